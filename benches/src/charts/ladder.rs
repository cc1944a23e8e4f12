//! Wait-time ladders: for each store a panel, one line per client (distlock and its peers) from
//! the median to the worst wait on a log axis, so tails are compared whole, not by one p99.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::style::{colour, micros, Res};
use crate::scenarios::ResultRow;

/// A ladder's rungs as labels (the quantiles of `stats::LADDER`).
fn rung(q: f64) -> String {
    if q >= 1.0 {
        "max".into()
    } else {
        let p = format!("{:.2}", q * 100.0);
        format!("p{}", p.trim_end_matches('0').trim_end_matches('.'))
    }
}

/// One panel's lines: its store and each client's ladder.
pub type Group<'a> = (String, Vec<&'a ResultRow>);

/// The rows that carry a ladder, grouped by store (a peer joins its store's panel), in the
/// order first seen.
pub fn groups<'a>(rows: impl Iterator<Item = &'a ResultRow>) -> Vec<Group<'a>> {
    let mut out: Vec<Group> = Vec::new();
    for r in rows.filter(|r| !r.wait_ladder_us.is_empty()) {
        let store = match r.backend.rsplit_once(" (") {
            Some((_, s)) => s.trim_end_matches(')').to_owned(),
            None => r.backend.clone(),
        };
        match out.iter_mut().find(|g| g.0 == store) {
            Some(g) => g.1.push(r),
            None => out.push((store, vec![r])),
        }
    }
    out
}

/// Panels per row of the figure.
pub const COLUMNS: usize = 3;

/// Draws one panel per group in `area`.
pub fn draw<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, groups: &[Group]) -> Res
where
    DB::ErrorType: 'static,
{
    let all = groups
        .iter()
        .flat_map(|g| g.1.iter())
        .flat_map(|r| r.wait_ladder_us.iter());
    let (lo, hi) = all.fold((f64::MAX, 1.0f64), |(lo, hi), p| {
        (lo.min(p[1].max(1.0)), hi.max(p[1]))
    });
    let (lo, hi) = (lo.min(hi) / 1.5, hi * 1.5);
    let rows = groups.len().div_ceil(COLUMNS);
    let panels = area.split_evenly((rows.max(1), COLUMNS.min(groups.len()).max(1)));
    for (g, a) in groups.iter().zip(panels) {
        let rungs: Vec<f64> =
            g.1.first()
                .map(|r| r.wait_ladder_us.iter().map(|p| p[0]).collect())
                .unwrap_or_default();
        let last = rungs.len().saturating_sub(1);
        let mut chart = ChartBuilder::on(&a)
            .caption(&g.0, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(26)
            .y_label_area_size(62)
            .build_cartesian_2d(0..last, (lo..hi).log_scale())?;
        chart
            .configure_mesh()
            .x_labels(rungs.len())
            .x_label_formatter(&|i| rungs.get(*i).map(|q| rung(*q)).unwrap_or_default())
            .y_labels(5)
            .y_label_formatter(&|v| micros(*v))
            .label_style(("sans-serif", 12))
            .draw()?;
        for r in &g.1 {
            let c = colour(&r.backend);
            let pts = r
                .wait_ladder_us
                .iter()
                .enumerate()
                .map(|(i, p)| (i, p[1].max(lo)));
            chart.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?;
            chart.draw_series(pts.map(|p| Circle::new(p, 3, c.filled())))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rungs_read_as_percentiles() {
        let names: Vec<String> = crate::stats::LADDER.iter().map(|q| rung(*q)).collect();
        assert_eq!(
            names,
            ["p10", "p25", "p50", "p75", "p90", "p95", "p99", "p99.9", "p99.99", "max"]
        );
    }
}
