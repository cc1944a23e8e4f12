//! [`Figure`]: one chart (what it plots, its title, legend and words) and how it is drawn.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::style::{self, Res};
use super::{bars, heatmap, ladder, lines};
use crate::scenarios::ResultRow;

/// What a figure draws.
pub enum Plot<'a> {
    /// Horizontal bar panels sharing their names.
    Bars(Vec<bars::Panel<'a>>),
    /// Wait ladders, a panel per store.
    Ladder(Vec<ladder::Group<'a>>),
    /// One line per backend.
    Lines(Vec<lines::Series>, lines::Axes),
    /// The grid's heat maps, one per client.
    Heat(Vec<(String, Vec<&'a ResultRow>)>),
}

/// One chart and what the report says about it.
pub struct Figure<'a> {
    /// File stem (`handoffs` → `handoffs.svg`, `handoffs.png`).
    pub stem: &'static str,
    /// Its title, drawn on it.
    pub title: String,
    /// The heading (its start) of the report section it illustrates.
    pub section: &'static str,
    /// How to read it, in a few sentences.
    pub how: &'static str,
    pub(super) size: (u32, u32),
    pub(super) legend: Vec<(String, RGBColor)>,
    pub(super) plot: Plot<'a>,
}

impl Figure<'_> {
    pub(super) fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Res
    where
        DB::ErrorType: 'static,
    {
        let body = style::header(&root, &self.title, &self.legend)?;
        match &self.plot {
            Plot::Bars(panels) => bars::draw(&body, panels)?,
            Plot::Ladder(groups) => ladder::draw(&body, groups)?,
            Plot::Lines(series, axes) => lines::draw(&body, series, axes)?,
            Plot::Heat(clients) => heatmap::draw(&body, clients)?,
        }
        root.present()?;
        Ok(())
    }
}
