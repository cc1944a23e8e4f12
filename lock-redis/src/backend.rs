//! [`RedisLock`]: the `DistributedLock` over one Redis server or a Redlock quorum.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use lock_core::backend::wait::random_up_to;
use lock_core::backend::{
    owner_token, CleanupOnDrop, Deadline, GuardParts, LockBackend, LostSignal,
};
use lock_core::{
    AcquireOptions, Capabilities, DistributedLock, LockError, LockGuard, LockInfo, Wakeup,
};
use tokio::time::Instant;

use crate::config::{RedisConfig, Topology};
use crate::error::map;
use crate::keys::Keys;
use crate::lease::{drift, RedisLease};
use crate::node::{Attempt, Node, Peek};
use crate::redlock::{write_back, Fence};
use crate::subscriber::{Subscriber, Waiting};

/// A queued waiter re-checks (and refreshes its place) at least this often, even without a
/// release message.
const HEARTBEAT: Duration = Duration::from_millis(1000);
/// A queued waiter that stops refreshing loses its place after this long.
const WAITER_TTL: Duration = Duration::from_millis(3000);

/// A Redis lock client: one reconnecting connection and one lazily opened pub/sub connection
/// per node.
pub struct RedisLock {
    cfg: RedisConfig,
    nodes: Vec<Node>,
    subscribers: Vec<Arc<Subscriber>>,
    label: String,
}

impl fmt::Debug for RedisLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLock")
            .field("config", &self.cfg)
            .finish()
    }
}

enum Round {
    Acquired {
        token: u64,
        validity: Duration,
    },
    /// Not ours. `partial`: a Redlock round that won some masters but no quorum (a split
    /// vote while queues converge), worth retrying at once.
    Held {
        pttl_ms: i64,
        partial: bool,
    },
}

