//! The report: `report.md` (tables), `results.json`, and the charts, under `target/bench-report/`.

use std::fmt::Write as _;
use std::path::Path;

use crate::scenarios::ResultRow;

/// Settings and machine facts written at the top of the report.
pub struct Header {
    /// Command-line settings.
    pub settings: String,
    /// Store versions, one line each.
    pub versions: Vec<String>,
}

fn f(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn opt(v: Option<f64>) -> String {
    v.map(f).unwrap_or_else(|| "–".into())
}

/// Renders `report.md`.
pub fn markdown(h: &Header, rows: &[ResultRow]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# distlock benchmark report\n");
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let _ = writeln!(s, "- machine: {cores} cores, {}", std::env::consts::OS);
    for v in &h.versions {
        let _ = writeln!(s, "- store: {v}");
    }
    let _ = writeln!(s, "- settings: {}\n", h.settings);
    let _ = writeln!(s, "## Uncontended (one client, acquire + release)\n");
    let _ = writeln!(
        s,
        "| backend | cycles/s | p50 µs | p99 µs | p999 µs | raw primitive/s | lock ÷ raw |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|");
    for r in rows.iter().filter(|r| r.scenario == "uncontended") {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.backend,
            f(r.ops_per_sec),
            f(r.p50_us),
            f(r.p99_us),
            f(r.p999_us),
            opt(r.baseline_ops_per_sec),
            r.ratio_vs_baseline
                .map(|v| format!("{v:.2}"))
                .unwrap_or_else(|| "–".into())
        );
    }
    contended_table(
        &mut s,
        rows,
        "contended",
        "Contended (worker tasks of one process on one name, each its own client)",
    );
    contended_table(
        &mut s,
        rows,
        "contended-procs",
        "Contended across processes (one client per process, one name)",
    );
    grid_table(&mut s, rows);
    permits_table(&mut s, rows);
    let _ = writeln!(s, "\n## Failover (holder process killed with SIGKILL)\n");
    let _ = writeln!(
        s,
        "| backend | next holder after ms | holder's lease ms | how |"
    );
    let _ = writeln!(s, "|---|---:|---:|---|");
    for r in rows.iter().filter(|r| r.scenario == "failover") {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            r.backend,
            opt(r.failover_ms),
            opt(r.ttl_ms),
            r.note
        );
    }
    let _ = writeln!(s, "\n## Scaling\n");
    let _ = writeln!(
        s,
        "| backend | scenario | n | per second | mean µs per handoff | RSS growth KiB | heap growth KiB |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|");
    for r in rows.iter().filter(|r| r.scenario.starts_with("scaling")) {
        let per = if r.scenario == "scaling-waiters" {
            f(r.p50_us)
        } else {
            "–".into()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.backend,
            r.scenario,
            r.param.unwrap_or(0),
            f(r.ops_per_sec),
            per,
            r.rss_kb
                .map(|v| v.to_string())
                .unwrap_or_else(|| "–".into()),
            r.heap_bytes
                .map(|v| (v / 1024).to_string())
                .unwrap_or_else(|| "–".into())
        );
    }
    // Each peer once, in the order of its first row.
    let mut peers: Vec<(&str, &str)> = Vec::new();
    for r in rows.iter().filter(|r| r.note.starts_with("peer:")) {
        let peer = (r.backend.as_str(), r.note.as_str());
        if !peers.contains(&peer) {
            peers.push(peer);
        }
    }
    if !peers.is_empty() {
        let _ = writeln!(s, "\n## What the peers give up\n");
        for (who, what) in peers {
            let _ = writeln!(s, "- {who}: {}", what.trim_start_matches("peer: "));
        }
    }
    for r in rows.iter().filter(|r| r.scenario.starts_with("skipped")) {
        let _ = writeln!(s, "\n- {} {}: {}", r.backend, r.scenario, r.note);
    }
    let _ = writeln!(
        s,
        "\n## Against the targets\n\nEach missed target is followed by its cause and the section of \
         `docs/bench/speed-breakdown.md` that holds its profile.\n"
    );
    for v in crate::shortfalls::with_causes(crate::verdicts::verdicts(rows)) {
        let _ = writeln!(s, "{v}");
    }
    let _ = writeln!(s, "\nFigures from one run on this machine; rerun with `cargo run --release -p benches -- --all`.");
    s
}

/// Writes `report.md` and `results.json` into `dir`.
pub fn write(dir: &Path, h: &Header, rows: &[ResultRow]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("report.md"), markdown(h, rows))?;
    let json = serde_json::to_string_pretty(rows).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("results.json"), json)
}

