//! [`RedisLock`]: the `DistributedLock` over one Redis server or a Redlock quorum.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{owner_token, Attempt, LockBackend, Share};
use distlock_core::{
    AcquireOptions, Broken, Capabilities, DistributedLock, Listing, LockError, LockGuard, LockInfo,
    Wakeup,
};
use futures::future::join_all;

use crate::acquire::{acquire, Rounds};
use crate::config::{RedisConfig, Topology};
use crate::error::map;
use crate::keys::Keys;
use crate::node::{Foreign, Node, Peek};
use crate::redlock::Redlock;
use crate::single::Single;
use crate::subscriber::Subscriber;

/// A Redis lock client: one reconnecting connection per node, and the process's lazily opened
/// pub/sub connection per node (shared with the process's other clients of that node on the
/// same runtime).
///
/// Holds on to one server or a Redlock quorum, chosen by [`RedisConfig::topology`] at
/// [`RedisLock::connect`]; every acquisition runs the same loop over that topology's rounds.
pub struct RedisLock {
    cfg: RedisConfig,
    store: Store,
    /// Per node: its connection URL and this client's share of the process's subscriber there.
    subscribers: Vec<(String, Share<Subscriber>)>,
    label: String,
}

/// The topology's servers and rounds.
enum Store {
    Single(Box<Single>),
    Redlock(Redlock),
}

impl Store {
    /// Every server (one for a single instance).
    fn nodes(&self) -> &[Node] {
        match self {
            Store::Single(s) => s.nodes(),
            Store::Redlock(r) => r.nodes(),
        }
    }
}

impl fmt::Debug for RedisLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLock")
            .field("config", &self.cfg)
            .finish()
    }
}

