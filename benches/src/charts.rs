//! Charts as SVG and PNG with `plotters`: latency and handoffs/s per backend, scaling curves.

use std::path::Path;

use plotters::prelude::*;

use crate::scenarios::ResultRow;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Registers a TrueType font for PNG text; `false` when none is installed (PNG charts skipped).
pub fn init_font() -> bool {
    match std::fs::read(FONT) {
        Ok(bytes) => {
            let leaked: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, leaked).is_ok()
        }
        Err(_) => false,
    }
}

type Res = Result<(), Box<dyn std::error::Error>>;
/// (file stem, title, unit, bars)
type BarChart<'a> = (&'a str, &'a str, &'a str, Vec<(String, f64)>);

fn bars<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    unit: &str,
    data: &[(String, f64)],
) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let max = data.iter().map(|d| d.1).fold(0.0, f64::max).max(1.0) * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(60)
        .y_label_area_size(70)
        .build_cartesian_2d(0..data.len(), 0.0..max)?;
    let labels: Vec<String> = data.iter().map(|d| d.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(data.len().max(1))
        .x_label_formatter(&|i| labels.get(*i).cloned().unwrap_or_default())
        .y_desc(unit)
        .draw()?;
    chart.draw_series(data.iter().enumerate().map(|(i, d)| {
        let mut r = Rectangle::new([(i, 0.0), (i + 1, d.1)], BLUE.mix(0.6).filled());
        r.set_margin(0, 0, 8, 8);
        r
    }))?;
    root.present()?;
    Ok(())
}

fn lines<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    series: &[(String, Vec<(f64, f64)>)],
) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let max_x = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let max_y = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption("Per-handoff time vs waiters", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((1.0..max_x).log_scale(), 0.0..max_y)?;
    chart
        .configure_mesh()
        .x_desc("waiters")
        .y_desc("µs per handoff")
        .draw()?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Writes every chart as SVG (and PNG when a font is available). Returns the files written.
pub fn write(
    dir: &Path,
    rows: &[ResultRow],
    png: bool,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let mut files = Vec::new();
    let pick = |scenario: &str, f: &dyn Fn(&ResultRow) -> f64| -> Vec<(String, f64)> {
        rows.iter()
            .filter(|r| r.scenario == scenario)
            .map(|r| (r.backend.clone(), f(r)))
            .collect()
    };
    let charts: Vec<BarChart> = vec![
        (
            "latency",
            "Uncontended acquire+release p50",
            "µs",
            pick("uncontended", &|r| r.p50_us),
        ),
        (
            "throughput",
            "Uncontended cycles per second",
            "cycles/s",
            pick("uncontended", &|r| r.ops_per_sec),
        ),
        (
            "handoffs",
            "Contended handoffs per second",
            "handoffs/s",
            pick("contended", &|r| r.ops_per_sec),
        ),
        (
            "wait-p99",
            "Contended wait p99",
            "µs",
            pick("contended", &|r| r.p99_us),
        ),
    ];
    for (stem, title, unit, data) in charts {
        if data.is_empty() {
            continue;
        }
        let svg = dir.join(format!("{stem}.svg"));
        bars(
            SVGBackend::new(&svg, (900, 520)).into_drawing_area(),
            title,
            unit,
            &data,
        )?;
        files.push(svg.display().to_string());
        if png {
            let p = dir.join(format!("{stem}.png"));
            bars(
                BitMapBackend::new(&p, (900, 520)).into_drawing_area(),
                title,
                unit,
                &data,
            )?;
            files.push(p.display().to_string());
        }
    }
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in rows.iter().filter(|r| r.scenario == "scaling-waiters") {
        let pt = (r.param.unwrap_or(1) as f64, r.p50_us);
        match series.iter_mut().find(|s| s.0 == r.backend) {
            Some(s) => s.1.push(pt),
            None => series.push((r.backend.clone(), vec![pt])),
        }
    }
    if !series.is_empty() {
        let svg = dir.join("scaling.svg");
        lines(
            SVGBackend::new(&svg, (900, 520)).into_drawing_area(),
            &series,
        )?;
        files.push(svg.display().to_string());
        if png {
            let p = dir.join("scaling.png");
            lines(
                BitMapBackend::new(&p, (900, 520)).into_drawing_area(),
                &series,
            )?;
            files.push(p.display().to_string());
        }
    }
    Ok(files)
}
