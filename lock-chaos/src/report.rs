//! The chaos report: scenario × backend.

use std::fmt::Write as _;

use crate::scenarios::Outcome;

/// Renders the Markdown table.
pub fn markdown(rows: &[Outcome], failures: &[String]) -> String {
    let mut s = String::from("# distlock chaos report\n\n");
    let _ = writeln!(s, "| scenario | backend | acquisitions | overlaps | stale writes accepted | stale writes rejected | out-of-order accepted | lost() after the fault, ms p50 / max | note |");
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---|");
    for r in rows {
        let lost = if r.lost_ms.is_empty() {
            "–".to_owned()
        } else {
            let mut v = r.lost_ms.clone();
            v.sort_by(f64::total_cmp);
            let p50 = v[(v.len() - 1) / 2];
            let max = v[v.len() - 1];
            format!("{p50:.0} / {max:.0} (n={})", v.len())
        };
        let overlaps = if r.overlap_expected {
            format!("{} (expected)", r.overlaps)
        } else {
            r.overlaps.to_string()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.scenario,
            r.backend,
            r.acquisitions,
            overlaps,
            r.stale_accepted,
            r.stale_rejected,
            r.out_of_order,
            lost,
            r.note
        );
    }
    for f in failures {
        let _ = writeln!(s, "\n- FAILED: {f}");
    }
    s
}

/// Whether any outcome breaks a claimed guarantee.
pub fn violations(rows: &[Outcome]) -> Vec<String> {
    rows.iter()
        .filter(|r| {
            r.stale_accepted > 0 || r.out_of_order > 0 || (r.overlaps > 0 && !r.overlap_expected)
        })
        .map(|r| {
            format!(
                "{} on {}: {} overlaps, {} stale accepted, {} out of order",
                r.scenario, r.backend, r.overlaps, r.stale_accepted, r.out_of_order
            )
        })
        .collect()
}
