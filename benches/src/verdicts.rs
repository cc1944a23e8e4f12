//! The speed and fairness targets, checked from one run's rows (a verdict line each, in the
//! report's "Against the targets"). Every figure compared comes from the same run: distlock
//! beside its raw store primitive and beside the peers measured on the same store.
//!
//! 1. Contended handoffs/s ≥ the best peer on the same store, re-takes ≤ 10%, wait p99 ≤ 20 ms;
//!    handoff p50 ≤ one store round trip + 0.2 ms (Redis, SQL), ≤ Curator's (ZooKeeper).
//! 2. Uncontended ≥ 0.9× the raw primitive; Redlock ≥ rslock's cycles/s.
//! 3. Across 8 processes: re-takes ≤ 20%, wait p99 ≤ 20 ms.
//! 4. Grid: no distlock client gets less than half its fair share (acquisitions ÷ processes)
//!    in any cell of processes × hold time; the peers' worst cells are shown beside.
//! 5. Cost per handoff flat from 1 to 1,000 waiters (never more than 2× that of a step with
//!    fewer waiters; falling is flat); ≤ 2 KiB of client
//!    memory per held lock.

use crate::scenarios::ResultRow;

/// The store a row ran on: a peer's label ends with it in parentheses (`rslock (redlock)`).
fn store(label: &str) -> &str {
    match label.rsplit_once(" (") {
        Some((_, s)) => s.trim_end_matches(')'),
        None => label,
    }
}

fn is_peer(label: &str) -> bool {
    label.contains(" (")
}

/// Whether a row is one of the SQL modes' (`<dialect>-row`, `-for_update`, `-advisory`).
pub(crate) fn is_sql(label: &str) -> bool {
    label.contains("-row") || label.contains("-for_update") || label.contains("-advisory")
}

/// Round trips in one raw primitive cycle (`BEGIN; SELECT … FOR UPDATE; COMMIT` is three).
fn raw_round_trips(label: &str) -> f64 {
    if label.contains("for_update") {
        3.0
    } else {
        2.0
    }
}

fn ms(us: f64) -> String {
    format!("{:.1} ms", us / 1000.0)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "meets"
    } else {
        "MISSES"
    }
}

/// How much the cost per handoff grew as waiters were added: the largest ratio of a step's
/// cost to the cost of any step with fewer waiters (`costs` in increasing waiter counts). A
/// cost that falls as waiters are added (work shared by more waiters) is flat, not growth.
fn growth(costs: &[(u64, f64)]) -> f64 {
    let mut cheapest = f64::MAX;
    let mut grew = 1.0f64;
    for &(_, c) in costs {
        if cheapest < f64::MAX {
            grew = grew.max(c / cheapest);
        }
        cheapest = cheapest.min(c);
    }
    grew
}

/// A grid cell's worst client as a fraction of its fair share (acquisitions ÷ processes).
pub(crate) fn cell_share(r: &ResultRow) -> f64 {
    let total = r.acquisitions.unwrap_or(0) as f64;
    let n = r.processes.unwrap_or(1).max(1) as f64;
    if total == 0.0 {
        0.0
    } else {
        r.min_per_client.unwrap_or(0) as f64 * n / total
    }
}

/// Target 4: each backend's worst grid cell; a verdict for distlock, the figure for a peer.
fn grid(rows: &[ResultRow]) -> Vec<String> {
    let mut labels: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.scenario == "grid") {
        if !labels.contains(&r.backend.as_str()) {
            labels.push(&r.backend);
        }
    }
    let mut out = Vec::new();
    for b in labels {
        let cells: Vec<&ResultRow> = rows
            .iter()
            .filter(|r| r.scenario == "grid" && r.backend == b)
            .collect();
        let Some(worst) = cells
            .iter()
            .min_by(|x, y| cell_share(x).total_cmp(&cell_share(y)))
        else {
            continue;
        };
        let fair =
            worst.acquisitions.unwrap_or(0) as f64 / worst.processes.unwrap_or(1).max(1) as f64;
        let figure = format!(
            "grid worst of {} cells: {} processes × {} ms hold, one client got {} of a fair {fair:.0} ({:.0}%)",
            cells.len(),
            worst.processes.unwrap_or(0),
            worst.hold_ms.unwrap_or(0),
            worst.min_per_client.unwrap_or(0),
            cell_share(worst) * 100.0
        );
        out.push(if is_peer(b) {
            format!("- {b}: {figure} (a peer, for comparison)")
        } else {
            format!(
                "- {b}: {figure} — {} the ≥ half a fair share target",
                verdict(cell_share(worst) >= 0.5)
            )
        });
    }
    out
}

