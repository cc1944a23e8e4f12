//! A server whose `maxmemory-policy` can evict a held lock's key is refused at connect (or,
//! with `eviction=warn`, accepted with a warning), on a single instance and on every Redlock
//! master. Each test starts its own private redis-server: the shared ones stay `noeviction`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use distlock_core::fault::FaultProxy;
use distlock_core::{AcquireOptions, DistributedLock, LockError};
use support::*;

/// A throwaway redis-server on a free loopback port, killed when dropped.
struct PrivateRedis {
    child: Child,
    port: u16,
}

impl PrivateRedis {
    /// Starts `redis-server` with `extra` arguments and waits (at most 10 s) until it answers.
    async fn start(extra: &[&str]) -> PrivateRedis {
        for _attempt in 0..5 {
            // A free port: another process may take it before the server binds; then retry.
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .args(["--dir", &std::env::temp_dir().to_string_lossy()])
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot start redis-server ({e}): install it with `scripts/services.sh up`"
                    )
                });
            let mut server = PrivateRedis { child, port };
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(10) {
                if server.child.try_wait().unwrap().is_some() {
                    break;
                }
                let ping = async {
                    let client = redis::Client::open(server.url()).ok()?;
                    let mut c = client.get_multiplexed_async_connection().await.ok()?;
                    redis::cmd("PING").query_async::<String>(&mut c).await.ok()
                };
                if tokio::time::timeout(Duration::from_secs(1), ping)
                    .await
                    .ok()
                    .flatten()
                    .is_some()
                {
                    return server;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        panic!("a private redis-server did not start within 10 s (5 attempts)");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn set_policy(&self, policy: &str) {
        run::<()>(
            self.port,
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory-policy")
                .arg(policy),
        )
        .await;
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Takes a fresh lock, runs `while_held` with its name, releases it.
async fn lock_once<F: std::future::Future<Output = ()>>(
    lock: &dyn DistributedLock,
    what: &str,
    while_held: impl FnOnce(String) -> F,
) {
    let name = unique(what);
    let g = lock
        .acquire(&name, &AcquireOptions::new().wait(Duration::from_secs(3)))
        .await
        .unwrap();
    while_held(name).await;
    g.release().await.unwrap();
}

fn refused(r: Result<impl std::fmt::Debug, LockError>, policy: &str, port: u16) {
    match r {
        Err(LockError::InvalidConfig(m))
            if m.contains(policy)
                && m.contains("noeviction")
                && m.contains("eviction=warn")
                && m.contains(&port.to_string()) => {}
        other => panic!("{policy} on {port}: {other:?}"),
    }
}

fn redlock_with(port: u16) -> String {
    let masters = ports(&redlock_url());
    format!(
        "redlock://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{port}",
        masters[0], masters[1]
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_that_can_evict_lock_keys_is_refused_unless_told_to_warn() {
    let server = PrivateRedis::start(&["--maxmemory-policy", "allkeys-lru"]).await;
    let port = server.port;
    for policy in [
        "allkeys-lru",
        "volatile-lru",
        "volatile-ttl",
        "allkeys-random",
    ] {
        server.set_policy(policy).await;
        refused(distlock_redis::connect(&server.url()).await, policy, port);
        refused(
            distlock_redis::connect(&redlock_with(port)).await,
            policy,
            port,
        );
    }
    // eviction=warn: connects, and the lock works.
    for url in [
        format!("{}?eviction=warn", server.url()),
        format!("{}?eviction=warn", redlock_with(port)),
    ] {
        let lock = distlock_redis::connect(&url).await.unwrap();
        lock_once(&*lock, "warned", |_| async {}).await;
    }
    // noeviction: accepted by default.
    server.set_policy("noeviction").await;
    distlock_redis::connect(&server.url()).await.unwrap();
    distlock_redis::connect(&redlock_with(port)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redlock_master_down_at_connect_is_checked_before_it_counts() {
    let server = PrivateRedis::start(&["--maxmemory-policy", "volatile-lru"]).await;
    let proxy = FaultProxy::start(([127, 0, 0, 1], server.port).into())
        .await
        .unwrap();
    proxy.kill();
    let lock = distlock_redis::connect(&redlock_with(proxy.addr().port()))
        .await
        .unwrap();
    proxy.heal();
    // The master is back: it must not hold (and never be counted for) a lock.
    for _ in 0..3 {
        lock_once(&*lock, "lazycheck", |name| async move {
            let n: i64 = run(server.port, redis::cmd("EXISTS").arg(&name)).await;
            assert_eq!(n, 0, "a volatile-lru master holds lock {name:?}");
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_without_config_is_accepted_as_unknown() {
    let server = PrivateRedis::start(&["--rename-command", "CONFIG", ""]).await;
    let lock = distlock_redis::connect(&server.url()).await.unwrap();
    lock_once(&*lock, "noconfig", |_| async {}).await;
}
