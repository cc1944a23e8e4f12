//! The client's clock as a fencing-token floor: Redlock draws every token of a round, and
//! every grant of a release (`node::Handoff`), above one reading of it, so masters whose
//! counters agree draw one token (`redlock/fence.rs`). A single instance uses the server's
//! clock instead.

use std::time::Duration;

/// This client's clock in µs since the epoch, less `lag` (a test hook: a client whose clock
/// runs behind; zero in use).
pub(crate) fn now_us(lag: Duration) -> u64 {
    let behind = u64::try_from(lag.as_micros()).unwrap_or(u64::MAX);
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .saturating_sub(behind)
}
