//! [`ZkLock`]: Curator's `InterProcessMutex` recipe on zookeeper-client's primitives.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    Attempt, Backoff, CleanupOnDrop, Deadline, GuardParts, LockBackend, LostSignal,
};
use distlock_core::{
    AcquireOptions, Broken, Capabilities, CrashRelease, DistributedLock, DistributedRwLock,
    DistributedSemaphore, Leader, Listing, LockError, LockGuard, LockInfo, Wakeup,
};
use futures::future::BoxFuture;
use tokio::time::Instant;
use zookeeper_client::{
    Acl, Acls, Client, CreateMode, Error, OneshotWatcher, Permission, SessionState,
};

use crate::config::ZkConfig;
use crate::contender::{Contender, Created};
use crate::error::map;
use crate::lease::ZkLease;
use crate::own_watch::OwnWatch;
use crate::path::{lock_path, protected_prefix, uuid, NodeKind, Turn};
use crate::session::Session;

/// Attempts to create the lock directory's parents and then our node again.
const PARENT_ATTEMPTS: usize = 3;

/// Test support: runs with our session's client, the lock directory and this acquisition's
/// protected prefix just before the contender node is created.
#[doc(hidden)]
pub type BeforeCreate = Arc<dyn Fn(Client, String, String) -> BoxFuture<'static, ()> + Send + Sync>;

/// What one acquisition creates: a node of `kind` with `data` in `dir`, for `name` (in
/// errors and on the guard); `max_leases` counts only for [`NodeKind::Lease`].
#[derive(Clone)]
pub(crate) struct Node<'a> {
    pub name: &'a str,
    pub dir: String,
    pub kind: NodeKind,
    pub data: Vec<u8>,
    pub max_leases: usize,
}

impl<'a> Node<'a> {
    /// A node of `kind` in `name`'s own directory, with the holder identity of `opts` as data.
    pub(crate) fn of(
        base: &str,
        name: &'a str,
        kind: NodeKind,
        opts: &AcquireOptions,
    ) -> Result<Self, LockError> {
        Ok(Node {
            name,
            dir: lock_path(base, name)?,
            kind,
            data: opts.holder.clone().unwrap_or_default().into_bytes(),
            max_leases: 0,
        })
    }
}

/// Waits for `watcher` to fire until `deadline`: false when the deadline came first.
/// How a waiter's wait for its watch ended.
enum Woke {
    /// The watch fired (or its session went away under it): look again.
    Fired,
    /// The caller's wait ran out.
    TimedOut,
    /// This client retired the waiter's session (`session.rs`): the waiter leaves.
    Retired,
}

/// The children of `dir`, listed behind a `sync`, pipelined: the list is answered only after
/// the leader has seen the sync, so a guard's validity can count from before it (see
/// `leader_validity`) at the cost of one follower-leader hop per handoff.
async fn relist(client: &Client, dir: &str) -> Result<Vec<String>, zookeeper_client::Error> {
    let (synced, listed) = tokio::join!(client.sync(dir), client.get_children(dir));
    synced?;
    Ok(listed?.0)
}

async fn fired_within(watcher: OneshotWatcher, deadline: &Deadline, retired: &LostSignal) -> Woke {
    // In its own task: zookeeper-client panics in `changed()` if the session goes away
    // mid-wait; a failed task is just another wake-up here (the caller re-lists next).
    let mut fired = tokio::spawn(async move {
        watcher.changed().await;
    });
    let expiry = async {
        match deadline.instant() {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    let woke = tokio::select! {
        _ = &mut fired => Woke::Fired,
        _ = retired.wait() => Woke::Retired,
        _ = expiry => Woke::TimedOut,
    };
    fired.abort();
    woke
}

/// A waiter's enrolment with its session: the signal fires when the session is retired, and
/// is marked done (so the session forgets it) when the acquisition ends any other way.
struct Enrolled(LostSignal);

impl Enrolled {
    fn with(session: &Session) -> Enrolled {
        let signal = LostSignal::new();
        session.register(&signal);
        Enrolled(signal)
    }
}

impl Drop for Enrolled {
    fn drop(&mut self) {
        self.0.mark_lost("the acquisition is over");
    }
}

/// A ZooKeeper lock client: one session at a time (a new one after expiry).
pub struct ZkLock {
    cfg: ZkConfig,
    label: String,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    watch_events: Arc<AtomicU64>,
    before_create: std::sync::Mutex<Option<BeforeCreate>>,
}

impl fmt::Debug for ZkLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkLock").field("config", &self.cfg).finish()
    }
}

