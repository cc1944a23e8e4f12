//! [`Harness`]: what a backend supplies so the shared cases can run against it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;

use crate::fault::FaultProxy;
use crate::{DistributedLock, LockError};

/// A client that can be crashed: `crash` cuts its connections (or session) so that nothing it
/// holds is released by it. The case then abandons the guard.
pub struct CrashableClient {
    /// The client.
    pub lock: Arc<dyn DistributedLock>,
    /// Cuts the client off from the store, as a process crash or a pulled cable would.
    pub crash: Crash,
    /// The proxies between the client and the store, for gray faults (late requests, lost
    /// replies); empty for an in-process store, where no request or reply crosses a network.
    pub proxies: Arc<[FaultProxy]>,
}

/// Cuts a client off from the store, as a process crash or a pulled cable would.
pub type Crash = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// Starts one [`crate::fault::FaultProxy`] per upstream port: the proxies' `127.0.0.1:port`
/// list (comma-joined) to connect a client through, and the [`Crash`] that kills them all.
///
/// # Panics
/// When a proxy cannot bind a loopback port (test support).
pub async fn proxies(ports: &[u16]) -> (String, Crash) {
    let (hosts, crash, _) = proxy_set(ports).await;
    (hosts, crash)
}

/// [`proxies`], and the proxies themselves.
async fn proxy_set(ports: &[u16]) -> (String, Crash, Arc<[FaultProxy]>) {
    let mut proxies = Vec::new();
    for p in ports {
        match FaultProxy::start(([127, 0, 0, 1], *p).into()).await {
            Ok(proxy) => proxies.push(proxy),
            Err(e) => panic!("cannot start a fault proxy: {e}"),
        }
    }
    let hosts: Vec<String> = proxies
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.addr().port()))
        .collect();
    let proxies: Arc<[FaultProxy]> = proxies.into();
    (hosts.join(","), kill_all(Arc::clone(&proxies)), proxies)
}

/// The [`Crash`] that kills every one of `proxies`.
fn kill_all(proxies: Arc<[FaultProxy]>) -> Crash {
    Box::new(move || {
        Box::pin(async move {
            for p in proxies.iter() {
                p.kill();
            }
        })
    })
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
        let (hosts, crash, proxies) = proxy_set(ports).await;
        CrashableClient {
            lock: connect(hosts).await,
            crash,
            proxies,
        }
    }

    /// A client of an in-process store (SQLite, memory): a crash is its guard abandoned, and
    /// there is no network to fault.
    pub fn in_process(lock: Arc<dyn DistributedLock>) -> CrashableClient {
        CrashableClient {
            lock,
            crash: Box::new(|| Box::pin(async {})),
            proxies: Arc::from([]),
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
