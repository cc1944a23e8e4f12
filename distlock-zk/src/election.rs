//! Leader election as Apache Curator's `LeaderLatch` does it, so Java services using Curator
//! and Rust services using distlock elect one leader together.
//!
//! # The layout (Curator 5 `LeaderLatch`)
//! A participant of group `g` creates an `EPHEMERAL_SEQUENTIAL` node
//! `/distlock/g/_c_<uuid>-latch-<10-digit sequence>` whose data is its identity (Curator's
//! participant id, UTF-8). Participants are ordered by the sequence after the final `latch-`;
//! the first leads. Every other participant watches only its predecessor and lists the
//! directory again when it goes (no herd). A participant that withdraws deletes its node.
//!
//! # Distlock's side of it
//! The campaign is the lock recipe's acquisition with `latch-` nodes (`backend.rs`,
//! [`NodeKind::Latch`]): the same handling of connection loss during create, of leftovers and
//! of cancellation, and a leadership that is a guard with the same validity rule (see
//! `validity.rs`) — it is reported lost before the ensemble can expire its session and let the
//! next participant lead. The fencing token is the `czxid` of the leader's node.
//!
//! Curator's participant gives up leadership as soon as its connection is suspended; ours
//! after a quarter of the session timeout disconnected or a third of it without a round trip
//! through the leader — both before the session can expire, which is what hands leadership on.

use distlock_core::{Leader, LockError};
use zookeeper_client::{Client, Error};

use crate::error::map;
use crate::path::{lock_path, NodeKind};
use crate::session::Session;

/// The first node of a lock or election directory.
pub(crate) struct First {
    /// Its child name.
    pub node: String,
    /// Its `czxid`: the holder's fencing token.
    pub czxid: u64,
    /// Its data as an identity, when not empty.
    pub identity: Option<String>,
    /// How many nodes of the same kind follow it.
    pub others: usize,
}

/// The first node of `kind` in `name`'s directory under `base`, read through `session` as of
/// the call (behind a write of our own, see `read.rs`), or `None` when there is none. `label`
/// names the backend in errors.
pub(crate) async fn first_node(
    session: &Session,
    base: &str,
    label: &str,
    name: &str,
    kind: NodeKind,
) -> Result<Option<First>, LockError> {
    let dir = lock_path(base, name)?;
    let m = |e| map(e, label, Some(name));
    match crate::read::children_now(&session.client, &dir)
        .await
        .map_err(m)?
    {
        Some(children) => first_standing(&session.client, &dir, &kind.sorted(children))
            .await
            .map_err(m),
        None => Ok(None),
    }
}

/// The first of `sorted` (one kind's nodes in `dir`, in order) that still stands. A node gone
/// since the listing let go, and the next one holds: a node created since sorts behind them
/// all.
pub(crate) async fn first_standing(
    client: &Client,
    dir: &str,
    sorted: &[String],
) -> Result<Option<First>, Error> {
    for (i, node) in sorted.iter().enumerate() {
        match client.get_data(&format!("{dir}/{node}")).await {
            Ok((data, stat)) => {
                return Ok(Some(First {
                    node: node.clone(),
                    czxid: stat.czxid as u64,
                    identity: (!data.is_empty())
                        .then(|| String::from_utf8_lossy(&data).into_owned()),
                    others: sorted.len() - i - 1,
                }))
            }
            Err(Error::NoNode) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// Who leads `group`: the first participant's identity (Curator's participant id; empty when a
/// Curator participant set none) and its node's `czxid`.
pub(crate) async fn leader(
    session: &Session,
    base: &str,
    label: &str,
    group: &str,
) -> Result<Option<Leader>, LockError> {
    let first = first_node(session, base, label, group, NodeKind::Latch).await?;
    Ok(first.map(|f| Leader::new(f.identity.unwrap_or_default(), f.czxid)))
}
