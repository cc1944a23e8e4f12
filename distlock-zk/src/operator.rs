//! What an operator sees and breaks (`distlock ls`, `distlock break`) in Curator's lock layout.
//!
//! * **list**: the directories under the base path (`/distlock`), walked depth first in name
//!   order (names with `/` are nested directories), reading each as of the call (behind one
//!   write of our own, `read.rs`). A directory with lock contenders (`_c_<uuid>-lock-<seq>`) is
//!   held by the first: its `czxid` is the token, its data the identity, the contenders behind
//!   it the waiters. Bounded by [`MAX_DIRECTORIES`] directories and [`WALK_TIME`]: a walk cut
//!   short marks the listing truncated. Names given as absolute paths live outside the base and
//!   are not listed.
//! * **break**: deletes the holder's node — the first contender as read as of the call, and only
//!   that node (unique by its uuid): a holder that let go meanwhile is not replaced by breaking
//!   the next one (`NotHeld`). The next holder's node was created later, so its `czxid`, the
//!   next token, is higher: ZooKeeper's transaction ids advance the fence by themselves. The
//!   broken holder's watch on its own node reports its guard lost at once (and its renewal
//!   would find the node gone).

use std::time::Duration;

use distlock_core::operator::nobody_holds;
use distlock_core::{Broken, Listed, Listing, LockError, LockInfo};
use tokio::time::Instant;
use zookeeper_client::Error;

use crate::election::{first_node, first_standing};
use crate::error::map;
use crate::path::{lock_path, NodeKind};
use crate::read::catch_up;
use crate::session::Session;

/// The most directories one listing reads.
const MAX_DIRECTORIES: usize = 20_000;
/// The longest one listing walks.
const WALK_TIME: Duration = Duration::from_secs(30);

/// The held names under `base` starting with `prefix`, at most `limit`.
pub(crate) async fn list(
    session: &Session,
    base: &str,
    label: &str,
    prefix: &str,
    limit: usize,
) -> Result<Listing, LockError> {
    let client = &session.client;
    let m = |e| map(e, label, None);
    catch_up(client).await.map_err(m)?;
    let base = base.trim_end_matches('/');
    let started = Instant::now();
    // Directories still to read, as (path, name); popped from the end, so pushed in reverse.
    let mut pending = vec![(base.to_owned(), String::new())];
    let (mut found, mut read) = (Vec::new(), 0);
    while let Some((dir, name)) = pending.pop() {
        if read >= MAX_DIRECTORIES || started.elapsed() >= WALK_TIME || found.len() > limit {
            return Ok(Listing::page(found, limit, true));
        }
        read += 1;
        let mut children = match client.get_children(&dir).await {
            Ok((children, _)) => children,
            Err(Error::NoNode) => continue,
            Err(e) => return Err(m(e)),
        };
        children.sort();
        let (contenders, dirs): (Vec<_>, Vec<_>) = children
            .into_iter()
            .partition(|c| NodeKind::ALL.iter().any(|k| k.sequence_of(c).is_some()));
        let contenders = NodeKind::Lock.sorted(contenders);
        if !name.is_empty() && name.starts_with(prefix) && !contenders.is_empty() {
            if let Some(h) = first_standing(client, &dir, &contenders).await.map_err(m)? {
                let info = LockInfo::held(Some(h.czxid), Some(h.node), None, Some(h.others))
                    .with_holder(h.identity);
                found.push(Listed::new(name.clone(), info));
            }
        }
        for child in dirs.into_iter().rev() {
            let nested = match name.as_str() {
                "" => child.clone(),
                n => format!("{n}/{child}"),
            };
            // Only where a name that starts with the prefix can be.
            if nested.starts_with(prefix) || prefix.starts_with(&format!("{nested}/")) {
                pending.push((format!("{dir}/{child}"), nested));
            }
        }
    }
    Ok(Listing::page(found, limit, false))
}

/// Deletes the node of `name`'s holder (see the module docs).
pub(crate) async fn break_lock(
    session: &Session,
    base: &str,
    label: &str,
    name: &str,
) -> Result<Broken, LockError> {
    let Some(h) = first_node(session, base, label, name, NodeKind::Lock).await? else {
        return Err(nobody_holds(name, label));
    };
    let dir = lock_path(base, name)?;
    let client = &session.client;
    let m = |e| map(e, label, Some(name));
    match client.delete(&format!("{dir}/{}", h.node), None).await {
        Ok(()) => Ok(Broken::new(name, Some(h.czxid)).with_owner(Some(h.node), h.identity)),
        Err(Error::NoNode) => Err(LockError::not_held(
            name,
            label,
            "its holder let go while the break was under way; nothing was broken",
        )),
        Err(e) => Err(m(e)),
    }
}
