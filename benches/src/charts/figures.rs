//! Which figures a run's rows make: each with its file stem, title, the report section it
//! illustrates and a short "how to read this".

use super::bars::{self, Bar, Panel};
use super::figure::{Figure, Plot};
use super::heatmap;
use super::ladder;
use super::lines::{Axes, Series};
use super::style::{legend_for, micros, percent, thousands, tick, RAW_SUFFIX};
use crate::scenarios::ResultRow;

fn of<'a>(rows: &'a [ResultRow], scenario: &str) -> Vec<&'a ResultRow> {
    rows.iter().filter(|r| r.scenario == scenario).collect()
}

fn bar(label: &str, value: f64, text: String) -> Bar {
    Bar {
        label: label.to_owned(),
        value,
        text,
    }
}

fn pct(v: f64) -> String {
    percent(v)
}

fn bar_figure<'a>(
    stem: &'static str,
    title: String,
    section: &'static str,
    how: &'static str,
    panels: Vec<Panel<'a>>,
) -> Option<Figure<'a>> {
    let first = panels.first()?;
    if first.bars.is_empty() {
        return None;
    }
    let legend = legend_for(first.bars.iter().map(|b| b.label.as_str()));
    let height = 66 + bars::height(first.bars.len());
    Some(Figure {
        stem,
        title,
        section,
        how,
        size: (1100, height),
        legend,
        plot: Plot::Bars(panels),
    })
}

/// Uncontended cycles/s: each backend above its raw primitive, its peers after it.
fn throughput(rows: &[ResultRow]) -> Option<Figure<'static>> {
    let mut out = Vec::new();
    for r in of(rows, "uncontended") {
        out.push(bar(
            &r.backend,
            r.ops_per_sec,
            format!("{}/s", thousands(r.ops_per_sec)),
        ));
        if let Some(raw) = r.baseline_ops_per_sec {
            let text = match r.ratio_vs_baseline {
                Some(x) => format!("{}/s (lock ÷ raw {x:.2})", thousands(raw)),
                None => format!("{}/s", thousands(raw)),
            };
            out.push(bar(&format!("{}{RAW_SUFFIX}", r.backend), raw, text));
        }
    }
    bar_figure(
        "throughput",
        "Uncontended: acquire + release cycles per second, beside the raw store primitive".into(),
        "## Uncontended",
        "Longer is faster. Each distlock backend (blue) sits above its store's raw primitive issued the textbook way (grey): the gap is what the lock's promises cost. Peers on the same store are in their own colours.",
        vec![Panel {
            title: "cycles per second",
            bars: out,
            max: None,
            tick,
        }],
    )
}

/// Uncontended latency, median beside p99.
fn latency(rows: &[ResultRow]) -> Option<Figure<'static>> {
    let u = of(rows, "uncontended");
    let panel = |title, f: fn(&ResultRow) -> f64| Panel {
        title,
        bars: u
            .iter()
            .map(|r| bar(&r.backend, f(r), micros(f(r))))
            .collect(),
        max: None,
        tick: micros,
    };
    bar_figure(
        "latency",
        "Uncontended: one acquire + release".into(),
        "## Uncontended",
        "Shorter is faster. The median cycle on the left, the 99th percentile on the right: a backend whose right bar is much longer than its left has a tail.",
        vec![panel("median", |r| r.p50_us), panel("p99", |r| r.p99_us)],
    )
}

/// A contended scenario's throughput beside its fairness.
fn fairness(rows: &[ResultRow], scenario: &str) -> Option<Figure<'static>> {
    let c = of(rows, scenario);
    let procs = scenario == "contended-procs";
    let name = |r: &ResultRow| {
        if procs {
            format!("{}, {} processes", r.backend, r.param.unwrap_or(0))
        } else {
            r.backend.clone()
        }
    };
    let panel = |title, max, tick, f: &dyn Fn(&ResultRow) -> (f64, String)| Panel {
        title,
        bars: c
            .iter()
            .map(|r| {
                let (v, t) = f(r);
                bar(&name(r), v, t)
            })
            .collect(),
        max,
        tick,
    };
    let (stem, title, section) = if procs {
        (
            "handoffs-procs",
            "Contended across processes: speed and fairness",
            "## Contended across",
        )
    } else {
        (
            "handoffs",
            "Contended, 8 tasks of one process: speed and fairness",
            "## Contended (worker",
        )
    };
    bar_figure(
        stem,
        title.into(),
        section,
        "Throughput never alone: a lock can reach its handoffs/s by handing the lock back to the client that just released it. Read the four panels together: re-takes should be near 0%, Jain's index near 1 and the worst client's share (its acquisitions ÷ a fair share) near 100%. A peer as fast as distlock with 99% re-takes starved the other clients.",
        vec![
            panel("handoffs per second", None, tick, &|r| (r.ops_per_sec, format!("{}/s", thousands(r.ops_per_sec)))),
            panel("re-takes (lower is fairer)", Some(1.3), pct, &|r| {
                let v = r.same_holder_fraction.unwrap_or(0.0);
                (v, percent(v))
            }),
            panel("Jain's index (1 = even)", Some(1.3), tick, &|r| {
                let v = r.jain_index.unwrap_or(0.0);
                (v, format!("{v:.2}"))
            }),
            panel("worst client's share of fair", Some(1.3), pct, &|r| match r.worst_share {
                Some(v) => (v, percent(v)),
                None => (0.0, "not measured".into()),
            }),
        ],
    )
}

