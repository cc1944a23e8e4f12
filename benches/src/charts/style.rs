//! Colours, legends and number formats every chart shares: distlock blue, each peer a warm
//! colour of its own, raw store primitives grey, so a reader tells them apart at a glance; and
//! figures in their units, never "3000.0".

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// A chart's drawing result.
pub type Res = Result<(), Box<dyn std::error::Error>>;

/// distlock's backends.
pub const DISTLOCK: RGBColor = RGBColor(31, 119, 180);
/// The raw store primitives.
pub const RAW: RGBColor = RGBColor(150, 150, 150);
/// Each peer's colour, by the start of its label.
const PEERS: [(&str, RGBColor); 4] = [
    ("redis-py", RGBColor(214, 39, 40)),
    ("naive-poll", RGBColor(255, 127, 14)),
    ("rslock", RGBColor(148, 103, 189)),
    ("Curator", RGBColor(140, 86, 75)),
];
/// A peer not listed above.
const OTHER_PEER: RGBColor = RGBColor(227, 119, 194);
/// One colour per line where every line is a distlock backend (scaling, memory), as `0xRRGGBB`.
const SERIES: [u32; 12] = [
    0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22,
    0x17becf, 0x000080, 0x800000,
];

/// The suffix a raw primitive's bar label carries.
pub const RAW_SUFFIX: &str = " raw primitive";

/// A peer's label ends with its store in parentheses (`rslock (redlock)`).
pub fn is_peer(label: &str) -> bool {
    label.contains(" (")
}

/// The colour of a bar or line labelled `label`.
pub fn colour(label: &str) -> RGBColor {
    if label.ends_with(RAW_SUFFIX) {
        RAW
    } else if is_peer(label) {
        PEERS
            .iter()
            .find(|(p, _)| label.starts_with(p))
            .map_or(OTHER_PEER, |p| p.1)
    } else {
        DISTLOCK
    }
}

/// The `i`th series colour.
pub fn series(i: usize) -> RGBColor {
    let c = SERIES[i % SERIES.len()];
    RGBColor((c >> 16) as u8, (c >> 8) as u8, c as u8)
}

/// The legend for `labels`: distlock, the raw primitive if drawn, and each peer drawn, once.
pub fn legend_for<'a>(labels: impl IntoIterator<Item = &'a str>) -> Vec<(String, RGBColor)> {
    let mut out: Vec<(String, RGBColor)> = Vec::new();
    for l in labels {
        let name = if l.ends_with(RAW_SUFFIX) {
            "raw store primitive".to_owned()
        } else if is_peer(l) {
            format!("peer: {}", l.split(" (").next().unwrap_or(l))
        } else {
            "distlock".to_owned()
        };
        if !out.iter().any(|(n, _)| *n == name) {
            out.push((name, colour(l)));
        }
    }
    out
}

/// A title, and under it a legend of colour swatches, across the top of `area`; returns the
/// area left below.
pub fn header<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    legend: &[(String, RGBColor)],
) -> Result<DrawingArea<DB, Shift>, Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    area.fill(&WHITE)?;
    let (top, rest) = area.split_vertically(if legend.is_empty() { 40 } else { 66 });
    top.draw(&Text::new(title, (12, 10), ("sans-serif", 20).into_font()))?;
    let mut x = 12;
    for (name, c) in legend {
        top.draw(&Rectangle::new([(x, 44), (x + 14, 58)], c.filled()))?;
        let style = ("sans-serif", 14)
            .into_text_style(&top)
            .pos(Pos::new(HPos::Left, VPos::Center));
        top.draw(&Text::new(name.clone(), (x + 20, 51), style))?;
        x += 34 + 8 * name.chars().count() as i32;
    }
    Ok(rest)
}

/// `v` rounded, with thousands separated: `2,919`.
pub fn thousands(v: f64) -> String {
    let n = v.round() as i64;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// An axis tick: whole numbers without decimals, fractions with as few as they need.
pub fn tick(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        thousands(v)
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// A duration given in µs, in the unit that reads best: `850 µs`, `1.7 ms`, `23 ms`, `2.3 s`.
pub fn micros(us: f64) -> String {
    let one = |v: f64, unit: &str| {
        if v < 10.0 && (v - v.round()).abs() >= 0.05 {
            format!("{v:.1} {unit}")
        } else {
            format!("{} {unit}", thousands(v))
        }
    };
    if us < 1000.0 {
        format!("{} µs", thousands(us))
    } else if us < 1e6 {
        one(us / 1e3, "ms")
    } else {
        one(us / 1e6, "s")
    }
}

/// A fraction as a percentage: `99%`, and `0.4%` below one.
pub fn percent(f: f64) -> String {
    let p = f * 100.0;
    if p > 0.0 && p < 1.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_in_their_units_without_spurious_decimals() {
        let check = |format: fn(f64) -> String, cases: &[(f64, &str)]| {
            for (v, want) in cases {
                assert_eq!(format(*v), *want, "{v}");
            }
        };
        check(thousands, &[(2919.4, "2,919"), (1_234_567.0, "1,234,567")]);
        check(tick, &[(3000.0, "3,000"), (0.25, "0.25"), (0.5, "0.5")]);
        check(
            micros,
            &[(850.0, "850 µs"), (1700.0, "1.7 ms"), (3000.0, "3 ms")],
        );
        check(micros, &[(23_400.0, "23 ms"), (2_300_000.0, "2.3 s")]);
        check(percent, &[(0.99, "99%"), (0.004, "0.4%"), (0.0, "0%")]);
    }

    #[test]
    fn distlock_peers_and_raw_primitives_differ_in_colour() {
        let labels = [
            "redis",
            "redis raw primitive",
            "redis-py Lock (redis)",
            "naive-poll (redis)",
            "postgres-row",
        ];
        let legend = legend_for(labels);
        let names: Vec<&str> = legend.iter().map(|l| l.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "distlock",
                "raw store primitive",
                "peer: redis-py Lock",
                "peer: naive-poll"
            ]
        );
        let mut colours: Vec<RGBColor> = legend.iter().map(|l| l.1).collect();
        colours.dedup();
        assert_eq!(colours.len(), 4);
    }
}
