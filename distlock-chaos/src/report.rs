//! The chaos report: scenario × backend.

use std::fmt::Write as _;

use crate::scenarios::Outcome;

/// Renders the Markdown table.
pub fn markdown(rows: &[Outcome], failures: &[String]) -> String {
    let mut s = String::from("# distlock chaos report\n\n");
    let _ = writeln!(s, "| scenario | backend | acquisitions | overlaps | stale writes accepted | stale writes rejected | out-of-order accepted | lost() after the fault, ms p50 / max | next holder after the fault, ms p50 / max | note |");
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in rows {
        let (lost, next) = (percentiles(&r.lost_ms), percentiles(&r.next_holder_ms));
        let overlaps = if r.overlap_expected {
            format!("{} (expected)", r.overlaps)
        } else {
            r.overlaps.to_string()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.scenario,
            r.backend,
            r.acquisitions,
            overlaps,
            r.stale_accepted,
            r.stale_rejected,
            r.out_of_order,
            lost,
            next,
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

/// `p50 / max (n=…)` of a sample, `–` when empty.
fn percentiles(ms: &[f64]) -> String {
    if ms.is_empty() {
        return "–".to_owned();
    }
    let mut v = ms.to_vec();
    v.sort_by(f64::total_cmp);
    let (p50, max) = (v[(v.len() - 1) / 2], v[v.len() - 1]);
    if v.len() == 1 {
        format!("{max:.0}")
    } else {
        format!("{p50:.0} / {max:.0} (n={})", v.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_violations() {
        assert_eq!(percentiles(&[]), "–");
        assert_eq!(percentiles(&[7.2]), "7");
        assert_eq!(percentiles(&[30.0, 10.0, 20.0]), "20 / 30 (n=3)");
        let ok = Outcome {
            overlaps: 1,
            overlap_expected: true,
            ..Default::default()
        };
        let bad = Outcome {
            stale_accepted: 1,
            ..Default::default()
        };
        assert!(violations(std::slice::from_ref(&ok)).is_empty());
        assert_eq!(violations(&[ok, bad]).len(), 1);
    }
}
