//! [`AcquireOptions`]: how long to wait, how long the lease lasts, whether to renew it.

use std::time::Duration;

use crate::LockError;

/// The default lease: 30 seconds.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// Options for one acquisition.
///
/// * `wait`: how long [`crate::DistributedLock::acquire`] may wait for another holder;
///   `None` waits forever. `try_acquire` ignores it and never waits on a holder.
/// * `ttl`: the lease. On lease-based stores (Redis, SQL row mode) the lock expires this long
///   after the last successful renewal if the holder disappears. On session- or
///   connection-bound stores (ZooKeeper, SQL `for_update`) the lock is held as long as the
///   session/connection lives, and `ttl` paces the liveness checks.
/// * `renew`: keep the lease alive in the background (every `ttl / 3`, or a third of a
///   shorter validity the store vouches for) while the guard lives.
///   With `renew = false` the guard reports itself lost when the lease runs out.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AcquireOptions {
    /// Longest wait for another holder; `None` = forever.
    pub wait: Option<Duration>,
    /// The lease length.
    pub ttl: Duration,
    /// Renew the lease in the background while held.
    pub renew: bool,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            wait: None,
            ttl: DEFAULT_TTL,
            renew: true,
        }
    }
}

impl AcquireOptions {
    /// Defaults: wait forever, 30 s lease, renewal on.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wait at most `wait` for another holder.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Wait forever (the default).
    pub fn wait_forever(mut self) -> Self {
        self.wait = None;
        self
    }

    /// Sets the lease length.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Turns background renewal on or off.
    pub fn renew(mut self, renew: bool) -> Self {
        self.renew = renew;
        self
    }

    /// Checks the options: the lease must be at least 10 ms and at most 24 hours.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] naming the bad value.
    pub fn validate(&self) -> Result<(), LockError> {
        if self.ttl < Duration::from_millis(10) {
            return Err(LockError::invalid_config(format!(
                "ttl {:?} is too short: a lease must be at least 10ms",
                self.ttl
            )));
        }
        if self.ttl > Duration::from_secs(24 * 3600) {
            return Err(LockError::invalid_config(format!(
                "ttl {:?} is too long: a lease must be at most 24h",
                self.ttl
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_ttl_is_invalid_config() {
        let err = AcquireOptions::new()
            .ttl(Duration::ZERO)
            .validate()
            .unwrap_err();
        assert!(matches!(err, LockError::InvalidConfig(_)));
        assert!(err.to_string().contains("ttl"));
        assert!(AcquireOptions::new().validate().is_ok());
    }
}
