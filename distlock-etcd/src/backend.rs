//! [`EtcdLock`]: etcd's `concurrency.Mutex` recipe as a [`LockBackend`].

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use distlock_core::backend::credentials::TlsFiles;
use distlock_core::backend::{Attempt, Deadline, GuardParts, LockBackend, LostSignal};
use distlock_core::{
    AcquireOptions, Broken, Capabilities, DistributedLock, Listing, LockError, LockGuard, LockInfo,
    Wakeup,
};
use etcd_client::{Certificate, Identity, SortOrder, TlsOptions};
use tokio::time::Instant;

use crate::config::EtcdConfig;
use crate::contender::{by_create, join, still_fresh, Asker, Contender};
use crate::error::map;
use crate::key::LockKeys;
use crate::lease::EtcdLease;
use crate::lease_pool::LeasePool;
use crate::members::Members;
use crate::queue::{wait_for_turn, Rule, WaitCounts, Waited};

/// An etcd lock client: one connection per member, one member in use at a time (see
/// `members`).
pub struct EtcdLock {
    cfg: EtcdConfig,
    label: String,
    members: Arc<Members>,
    /// Leases that released locks left without a key, for the next acquisitions.
    leases: Arc<LeasePool>,
    counts: Arc<WaitCounts>,
}

impl fmt::Debug for EtcdLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLock")
            .field("config", &self.cfg)
            .finish()
    }
}

impl EtcdLock {
    /// Connects and checks that the cluster answers (one `Status` call, bounded by
    /// `connect_timeout`).
    ///
    /// # Errors
    /// [`LockError::Unavailable`] when no endpoint answers in time.
    pub async fn connect(cfg: EtcdConfig) -> Result<Self, LockError> {
        let label = if cfg.endpoints.len() > 1 {
            format!("etcd-{}", cfg.endpoints.len())
        } else {
            "etcd".to_owned()
        };
        let unreachable = |why: String| {
            LockError::unavailable(
                &label,
                None,
                format!(
                    "cannot reach etcd at {}: {why}; check the endpoints (scripts/services.sh up starts test servers)",
                    cfg.endpoint_urls().join(",")
                ),
                None,
            )
        };
        let tls = cfg.tls.as_ref().map(tls_options).transpose()?;
        let members = tokio::time::timeout(cfg.connect_timeout, Members::new(&cfg, tls))
            .await
            .map_err(|_| unreachable(format!("no answer within {:?}", cfg.connect_timeout)))?
            .map_err(|e| map(e, &label, None))?;
        // Every member at once: a stalled first endpoint must not hold up the connect.
        let status =
            members.first_to_answer(|c| async move { c.maintenance_client().status().await });
        tokio::time::timeout(cfg.connect_timeout, status)
            .await
            .map_err(|_| unreachable(format!("no answer within {:?}", cfg.connect_timeout)))?
            .map_err(|e| map(e, &label, None))?;
        Ok(EtcdLock {
            cfg,
            label,
            members: Arc::new(members),
            leases: Arc::default(),
            counts: Arc::default(),
        })
    }

    /// Predecessor deletions this client's waiters were woken by (one per handoff it waited
    /// for: the herd-effect check).
    #[doc(hidden)]
    pub fn wakeups(&self) -> u64 {
        self.counts.wakeups.load(Ordering::SeqCst)
    }

    /// Reads of a lock's whole range by this client's waiters (a waiter's other looks read
    /// one key): the scaling check.
    #[doc(hidden)]
    pub fn range_reads(&self) -> u64 {
        self.counts.range_reads.load(Ordering::SeqCst)
    }

    /// Deletions this client's waiters found by reading while their watch might be late and
    /// had not reported them (a watch late in etcd's catch-up loop: `crate::queue`).
    #[doc(hidden)]
    pub fn read_before_watch(&self) -> u64 {
        self.counts.read_before_watch.load(Ordering::SeqCst)
    }

    /// Handoffs this client's waiters took on the member's own (serializable) read, right
    /// after their predecessor's deletion (`crate::queue`).
    #[doc(hidden)]
    pub fn member_reads(&self) -> u64 {
        self.counts.member_reads.load(Ordering::SeqCst)
    }

