//! What distlock records through the [`metrics`](https://docs.rs/metrics) facade with the
//! `metrics` feature, so users pick the exporter (Prometheus, StatsD, OpenTelemetry) by
//! installing its recorder; without the feature every call here compiles to nothing.
//!
//! | series | kind | labels | what |
//! |---|---|---|---|
//! | `distlock_acquisitions_total` | counter | `backend`, `outcome` | every acquisition: `acquired`, `timed_out` (the wait ran out), `busy` (a try found it held), `error` |
//! | `distlock_wait_seconds` | histogram | `backend` | from the call to the grant, for acquisitions that got the lock |
//! | `distlock_handoffs_total` | counter | `backend` | acquisitions granted after waiting behind another holder (the lock passed from one holder to a waiter; see [`crate::backend::handoff`]) |
//! | `distlock_hold_seconds` | histogram | `backend` | from the grant to the release, the drop or the loss |
//! | `distlock_lost_total` | counter | `backend`, `reason` | locks lost while held: `refused` (the store says it is no longer ours), `lease_ran_out` (not renewed in time), `store` (session expiry, a dead connection, the lock removed underneath), `renewal_stopped` |
//! | `distlock_renewal_failures_total` | counter | `backend` | renewals that failed without losing the lock (retried) |
//!
//! Lock names are not labels unless [`label_names`] turns them on: names can be unbounded, and
//! each label value is a series of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static NAME_LABELS: AtomicBool = AtomicBool::new(false);

/// Adds the lock name as a `name` label to every series from now on (off by default: only for
/// a bounded set of names).
pub fn label_names(on: bool) {
    NAME_LABELS.store(on, Ordering::Relaxed);
}

/// How an acquisition ended, as the `outcome` label says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    TimedOut,
    Busy,
    Error,
}

/// Why a held lock was lost, as the `reason` label says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loss {
    Refused,
    LeaseRanOut,
    Store,
    RenewalStopped,
}

#[cfg(feature = "metrics")]
fn labels(
    backend: &str,
    name: &str,
    extra: Option<(&'static str, &'static str)>,
) -> Vec<metrics::Label> {
    let mut l = vec![metrics::Label::new("backend", backend.to_owned())];
    if NAME_LABELS.load(Ordering::Relaxed) {
        l.push(metrics::Label::new("name", name.to_owned()));
    }
    if let Some((k, v)) = extra {
        l.push(metrics::Label::new(k, v));
    }
    l
}

/// Records one acquisition's outcome, and its wait when it got the lock (`behind`: it waited
/// behind another holder, so the grant was a handoff).
pub(crate) fn acquisition(
    backend: &str,
    name: &str,
    outcome: Outcome,
    waited: Duration,
    behind: bool,
) {
    #[cfg(feature = "metrics")]
    {
        let label = match outcome {
            Outcome::Acquired => "acquired",
            Outcome::TimedOut => "timed_out",
            Outcome::Busy => "busy",
            Outcome::Error => "error",
        };
        let l = labels(backend, name, Some(("outcome", label)));
        metrics::counter!("distlock_acquisitions_total", l).increment(1);
        if outcome == Outcome::Acquired {
            metrics::histogram!("distlock_wait_seconds", labels(backend, name, None))
                .record(waited.as_secs_f64());
            if behind {
                metrics::counter!("distlock_handoffs_total", labels(backend, name, None))
                    .increment(1);
            }
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, name, outcome, waited, behind, &NAME_LABELS);
}

/// Records how long a lock was held.
pub(crate) fn held(backend: &str, name: &str, held: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("distlock_hold_seconds", labels(backend, name, None))
        .record(held.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, name, held);
}

/// Records a lock lost while held.
pub(crate) fn lost(backend: &str, name: &str, why: Loss) {
    #[cfg(feature = "metrics")]
    {
        let reason = match why {
            Loss::Refused => "refused",
            Loss::LeaseRanOut => "lease_ran_out",
            Loss::Store => "store",
            Loss::RenewalStopped => "renewal_stopped",
        };
        let l = labels(backend, name, Some(("reason", reason)));
        metrics::counter!("distlock_lost_total", l).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, name, why);
}

/// Records a renewal that failed and will be retried.
pub(crate) fn renewal_failed(backend: &str, name: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "distlock_renewal_failures_total",
        labels(backend, name, None)
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, name);
}