impl RedisLock {
    /// Connects. Single: the server must answer. Redlock: at least a quorum must answer now;
    /// the others are retried on every later call. Every server that answers has its
    /// `maxmemory-policy` checked (see [`RedisConfig::eviction`]).
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`], [`LockError::Unavailable`].
    pub async fn connect(cfg: RedisConfig) -> Result<Self, LockError> {
        cfg.validate()?;
        let label = match cfg.topology {
            Topology::Single => "redis".to_owned(),
            Topology::Sentinel => "redis-sentinel".to_owned(),
            Topology::Cluster => "redis-cluster".to_owned(),
            Topology::Redlock => format!("redlock-{}", cfg.nodes.len()),
        };
        let store = match cfg.topology {
            Topology::Single | Topology::Sentinel | Topology::Cluster => {
                Store::Single(Box::new(Single::connect(&cfg, &label).await?))
            }
            Topology::Redlock => Store::Redlock(Redlock::connect(&cfg, &label).await?),
        };
        // (A Sentinel client's is keyed by its first sentinel's address: the subscriber
        // reconnects to whichever master the node names when its connection is lost.)
        let subscribers = (0..store.nodes().len())
            .map(|i| (cfg.node_url(i), Share::default()))
            .collect();
        Ok(RedisLock {
            cfg,
            store,
            subscribers,
            label,
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &RedisConfig {
        &self.cfg
    }

    fn single(&self) -> bool {
        matches!(self.store, Store::Single(_))
    }

    /// The one server and its pub/sub subscriber; `None` on Redlock.
    pub(crate) fn single_server(&self) -> Option<(&Node, Arc<Subscriber>)> {
        match &self.store {
            Store::Single(s) => Some((&s.nodes()[0], self.subscriber(0))),
            Store::Redlock(_) => None,
        }
    }

    /// Node `i`'s subscriber: the one the process's clients share on the current runtime.
    fn subscriber(&self, i: usize) -> Arc<Subscriber> {
        let (url, share) = &self.subscribers[i];
        Subscriber::shared(share, url, &self.store.nodes()[i].addr())
    }

    /// The backend label (`redis`, `redlock-N`).
    pub(crate) fn backend_label(&self) -> &str {
        &self.label
    }
}

#[async_trait]
impl LockBackend for RedisLock {
    async fn attempt(
        &self,
        name: &str,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let keys = Keys::new(&self.cfg.prefix, name);
        if self.cfg.topology == Topology::Cluster && !crate::keys::one_slot(&keys.lock) {
            return Err(crate::keys::split_by_braces(name));
        }
        let token = self
            .cfg
            .test_hooks
            .owner_token
            .clone()
            .unwrap_or_else(owner_token);
        let token = crate::holder::owner_value(token, opts.holder.as_deref());
        let subs: Vec<_> = (0..self.subscribers.len())
            .map(|i| self.subscriber(i))
            .collect();
        let (subs, try_only) = (&subs, how == Attempt::Try);
        match &self.store {
            Store::Single(s) => acquire(&**s, subs, keys, token, name, opts, try_only).await,
            Store::Redlock(r) => acquire(r, subs, keys, token, name, opts, try_only).await,
        }
    }

    /// Leased, woken by release messages; queue lengths from a single instance only.
    fn capabilities(&self) -> Capabilities {
        Capabilities::leased(Wakeup::Notify, true)
            .with_queue_length(self.single())
            .with_holder_identity(true)
            .with_operator(self.cfg.topology != Topology::Cluster, true)
    }

    fn backend_name(&self) -> &str {
        &self.label
    }

    async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        let keys = Keys::new(&self.cfg.prefix, name);
        self.quorum_view(&keys, name)
            .await?
            .map_err(|f| LockError::backend(&self.label, Some(name), f.describe(&keys), None))
    }

    /// See `operator.rs`.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Listing, LockError> {
        self.operator_list(prefix, limit).await
    }

    /// See `operator.rs`.
    async fn break_lock(&self, name: &str) -> Result<Broken, LockError> {
        self.operator_break(name).await
    }
}

impl RedisLock {
    /// Every server (one for a single instance).
    pub(crate) fn nodes(&self) -> &[Node] {
        self.store.nodes()
    }

    /// The holder that a quorum of nodes names (the one node of a single instance), as
    /// `inspect` reports it, or the foreign data a node found at one of the lock's keys. Free
    /// only when the nodes that did not answer could not make a quorum with any holder's;
    /// otherwise unknown, so `Unavailable`.
    pub(crate) async fn quorum_view(
        &self,
        keys: &Keys,
        name: &str,
    ) -> Result<Result<LockInfo, Foreign>, LockError> {
        let t = self.cfg.timeout;
        let peeks = join_all(
            self.store
                .nodes()
                .iter()
                .map(|n| tokio::time::timeout(t, n.peek(keys))),
        )
        .await;
        // Per holder token: how many nodes name it, and one node's view of it; and every
        // answering node's fencing counter.
        let mut holders = std::collections::HashMap::<String, (usize, Peek)>::new();
        let mut counters = Vec::new();
        let (mut silent, mut failure) = (0, None);
        for p in peeks {
            let p = match p {
                Ok(Ok(Ok(p))) => p,
                Ok(Ok(Err(f))) => return Ok(Err(f)),
                Ok(Err(e)) => {
                    silent += 1;
                    failure = Some(map(e, &self.label, Some(name)));
                    continue;
                }
                Err(_) => {
                    silent += 1;
                    continue;
                }
            };
            counters.extend(p.counter);
            if let Some(owner) = p.owner.clone() {
                holders.entry(owner).or_insert((0, p)).0 += 1;
            }
        }
        let named = holders.values().map(|(n, _)| *n).max().unwrap_or(0);
        if named < self.cfg.quorum() && named + silent >= self.cfg.quorum() {
            // The silent nodes may complete a holder's quorum: neither held nor free is known.
            return Err(failure.unwrap_or_else(|| {
                LockError::unavailable(
                    &self.label,
                    Some(name),
                    format!(
                        "{silent} of {} servers did not answer in {t:?}, too many to tell whether the lock is held",
                        self.store.nodes().len()
                    ),
                    None,
                )
            }));
        }
        let token = holder_token(&mut counters, self.cfg.quorum());
        Ok(Ok(
            match holders.into_values().find(|(n, _)| *n >= self.cfg.quorum()) {
                Some((_, p)) => {
                    let (owner, holder) = p.owner.map(crate::holder::split).unzip();
                    LockInfo::held(
                        token,
                        owner,
                        (p.pttl_ms >= 0).then(|| Duration::from_millis(p.pttl_ms as u64)),
                        self.single().then_some(p.queued.max(0) as usize),
                    )
                    .with_holder(holder.flatten())
                }
                None => LockInfo::free(),
            },
        ))
    }
}

/// The holder's fencing token from every answering node's counter: the `quorum`-th highest
/// (a single instance: its one counter). A Redlock holder's token `t` is stored (counter ≥ `t`)
/// on a quorum before it holds, and the quorum that granted it drew at most `t` and is raised to
/// exactly `t`; while it holds, those counters stay (a round or release that finds the key
/// someone else's leaves the counter alone). So at least a quorum of counters is ≥ `t` and fewer
/// than a quorum are above it, whatever the other masters drew meanwhile — a release that
/// reached a master after the holder won elsewhere grants it there above `t`, an undone round
/// leaves a higher counter behind. Exact when every master answers.
fn holder_token(counters: &mut [u64], quorum: usize) -> Option<u64> {
    counters.sort_unstable_by(|a, b| b.cmp(a));
    counters
        .get(quorum.min(counters.len()).checked_sub(1)?)
        .copied()
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

#[cfg(test)]
mod tests {
    use super::holder_token;

    #[test]
    fn the_holder_token_is_the_quorums_not_a_late_grants() {
        let t = 1_000;
        // Four masters granted t; the fifth was granted t + 563 by the previous holder's
        // release, which reached it after the holder had won (seen in a conformance run).
        assert_eq!(holder_token(&mut [t, t, t, t, t + 563], 3), Some(t));
        // Granted below t on two masters, their write-backs still on the way; the two masters
        // that did not grant confirmed theirs.
        assert_eq!(holder_token(&mut [t - 5, t - 5, t, t, t], 3), Some(t));
        // An undone round left higher counters on a minority.
        assert_eq!(holder_token(&mut [t + 9, t, t + 7, t, t], 3), Some(t));
        // A single instance: its counter.
        assert_eq!(holder_token(&mut [t], 1), Some(t));
        assert_eq!(holder_token(&mut [], 3), None);
    }
}