impl RedisLock {
    /// Connects. Single: the server must answer. Redlock: at least a quorum must answer now;
    /// the others are retried on every later call.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`], [`LockError::Unavailable`].
    pub async fn connect(cfg: RedisConfig) -> Result<Self, LockError> {
        cfg.validate()?;
        let label = match cfg.topology {
            Topology::Single => "redis".to_owned(),
            Topology::Redlock => format!("redlock-{}", cfg.nodes.len()),
        };
        let nodes = match cfg.topology {
            Topology::Single => vec![Node::connect(&cfg, 0, &label).await?],
            Topology::Redlock => {
                let mut checks =
                    join_all((0..cfg.nodes.len()).map(|i| Node::connect(&cfg, i, &label))).await;
                let up = checks.iter().filter(|c| c.is_ok()).count();
                // A master that refused the credentials or may evict lock keys is a
                // configuration error even while a quorum of others answered.
                if let Some(i) = checks
                    .iter()
                    .position(|c| matches!(c, Err(LockError::InvalidConfig { .. })))
                {
                    return Err(checks.swap_remove(i).err().unwrap_or_else(|| {
                        LockError::invalid_config("a Redlock master refused the configuration")
                    }));
                }
                if up < cfg.quorum() {
                    return Err(LockError::unavailable(
                        &label,
                        None,
                        format!(
                            "only {up} of {} Redlock masters answered; a quorum of {} is needed",
                            cfg.nodes.len(),
                            cfg.quorum()
                        ),
                        None,
                    ));
                }
                // Keep the connections that answered; the others reconnect lazily on later calls.
                checks
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| c.or_else(|_| Node::lazy(&cfg, i, &label)))
                    .collect::<Result<_, _>>()?
            }
        };
        let subscribers = nodes
            .iter()
            .map(|_| Arc::new(Subscriber::default()))
            .collect();
        Ok(RedisLock {
            cfg,
            nodes,
            subscribers,
            label,
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &RedisConfig {
        &self.cfg
    }

    /// The client's clock in µs (Redlock token floor and queue score).
    fn now_us(&self) -> u64 {
        let behind =
            u64::try_from(self.cfg.test_hooks.clock_behind.as_micros()).unwrap_or(u64::MAX);
        now_us().saturating_sub(behind)
    }

    fn redlock(&self) -> bool {
        self.cfg.topology == Topology::Redlock
    }

    /// Each node's reply bound: a quarter of the lease (capped by `timeout`), so a dead master
    /// cannot eat the lease (acquire + token write-back take at most half of it) while a slow
    /// link (e.g. 100 ms round trips under a 1 s lease) still gets its answers counted.
    fn per_node_timeout(&self, ttl: Duration) -> Duration {
        if self.redlock() {
            self.cfg
                .timeout
                .min((ttl / 4).max(Duration::from_millis(10)))
        } else {
            self.cfg.timeout
        }
    }

    /// One acquisition round on every node.
    async fn round(
        &self,
        keys: &Keys,
        token: &str,
        ttl: Duration,
        queue: bool,
        score: Option<u64>,
        name: &str,
    ) -> Result<Round, LockError> {
        let started = Instant::now();
        let t = self.per_node_timeout(ttl);
        // Redlock: one token floor for the whole round, so masters whose counters agree grant
        // the same token (the fast path in redlock.rs).
        let floor = self.redlock().then(|| self.now_us());
        let results = join_all(self.nodes.iter().map(|n| {
            tokio::time::timeout(
                t,
                n.acquire(keys, token, ttl, queue, WAITER_TTL, score, floor),
            )
        }))
        .await;
        // Per node: the token it drew if it granted; the counters of those that did not.
        let (mut granted, mut counters) = (vec![None; self.nodes.len()], Vec::new());
        let (mut pttl, mut errors, mut last_err, mut foreign) = (i64::MAX, 0usize, None, None);
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(Ok(Attempt::Acquired(f))) => granted[i] = Some(f),
                // The shortest remaining lease among the masters that have one (a master
                // without the key, or one that never expires it, says nothing about when the
                // holder's quorum runs out).
                Ok(Ok(Attempt::Held { pttl_ms, counter })) => {
                    pttl = shortest_pttl(pttl, pttl_ms);
                    counters.push(counter);
                }
                Ok(Ok(Attempt::Foreign(f))) => foreign = Some(f),
                Ok(Err(e)) => {
                    errors += 1;
                    last_err = Some(e);
                }
                Err(_) => errors += 1,
            }
        }
        let grants = granted.iter().flatten().count();
        if let Some(f) = foreign {
            // Another application's data at one of the lock's keys: no lock here. Whatever
            // other masters granted is undone before the error is returned.
            if grants > 0 {
                self.undo(keys, token, t).await;
            }
            return Err(LockError::backend(
                &self.label,
                Some(name),
                f.describe(keys),
                None,
            ));
        }
        let quorum = self.cfg.quorum();
        if !self.redlock() {
            if let Some(e) = last_err {
                return Err(map(e, &self.label, Some(name)));
            }
            if errors > 0 {
                return Err(LockError::unavailable(
                    &self.label,
                    Some(name),
                    format!("no reply within {t:?}"),
                    None,
                ));
            }
            return Ok(match granted.first().copied().flatten() {
                Some(token) => Round::Acquired {
                    token,
                    validity: ttl,
                },
                None => Round::Held {
                    pttl_ms: pttl,
                    partial: false,
                },
            });
        }
        // Redlock: quorum, validity = ttl − elapsed − drift, and the fencing token above every
        // counter heard of, stored on a quorum before the lock counts as held (see redlock.rs).
        let valid = || {
            !ttl.saturating_sub(started.elapsed())
                .saturating_sub(drift(ttl))
                .is_zero()
        };
        if grants >= quorum && valid() {
            let fence = Fence::settle(&granted, &counters);
            let stored = write_back(&self.nodes, keys, token, &fence, quorum, t).await;
            if stored >= quorum && valid() {
                return Ok(Round::Acquired {
                    token: fence.token,
                    validity: ttl.saturating_sub(drift(ttl)),
                });
            }
        }
        // Failed: undo everywhere before anyone retries.
        self.undo(keys, token, t).await;
        if self.nodes.len() - errors < quorum {
            return Err(LockError::unavailable(
                &self.label,
                Some(name),
                format!(
                    "only {} of {} masters answered; a quorum of {quorum} is needed{}",
                    self.nodes.len() - errors,
                    self.nodes.len(),
                    last_err.map_or_else(String::new, |e| format!(" (last error: {e})"))
                ),
                None,
            ));
        }
        Ok(Round::Held {
            pttl_ms: if pttl == i64::MAX { 0 } else { pttl },
            partial: grants > 0,
        })
    }

