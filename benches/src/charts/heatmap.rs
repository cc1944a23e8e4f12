//! The grid as small multiples: a heat map per client, processes down and hold times across,
//! each cell coloured by the worst-served process's share of a fair turn (red starved, green
//! fair) and labelled with the fewest–most acquisitions per process.

use plotters::coord::ranged1d::SegmentValue::{self, CenterOf, Exact};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::style::{colour, Res};
use crate::scenarios::ResultRow;

/// Panels per row of the figure.
pub const COLUMNS: usize = 4;

/// The grid rows by client, in the order first seen.
pub fn clients(rows: &[ResultRow]) -> Vec<(String, Vec<&ResultRow>)> {
    let mut out: Vec<(String, Vec<&ResultRow>)> = Vec::new();
    for r in rows.iter().filter(|r| r.scenario == "grid") {
        match out.iter_mut().find(|c| c.0 == r.backend) {
            Some(c) => c.1.push(r),
            None => out.push((r.backend.clone(), vec![r])),
        }
    }
    out
}

/// Red at 0, amber at half, green at a full fair share.
fn shade(share: f64) -> RGBColor {
    let s = share.clamp(0.0, 1.0);
    let mix = |a: u8, b: u8, t: f64| (a as f64 + (b as f64 - a as f64) * t) as u8;
    if s < 0.5 {
        let t = s / 0.5;
        RGBColor(mix(215, 250, t), mix(48, 190, t), mix(39, 60, t))
    } else {
        let t = (s - 0.5) / 0.5;
        RGBColor(mix(250, 60, t), mix(190, 170, t), mix(60, 80, t))
    }
}

/// A label at a segment's middle.
fn centre(v: &SegmentValue<usize>, values: &[u64]) -> String {
    match v {
        CenterOf(i) => values.get(*i).map(|x| x.to_string()).unwrap_or_default(),
        _ => String::new(),
    }
}

fn axis(cells: &[&ResultRow], f: fn(&ResultRow) -> Option<u64>) -> Vec<u64> {
    let mut v: Vec<u64> = cells.iter().filter_map(|r| f(r)).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Draws one heat map per client in `area`.
pub fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    clients: &[(String, Vec<&ResultRow>)],
) -> Res
where
    DB::ErrorType: 'static,
{
    let rows = clients.len().div_ceil(COLUMNS);
    let panels = area.split_evenly((rows.max(1), COLUMNS.min(clients.len()).max(1)));
    for ((name, cells), a) in clients.iter().zip(panels) {
        let procs = axis(cells, |r| r.processes);
        let holds = axis(cells, |r| r.hold_ms);
        let mut chart = ChartBuilder::on(&a)
            .caption(name, ("sans-serif", 14).into_font().color(&colour(name)))
            .margin(6)
            .x_label_area_size(34)
            .y_label_area_size(46)
            .build_cartesian_2d(
                (0..holds.len() - 1).into_segmented(),
                (0..procs.len() - 1).into_segmented(),
            )?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(holds.len() + 1)
            .y_labels(procs.len() + 1)
            .x_desc("hold ms")
            .y_desc("processes")
            .x_label_formatter(&|v| centre(v, &holds))
            .y_label_formatter(&|v| centre(v, &procs))
            .label_style(("sans-serif", 12))
            .draw()?;
        let at = |r: &ResultRow| {
            let x = holds
                .iter()
                .position(|h| Some(*h) == r.hold_ms)
                .unwrap_or(0);
            let y = procs
                .iter()
                .position(|p| Some(*p) == r.processes)
                .unwrap_or(0);
            (x, y)
        };
        chart.draw_series(cells.iter().map(|r| {
            let (x, y) = at(r);
            Rectangle::new(
                [(Exact(x), Exact(y)), (Exact(x + 1), Exact(y + 1))],
                shade(crate::verdicts::cell_share(r)).filled(),
            )
        }))?;
        let style = ("sans-serif", 11)
            .into_text_style(&a)
            .pos(Pos::new(HPos::Center, VPos::Center));
        chart.draw_series(cells.iter().map(|r| {
            let (x, y) = at(r);
            let text = format!(
                "{}–{}",
                r.min_per_client.unwrap_or(0),
                r.max_per_client.unwrap_or(0)
            );
            EmptyElement::at((CenterOf(x), CenterOf(y))) + Text::new(text, (0, 0), style.clone())
        }))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_starved_cell_is_red_and_a_fair_one_green() {
        let r = shade(0.0);
        assert!(r.0 > 200 && r.1 < 60, "{r:?}");
        let g = shade(1.0);
        assert!(g.1 > g.0 && g.1 > g.2, "{g:?}");
    }
}
