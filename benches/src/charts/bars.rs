//! Horizontal bars, names on the axis and each value written at its bar's end; several panels
//! side by side share one list of names (throughput beside re-takes, Jain's index and the worst
//! client's share).

use plotters::coord::ranged1d::SegmentValue;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::style::{colour, Res};

/// One bar.
#[derive(Clone, Debug)]
pub struct Bar {
    /// The row's label (its colour follows from it).
    pub label: String,
    /// Its length.
    pub value: f64,
    /// What is written at its end, in its unit.
    pub text: String,
}

/// One panel: a heading and a value per name.
pub struct Panel<'a> {
    /// Heading above the panel.
    pub title: &'a str,
    /// One bar per name, in the names' order.
    pub bars: Vec<Bar>,
    /// The axis end (`None`: the longest bar plus room for its text).
    pub max: Option<f64>,
    /// The axis tick format.
    pub tick: fn(f64) -> String,
}

/// Pixels of axis room for `names`.
pub fn name_width(names: &[&str]) -> u32 {
    names.iter().map(|n| n.chars().count()).max().unwrap_or(4) as u32 * 7 + 16
}

/// Height for `n` bars.
pub fn height(n: usize) -> u32 {
    130 + 28 * n.max(1) as u32
}

/// Draws `panels` side by side in `area`; the first carries the names.
pub fn draw<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, panels: &[Panel]) -> Res
where
    DB::ErrorType: 'static,
{
    let Some(first) = panels.first() else {
        return Ok(());
    };
    let names: Vec<&str> = first.bars.iter().map(|b| b.label.as_str()).collect();
    let label_w = name_width(&names);
    let width = area.dim_in_pixel().0;
    let each = (width.saturating_sub(label_w)) / panels.len() as u32;
    let mut cuts = vec![label_w + each];
    for i in 2..panels.len() as u32 {
        cuts.push(label_w + each * i);
    }
    let areas = area.split_by_breakpoints(cuts, Vec::<u32>::new());
    for (i, (panel, a)) in panels.iter().zip(areas).enumerate() {
        one(&a, panel, &names, if i == 0 { label_w } else { 6 })?;
    }
    Ok(())
}

fn one<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    p: &Panel,
    names: &[&str],
    label_w: u32,
) -> Res
where
    DB::ErrorType: 'static,
{
    let n = p.bars.len().max(1);
    let longest = p.bars.iter().map(|b| b.value).fold(0.0, f64::max);
    let max = p.max.unwrap_or(longest * 1.35).max(f64::MIN_POSITIVE);
    let mut chart = ChartBuilder::on(area)
        .caption(p.title, ("sans-serif", 15))
        .margin_right(30)
        .x_label_area_size(28)
        .y_label_area_size(label_w)
        .build_cartesian_2d(0.0..max, (0..n - 1).into_segmented())?;
    // Row j from the top is segment n-1-j, so the first name is drawn first.
    let row = |j: usize| n - 1 - j;
    let tick = p.tick;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .light_line_style(WHITE)
        .x_labels(4)
        .x_label_formatter(&|v| tick(*v))
        .y_labels(n + 1)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) if label_w > 6 && *i < n => names
                .get(n - 1 - *i)
                .map(|s| s.to_string())
                .unwrap_or_default(),
            _ => String::new(),
        })
        .label_style(("sans-serif", 13))
        .draw()?;
    chart.draw_series(p.bars.iter().enumerate().map(|(j, b)| {
        let y = row(j);
        let mut r = Rectangle::new(
            [
                (0.0, SegmentValue::Exact(y)),
                (b.value.min(max), SegmentValue::Exact(y + 1)),
            ],
            colour(&b.label).filled(),
        );
        r.set_margin(4, 4, 0, 0);
        r
    }))?;
    let style = ("sans-serif", 12)
        .into_text_style(area)
        .pos(Pos::new(HPos::Left, VPos::Center));
    chart.draw_series(p.bars.iter().enumerate().map(|(j, b)| {
        EmptyElement::at((b.value.min(max), SegmentValue::CenterOf(row(j))))
            + Text::new(b.text.clone(), (4, 0), style.clone())
    }))?;
    Ok(())
}
