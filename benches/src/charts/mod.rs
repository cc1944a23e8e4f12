//! The report's charts, drawn with `plotters`: each written as SVG (inlined in `report.html`)
//! and as PNG when a font is installed. Colours tell distlock, its peers and the raw store
//! primitives apart; throughput is always drawn beside fairness.

mod bars;
mod figure;
mod figures;
mod heatmap;
mod ladder;
mod lines;
mod style;

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

/// A chart drawn: its figure's words and its SVG text.
pub struct Drawn {
    /// File stem.
    pub stem: &'static str,
    /// Title.
    pub title: String,
    /// The report section it illustrates.
    pub section: &'static str,
    /// How to read it.
    pub how: &'static str,
    /// The SVG document.
    pub svg: String,
}

/// Draws every chart the rows make into `dir` (SVG, and PNG when `png`). Returns the charts
/// and the files written.
pub fn write(
    dir: &Path,
    rows: &[ResultRow],
    png: bool,
) -> Result<(Vec<Drawn>, Vec<String>), Box<dyn std::error::Error>> {
    let (mut drawn, mut files) = (Vec::new(), Vec::new());
    for fig in figures::all(rows) {
        let mut svg = String::new();
        fig.draw(SVGBackend::with_string(&mut svg, fig.size).into_drawing_area())?;
        let path = dir.join(format!("{}.svg", fig.stem));
        std::fs::write(&path, &svg)?;
        files.push(path.display().to_string());
        if png {
            let path = dir.join(format!("{}.png", fig.stem));
            fig.draw(BitMapBackend::new(&path, fig.size).into_drawing_area())?;
            files.push(path.display().to_string());
        }
        drawn.push(Drawn {
            stem: fig.stem,
            title: fig.title,
            section: fig.section,
            how: fig.how,
            svg,
        });
    }
    Ok((drawn, files))
}
