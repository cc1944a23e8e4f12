//! [`Contender`]: this acquisition's node in a lock directory, and every other node a create
//! whose reply was lost may have left there.
//!
//! Every child whose name starts with this acquisition's protected prefix (`_c_<uuid>-`) is
//! ours: nobody else knows the uuid. A create that fails with `ConnectionLoss` may still have
//! happened (the request reached the server, the reply did not come back), and a retried create
//! then makes a second node. So after a `ConnectionLoss` the directory is listed behind a `sync`
//! (a lagging follower could otherwise hide the node, issue 14), and whenever more than one node
//! of ours is seen, the lowest is our contender and the others are deleted: a client must never
//! queue behind its own orphan, nor leave one queued behind it after release.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client::{Acls, Client, CreateMode, Error};

use crate::path::NodeKind;

/// Attempts to create our contender node through connection losses and vanished parents.
const CREATE_ATTEMPTS: usize = 10;

/// Pause between attempts to delete our nodes while the connection is down.
const DELETE_RETRY: Duration = Duration::from_millis(100);

/// How one attempt to create a contender ended.
pub(crate) enum Created {
    /// Our contender (child name and `czxid`) and the children listed with it.
    Ours(String, i64, Vec<String>),
    /// The parent directory does not exist.
    NoParent,
    /// Every attempt lost the connection before our node could be seen.
    GaveUp,
}

/// This acquisition's nodes in one lock directory.
pub(crate) struct Contender {
    pub client: Client,
    pub dir: String,
    pub prefix: String,
    /// The recipe our node belongs to, and the data it is created with.
    kind: NodeKind,
    data: Vec<u8>,
    /// A create's reply was lost: a node of ours may exist that was never seen (it may even
    /// commit later, behind our contender), so release sweeps the directory for it.
    unsure: AtomicBool,
    /// Our contender once settled.
    known: Mutex<Option<String>>,
    /// The ACLs our node is created with.
    acls: Acls<'static>,
}

impl Contender {
    pub(crate) fn new(client: Client, dir: String, prefix: String) -> Self {
        Contender {
            client,
            dir,
            prefix,
            kind: NodeKind::Lock,
            data: Vec::new(),
            unsure: AtomicBool::new(false),
            known: Mutex::new(None),
            acls: Acls::anyone_all(),
        }
    }

    /// The same contender creating its node with `acls`.
    pub(crate) fn with_acls(mut self, acls: Acls<'static>) -> Self {
        self.acls = acls;
        self
    }

    /// The same contender as a node of `kind` created with `data` (a holder identity).
    pub(crate) fn with_node(mut self, kind: NodeKind, data: Vec<u8>) -> Self {
        self.kind = kind;
        self.data = data;
        self
    }

    /// Whether `child` is one of our nodes.
    pub(crate) fn is_ours(&self, child: &str) -> bool {
        child.starts_with(&self.prefix) && self.kind.sequence_of(child).is_some()
    }

    /// Whether a create's reply was lost during this acquisition.
    pub(crate) fn unsure(&self) -> bool {
        self.unsure.load(Ordering::SeqCst)
    }