/// One line per target and backend.
pub fn verdicts(rows: &[ResultRow]) -> Vec<String> {
    let mut out = Vec::new();
    fn rows_of<'a>(
        rows: &'a [ResultRow],
        scenario: &'a str,
    ) -> impl Iterator<Item = &'a ResultRow> + 'a {
        rows.iter().filter(move |r| r.scenario == scenario)
    }
    let of = |scenario: &'static str| rows_of(rows, scenario);
    // 2. Uncontended.
    for r in of("uncontended").filter(|r| !is_peer(&r.backend)) {
        if let Some(ratio) = r.ratio_vs_baseline {
            out.push(format!(
                "- {}: uncontended lock ÷ raw = {ratio:.2} — {} the ≥ 0.9× target",
                r.backend,
                verdict(ratio >= 0.9)
            ));
        }
        for p in of("uncontended").filter(|p| is_peer(&p.backend) && store(&p.backend) == r.backend)
        {
            out.push(format!(
                "- {}: uncontended {:.0} cycles/s vs {} {:.0} — {} the ≥ peer target",
                r.backend,
                r.ops_per_sec,
                p.backend,
                p.ops_per_sec,
                if r.ops_per_sec >= p.ops_per_sec {
                    "meets"
                } else {
                    "MISSES"
                }
            ));
        }
    }
    // 1. Contended, in one process.
    for r in of("contended").filter(|r| !is_peer(&r.backend)) {
        let peers: Vec<&ResultRow> = of("contended")
            .filter(|p| is_peer(&p.backend) && store(&p.backend) == r.backend)
            .collect();
        if let Some(best) = peers
            .iter()
            .max_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec))
        {
            out.push(format!(
                "- {}: contended {:.0} handoffs/s vs the best peer {} {:.0} — {} the ≥ best peer target",
                r.backend,
                r.ops_per_sec,
                best.backend,
                best.ops_per_sec,
                verdict(r.ops_per_sec >= best.ops_per_sec)
            ));
        }
        let retakes = r.same_holder_fraction.unwrap_or(0.0);
        out.push(format!(
            "- {}: contended re-takes {:.0}%, wait p99 {} — {} the ≤ 10%, ≤ 20 ms target",
            r.backend,
            retakes * 100.0,
            ms(r.p99_us),
            verdict(retakes <= 0.10 && r.p99_us <= 20_000.0)
        ));
        let handoff = r.handoff_p50_us.unwrap_or(f64::MAX);
        if r.backend == "zookeeper" {
            if let Some(c) = peers.iter().find(|p| p.backend.starts_with("Curator")) {
                let theirs = c.handoff_p50_us.unwrap_or(0.0);
                out.push(format!(
                    "- zookeeper: handoff p50 {} vs Curator's {} — {} the ≤ Curator target",
                    ms(handoff),
                    ms(theirs),
                    verdict(handoff <= theirs)
                ));
            }
        } else if r.backend == "redis" || is_sql(&r.backend) {
            let raw = of("uncontended")
                .find(|u| u.backend == r.backend)
                .and_then(|u| u.baseline_ops_per_sec);
            if let Some(raw) = raw {
                let rtt = 1e6 / raw / raw_round_trips(&r.backend);
                out.push(format!(
                    "- {}: handoff p50 {} vs one round trip {} + 0.2 ms — {} the target",
                    r.backend,
                    ms(handoff),
                    ms(rtt),
                    verdict(handoff <= rtt + 200.0)
                ));
            }
        }
    }
    // 3. Across processes.
    for r in of("contended-procs") {
        let retakes = r.same_holder_fraction.unwrap_or(0.0);
        out.push(format!(
            "- {}: across {} processes re-takes {:.0}%, wait p99 {} — {} the ≤ 20%, ≤ 20 ms target",
            r.backend,
            r.param.unwrap_or(0),
            retakes * 100.0,
            ms(r.p99_us),
            verdict(retakes <= 0.20 && r.p99_us <= 20_000.0)
        ));
    }
    // 4. Grid.
    out.extend(grid(rows));
    // 5. Scale.
    let mut backends: Vec<&str> = of("scaling-waiters").map(|r| r.backend.as_str()).collect();
    backends.dedup();
    for b in backends {
        let costs: Vec<(u64, f64)> = of("scaling-waiters")
            .filter(|r| r.backend == b && r.p50_us > 0.0)
            .map(|r| (r.param.unwrap_or(0), r.p50_us))
            .collect();
        if costs.len() > 1 {
            let grew = growth(&costs);
            out.push(format!(
                "- {b}: µs per handoff from {} to {} waiters: {} — grew at most {grew:.1}× with more waiters, {} the flat (≤ 2×) target",
                costs.first().map_or(0, |c| c.0),
                costs.last().map_or(0, |c| c.0),
                costs.iter().map(|c| format!("{:.0}", c.1)).collect::<Vec<_>>().join(" / "),
                verdict(grew <= 2.0)
            ));
        }
    }
    for r in of("scaling-names") {
        if let (Some(kb), Some(n)) = (r.rss_kb, r.param) {
            // The larger of the resident-set growth and the live heap growth: the first misses
            // memory freed earlier and handed out again, the second the allocator's slack.
            let heap = r.heap_bytes.unwrap_or(0);
            let per = (kb * 1024).max(heap) as f64 / n.max(1) as f64;
            out.push(format!(
                "- {}: {:.0} bytes of client memory per held lock ({} held; heap {:.0}, resident {:.0}) — {} the ≤ 2 KiB target",
                r.backend,
                per,
                n,
                heap as f64 / n.max(1) as f64,
                (kb * 1024) as f64 / n.max(1) as f64,
                verdict(per <= 2048.0)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(backend: &str, scenario: &str, ops: f64) -> ResultRow {
        ResultRow {
            backend: backend.into(),
            scenario: scenario.into(),
            ops_per_sec: ops,
            ..Default::default()
        }
    }

    #[test]
    fn peers_are_matched_to_their_store() {
        assert_eq!(store("rslock (redlock)"), "redlock");
        assert_eq!(store("redis-py Lock (redis)"), "redis");
        assert_eq!(store("postgres-row"), "postgres-row");
        let rows = vec![
            row("redis", "contended", 900.0),
            row("naive-poll (redis)", "contended", 2000.0),
            row("redis-py Lock (redis)", "contended", 1500.0),
            row("redlock", "contended", 5000.0),
        ];
        let v = verdicts(&rows);
        let line = v
            .iter()
            .find(|l| l.contains("best peer") && l.starts_with("- redis:"));
        assert!(
            line.is_some_and(|l| l.contains("naive-poll (redis) 2000") && l.contains("MISSES")),
            "{v:?}"
        );
        assert!(
            !v.iter()
                .any(|l| l.starts_with("- redlock:") && l.contains("best peer")),
            "{v:?}"
        );
    }

    #[test]
    fn a_cost_that_falls_with_more_waiters_is_flat_and_one_that_doubles_is_not() {
        assert_eq!(
            growth(&[(1, 3496.0), (10, 2945.0), (100, 1078.0), (1000, 529.0)]),
            1.0
        );
        let g = growth(&[(1, 654.0), (10, 1054.0), (100, 1430.0), (1000, 1441.0)]);
        assert!((g - 1441.0 / 654.0).abs() < 1e-9, "{g}");
        let g = growth(&[(1, 2057.0), (10, 971.0), (100, 1123.0), (1000, 1047.0)]);
        assert!((g - 1123.0 / 971.0).abs() < 1e-9, "{g}");
    }

    #[test]
    fn memory_per_lock_is_judged_against_2_kib() {
        let mut r = row("redis", "scaling-names", 1.0);
        r.rss_kb = Some(30_000);
        r.param = Some(10_000);
        let v = verdicts(&[r]);
        assert!(
            v[0].contains("3072 bytes") && v[0].contains("MISSES"),
            "{v:?}"
        );
    }

    #[test]
    fn memory_per_lock_counts_the_heap_when_the_resident_set_did_not_grow() {
        let mut r = row("etcd", "scaling-names", 1.0);
        r.rss_kb = Some(0);
        r.heap_bytes = Some(25_000_000);
        r.param = Some(10_000);
        let v = verdicts(&[r]);
        assert!(
            v[0].contains("2500 bytes") && v[0].contains("MISSES"),
            "{v:?}"
        );
    }

    fn cell(backend: &str, processes: u64, hold_ms: u64, counts: (u64, u64, u64)) -> ResultRow {
        ResultRow {
            backend: backend.into(),
            scenario: "grid".into(),
            processes: Some(processes),
            hold_ms: Some(hold_ms),
            acquisitions: Some(counts.0),
            min_per_client: Some(counts.1),
            max_per_client: Some(counts.2),
            ..Default::default()
        }
    }

    #[test]
    fn a_grid_cell_with_a_client_under_half_its_share_misses() {
        let rows = [
            cell("redis", 8, 0, (800, 96, 104)),
            cell("redis", 8, 10, (80, 9, 11)),
            cell("naive-poll (redis)", 8, 10, (80, 0, 40)),
            cell("sqlite-row", 2, 0, (100, 24, 76)),
        ];
        let v = verdicts(&rows);
        let line = |who: &str| {
            v.iter()
                .find(|l| l.starts_with(who))
                .cloned()
                .unwrap_or_default()
        };
        assert!(line("- redis:").contains("meets"), "{v:?}");
        assert!(line("- redis:").contains("8 processes × 10 ms"), "{v:?}");
        assert!(line("- sqlite-row:").contains("MISSES"), "{v:?}");
        let peer = line("- naive-poll (redis):");
        assert!(
            peer.contains("got 0 of a fair 10") && !peer.contains("MISSES"),
            "{v:?}"
        );
    }
}
