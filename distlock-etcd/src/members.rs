//! [`Members`]: one etcd-client connection per cluster member, and failover between them.
//!
//! etcd-client's own balanced channel keeps sending requests to a member that went away (each
//! one fails with "connection refused", or waits on a reconnect), so a killed member makes a
//! third of all calls fail. Like etcd's Go client, this talks to one member at a time: a call
//! that finds its member unreachable, leaderless or silent past the request timeout moves on
//! to the next member and is tried there, once per member.
//!
//! Retrying is safe for every call this crate makes: the enqueue transaction creates our key
//! only if it does not exist and otherwise reads it back (why `concurrency.Mutex` is written
//! that way), keep-alives and reads are idempotent, a duplicate lease grant only leaves an
//! unused lease that runs out, and a release retried after its delete landed answers `NotHeld`
//! while the lock is free.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, Error, TlsOptions, WatchOptions};
use futures::stream::{FuturesUnordered, StreamExt};

use crate::config::EtcdConfig;
use crate::error::is_unreachable;
use crate::watches::{WatchHub, Watching};

/// The cluster's members, the one in use first.
pub(crate) struct Members {
    clients: Vec<Client>,
    current: AtomicUsize,
    timeout: Duration,
    watches: WatchHub,
}

impl Members {
    /// One lazily connected client per endpoint (authenticated at once when `cfg` has a
    /// user), over TLS with `tls`.
    pub async fn new(cfg: &EtcdConfig, tls: Option<TlsOptions>) -> Result<Self, Error> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(cfg.connect_timeout)
            .with_timeout(cfg.timeout)
            // A member cut from its leader refuses requests (and cancels watches) instead of
            // answering from a stale state.
            .with_require_leader(true)
            .with_keep_alive(cfg.timeout / 2, cfg.timeout / 2);
        if let Some((user, password)) = cfg.credentials() {
            // etcd's simple tokens lapse after 5 idle minutes: fetch a new one when told so.
            options = options
                .with_user(user, password)
                .with_auto_token_refresh(true);
        }
        if let Some(tls) = tls {
            options = options.with_tls(tls);
        }
        let mut clients = Vec::new();
        for ep in cfg.endpoint_urls() {
            clients.push(Client::connect([ep], Some(options.clone())).await?);
        }
        Ok(Members {
            clients,
            current: AtomicUsize::new(0),
            timeout: cfg.timeout,
            watches: WatchHub::default(),
        })
    }

    /// Asks every member at once and uses the first that answers `call`, so a stalled
    /// member (connections open, nothing answered) first in the list does not hold up a
    /// client the others would serve. Returns the last error when none answered.
    pub async fn first_to_answer<T, F, Fut>(&self, call: F) -> Result<T, Error>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let mut asks: FuturesUnordered<_> = self
            .clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let answer = call(c.clone());
                async move { (i, answer.await) }
            })
            .collect();
        let mut last = None;
        while let Some((i, answer)) = asks.next().await {
            match answer {
                Ok(v) => {
                    self.current.store(i, Ordering::SeqCst);
                    return Ok(v);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::InvalidArgs("no etcd endpoint configured".into())))
    }

    /// Runs `call` on the member in use; when that member is unreachable, has no leader or
    /// does not answer within the request timeout, moves on and runs it on the next, at most
    /// once per member. Returns the last error when none answered.
    pub async fn run<T, F, Fut>(&self, call: F) -> Result<T, Error>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        self.run_within(self.timeout, call).await
    }

    /// The index of the member in use.
    fn in_use(&self) -> usize {
        self.current.load(Ordering::SeqCst) % self.clients.len().max(1)
    }

    /// Tests only: see [`WatchHub::set_deaf`].
    #[cfg(feature = "test-hooks")]
    pub fn set_watches_deaf(&self, deaf: bool) {
        self.watches.set_deaf(deaf);
    }

    /// Watches `key` (with `opts`: a prefix, a start revision) for its first deletion, on
    /// the client's one shared watch stream ([`crate::watches`]), opened on the member in use.
    pub async fn watch(
        &self,
        key: impl Into<Vec<u8>>,
        opts: WatchOptions,
    ) -> Result<Watching, Error> {
        let member = self.in_use();
        self.watches
            .watch(
                member,
                key.into(),
                opts,
                self.timeout,
                |key, opts| async move {
                    let stream = self
                        .run(|c| crate::watches::open_on(c, key.clone(), opts.clone()))
                        .await?;
                    // The member `run` ended on (it moves past members that fail).
                    Ok((stream, self.in_use()))
                },
            )
            .await
    }

    /// [`Members::run`] with each member given at most `per_member` (capped at the request
    /// timeout): a keep-alive must find a live member well within its lease.
    pub async fn run_within<T, F, Fut>(&self, per_member: Duration, call: F) -> Result<T, Error>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let per_member = per_member.min(self.timeout);
        let n = self.clients.len();
        let mut last = None;
        for _ in 0..n {
            let i = self.in_use();
            match tokio::time::timeout(per_member, call(self.clients[i].clone())).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if is_unreachable(&e) => last = Some(e),
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    last = Some(Error::IoError(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer within {per_member:?}"),
                    )))
                }
            }
            // Another call may have moved on already; only move past the member that failed.
            let _ =
                self.current
                    .compare_exchange(i, (i + 1) % n, Ordering::SeqCst, Ordering::SeqCst);
        }
        Err(last.unwrap_or_else(|| Error::InvalidArgs("no etcd endpoint configured".into())))
    }
}
