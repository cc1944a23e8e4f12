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
/// * `holder`: an identity recorded with the acquisition where the store can keep it
///   ([`crate::Capabilities::holder_identity`]), so [`crate::DistributedLock::inspect`] reports
///   it as [`crate::LockInfo::holder`] (leader election uses it). At most
///   [`MAX_IDENTITY_BYTES`] bytes, non-empty, no control characters.
///
/// # Defaults from configuration
/// A lock connected from a URL with `ttl`, `wait` or `renew` parameters (or a `LockConfig`)
/// applies them to every field the caller did not set: a field counts as set when one of the
/// builder methods set it or when it differs from the built-in default.
/// [`AcquireOptions::or_defaults`] does the merge.
///
/// ```
/// use std::time::Duration;
/// use distlock_core::AcquireOptions;
///
/// // Wait up to 10 s for the lock; hold it on a 15 s lease renewed in the background.
/// let opts = AcquireOptions::new()
///     .wait(Duration::from_secs(10))
///     .ttl(Duration::from_secs(15));
/// assert_eq!(opts.wait, Some(Duration::from_secs(10)));
/// assert!(opts.renew);
/// assert!(opts.validate().is_ok());
/// // A lease under 10 ms is refused before any store is asked.
/// assert!(AcquireOptions::new().ttl(Duration::from_millis(1)).validate().is_err());
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AcquireOptions {
    /// Longest wait for another holder; `None` = forever.
    pub wait: Option<Duration>,
    /// The lease length.
    pub ttl: Duration,
    /// Renew the lease in the background while held.
    pub renew: bool,
    /// The holder identity recorded with the acquisition, if any.
    pub holder: Option<String>,
    /// Which fields a builder method set (`SET_*` bits).
    set: u8,
}

const SET_WAIT: u8 = 1;
const SET_TTL: u8 = 2;
const SET_RENEW: u8 = 4;

impl PartialEq for AcquireOptions {
    fn eq(&self, other: &Self) -> bool {
        (self.wait, self.ttl, self.renew, &self.holder)
            == (other.wait, other.ttl, other.renew, &other.holder)
    }
}

impl Eq for AcquireOptions {}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            wait: None,
            ttl: DEFAULT_TTL,
            renew: true,
            holder: None,
            set: 0,
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
        self.set |= SET_WAIT;
        self
    }

    /// Wait forever (the default).
    pub fn wait_forever(mut self) -> Self {
        self.wait = None;
        self.set |= SET_WAIT;
        self
    }

    /// Sets the lease length.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self.set |= SET_TTL;
        self
    }

    /// Turns background renewal on or off.
    pub fn renew(mut self, renew: bool) -> Self {
        self.renew = renew;
        self.set |= SET_RENEW;
        self
    }

    /// Records `identity` as the holder of the locks taken with these options (see
    /// [`AcquireOptions::holder`](#structfield.holder)); checked by [`AcquireOptions::validate`].
    pub fn holder(mut self, identity: impl Into<String>) -> Self {
        self.holder = Some(identity.into());
        self
    }

    /// These options with every field the caller did not set taken from `defaults` (the
    /// configured defaults of a lock). A field counts as set when a builder method set it or
    /// when it differs from the built-in default ([`AcquireOptions::new`]).
    pub fn or_defaults(&self, defaults: &AcquireOptions) -> AcquireOptions {
        let builtin = AcquireOptions::new();
        let mut out = self.clone();
        if self.set & SET_WAIT == 0 && self.wait == builtin.wait {
            out.wait = defaults.wait;
        }
        if self.set & SET_TTL == 0 && self.ttl == builtin.ttl {
            out.ttl = defaults.ttl;
        }
        if self.set & SET_RENEW == 0 && self.renew == builtin.renew {
            out.renew = defaults.renew;
        }
        out.set |= defaults.set;
        out
    }

    /// Checks the options: the lease must be at least 10 ms and at most 24 hours; a holder
    /// identity must pass [`validate_identity`].
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] naming the bad value; [`LockError::InvalidIdentity`] for a
    /// bad holder identity.
    pub fn validate(&self) -> Result<(), LockError> {
        if let Some(id) = &self.holder {
            validate_identity(id)?;
        }
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

/// The longest holder identity accepted, in bytes.
pub const MAX_IDENTITY_BYTES: usize = 128;

/// Checks a holder (participant) identity: non-empty, at most [`MAX_IDENTITY_BYTES`] bytes, no
/// control characters (so it prints on one line and fits every store's record).
///
/// # Errors
/// [`LockError::InvalidIdentity`] naming the broken rule.
pub fn validate_identity(identity: &str) -> Result<(), LockError> {
    let why = if identity.is_empty() {
        "an identity must not be empty".to_owned()
    } else if identity.len() > MAX_IDENTITY_BYTES {
        format!(
            "an identity is at most {MAX_IDENTITY_BYTES} bytes, this one has {}",
            identity.len()
        )
    } else if identity.chars().any(char::is_control) {
        "an identity must not contain control characters (newline, tab, NUL, …)".to_owned()
    } else {
        return Ok(());
    };
    Err(LockError::invalid_identity(identity, why))
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

    #[test]
    fn identities_are_checked_with_typed_errors() {
        for bad in ["", "a\nb", "tab\there", "nul\0", &"x".repeat(129)] {
            let e = AcquireOptions::new().holder(bad).validate().unwrap_err();
            assert!(
                matches!(e, LockError::InvalidIdentity { .. }),
                "{bad:?}: {e}"
            );
        }
        for good in ["node-1", "10.0.0.7:8080", "ключ 🔒", &"x".repeat(128)] {
            assert!(validate_identity(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn configured_defaults_fill_only_what_the_caller_left_unset() {
        let configured = AcquireOptions::new()
            .ttl(Duration::from_secs(5))
            .wait(Duration::from_secs(2))
            .renew(false);
        let merged = AcquireOptions::new().or_defaults(&configured);
        assert_eq!(merged, configured);
        // Set by a builder, even to the built-in value: the caller's value wins.
        let mine = AcquireOptions::new().ttl(DEFAULT_TTL).wait_forever();
        let merged = mine.or_defaults(&configured);
        assert_eq!(merged.ttl, DEFAULT_TTL);
        assert_eq!(merged.wait, None);
        assert!(!merged.renew);
        // Set by assigning the field to a non-default value: the caller's value wins.
        let mut assigned = AcquireOptions::new();
        assigned.ttl = Duration::from_secs(7);
        assert_eq!(
            assigned.or_defaults(&configured).ttl,
            Duration::from_secs(7)
        );
    }
}