/// With digest credentials: the session's identity may do anything, anyone may read (see who
/// holds, `inspect`, `ls`), nobody else may create, change or delete.
static AUTHED_ACLS: [Acl; 2] = [
    Acl::new_const(Permission::ALL, "auth", ""),
    Acl::new_const(Permission::READ, "world", "anyone"),
];

/// The ACLs of a lock directory and contender node distlock creates: open without credentials
/// (as Curator makes them), [`AUTHED_ACLS`] with them, so no other identity can delete (or add)
/// a contender node. A directory another identity made first keeps its own ACLs.
fn dir_acls(cfg: &ZkConfig) -> Acls<'static> {
    if cfg.digest().is_some() {
        Acls::new(&AUTHED_ACLS)
    } else {
        Acls::anyone_all()
    }
}

impl ZkLock {
    /// Opens a session (bounded by the connect timeout) and checks the chroot.
    ///
    /// # Errors
    /// [`LockError::Unavailable`] when no server answers; [`LockError::InvalidConfig`] for a
    /// missing chroot.
    pub async fn connect(cfg: ZkConfig) -> Result<Self, LockError> {
        let label = if cfg.hosts.len() > 1 {
            format!("zookeeper-{}", cfg.hosts.len())
        } else {
            "zookeeper".to_owned()
        };
        let session = Session::open(&cfg, &label, cfg.connect_timeout).await?;
        Ok(ZkLock {
            cfg,
            label,
            session: tokio::sync::Mutex::new(Some(session)),
            watch_events: Arc::default(),
            before_create: std::sync::Mutex::new(None),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &ZkConfig {
        &self.cfg
    }

    /// The backend label (`zookeeper`, or `zookeeper-N` for an ensemble of N).
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// Predecessor-watch notifications this client has received (one per handoff it waited
    /// for: the herd-effect check).
    #[doc(hidden)]
    pub fn watch_events(&self) -> u64 {
        self.watch_events.load(Ordering::SeqCst)
    }

    /// Test support: the id of the session in use (`sid` in ZooKeeper's `cons` output),
    /// opening a session if none lives.
    #[doc(hidden)]
    pub async fn session_id(&self) -> Result<i64, LockError> {
        Ok(self.session().await?.client.session_id().0)
    }

    /// Test support: runs `hook` before each contender node is created (`None` removes it).
    #[doc(hidden)]
    pub fn set_before_create(&self, hook: Option<BeforeCreate>) {
        *self.before_create.lock().unwrap_or_else(|p| p.into_inner()) = hook;
    }

    /// The live session, or a new one if it expired.
    pub(crate) async fn session(&self) -> Result<Arc<Session>, LockError> {
        self.session_within(self.cfg.connect_timeout).await
    }

    /// [`ZkLock::session`], trying the servers for at most `within` if a new one is needed.
    async fn session_within(&self, within: Duration) -> Result<Arc<Session>, LockError> {
        let mut slot = self.session.lock().await;
        if let Some(s) = slot.as_ref().filter(|s| !s.is_dead()) {
            return Ok(Arc::clone(s));
        }
        if let Some(old) = slot.as_ref() {
            tracing::debug!(backend = %self.label, session = %old.client.session_id(), "the ZooKeeper session is gone; opening a new one");
        }
        let s = Session::open(&self.cfg, &self.label, within).await?;
        *slot = Some(Arc::clone(&s));
        Ok(s)
    }

    /// Creates the lock directory and its parents as container nodes: the parents open, the
    /// lock directory with [`dir_acls`] (ZooKeeper checks deleting a node against its parent).
    async fn create_parents(
        &self,
        client: &Client,
        dir: &str,
        name: &str,
    ) -> Result<(), LockError> {
        let mut path = String::new();
        let segments: Vec<&str> = dir.trim_start_matches('/').split('/').collect();
        for (i, seg) in segments.iter().enumerate() {
            path.push('/');
            path.push_str(seg);
            let acls = if i + 1 == segments.len() {
                dir_acls(&self.cfg)
            } else {
                Acls::anyone_all()
            };
            match client
                .create(&path, &[], &CreateMode::Container.with_acls(acls))
                .await
            {
                Ok(_) | Err(Error::NodeExists) => {}
                Err(e) => return Err(map(e, &self.label, Some(name))),
            }
        }
        Ok(())
    }

    /// Creates our contender (see [`Contender::create`]), creating the lock directory first
    /// if it is missing. Returns (our child name, its czxid, the children).
    async fn create_contender(
        &self,
        mine: &Contender,
        name: &str,
    ) -> Result<(String, i64, Vec<String>), LockError> {
        let hook = self
            .before_create
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(hook) = hook {
            hook(mine.client.clone(), mine.dir.clone(), mine.prefix.clone()).await;
        }
        for _ in 0..PARENT_ATTEMPTS {
            match mine.create().await {
                Ok(Created::Ours(ours, czxid, children)) => return Ok((ours, czxid, children)),
                Ok(Created::NoParent) => self.create_parents(&mine.client, &mine.dir, name).await?,
                Ok(Created::GaveUp) => break,
                Err(e) => return Err(map(e, &self.label, Some(name))),
            }
        }
        Err(LockError::unavailable(
            &self.label,
            Some(name),
            "could not create the lock node (connection kept failing)",
            None,
        ))
    }

    /// One acquisition of `node.dir` with a node of `node.kind` (a lock contender, an election
    /// participant, a reader or writer, a semaphore lease; the recipes differ only in their
    /// node names and in [`NodeKind::turn`]), created with `node.data`.
    ///
    /// An attempt that finds the ensemble unavailable (an election after a leader died or
    /// stalled) is made again, from the start, while the wait lasts (and for at most twice the
    /// session or connect timeout of failure) — but only once the node it may have made is
    /// sure to be gone: when no session could be opened (no node), or when the attempt's
    /// session ended (retired or expired: its nodes go with it). A session that reconnected
    /// instead keeps the attempt's node until its cleanup deletes it, so that error is returned.
    /// The retry rejoins the queue at its end.
    pub(crate) async fn acquire_inner(
        &self,
        node: Node<'_>,
        opts: &AcquireOptions,
        try_only: bool,
    ) -> Result<Option<LockGuard>, LockError> {
        let deadline = Deadline::after(opts.wait);
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        // An election or a session move takes seconds; an ensemble gone for longer is
        // reported even to a caller who waits forever.
        let ride_out = 2 * self.cfg.session_timeout.max(self.cfg.connect_timeout);
        let mut failing_since = None;
        loop {
            let mut this = opts.clone();
            this.wait = deadline.remaining();
            let opened = self
                .session_within(deadline.clamp(self.cfg.connect_timeout))
                .await;
            let (res, node_gone) = match opened {
                Ok(session) => {
                    let res = self
                        .attempt_once(&session, node.clone(), &this, try_only)
                        .await;
                    let gone = res.is_err() && self.ended(&session, &deadline).await;
                    (res, gone)
                }
                Err(e) => (Err(e), true),
            };
            let failing_for = failing_since.get_or_insert_with(Instant::now).elapsed();
            match res {
                Err(e @ LockError::Unavailable { .. })
                    if node_gone && !try_only && !deadline.expired() && failing_for < ride_out =>
                {
                    tracing::debug!(backend = %self.label, name = node.name, error = %e, "ZooKeeper unavailable; trying again within the wait");
                    deadline.sleep(backoff.next_delay()).await;
                    if deadline.expired() {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    /// Whether `session` ends (retired or expired) rather than reconnects, watched until the
    /// deadline or a session timeout at most.
    async fn ended(&self, session: &Session, deadline: &Deadline) -> bool {
        let until = Instant::now() + deadline.clamp(self.cfg.session_timeout);
        loop {
            if session.is_dead() {
                return true;
            }
            let connected = matches!(
                session.client.state(),
                SessionState::SyncConnected | SessionState::ConnectedReadOnly
            );
            if connected || Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// One attempt of [`ZkLock::acquire_inner`], on `session`.
    async fn attempt_once(
        &self,
        session: &Arc<Session>,
        node: Node<'_>,
        opts: &AcquireOptions,
        try_only: bool,
    ) -> Result<Option<LockGuard>, LockError> {
        let Node {
            name,
            dir,
            kind,
            data,
            max_leases,
        } = node;
        let deadline = Deadline::after(opts.wait);
        let session = Arc::clone(session);
        // A waiter leaves with its session: once this client retires the session (disconnected
        // for a quarter of its timeout), the waiter's node would otherwise stay queued for as
        // long as the old client keeps the session open on the server. Enrolled before its
        // first wait only (one retired already is signalled at once), so an acquisition that
        // never waits adds nothing to the session's list.
        let mut retired: Option<Enrolled> = None;
        let client = session.client.clone();
        let mine = Arc::new(
            Contender::new(client.clone(), dir.clone(), protected_prefix(&uuid()))
                .with_acls(dir_acls(&self.cfg))
                .with_node(kind, data),
        );
        let cleanup = self.cleanup(&mine);
        // When a request last went through the leader (the create does; so does each re-list).
        let mut confirmed_at = Instant::now();
        let (ours, czxid, mut children) = self.create_contender(&mine, name).await?;
        loop {
            let (sorted, idx) = self.our_place(&mine, &ours, kind, children, name).await?;
            let watcher = match kind.turn(&sorted, idx, max_leases) {
                Turn::Ours => {
                    let token = czxid as u64;
                    let guard = self.guard(&session, &mine, &ours, name, token, opts, confirmed_at);
                    // Armed until the guard owns the node: building it may take a round trip.
                    let guard = guard.await?;
                    cleanup.disarm();
                    return Ok(Some(guard));
                }
                _ if try_only => {
                    cleanup.run_now().await;
                    return Ok(None);
                }
                turn => {
                    distlock_core::backend::handoff::waited();
                    self.watch_turn(&client, &dir, turn, &sorted, kind, max_leases)
                        .await
                        .map_err(|e| map(e, &self.label, Some(name)))?
                }
            };
            if let Some(watcher) = watcher {
                let retired = retired.get_or_insert_with(|| Enrolled::with(&session));
                match fired_within(watcher, &deadline, &retired.0).await {
                    Woke::Fired => {}
                    Woke::TimedOut => {
                        cleanup.run_now().await;
                        return Ok(None);
                    }
                    Woke::Retired => {
                        cleanup.run_now().await;
                        return Err(self.retired(name));
                    }
                }
                self.watch_events.fetch_add(1, Ordering::SeqCst);
            }
            // Re-listed behind a `sync`: the guard's validity can count from here.
            confirmed_at = Instant::now();
            children = relist(&client, &dir)
                .await
                .map_err(|e| map(e, &self.label, Some(name)))?;
        }
    }

    /// Deletes whatever node `mine` created if the acquisition is cancelled or gives up.
    fn cleanup(&self, mine: &Arc<Contender>) -> CleanupOnDrop {
        let (mine, within) = (Arc::clone(mine), self.cfg.session_timeout);
        CleanupOnDrop::new(move || Box::pin(async move { mine.delete_all(within).await }))
    }

    /// The error of a waiter whose session this client retired while it waited.
    fn retired(&self, name: &str) -> LockError {
        LockError::unavailable(
            &self.label,
            Some(name),
            "the ZooKeeper session was retired while waiting (disconnected for a quarter of its \
             timeout); retry",
            None,
        )
    }

    /// The contenders of `children` in turn order, and our place among them. A node of ours
    /// other than our contender `ours` (a create whose reply was lost, committed late) is never
    /// waited on, and goes.
    async fn our_place(
        &self,
        mine: &Contender,
        ours: &str,
        kind: NodeKind,
        children: Vec<String>,
        name: &str,
    ) -> Result<(Vec<String>, usize), LockError> {
        let (strays, sorted): (Vec<String>, Vec<String>) = kind
            .sorted(children)
            .into_iter()
            .partition(|c| c != ours && mine.is_ours(c));
        for stray in &strays {
            tracing::debug!(backend = %self.label, name, node = %stray, "deleting a leftover node of ours (a create whose reply was lost)");
            mine.delete_child(stray)
                .await
                .map_err(|e| map(e, &self.label, Some(name)))?;
        }
        match sorted.iter().position(|c| c == ours) {
            Some(idx) => Ok((sorted, idx)),
            None => Err(LockError::unavailable(
                &self.label,
                Some(name),
                "our lock node vanished (session expired?); retry",
                None,
            )),
        }
    }

    /// A watch on what our `turn` waits for, or `None` when it is over already: the one node
    /// we wait behind (one notification per handoff, however many wait), or, for the
    /// semaphore's admitter (the holder of its internal mutex), the directory's children.
    async fn watch_turn(
        &self,
        client: &Client,
        dir: &str,
        turn: Turn,
        sorted: &[String],
        kind: NodeKind,
        max_leases: usize,
    ) -> Result<Option<OneshotWatcher>, zookeeper_client::Error> {
        Ok(match turn {
            Turn::After(i) => {
                let (stat, watcher) = client
                    .check_and_watch_stat(&format!("{dir}/{}", sorted[i]))
                    .await?;
                stat.map(|_| watcher)
            }
            Turn::Count => {
                let (kids, _, watcher) = client.get_and_watch_children(dir).await?;
                (kind.sorted(kids).len() > max_leases).then_some(watcher)
            }
            Turn::Ours => None,
        })
    }

    /// The guard for our contender `ours`. Through [`GuardParts::start`], a guard whose
    /// validity mostly passed during a slow acquisition is confirmed once more or given back.
    #[allow(clippy::too_many_arguments)]
    async fn guard(
        &self,
        session: &Arc<Session>,
        mine: &Arc<Contender>,
        ours: &str,
        name: &str,
        token: u64,
        opts: &AcquireOptions,
        started: Instant,
    ) -> Result<LockGuard, LockError> {
        let node = mine.path(ours);
        let lost = LostSignal::new();
        session.register(&lost);
        // Deleting a lost guard's nodes is bounded by the client's own give-up point (7/5 of
        // the session timeout) and then some.
        let own_watch = OwnWatch::start(
            Arc::clone(mine),
            node.clone(),
            lost.clone(),
            session.client.session_timeout() * 2,
            name,
            &self.label,
        );
        // With renewals on, the guard confirms the session through the leader every third of
        // min(ttl, t/2, t/3) and counts it valid for t/3 after each confirmation (the acquire's
        // own round trip through the leader is the first): see `leader_validity`.
        let session_timeout = self
            .cfg
            .session_timeout
            .min(session.client.session_timeout());
        let validity = crate::validity::leader_validity(session_timeout);
        let lease = ZkLease::new(
            Arc::clone(session),
            Arc::clone(mine),
            node,
            name,
            &self.label,
            own_watch,
            validity,
            lost.clone(),
        );
        let parts = GuardParts {
            name: name.to_owned(),
            backend: self.label.clone(),
            fencing_token: token,
            ttl: if opts.renew {
                crate::validity::renewal_ttl(opts.ttl, session_timeout)
            } else {
                opts.ttl
            },
            renew: opts.renew,
            acquired_at: started,
            validity: opts.renew.then_some(validity),
            lease: Arc::new(lease),
            lost: lost.clone(),
        };
        parts.start().await.inspect_err(|_| {
            // Given back: stop tracking the signal.
            lost.mark_lost("the acquisition was given back");
        })
    }
}

#[async_trait]
impl LockBackend for ZkLock {
    async fn attempt(
        &self,
        name: &str,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let node = Node::of(&self.cfg.base, name, NodeKind::Lock, opts)?;
        self.acquire_inner(node, opts, how == Attempt::Try).await
    }

    /// Curator's `LeaderLatch` (see `election.rs`).
    async fn campaign(
        &self,
        group: &str,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        let node = Node::of(&self.cfg.base, group, NodeKind::Latch, opts)?;
        self.acquire_inner(node, opts, false).await
    }

    async fn leader(&self, group: &str) -> Result<Option<Leader>, LockError> {
        crate::election::leader(&*self.session().await?, &self.cfg.base, &self.label, group).await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::bound(CrashRelease::Session, Wakeup::Watch, true)
            .with_queue_length(true)
            .with_holder_identity(true)
            .with_operator(true, true)
            .with_stall_tolerance(self.cfg.stall_tolerance(distlock_core::DEFAULT_TTL))
    }

    fn backend_name(&self) -> &str {
        &self.label
    }

    async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        let first = crate::election::first_node(
            &*self.session().await?,
            &self.cfg.base,
            &self.label,
            name,
            NodeKind::Lock,
        )
        .await?;
        Ok(match first {
            Some(f) => LockInfo::held(Some(f.czxid), Some(f.node), None, Some(f.others))
                .with_holder(f.identity),
            None => LockInfo::free(),
        })
    }

    /// See `operator.rs`.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Listing, LockError> {
        let session = self.session().await?;
        crate::operator::list(&session, &self.cfg.base, &self.label, prefix, limit).await
    }

    /// See `operator.rs`.
    async fn break_lock(&self, name: &str) -> Result<Broken, LockError> {
        let session = self.session().await?;
        crate::operator::break_lock(&session, &self.cfg.base, &self.label, name).await
    }
}

/// Connects from a `zk://` URL.
///
/// # Errors
/// As [`ZkConfig::from_url`] and [`ZkLock::connect`].
pub async fn connect(url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    Ok(Arc::new(ZkLock::connect(ZkConfig::from_url(url)?).await?))
}

/// Connects a semaphore (Curator's `InterProcessSemaphoreV2` layout) from a `zk://` URL.
///
/// # Errors
/// As [`connect`].
pub async fn connect_semaphore(url: &str) -> Result<Arc<dyn DistributedSemaphore>, LockError> {
    Ok(Arc::new(ZkLock::connect(ZkConfig::from_url(url)?).await?))
}

/// Connects a read-write lock (Curator's `InterProcessReadWriteLock` layout) from a `zk://`
/// URL.
///
/// # Errors
/// As [`connect`].
pub async fn connect_rwlock(url: &str) -> Result<Arc<dyn DistributedRwLock>, LockError> {
    Ok(Arc::new(ZkLock::connect(ZkConfig::from_url(url)?).await?))
}
