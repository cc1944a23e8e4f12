//! [`Harness`]: what a backend supplies so the shared cases can run against it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;

use crate::{DistributedLock, LockError};

/// A client that can be crashed: `crash` cuts its connections (or session) so that nothing it
/// holds is released by it. The case then abandons the guard.
pub struct CrashableClient {
    /// The client.
    pub lock: Arc<dyn DistributedLock>,
    /// Cuts the client off from the store, as a process crash or a pulled cable would.
    pub crash: Crash,
}

/// Cuts a client off from the store, as a process crash or a pulled cable would.
pub type Crash = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// Starts one [`crate::fault::FaultProxy`] per upstream port: the proxies' `127.0.0.1:port`
/// list (comma-joined) to connect a client through, and the [`Crash`] that kills them all.
///
/// # Panics
/// When a proxy cannot bind a loopback port (test support).
pub async fn proxies(ports: &[u16]) -> (String, Crash) {
    let mut proxies = Vec::new();
    for p in ports {
        match crate::fault::FaultProxy::start(([127, 0, 0, 1], *p).into()).await {
            Ok(proxy) => proxies.push(proxy),
            Err(e) => panic!("cannot start a fault proxy: {e}"),
        }
    }
    let hosts: Vec<String> = proxies
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.addr().port()))
        .collect();
    let crash: Crash = Box::new(move || {
        Box::pin(async move {
            for p in &proxies {
                p.kill();
            }
            drop(proxies);
        })
    });
    (hosts.join(","), crash)
}

impl CrashableClient {
    /// Routes a client through one [`crate::fault::FaultProxy`] per upstream port; `connect`
    /// gets the proxies' `127.0.0.1:port` list (comma-joined) and `crash` kills every proxy.
    ///
    /// # Panics
    /// When a proxy cannot bind a loopback port (test support).
    pub async fn through_proxies<F, Fut>(ports: &[u16], connect: F) -> CrashableClient
    where
        F: FnOnce(String) -> Fut,
        Fut: std::future::Future<Output = Arc<dyn DistributedLock>>,
    {
        let (hosts, crash) = proxies(ports).await;
        CrashableClient {
            lock: connect(hosts).await,
            crash,
        }
    }
}

/// A backend factory for the conformance suite.
///
/// Harness methods panic with a message naming `scripts/services.sh up` when the store is not
/// running: a conformance case never skips silently.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// Opens a new independent client (its own connections / session).
    async fn client(&self) -> Arc<dyn DistributedLock>;

    /// Opens a client that [`CrashableClient::crash`] can cut off.
    async fn crashable_client(&self) -> CrashableClient;

    /// Removes the lock underneath its holder: delete the key/row/node, or kill the connection
    /// that holds it.
    async fn remove_underneath(&self, name: &str);

    /// How many store entries exist for `name` that a lock-free state should not have
    /// (keys, rows, nodes, open lock transactions), not counting permanent fencing counters.
    async fn traces(&self, name: &str) -> usize;

    /// A client configured for a store that does not answer. Either this or its first acquire
    /// must fail with [`LockError::Unavailable`] promptly.
    async fn unreachable(&self) -> Result<Arc<dyn DistributedLock>, LockError>;

    /// The longest time a crashed holder with lease `ttl` may keep the lock.
    fn crash_release_bound(&self, ttl: Duration) -> Duration {
        ttl + Duration::from_secs(2)
    }
}