    /// Creates our node; the create and the first children listing go out back to back (one
    /// round trip). After a `ConnectionLoss`, finds the node the create may have made behind a
    /// `sync` before creating again. Returns [`Created::Ours`] with the lowest node of ours.
    ///
    /// # Errors
    /// Any other ZooKeeper error, unmapped.
    pub(crate) async fn create(&self) -> Result<Created, Error> {
        let marker = self.kind.marker();
        let node_base = format!("{}/{}{marker}", self.dir, self.prefix);
        for _ in 0..CREATE_ATTEMPTS {
            let opts = CreateMode::EphemeralSequential.with_acls(self.acls);
            let create = self.client.create(&node_base, &self.data, &opts);
            let list = self.client.get_children(&self.dir);
            let (created, listed) = tokio::join!(create, list);
            match created {
                // The list was answered after the create by the same server, so it shows every
                // node of ours that committed before this one.
                Ok((stat, seq)) => {
                    let ours = format!("{}{marker}{seq}", self.prefix);
                    return self.settle(listed?.0, Some((ours, stat.czxid))).await;
                }
                Err(Error::NoNode) => return Ok(Created::NoParent),
                // zookeeper-client fails requests in flight on a dropped connection with
                // `ConnectionLoss` (closed) or `Custom` (reset, or no reply within its
                // connection timeout): either way the create may have happened.
                Err(e @ (Error::ConnectionLoss | Error::Custom(_))) => {
                    tracing::debug!(dir = %self.dir, error = %e, "create lost its connection; looking for our node behind a sync");
                    self.unsure.store(true, Ordering::SeqCst);
                    // The create may have happened; a follower may not show it yet: sync first.
                    if let Ok(children) = self.synced_children().await {
                        if children.iter().any(|c| self.is_ours(c)) {
                            tracing::debug!(dir = %self.dir, "found the node of a create whose reply was lost");
                            return self.settle(children, None).await;
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Created::GaveUp)
    }

    /// The children behind a `sync`: nothing committed before this call is missing.
    async fn synced_children(&self) -> Result<Vec<String>, Error> {
        let synced = self.client.sync(&self.dir);
        let listed = self.client.get_children(&self.dir);
        let (synced, listed) = tokio::join!(synced, listed);
        synced?;
        Ok(listed?.0)
    }

    /// Picks the lowest node of ours in `children` as our contender and deletes the others.
    /// `created` is the node this call's create made (its czxid is known).
    async fn settle(
        &self,
        mut children: Vec<String>,
        created: Option<(String, i64)>,
    ) -> Result<Created, Error> {
        if let Some((node, _)) = &created {
            if !children.contains(node) {
                children.push(node.clone());
            }
        }
        let mut mine: Vec<String> = children
            .iter()
            .filter(|c| self.is_ours(c))
            .cloned()
            .collect();
        mine.sort_by(|a, b| self.kind.sequence_of(a).cmp(&self.kind.sequence_of(b)));
        let Some(lowest) = mine.first().cloned() else {
            return Ok(Created::GaveUp);
        };
        for orphan in &mine[1..] {
            tracing::debug!(dir = %self.dir, node = %orphan, "deleting a leftover node of ours (a create whose reply was lost)");
            self.delete_child(orphan).await?;
        }
        children.retain(|c| !mine[1..].contains(c));
        let czxid = match created {
            Some((node, czxid)) if node == lowest => czxid,
            _ => match self.client.check_stat(&self.path(&lowest)).await? {
                Some(stat) => stat.czxid,
                // Gone since the listing (session expired?): the caller retries on a new list.
                None => return Ok(Created::GaveUp),
            },
        };
        *self.known.lock().unwrap_or_else(|p| p.into_inner()) = Some(lowest.clone());
        Ok(Created::Ours(lowest, czxid, children))
    }

    /// The full path of a child.
    pub(crate) fn path(&self, child: &str) -> String {
        format!("{}/{child}", self.dir)
    }

    /// Deletes one node of ours (already gone is fine).
    pub(crate) async fn delete_child(&self, child: &str) -> Result<(), Error> {
        match self.client.delete(&self.path(child), None).await {
            Ok(()) | Err(Error::NoNode) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes our nodes: just our contender when it is known and no create's reply was lost,
    /// otherwise every node of ours found behind a `sync`. Retries through connection losses
    /// until `within` has passed; stops at once when the session is gone (its nodes went with
    /// it).
    pub(crate) async fn delete_all(&self, within: Duration) {
        let until = Instant::now() + within;
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(ours) = &known {
            self.retry_until(until, || self.delete_child(ours)).await;
            if !self.unsure() {
                return;
            }
        }
        let listed = self.retry_until(until, || self.synced_children()).await;
        if listed.is_none() {
            tracing::debug!(dir = %self.dir, "could not list the lock directory to delete leftover nodes of ours; the session's end removes them");
        }
        for c in listed
            .unwrap_or_default()
            .iter()
            .filter(|c| self.is_ours(c))
        {
            tracing::debug!(dir = %self.dir, node = %c, "deleting a node of ours");
            self.retry_until(until, || self.delete_child(c)).await;
        }
    }

    /// Runs `op` until it succeeds, fails for good (the session is gone, access is refused),
    /// or `until` passes. A request the client fails while its connection is down (with
    /// `ConnectionLoss` or its own "no response" error) is tried again.
    async fn retry_until<T, F, Fut>(&self, until: Instant, op: F) -> Option<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        while Instant::now() < until {
            match tokio::time::timeout_at(until, op()).await {
                Ok(Ok(v)) => return Some(v),
                Ok(Err(
                    Error::SessionExpired
                    | Error::ClientClosed
                    | Error::AuthFailed
                    | Error::NoAuth
                    | Error::BadArguments(_),
                ))
                | Err(_) => return None,
                Ok(Err(_)) => {
                    let left = until.saturating_duration_since(Instant::now());
                    tokio::time::sleep(DELETE_RETRY.min(left)).await;
                }
            }
        }
        None
    }
}