    /// Releases whatever a failed round took, on every node (each bounded by `t`).
    async fn undo(&self, keys: &Keys, token: &str, t: Duration) {
        join_all(
            self.nodes
                .iter()
                .map(|n| tokio::time::timeout(t, n.release(keys, token))),
        )
        .await;
    }

    fn lease(&self, keys: &Keys, token: &str, name: &str, ttl: Duration) -> RedisLease {
        RedisLease {
            nodes: self.nodes.clone(),
            keys: keys.clone(),
            token: token.to_owned(),
            quorum: self.cfg.quorum(),
            redlock: self.redlock(),
            name: name.to_owned(),
            label: self.label.clone(),
            per_node_timeout: self.per_node_timeout(ttl),
        }
    }

    async fn acquire_inner(
        &self,
        name: &str,
        opts: &AcquireOptions,
        try_only: bool,
    ) -> Result<Option<LockGuard>, LockError> {
        let keys = Keys::new(&self.cfg.prefix, name);
        let token = self
            .cfg
            .test_hooks
            .owner_token
            .clone()
            .unwrap_or_else(owner_token);
        let deadline = Deadline::after(opts.wait);
        // Waiters queue (FIFO). On Redlock every master orders its queue by the waiter's own
        // arrival time, so the same waiter heads every queue and wins a quorum (clock skew
        // between clients bends the order, never safety).
        let queue = !try_only;
        let score = self.redlock().then(|| self.now_us());
        // Subscribed only once the lock turns out to be held (a free lock costs one round trip),
        // followed at once by another round so a release in between is not missed.
        let mut waits: Option<Vec<Waiting>> = None;
        // Whatever an interrupted attempt or a departed waiter left behind is removed.
        let (cleanup_nodes, cleanup_keys, cleanup_token) =
            (self.nodes.clone(), keys.clone(), token.clone());
        let armed = CleanupOnDrop::new(move || {
            Box::pin(async move {
                for n in &cleanup_nodes {
                    let _ = n.release(&cleanup_keys, &cleanup_token).await;
                    let _ = n.leave(&cleanup_keys, &cleanup_token).await;
                }
            })
        });
        let mut first_failure: Option<Instant> = None;
        loop {
            let started = Instant::now();
            let outcome = match self
                .round(&keys, &token, opts.ttl, queue, score, name)
                .await
            {
                // Redlock: a round that missed a quorum is retried (after a random delay) for up to
                // half a lease before the masters are declared unavailable.
                Err(LockError::Unavailable { .. })
                    if self.redlock()
                        && !try_only
                        && first_failure.get_or_insert_with(Instant::now).elapsed()
                            < opts.ttl / 2
                        && !deadline.expired() =>
                {
                    tokio::time::sleep(
                        Duration::from_millis(20) + random_up_to(Duration::from_millis(80)),
                    )
                    .await;
                    continue;
                }
                other => other?,
            };
            match outcome {
                Round::Acquired {
                    token: fence,
                    validity,
                } => {
                    let started = GuardParts {
                        name: name.to_owned(),
                        backend: self.label.clone(),
                        fencing_token: fence,
                        ttl: opts.ttl,
                        renew: opts.renew,
                        acquired_at: started,
                        validity: Some(validity),
                        lease: Arc::new(self.lease(&keys, &token, name, opts.ttl)),
                        lost: LostSignal::new(),
                    }
                    .start()
                    .await;
                    match started {
                        Ok(g) => {
                            armed.disarm();
                            return Ok(Some(g));
                        }
                        // The reply came too late to be useful: try again while the wait allows.
                        Err(_) if !try_only && !deadline.expired() => continue,
                        Err(e) => {
                            armed.run_now().await;
                            return Err(e);
                        }
                    }
                }
                Round::Held { pttl_ms, partial } => {
                    if try_only {
                        armed.disarm();
                        return Ok(None);
                    }
                    if deadline.expired() {
                        armed.run_now().await;
                        return Ok(None);
                    }
                    let Some(waits) = waits.as_ref() else {
                        waits = Some(
                            join_all(
                                self.nodes
                                    .iter()
                                    .zip(&self.subscribers)
                                    .map(|(n, s)| s.wait_on(&n.client, &keys.channel, &token)),
                            )
                            .await,
                        );
                        continue;
                    };
                    let until_expiry = if pttl_ms >= 0 {
                        Duration::from_millis(pttl_ms as u64)
                            + random_up_to(Duration::from_millis(3))
                    } else {
                        HEARTBEAT
                    };
                    let mut nap = until_expiry.min(HEARTBEAT);
                    if partial {
                        // Some masters granted, others had not yet seen the release (woken by the
                        // first master's message) or list an older waiter still in flight: the
                        // queues converge within a round trip or two.
                        nap = nap.min(
                            Duration::from_micros(500) + random_up_to(Duration::from_millis(2)),
                        );
                    }
                    let woken = futures::future::select_all(
                        waits.iter().map(|w| Box::pin(w.notify.notified())),
                    );
                    tokio::select! {
                        _ = woken => {}
                        _ = deadline.sleep(nap) => {}
                    }
                }
            }
        }
    }
}