    /// Watches this client's waiters created on predecessors.
    #[doc(hidden)]
    pub fn waiter_watches(&self) -> u64 {
        self.counts.watches.load(Ordering::SeqCst)
    }

    /// Test hook (cargo feature `test-hooks`): while `deaf`, this client's watches report no
    /// deletion, as watches stuck in etcd's catch-up loop would (a held lock's `lost()` too);
    /// waiters then learn of deletions by reading.
    #[cfg(feature = "test-hooks")]
    pub fn set_watches_deaf(&self, deaf: bool) {
        self.members.set_watches_deaf(deaf);
    }

    /// The configuration.
    pub fn config(&self) -> &EtcdConfig {
        &self.cfg
    }

    /// The backend label (`etcd`, or `etcd-N` for N endpoints).
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// The members, one in use at a time.
    pub(crate) fn members(&self) -> &Members {
        &self.members
    }

    /// One acquisition for `name`: a key with `value` in `keys`' range, holding when `rule`
    /// says so (a mutex: every earlier key of its own range gone).
    pub(crate) async fn acquire_inner(
        &self,
        name: &str,
        (keys, value, rule): (LockKeys, &str, Rule),
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let deadline = if how == Attempt::Try {
            // A try looks once.
            Deadline::after(Some(std::time::Duration::ZERO))
        } else {
            Deadline::after(opts.wait)
        };
        // The enqueue transaction reads the first key of our own range: whether we hold, for
        // a mutex.
        let exact = matches!(&rule, Rule::After(r) if *r == keys.range);
        let who = Asker {
            members: &self.members,
            pool: &self.leases,
            label: &self.label,
            name,
        };
        // Until the guard owns it, the lease (and the key it carries) goes if we are dropped.
        let (me, cleanup, enqueued) = join(who, keys, opts.ttl, value).await?;
        let (acquired_at, validity) = if exact && enqueued.holder {
            (me.granted_at, me.granted)
        } else if exact && how == Attempt::Try {
            cleanup.run_now().await;
            return Ok(None);
        } else {
            let gone = LostSignal::new();
            let keeper = me.keep_alive_while_waiting(gone.clone());
            match wait_for_turn(&me, &rule, &deadline, &gone, &self.counts).await? {
                Waited::TimedOut => {
                    drop(keeper);
                    cleanup.run_now().await;
                    return Ok(None);
                }
                Waited::Ours => {}
            }
            let fresh_at = keeper.fresh_at();
            drop(keeper);
            if still_fresh(fresh_at, me.granted, Instant::now()) {
                // Kept alive lately: the lease, and our key with it, stands for the rest of
                // its TTL (a deletion or revoke meanwhile is what the guard's `lost()` reports,
                // its watch starting at our key's revision), so the guard's validity counts
                // from that keep-alive, without another round trip on the handoff.
                (fresh_at, me.granted)
            } else {
                // Our turn after keep-alives failed for a while: refresh the lease (the guard's
                // validity counts from here) and make sure our key survived the wait, as
                // `Mutex.Lock` does.
                let again = Instant::now();
                let read = me.members.run(|c| {
                    let key = me.key.clone();
                    async move { c.kv_client().get(key, None).await }
                });
                let (alive, key) = tokio::join!(me.keep_alive_once(), read);
                let key = key.map_err(|e| map(e, &self.label, Some(name)))?;
                let ours = key
                    .kvs()
                    .first()
                    .is_some_and(|kv| kv.create_revision() == me.rev);
                if alive.is_err() || !ours {
                    cleanup.run_now().await;
                    return Err(LockError::unavailable(
                        &self.label,
                        Some(name),
                        "our etcd lease ran out while waiting (the cluster did not answer its keep-alives); retry",
                        None,
                    ));
                }
                (again, me.granted)
            }
        };
        let guard = self.guard(&me, name, opts, acquired_at, validity).await?;
        cleanup.disarm();
        Ok(Some(guard))
    }