/// The grid: a row per backend and process count, a column per hold time, each cell
/// `acquisitions (fewest–most per client)`.
fn grid_table(s: &mut String, rows: &[ResultRow]) {
    let grid: Vec<&ResultRow> = rows.iter().filter(|r| r.scenario == "grid").collect();
    let mut holds: Vec<u64> = grid.iter().filter_map(|r| r.hold_ms).collect();
    holds.sort_unstable();
    holds.dedup();
    if holds.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n## Grid (processes × hold time on one name; acquisitions, fewest–most per process)\n"
    );
    let head: Vec<String> = holds.iter().map(|h| format!("hold {h} ms")).collect();
    let _ = writeln!(s, "| backend | processes | {} |", head.join(" | "));
    let _ = writeln!(s, "|---|---:|{}", "---:|".repeat(holds.len()));
    let mut keys: Vec<(&str, u64)> = Vec::new();
    for r in &grid {
        let k = (r.backend.as_str(), r.processes.unwrap_or(0));
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (backend, n) in keys {
        let cells: Vec<String> = holds
            .iter()
            .map(|&h| {
                grid.iter()
                    .find(|r| {
                        r.backend == backend && r.processes == Some(n) && r.hold_ms == Some(h)
                    })
                    .map_or("–".into(), |r| {
                        format!(
                            "{} ({}–{})",
                            r.acquisitions.unwrap_or(0),
                            r.min_per_client.unwrap_or(0),
                            r.max_per_client.unwrap_or(0)
                        )
                    })
            })
            .collect();
        let _ = writeln!(s, "| {backend} | {n} | {} |", cells.join(" | "));
    }
}

/// The semaphore and read-write lock rows, if any ran.
fn permits_table(s: &mut String, rows: &[ResultRow]) {
    let ran = |r: &&ResultRow| r.scenario == "semaphore" || r.scenario == "rwlock";
    if !rows.iter().any(|r| ran(&r)) {
        return;
    }
    let _ = writeln!(
        s,
        "\n## Semaphore (16 workers, 4 permits) and read-write lock (16 workers, 90% reads)\n"
    );
    let _ = writeln!(s, "| backend | scenario | grants/s | wait p50 µs | wait p99 µs | peak concurrent holders | Jain | violations |");
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|");
    for r in rows.iter().filter(ran) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.backend,
            r.scenario,
            f(r.ops_per_sec),
            f(r.p50_us),
            f(r.p99_us),
            r.param.map(|v| v.to_string()).unwrap_or_else(|| "–".into()),
            r.jain_index
                .map(|v| format!("{v:.2}"))
                .unwrap_or_else(|| "–".into()),
            r.violations
        );
    }
}

/// The table of one contended scenario.
fn contended_table(s: &mut String, rows: &[ResultRow], scenario: &str, heading: &str) {
    if !rows.iter().any(|r| r.scenario == scenario) {
        return;
    }
    let _ = writeln!(s, "\n## {heading}\n");
    let _ = writeln!(s, "| backend | workers | handoffs/s | wait p50 µs | wait p99 µs | handoff p50 µs | handoff p99 µs | same holder | Jain | violations |");
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows.iter().filter(|r| r.scenario == scenario) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.backend,
            r.param.unwrap_or(0),
            f(r.ops_per_sec),
            f(r.p50_us),
            f(r.p99_us),
            opt(r.handoff_p50_us),
            opt(r.handoff_p99_us),
            r.same_holder_fraction
                .map(|v| format!("{:.0}%", v * 100.0))
                .unwrap_or_default(),
            r.jain_index.map(|v| format!("{v:.2}")).unwrap_or_default(),
            r.violations
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer measured in several scenarios is described once, whatever rows lie between.
    #[test]
    fn each_peer_is_described_once() {
        let row = |backend: &str, scenario: &str, note: &str| ResultRow {
            backend: backend.into(),
            scenario: scenario.into(),
            note: note.into(),
            ..Default::default()
        };
        let rows = [
            row("redis-py Lock (redis)", "uncontended", "peer: no fencing"),
            row("naive-poll (redis)", "contended", "peer: no FIFO"),
            row("redis-py Lock (redis)", "contended", "peer: no fencing"),
        ];
        let h = Header {
            settings: String::new(),
            versions: Vec::new(),
        };
        let md = markdown(&h, &rows);
        assert_eq!(
            md.matches("- redis-py Lock (redis): no fencing").count(),
            1,
            "{md}"
        );
        assert_eq!(
            md.matches("- naive-poll (redis): no FIFO").count(),
            1,
            "{md}"
        );
    }
}
