//! What an operator sees and breaks (`distlock ls`, `distlock break`) on one server or a
//! Redlock quorum.
//!
//! * **list**: `SCAN` (string keys, `MATCH <prefix><name prefix>*`, 1,000 a step) on every
//!   node, bounded by [`SCAN_STEPS`] steps and [`SCAN_TIME`] per node and by [`MAX_CANDIDATES`]
//!   names; a name is listed only when a quorum of nodes names one holder (as `inspect`) and
//!   its key has an expiry and distlock's fencing counter beside it, so redis-py locks, fenced
//!   values and other applications' strings under the prefix are left out. A scan cut short by
//!   a bound marks the listing truncated. The names come back sorted, but which ones a
//!   truncated page holds depends on the scan order.
//! * **break**: `lua/break.lua` on every node at once: deletes the lock key whoever holds it
//!   and raises the fencing counter past the holder's token in one script, then wakes the
//!   queue's head; a key with no counter or no expiry is reported, never deleted. Broken when
//!   the holder was deleted on a quorum (or on every node that held it, with enough nodes
//!   answering to be sure); the broken holder's next renewal is refused (renewals are
//!   owner-checked) and its guard is lost.

use std::collections::BTreeSet;
use std::time::Duration;

use distlock_core::backend::name;
use distlock_core::operator::nobody_holds;
use distlock_core::{Broken, Listed, Listing, LockError};
use futures::future::join_all;
use futures::stream::{self, StreamExt};
use tokio::time::Instant;

use crate::backend::RedisLock;
use crate::error::map;
use crate::keys::Keys;
use crate::node::{Node, Taken};

/// Keys one `SCAN` step asks for.
const SCAN_COUNT: usize = 1000;
/// The most `SCAN` steps per node and listing (a million keys looked at).
const SCAN_STEPS: usize = 1000;
/// The longest a listing scans one node.
const SCAN_TIME: Duration = Duration::from_secs(10);
/// The most candidate names a listing checks, beyond `limit`.
const MAX_CANDIDATES: usize = 10_000;
/// Candidates checked at once.
const CHECKS_IN_FLIGHT: usize = 16;

/// The held names starting with `prefix`, at most `limit`.
pub(crate) async fn list_held(
    lock: &RedisLock,
    prefix: &str,
    limit: usize,
) -> Result<Listing, LockError> {
    if lock.config().topology == crate::Topology::Cluster {
        // SCAN walks one node: a listing would silently miss the other primaries' slots.
        return Err(LockError::unsupported(
            lock.backend_label(),
            "listing the locks of a Redis Cluster (ls)",
        ));
    }
    let key_prefix = format!("{}{prefix}", lock.config().prefix);
    let cap = limit.saturating_add(MAX_CANDIDATES);
    let mut candidates = BTreeSet::new();
    let mut cut_short = false;
    for node in lock.nodes() {
        match scan(node, lock, &key_prefix, cap, &mut candidates).await {
            Ok(complete) => cut_short |= !complete,
            // A Redlock quorum of views is enough: a node that does not answer is skipped.
            Err(e) if lock.nodes().len() > 1 => {
                tracing::debug!(backend = %lock.backend_label(), server = %node.addr(), error = %e, "listing skipped an unreachable node");
            }
            Err(e) => return Err(map(e, lock.backend_label(), None)),
        }
    }
    // Sorted, so a page cut at `limit` holds the first names by byte order of those scanned.
    let mut checks = stream::iter(candidates)
        .map(|name| async move {
            let keys = Keys::new(&lock.config().prefix, &name);
            let view = lock.quorum_view(&keys, &name).await;
            (name, view)
        })
        .buffered(CHECKS_IN_FLIGHT);
    let mut found = Vec::new();
    while let Some((name, view)) = checks.next().await {
        let view = match view {
            // Too many servers silent to tell this name's state (a Redlock master down):
            // skipped, and the page says it may be incomplete.
            Err(LockError::Unavailable { .. }) if lock.nodes().len() > 1 => {
                cut_short = true;
                continue;
            }
            view => view?,
        };
        match view {
            // Distlock's own: held by a quorum, with a fencing counter beside the key and a
            // lease (a key without expiry is someone else's value).
            Ok(info) if info.held && info.fencing_token.is_some() && info.expires_in.is_some() => {
                found.push(Listed::new(name, info));
                if found.len() > limit {
                    break;
                }
            }
            _ => {}
        }
    }
    Ok(Listing::page(found, limit, cut_short))
}

