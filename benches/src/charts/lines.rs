//! Line charts with a legend, one line per backend: cost per handoff as waiters grow, client
//! memory per held lock as names grow. A flat line is the promise kept.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::style::{series, Res};

/// One backend's points.
pub type Series = (String, Vec<(f64, f64)>);

/// Axis names and formats.
pub struct Axes {
    /// Under the x axis.
    pub x: &'static str,
    /// Beside the y axis.
    pub y: &'static str,
    /// The y tick format.
    pub y_tick: fn(f64) -> String,
}

/// Draws `lines` on a log x axis, the legend to the right.
pub fn draw<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, lines: &[Series], axes: &Axes) -> Res
where
    DB::ErrorType: 'static,
{
    let (plot, key) = area.split_horizontally(area.dim_in_pixel().0.saturating_sub(220));
    let pts = || lines.iter().flat_map(|s| s.1.iter());
    let min_x = pts().map(|p| p.0).fold(f64::MAX, f64::min).max(1.0);
    let max_x = pts().map(|p| p.0).fold(1.0, f64::max).max(min_x * 10.0);
    let max_y = pts().map(|p| p.1).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(&plot)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(78)
        .build_cartesian_2d((min_x..max_x).log_scale(), 0.0..max_y)?;
    let y_tick = axes.y_tick;
    chart
        .configure_mesh()
        .x_desc(axes.x)
        .y_desc(axes.y)
        .x_label_formatter(&|v| super::style::tick(*v))
        .y_label_formatter(&|v| y_tick(*v))
        .label_style(("sans-serif", 13))
        .draw()?;
    for (i, (_, p)) in lines.iter().enumerate() {
        let c = series(i);
        chart.draw_series(LineSeries::new(p.iter().copied(), c.stroke_width(2)))?;
        chart.draw_series(p.iter().map(|&q| Circle::new(q, 3, c.filled())))?;
    }
    let style = ("sans-serif", 13)
        .into_text_style(&key)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (i, (name, _)) in lines.iter().enumerate() {
        let y = 24 + 22 * i as i32;
        key.draw(&PathElement::new(
            vec![(4, y), (28, y)],
            series(i).stroke_width(3),
        ))?;
        key.draw(&Text::new(name.clone(), (34, y), style.clone()))?;
    }
    Ok(())
}
