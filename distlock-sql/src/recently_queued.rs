//! Which names this client had to queue for lately (the first try of SQLite and PostgreSQL,
//! `row/mod.rs`): a first try that may lose and then has to join the queue does both in one
//! transaction (SQLite), which costs an uncontended acquisition ~12% (three statements instead
//! of one), or one statement with more to do (PostgreSQL); a name queued for within [`WITHIN`]
//! is likely contended again, so only its first tries pay that.
//!
//! A hint only: either kind of first try is safe; the wrong guess costs speed (a plain try on
//! a contended name leaves a moment between the failed try and the place) or 12%.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a name counts as contended after this client last queued for it.
pub(crate) const WITHIN: Duration = Duration::from_secs(1);

/// At most this many names are remembered; when full, the ones older than [`WITHIN`] go (all
/// of them, should every one be recent).
const MOST: usize = 1024;

/// The names this client queued for lately, and when.
#[derive(Debug, Default)]
pub(crate) struct RecentlyQueued {
    names: Mutex<HashMap<String, Instant>>,
}

impl RecentlyQueued {
    /// Notes that an acquisition of `name` had to queue, now.
    pub(crate) fn note(&self, name: &str) {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if names.len() >= MOST && !names.contains_key(name) {
            names.retain(|_, at| at.elapsed() < WITHIN);
            if names.len() >= MOST {
                names.clear();
            }
        }
        names.insert(name.to_owned(), Instant::now());
    }

    /// Whether an acquisition of `name` had to queue within [`WITHIN`].
    pub(crate) fn lately(&self, name: &str) -> bool {
        let names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        names.get(name).is_some_and(|at| at.elapsed() < WITHIN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_recent_names_and_stays_bounded() {
        let r = RecentlyQueued::default();
        assert!(!r.lately("a"));
        r.note("a");
        assert!(r.lately("a"));
        assert!(!r.lately("b"));
        for i in 0..(MOST * 3) {
            r.note(&format!("n{i}"));
        }
        let len = r.names.lock().unwrap().len();
        assert!(len <= MOST, "{len} names kept");
        assert!(r.lately(&format!("n{}", MOST * 3 - 1)));
        // Older than WITHIN: forgotten.
        r.names
            .lock()
            .unwrap()
            .insert("old".into(), Instant::now() - WITHIN * 2);
        assert!(!r.lately("old"));
    }
}