fn waits<'a>(rows: &'a [ResultRow], scenario: &str) -> Option<Figure<'a>> {
    let most = of(rows, scenario).iter().filter_map(|r| r.param).max();
    let groups = ladder::groups(
        rows.iter()
            .filter(|r| r.scenario == scenario && r.param == most),
    );
    if groups.is_empty() {
        return None;
    }
    let legend = legend_for(
        groups
            .iter()
            .flat_map(|g| g.1.iter().map(|r| r.backend.as_str())),
    );
    let panel_rows = groups.len().div_ceil(ladder::COLUMNS) as u32;
    let (stem, title, section) = if scenario == "contended-procs" {
        (
            "waits-procs",
            format!(
                "Wait for the lock across {} processes, p10 to the worst",
                most.unwrap_or(0)
            ),
            "## Contended across",
        )
    } else {
        (
            "waits",
            "Wait for the lock, 8 tasks of one process, p10 to the worst".to_owned(),
            "## Contended (worker",
        )
    };
    Some(Figure {
        stem,
        title,
        section,
        how: "One panel per store, one line per client, the wait from the 10th percentile to the worst on a log axis (each gridline up is ten times longer). A fair lock's line rises gently: every client waits about one round of the others. A line flat at the bottom that shoots up at the end is an unfair lock: most acquisitions were immediate re-takes, and the clients it passed over waited the longest.",
        size: (1100, 66 + 280 * panel_rows),
        legend,
        plot: Plot::Ladder(groups),
    })
}

fn grid(rows: &[ResultRow]) -> Option<Figure<'_>> {
    let clients = heatmap::clients(rows);
    if clients.is_empty() {
        return None;
    }
    let panel_rows = clients.len().div_ceil(heatmap::COLUMNS) as u32;
    Some(Figure {
        stem: "grid",
        title: "Grid: fewest–most acquisitions per process, processes × hold time".into(),
        section: "## Grid",
        how: "One map per client (its name in its colour), processes down and hold time across. Each cell says the fewest and the most acquisitions one process got in the window; its colour is the fewest as a share of a fair turn: green is fair, amber half, red a process starved. distlock promises no cell under half.",
        size: (1100, 66 + 250 * panel_rows),
        legend: vec![
            ("fair share".into(), plotters::style::RGBColor(60, 170, 80)),
            ("half".into(), plotters::style::RGBColor(250, 190, 60)),
            ("starved".into(), plotters::style::RGBColor(215, 48, 39)),
        ],
        plot: Plot::Heat(clients),
    })
}

fn series_of(
    rows: &[ResultRow],
    scenario: &str,
    point: fn(&ResultRow) -> Vec<(f64, f64)>,
) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for r in rows.iter().filter(|r| r.scenario == scenario) {
        match out.iter_mut().find(|s| s.0 == r.backend) {
            Some(s) => s.1.extend(point(r)),
            None => out.push((r.backend.clone(), point(r))),
        }
    }
    out.retain(|s| !s.1.is_empty());
    out
}

fn line_figure(
    stem: &'static str,
    title: &str,
    how: &'static str,
    lines: Vec<Series>,
    axes: Axes,
) -> Option<Figure<'static>> {
    (!lines.is_empty()).then(|| Figure {
        stem,
        title: title.into(),
        section: "## Scaling",
        how,
        size: (1100, 560),
        legend: Vec::new(),
        plot: Plot::Lines(lines, axes),
    })
}

/// Every figure the rows make, in the report's order.
pub fn all(rows: &[ResultRow]) -> Vec<Figure<'_>> {
    let scaling = series_of(rows, "scaling-waiters", |r| {
        vec![(r.param.unwrap_or(1) as f64, r.p50_us)]
    });
    let memory = series_of(rows, "scaling-names", |r| {
        r.memory_per_lock
            .iter()
            .map(|p| (p[0] as f64, p[1] as f64))
            .collect()
    });
    [
        throughput(rows),
        latency(rows),
        fairness(rows, "contended"),
        waits(rows, "contended"),
        fairness(rows, "contended-procs"),
        waits(rows, "contended-procs"),
        grid(rows),
        line_figure(
            "scaling",
            "Cost per handoff as waiters grow",
            "One line per backend: the mean time per handoff with 1 to 1,000 waiters on one name (log axis across). Flat or falling is the promise kept; a line that climbs means each waiter costs the others.",
            scaling,
            Axes { x: "waiters on one name", y: "per handoff", y_tick: micros },
        ),
        line_figure(
            "memory",
            "Client memory per held lock as held names grow",
            "One line per backend: the client's memory growth (the larger of its live heap and its resident set) divided by the locks it holds, at each count of held names (log axis across). Flat means each held lock costs the same; the target is at most 2 KiB.",
            memory,
            Axes { x: "names held by one client", y: "bytes per held lock", y_tick: tick },
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}
