//! What an operator sees and breaks (`distlock ls`, `distlock break`) in etcd's
//! `concurrency.Mutex` layout.
//!
//! * **list**: the keys under `[<prefix>/]<escaped name prefix>`, read in key order in pages of
//!   [`PAGE`] (a name's contender keys are adjacent), at most [`MAX_PAGES`] pages; a key counts
//!   only when it is shaped as a contender's (`<segment>/<lease in hex>`, [`LockKeys::parse`])
//!   and is attached to that very lease, so other primitives' and other applications' keys are
//!   left out. Each name is held by its key with the lowest create revision (the token; its
//!   value the identity), the others wait; the lease's time to live is read for each name
//!   listed. A read cut short by the page bound marks the listing truncated.
//! * **break**: deletes the holder's key — the one with the lowest create revision, and only
//!   if it still has that create revision (one transaction): a holder that let go meanwhile is
//!   not replaced by breaking the next one (`NotHeld`). The broken holder's watch on its key
//!   reports its guard lost at once; its lease is left to it (its release revokes it). The next
//!   holder's key is younger, so its create revision, the next token, is higher: etcd's
//!   revisions advance the fence by themselves.

use std::time::Duration;

use distlock_core::backend::name;
use distlock_core::operator::nobody_holds;
use distlock_core::{Broken, Listed, Listing, LockError, LockInfo};
use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, SortOrder, Txn, TxnOp};
use futures::stream::{self, StreamExt};

use crate::contender::by_create;
use crate::error::map;
use crate::key::LockKeys;
use crate::members::Members;

/// Keys read per page.
const PAGE: i64 = 500;
/// The most pages one listing reads (100,000 keys).
const MAX_PAGES: usize = 200;
/// Lease lookups in flight at once.
const LEASES_IN_FLIGHT: usize = 16;

/// One name's contenders as read so far: the holder (lowest create revision) and how many.
struct Contenders {
    name: String,
    holder: KeyValue,
    count: usize,
}

impl Contenders {
    fn listed(self) -> (Listed, i64) {
        let h = &self.holder;
        let owner = h
            .key_str()
            .ok()
            .and_then(|k| k.rsplit('/').next())
            .map(str::to_owned);
        let identity =
            (!h.value().is_empty()).then(|| String::from_utf8_lossy(h.value()).into_owned());
        let info = LockInfo::held(
            u64::try_from(h.create_revision()).ok(),
            owner,
            None,
            Some(self.count - 1),
        )
        .with_holder(identity);
        (Listed::new(self.name, info), h.lease())
    }
}

/// The held names starting with `name_prefix`, at most `limit`.
pub(crate) async fn list(
    members: &Members,
    (prefix, label): (&str, &str),
    name_prefix: &str,
    limit: usize,
) -> Result<Listing, LockError> {
    let start = LockKeys::names_from(prefix, name_prefix).into_bytes();
    let end = range_end(&start);
    let mut from = if start.is_empty() { vec![0] } else { start };
    let mut found: Vec<(Listed, i64)> = Vec::new();
    let mut current: Option<Contenders> = None;
    let mut complete = false;
    for _ in 0..MAX_PAGES {
        let page = members
            .run(|c| {
                let (from, opts) = (from.clone(), GetOptions::new().with_range(end.clone()));
                async move { c.kv_client().get(from, Some(opts.with_limit(PAGE))).await }
            })
            .await
            .map_err(|e| map(e, label, None))?;
        for kv in page.kvs() {
            let Some(name) = contender_name(prefix, kv).filter(|n| n.starts_with(name_prefix))
            else {
                continue;
            };
            match current.as_mut() {
                Some(c) if c.name == name => {
                    c.count += 1;
                    if kv.create_revision() < c.holder.create_revision() {
                        c.holder = kv.clone();
                    }
                }
                _ => {
                    found.extend(current.take().map(Contenders::listed));
                    current = Some(Contenders {
                        name,
                        holder: kv.clone(),
                        count: 1,
                    });
                }
            }
        }
        match page.kvs().last() {
            Some(last) if page.more() && found.len() <= limit => {
                from = [last.key(), &[0]].concat();
            }
            _ => {
                complete = !page.more();
                break;
            }
        }
    }
    if complete {
        found.extend(current.map(Contenders::listed));
    }
    let truncated = !complete || found.len() > limit;
    found.truncate(limit);
    let found = with_leases_left(members, found).await;
    Ok(Listing::page(found, limit, truncated))
}

/// The lock name of a contender's key under `prefix`: shaped as one, and attached to the lease
/// its key names.
fn contender_name(prefix: &str, kv: &KeyValue) -> Option<String> {
    let (name, lease) = LockKeys::parse(prefix, kv.key_str().ok()?)?;
    (lease == kv.lease() && name::validate(&name).is_ok()).then_some(name)
}

/// The first key after every key that starts with `start` (etcd's prefix range end); `[0]`
/// (every key) for an empty `start`.
fn range_end(start: &[u8]) -> Vec<u8> {
    let mut end = start.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Each listed holder with its lease's time to live (left unknown when it cannot be read).
async fn with_leases_left(members: &Members, found: Vec<(Listed, i64)>) -> Vec<Listed> {
    stream::iter(found)
        .map(|(mut listed, lease)| async move {
            let ttl = members
                .run(|c| async move { c.lease_client().time_to_live(lease, None).await })
                .await;
            if let Ok(Ok(secs)) = ttl.map(|r| u64::try_from(r.ttl())) {
                listed.info.expires_in = Some(Duration::from_secs(secs));
            }
            listed
        })
        .buffered(LEASES_IN_FLIGHT)
        .collect()
        .await
}

/// Deletes the key of `name`'s holder (see the module docs).
pub(crate) async fn break_lock(
    members: &Members,
    (prefix, label): (&str, &str),
    name: &str,
) -> Result<Broken, LockError> {
    let keys = LockKeys::new(prefix, name);
    let m = |e| map(e, label, Some(name));
    let first = members
        .run(|c| {
            let range = keys.range.clone();
            async move {
                let opts = by_create(SortOrder::Ascend);
                c.kv_client().get(range, Some(opts)).await
            }
        })
        .await
        .map_err(m)?;
    let Some(holder) = first.kvs().first() else {
        return Err(nobody_holds(name, label));
    };
    let key = holder.key().to_vec();
    let txn = Txn::new()
        .when([Compare::create_revision(
            key.clone(),
            CompareOp::Equal,
            holder.create_revision(),
        )])
        .and_then([TxnOp::delete(key, None)]);
    let deleted = members
        .run(|c| {
            let txn = txn.clone();
            async move { c.kv_client().txn(txn).await }
        })
        .await
        .map_err(m)?
        .succeeded();
    if !deleted {
        return Err(LockError::not_held(
            name,
            label,
            "its holder let go while the break was under way; nothing was broken",
        ));
    }
    let listed = Contenders {
        name: name.to_owned(),
        holder: holder.clone(),
        count: 1,
    }
    .listed()
    .0;
    Ok(Broken::new(name, listed.info.fencing_token)
        .with_owner(listed.info.owner, listed.info.holder))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_range_ends_after_every_key_that_starts_with_it() {
        assert_eq!(range_end(b"ab"), b"ac");
        assert_eq!(range_end(&[b'a', 0xff]), b"b");
        assert_eq!(range_end(&[0xff, 0xff]), [0]);
        assert_eq!(range_end(b""), [0]);
    }
}