    async fn guard(
        &self,
        me: &Arc<Contender>,
        name: &str,
        opts: &AcquireOptions,
        acquired_at: Instant,
        validity: std::time::Duration,
    ) -> Result<LockGuard, LockError> {
        let lost = LostSignal::new();
        let watcher = crate::contender::AbortOnDrop(tokio::spawn(crate::watch::watch_own_key(
            Arc::clone(&me.members),
            me.key.clone(),
            me.rev,
            lost.clone(),
            self.label.clone(),
            name.to_owned(),
        )));
        let parts = GuardParts {
            name: name.to_owned(),
            backend: self.label.clone(),
            fencing_token: u64::try_from(me.rev).unwrap_or(0),
            ttl: opts.ttl,
            renew: opts.renew,
            acquired_at,
            validity: Some(validity),
            lease: Arc::new(EtcdLease::new(Arc::clone(me), watcher, acquired_at)),
            lost,
        };
        parts.start().await
    }
}

#[async_trait]
impl LockBackend for EtcdLock {
    async fn attempt(
        &self,
        name: &str,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let keys = LockKeys::new(&self.cfg.prefix, name);
        let rule = Rule::After(keys.range.clone());
        // The holder identity, if any, is the key's value (as `concurrency.Election` keeps
        // its proposal): `inspect` and `leader()` read it from the holder's own key.
        let value = opts.holder.as_deref().unwrap_or("");
        self.acquire_inner(name, (keys, value, rule), opts, how)
            .await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leased(Wakeup::Watch, true)
            .with_queue_length(true)
            .with_holder_identity(true)
            .with_operator(true, true)
    }

    fn backend_name(&self) -> &str {
        &self.label
    }

    async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        let keys = LockKeys::new(&self.cfg.prefix, name);
        let read = |opts: etcd_client::GetOptions| {
            let range = keys.range.clone();
            self.members.run(move |c| {
                let (range, opts) = (range.clone(), opts.clone());
                async move { c.kv_client().get(range, Some(opts)).await }
            })
        };
        let (first, count) = tokio::join!(
            read(by_create(SortOrder::Ascend)),
            read(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only()
            )
        );
        let first = first.map_err(|e| map(e, &self.label, Some(name)))?;
        let count = count.map_err(|e| map(e, &self.label, Some(name)))?.count();
        let Some(holder) = first.kvs().first() else {
            return Ok(LockInfo::free());
        };
        let owner = String::from_utf8_lossy(holder.key())
            .rsplit('/')
            .next()
            .map(str::to_owned);
        let identity = (!holder.value().is_empty())
            .then(|| String::from_utf8_lossy(holder.value()).into_owned());
        Ok(LockInfo::held(
            u64::try_from(holder.create_revision()).ok(),
            owner,
            None,
            Some(usize::try_from(count.saturating_sub(1)).unwrap_or(0)),
        )
        .with_holder(identity))
    }

    /// See `operator.rs`.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Listing, LockError> {
        let at = (self.cfg.prefix.as_str(), self.label.as_str());
        crate::operator::list(&self.members, at, prefix, limit).await
    }

    /// See `operator.rs`.
    async fn break_lock(&self, name: &str) -> Result<Broken, LockError> {
        let at = (self.cfg.prefix.as_str(), self.label.as_str());
        crate::operator::break_lock(&self.members, at, name).await
    }
}

/// etcd-client's TLS settings from the URL's files (the server name checked is the URL's host).
fn tls_options(files: &TlsFiles) -> Result<TlsOptions, LockError> {
    let pem = files.read()?;
    let mut tls = TlsOptions::new();
    if let Some(ca) = pem.ca {
        tls = tls.ca_certificate(Certificate::from_pem(ca));
    }
    if let Some((cert, key)) = pem.identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Ok(tls)
}

/// Connects from an `etcd://` or `etcds://` URL.
///
/// # Errors
/// As [`EtcdConfig::from_url`] and [`EtcdLock::connect`].
pub async fn connect(url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    Ok(Arc::new(
        EtcdLock::connect(EtcdConfig::from_url(url)?).await?,
    ))
}
