//! [`ZkLease`]: the store side of a ZooKeeper guard — our contender node.
//!
//! The node is ours by its unique name (`_c_<uuid>-lock-<seq>`), so deleting it is always
//! owner-checked. A guard reported lost deletes its node at once ([`OwnWatch`]'s task; and a
//! release of a lost guard deletes it too, answering `NotHeld`): while the session lives, a
//! lost guard's node would otherwise keep the name locked for everyone until the process exits
//! (issue 14).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{Lease, LostSignal};
use distlock_core::LockError;
use tokio::time::Instant;
use zookeeper_client::Error;

use crate::contender::Contender;
use crate::error::map;
use crate::own_watch::{OwnWatch, Standing};
use crate::session::Session;
use crate::validity::JOIN_WITHIN;

pub(crate) struct ZkLease {
    session: Arc<Session>,
    mine: Arc<Contender>,
    node: String,
    name: String,
    label: String,
    /// Watches our own node so a deletion by someone else is reported at once, and so a
    /// renewal need not ask whether the node stands; deletes our node once the guard is lost.
    own_watch: OwnWatch,
    lost: LostSignal,
    /// How long a check that reached the leader vouches for the session: see
    /// [`leader_validity`](crate::validity::leader_validity).
    validity: Duration,
}

impl ZkLease {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        session: Arc<Session>,
        mine: Arc<Contender>,
        node: String,
        name: &str,
        label: &str,
        own_watch: OwnWatch,
        validity: Duration,
        lost: LostSignal,
    ) -> Self {
        ZkLease {
            session,
            mine,
            node,
            name: name.to_owned(),
            label: label.to_owned(),
            own_watch,
            lost,
            validity,
        }
    }

    fn gone(&self) -> LockError {
        tracing::debug!(name = %self.name, backend = %self.label, node = %self.node, "the lock node is gone (session expired or node deleted)");
        LockError::not_held(
            &self.name,
            &self.label,
            format!(
                "lock node {} is gone (session expired or node deleted)",
                self.node
            ),
        )
    }
}

#[async_trait]
impl Lease for ZkLease {
    /// A liveness check through the leader: the session's shared `sync` (answered only once
    /// the leader has seen it; see [`Session::confirm`]), then our node's existence — from
    /// [`OwnWatch`] while it is armed (no request: a deletion's event arrives before the `sync`'s
    /// reply), else by asking the server. Vouches for
    /// the session for [`leader_validity`](crate::validity::leader_validity) from when that
    /// `sync` was sent, which may be up to [`JOIN_WITHIN`] of the validity before this call.
    async fn renew(&self, _ttl: Duration) -> Result<Option<Duration>, LockError> {
        if self.session.is_dead() {
            return Err(self.gone());
        }
        let called = Instant::now();
        let sent = match self.session.confirm(self.validity / JOIN_WITHIN).await {
            Ok(sent) => sent,
            Err(e) => return Err(map(e, &self.label, Some(&self.name))),
        };
        let vouched = self
            .validity
            .saturating_sub(called.saturating_duration_since(sent));
        match self.own_watch.standing() {
            Standing::Stands => return Ok(Some(vouched)),
            Standing::Gone => return Err(self.gone()),
            Standing::Unknown => {}
        }
        match self.session.client.check_stat(&self.node).await {
            Ok(Some(_)) => Ok(Some(vouched)),
            Ok(None) => Err(self.gone()),
            Err(e) => Err(map(e, &self.label, Some(&self.name))),
        }
    }

    /// Deletes our node (and any other node of ours a lost create reply left behind). A lost
    /// guard's node is deleted all the same, and the answer is `NotHeld`.
    async fn release(&self) -> Result<(), LockError> {
        // Marks the guard released (`Drop` reads it), and keeps the watch registered through
        // the delete: the deletion's own event ends it, with no request to remove it.
        self.own_watch.released();
        let deleted = self.session.client.delete(&self.node, None).await;
        // A delete cut off by a connection loss may never have reached the server while the
        // session lives on (the client reconnects within it): the node would stay behind and
        // everyone else wait forever. Like Curator's `guaranteed()` delete, keep trying in the
        // background until it succeeds or the session is gone (bounded by two session
        // timeouts). Found by the nemesis, seed 1795458225587695456.
        let cut_off = matches!(
            &deleted,
            Err(e) if !matches!(e, Error::NoNode | Error::SessionExpired | Error::ClientClosed)
        );
        if cut_off && !self.mine.unsure() {
            let mine = Arc::clone(&self.mine);
            let within = self.session.client.session_timeout() * 2;
            tracing::debug!(name = %self.name, node = %self.node, "release cut off; deleting in the background until the session ends");
            tokio::spawn(async move { mine.delete_all(within).await });
        }
        if self.mine.unsure() {
            self.mine
                .delete_all(self.session.client.session_timeout())
                .await;
        }
        if let Some(why) = self.lost.reason() {
            tracing::debug!(name = %self.name, backend = %self.label, reason = %why, "release of a lost guard: its node is deleted, NotHeld");
            return Err(LockError::not_held(&self.name, &self.label, why));
        }
        match deleted {
            Ok(()) => Ok(()),
            Err(Error::NoNode) | Err(Error::SessionExpired) | Err(Error::ClientClosed) => {
                Err(self.gone())
            }
            Err(e) => Err(map(e, &self.label, Some(&self.name))),
        }
    }
}