/// Adds to `names` the lock names whose keys `node` holds under `key_prefix`, up to `cap`
/// names: whether the scan went through (no bound cut it short).
async fn scan(
    node: &Node,
    lock: &RedisLock,
    key_prefix: &str,
    cap: usize,
    names: &mut BTreeSet<String>,
) -> redis::RedisResult<bool> {
    let pattern = format!("{}*", glob_escape(key_prefix));
    let prefix_len = lock.config().prefix.len();
    let started = Instant::now();
    let mut cursor = 0;
    for _ in 0..SCAN_STEPS {
        let step = node.scan(cursor, &pattern, SCAN_COUNT);
        let (next, keys) = match tokio::time::timeout(lock.config().timeout, step).await {
            Ok(reply) => reply?,
            Err(_) => return Ok(false),
        };
        // distlock's own keys beside a lock's have a NUL; names are valid UTF-8.
        let lock_names = keys
            .into_iter()
            .filter_map(|k| String::from_utf8(k.get(prefix_len..)?.to_vec()).ok())
            .filter(|n| name::validate(n).is_ok());
        names.extend(lock_names);
        if next == 0 {
            return Ok(true);
        }
        if names.len() >= cap || started.elapsed() >= SCAN_TIME {
            return Ok(false);
        }
        cursor = next;
    }
    Ok(false)
}

/// `s` with Redis glob metacharacters (`*?[]\`) escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Breaks `name` on every node (see the module docs).
pub(crate) async fn break_held(lock: &RedisLock, name: &str) -> Result<Broken, LockError> {
    let label = lock.backend_label();
    let keys = Keys::new(&lock.config().prefix, name);
    let t = lock.config().timeout;
    let replies = join_all(
        lock.nodes()
            .iter()
            .map(|n| async { n.within(t, n.force_release(&keys)).await }),
    )
    .await;
    let (n, quorum) = (replies.len(), lock.config().quorum());
    let mut taken: Vec<Taken> = Vec::new();
    let mut answered = 0;
    let mut failure = None;
    for reply in replies {
        match reply {
            Ok(Ok(Ok(took))) => {
                answered += 1;
                taken.extend(took);
            }
            Ok(Ok(Err(foreign))) => {
                return Err(LockError::backend(
                    label,
                    Some(name),
                    foreign.describe(&keys),
                    None,
                ))
            }
            Ok(Err(e)) => failure = Some(map(e, label, Some(name))),
            Err(_) => {}
        }
    }
    let unsure = |broke: usize| {
        failure.unwrap_or_else(|| {
            LockError::unavailable(
                label,
                Some(name),
                format!(
                    "the break reached {answered} of {n} servers (deleted the holder on {broke}); \
                     too few to tell whether it held: run it again"
                ),
                None,
            )
        })
    };
    let Some((value, on, token)) = most_named(&taken) else {
        return if answered >= quorum {
            Err(nobody_holds(name, label))
        } else {
            Err(unsure(0))
        };
    };
    // Deleted on fewer than a quorum, while the silent nodes could make one: unknown.
    if on < quorum && on + (n - answered) >= quorum {
        return Err(unsure(on));
    }
    let (owner, holder) = crate::holder::split(value);
    Ok(Broken::new(name, Some(token)).with_owner(Some(owner), holder))
}

/// The holder value deleted on the most nodes: the value, on how many, and the highest token
/// those nodes held for it.
fn most_named(taken: &[Taken]) -> Option<(String, usize, u64)> {
    let mut by_value = std::collections::HashMap::<&str, (usize, u64)>::new();
    for t in taken {
        let seen = by_value.entry(&t.value).or_insert((0, 0));
        *seen = (seen.0 + 1, seen.1.max(t.token));
    }
    by_value
        .into_iter()
        .max_by_key(|(_, (on, _))| *on)
        .map(|(v, (on, token))| (v.to_owned(), on, token))
}

impl RedisLock {
    /// [`list_held`], as `DistributedLock::list` calls it.
    pub(crate) async fn operator_list(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Listing, LockError> {
        list_held(self, prefix, limit).await
    }

    /// [`break_held`], as `DistributedLock::break_lock` calls it.
    pub(crate) async fn operator_break(&self, name: &str) -> Result<Broken, LockError> {
        break_held(self, name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_metacharacters_are_escaped() {
        assert_eq!(glob_escape(r"a*b?[c]\d"), r"a\*b\?\[c\]\\d");
        assert_eq!(glob_escape("jobs:"), "jobs:");
    }

    #[test]
    fn the_holder_deleted_on_most_nodes_is_reported_with_its_highest_token() {
        let t = |v: &str, token| Taken {
            value: v.to_owned(),
            token,
        };
        let got = most_named(&[t("a", 7), t("b", 9), t("a", 8)]);
        assert_eq!(got, Some(("a".to_owned(), 2, 8)));
        assert_eq!(most_named(&[]), None);
    }
}