#[async_trait]
impl LockBackend for RedisLock {
    async fn attempt(
        &self,
        name: &str,
        opts: &AcquireOptions,
        how: lock_core::backend::Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        self.acquire_inner(name, opts, how == lock_core::backend::Attempt::Try)
            .await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leased(Wakeup::Notify, true).with_queue_length(!self.redlock())
    }

    fn backend_name(&self) -> &str {
        &self.label
    }

    async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        let keys = Keys::new(&self.cfg.prefix, name);
        let t = self.cfg.timeout;
        let peeks = join_all(
            self.nodes
                .iter()
                .map(|n| tokio::time::timeout(t, n.peek(&keys))),
        )
        .await;
        // Per holder token: how many nodes name it, and the last of their views.
        let mut holders = std::collections::HashMap::<String, (usize, Peek)>::new();
        for p in peeks.into_iter().flatten() {
            let p = p
                .map_err(|e| map(e, &self.label, Some(name)))?
                .map_err(|f| {
                    LockError::backend(&self.label, Some(name), f.describe(&keys), None)
                })?;
            if let Some(owner) = p.owner.clone() {
                let seen = holders.entry(owner).or_insert((0, p.clone()));
                *seen = (seen.0 + 1, p);
            }
        }
        Ok(
            match holders.into_values().find(|(n, _)| *n >= self.cfg.quorum()) {
                Some((_, p)) => LockInfo::held(
                    p.counter,
                    p.owner,
                    (p.pttl_ms >= 0).then(|| Duration::from_millis(p.pttl_ms as u64)),
                    (!self.redlock()).then_some(p.queued.max(0) as usize),
                ),
                None => LockInfo::free(),
            },
        )
    }
}

/// Connects from a `redis://` or `redlock://` URL.
///
/// # Errors
/// As [`RedisConfig::from_url`] and [`RedisLock::connect`].
pub async fn connect(url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    Ok(Arc::new(
        RedisLock::connect(RedisConfig::from_url(url)?).await?,
    ))
}

/// Folds one master's remaining lease `q` (ms; negative: no key, or a key that never expires)
/// into the round's shortest so far `acc` (`i64::MAX` before any reply): the shortest
/// non-negative lease wins; a negative one stands only while no master reported any other.
fn shortest_pttl(acc: i64, q: i64) -> i64 {
    match (acc, q) {
        (i64::MAX, q) => q,
        (acc, q) if q < 0 => acc,
        (acc, q) if acc < 0 => q,
        (acc, q) => acc.min(q),
    }
}

/// The client's clock in µs (Redlock token floor and queue score).
fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::shortest_pttl;

    #[test]
    fn the_shortest_known_lease_wins_and_unknown_ones_only_stand_alone() {
        let fold = |v: &[i64]| v.iter().fold(i64::MAX, |acc, &q| shortest_pttl(acc, q));
        assert_eq!(fold(&[]), i64::MAX);
        assert_eq!(fold(&[500, 200, 900]), 200);
        assert_eq!(fold(&[-2, 300, -1, 100]), 100);
        assert_eq!(fold(&[300, -2]), 300);
        assert_eq!(fold(&[-2, -1]), -2);
    }
}
