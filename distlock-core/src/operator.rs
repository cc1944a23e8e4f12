//! What an operator sees and does: [`Listing`] (the names held now, from
//! [`DistributedLock::list`](crate::DistributedLock::list)) and [`Broken`] (what a forced release,
//! [`DistributedLock::break_lock`](crate::DistributedLock::break_lock), took away).
//!
//! A listing is a snapshot, bounded by its `limit` so a store with many names answers with a
//! page, never with everything. A break is for a holder that is gone or stuck: it frees the
//! name and leaves its fence ahead of the broken holder's token, so the next holder's token is
//! higher and a fenced resource ([`crate::fence`]) refuses the broken holder's late writes. The
//! broken holder's guard reports itself lost at its next renewal (or at once, where the store
//! tells it).

use crate::backend::name::MAX_NAME_BYTES;
use crate::{LockError, LockInfo};

/// The `limit` the `distlock ls` command uses when none is given.
pub const DEFAULT_LIST_LIMIT: usize = 1000;

/// The largest `limit` a listing takes: a page is held in memory whole.
pub const MAX_LIST_LIMIT: usize = 100_000;

/// One held name in a [`Listing`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Listed {
    /// The lock name.
    pub name: String,
    /// Its holder, as [`DistributedLock::inspect`](crate::DistributedLock::inspect) reports
    /// it (always `held`).
    pub info: LockInfo,
}

impl Listed {
    /// `name`, held as `info` says.
    pub fn new(name: impl Into<String>, info: LockInfo) -> Self {
        Listed {
            name: name.into(),
            info,
        }
    }
}

/// The names held now whose name starts with a prefix, at most `limit` of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Listing {
    /// The held names, sorted by name.
    pub locks: Vec<Listed>,
    /// More names may be held than are listed: the listing stopped at its `limit`, or at the
    /// backend's bound on the store's keys it reads (the backend's docs say which).
    pub truncated: bool,
}

impl Listing {
    /// A page of at most `limit` of `found`, sorted by name; truncated when `found` has more
    /// than `limit` or the reader stopped early (`stopped_early`).
    pub fn page(mut found: Vec<Listed>, limit: usize, stopped_early: bool) -> Self {
        found.sort_by(|a, b| a.name.cmp(&b.name));
        let truncated = stopped_early || found.len() > limit;
        found.truncate(limit);
        Listing {
            locks: found,
            truncated,
        }
    }
}

/// What [`DistributedLock::break_lock`](crate::DistributedLock::break_lock) took away: the
/// broken holder's token, owner and identity, as far as the store recorded them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Broken {
    /// The lock name.
    pub name: String,
    /// The broken holder's fencing token; the name's next holder gets a higher one.
    pub fencing_token: Option<u64>,
    /// The broken holder's owner id (token, node or key name), when known.
    pub owner: Option<String>,
    /// The broken holder's identity ([`crate::AcquireOptions::holder`]), when it gave one.
    pub holder: Option<String>,
}

impl Broken {
    /// The holder of `name` with `fencing_token`, broken.
    pub fn new(name: impl Into<String>, fencing_token: Option<u64>) -> Self {
        Broken {
            name: name.into(),
            fencing_token,
            owner: None,
            holder: None,
        }
    }

    /// Sets the owner id and holder identity.
    pub fn with_owner(mut self, owner: Option<String>, holder: Option<String>) -> Self {
        self.owner = owner;
        self.holder = holder;
        self
    }
}

/// Checks a listing's prefix (empty, or a beginning of a valid name) and limit.
///
/// # Errors
/// [`LockError::InvalidName`] for a prefix no name can start with; [`LockError::InvalidConfig`]
/// for a limit of 0 or above [`MAX_LIST_LIMIT`].
pub fn validate_listing(prefix: &str, limit: usize) -> Result<(), LockError> {
    if prefix.len() > MAX_NAME_BYTES {
        return Err(LockError::invalid_name(
            prefix,
            format!(
                "no lock name starts with this prefix: names are at most {MAX_NAME_BYTES} bytes, it has {}",
                prefix.len()
            ),
        ));
    }
    if prefix.contains('\0') {
        return Err(LockError::invalid_name(
            prefix,
            "no lock name starts with this prefix: names contain no NUL byte",
        ));
    }
    if limit == 0 || limit > MAX_LIST_LIMIT {
        return Err(LockError::invalid_config(format!(
            "list limit {limit} is out of range: give 1 to {MAX_LIST_LIMIT}"
        )));
    }
    Ok(())
}

/// The [`LockError::Unsupported`] of a backend that cannot list, saying why.
pub fn cannot_list(backend: &str, why: &str) -> LockError {
    LockError::unsupported(backend, format!("listing held locks ({why})"))
}

/// The [`LockError::Unsupported`] of a backend that cannot break a lock safely, saying why.
pub fn cannot_break(backend: &str, why: &str) -> LockError {
    LockError::unsupported(backend, format!("breaking a lock ({why})"))
}

/// The [`LockError::NotHeld`] of a break that found nobody holding `name`.
pub fn nobody_holds(name: &str, backend: &str) -> LockError {
    LockError::not_held(
        name,
        backend,
        "nobody holds it, so there is nothing to break",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_sorted_bounded_and_says_when_it_left_names_out() {
        let found = ["c", "a", "b"]
            .map(|n| Listed::new(n, LockInfo::held(Some(1), None, None, None)))
            .to_vec();
        let p = Listing::page(found.clone(), 2, false);
        let names: Vec<_> = p.locks.iter().map(|l| l.name.as_str()).collect();
        assert_eq!((names, p.truncated), (vec!["a", "b"], true));
        assert!(!Listing::page(found.clone(), 3, false).truncated);
        assert!(Listing::page(found, 3, true).truncated);
    }

    #[test]
    fn bad_prefixes_and_limits_are_typed_errors() {
        assert!(validate_listing("", 1).is_ok());
        assert!(matches!(
            validate_listing("a\0", 1),
            Err(LockError::InvalidName { .. })
        ));
        assert!(matches!(
            validate_listing(&"x".repeat(257), 1),
            Err(LockError::InvalidName { .. })
        ));
        for limit in [0, MAX_LIST_LIMIT + 1] {
            assert!(matches!(
                validate_listing("a", limit),
                Err(LockError::InvalidConfig(_))
            ));
        }
    }
}
