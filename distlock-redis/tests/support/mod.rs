//! The conformance harness for the Redis backend: real redis-server processes from
//! `scripts/services.sh up` (16379 single, 17001–17005 Redlock masters).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

pub mod grants;
pub mod sentinel;

use async_trait::async_trait;
use distlock_core::conformance::{CrashableClient, Harness};
use distlock_core::{DistributedLock, LockError};

pub fn single_url() -> String {
    std::env::var("DISTLOCK_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:16379".into())
}

pub fn redlock_url() -> String {
    std::env::var("DISTLOCK_TEST_REDLOCK_URL").unwrap_or_else(|_| {
        "redlock://127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005".into()
    })
}

/// The Sentinel set (`scripts/services.sh up`: sentinels 26400–26402, master set `distlock`).
pub fn sentinel_url() -> String {
    std::env::var("DISTLOCK_TEST_REDIS_SENTINEL_URL").unwrap_or_else(|_| {
        "redis+sentinel://127.0.0.1:26400,127.0.0.1:26401,127.0.0.1:26402/distlock".into()
    })
}

/// The port of the master the first sentinel of `url` names now.
fn sentinel_master_port(url: &str) -> u16 {
    let sentinel = ports(url)[0];
    let client = redis::Client::open(format!("redis://127.0.0.1:{sentinel}")).unwrap();
    let mut c = client
        .get_connection_with_timeout(std::time::Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("cannot reach sentinel {sentinel}: {e}\nstart the test stores with `scripts/services.sh up`"));
    let (_, port): (String, u16) = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg("distlock")
        .query(&mut c)
        .unwrap();
    port
}

/// The Redis Cluster (`scripts/services.sh up`: 16410–16415, three primaries).
pub fn cluster_url() -> String {
    std::env::var("DISTLOCK_TEST_REDIS_CLUSTER_URL").unwrap_or_else(|_| {
        "redis+cluster://127.0.0.1:16410,127.0.0.1:16411,127.0.0.1:16412".into()
    })
}

/// The TLS server (`scripts/services.sh up` starts it on 16390: TLS only, ACL user `distlock`).
pub fn tls_url() -> String {
    std::env::var("DISTLOCK_TEST_REDIS_TLS_URL").unwrap_or_else(|_| {
        let d = tls_dir();
        format!(
            "rediss://distlock@localhost:16390?ca={}/ca.crt&password_file={}/redis-password",
            d.display(),
            d.display()
        )
    })
}

pub use distlock_core::conformance::refusals::tls_dir;

/// A plain redis-rs connection to the TLS server on `port`, as its ACL user.
pub async fn raw_tls(port: u16) -> redis::aio::MultiplexedConnection {
    let d = tls_dir();
    let pw = std::fs::read_to_string(d.join("redis-password")).unwrap();
    let certs = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(std::fs::read(d.join("ca.crt")).unwrap()),
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = format!("rediss://distlock:{}@localhost:{port}", pw.trim());
    let client = redis::Client::build_with_tls(url, certs).unwrap();
    match client.get_multiplexed_async_connection().await {
        Ok(c) => c,
        Err(e) => panic!("cannot reach redis (TLS) on {port}: {e}\nstart the test stores with `scripts/services.sh up`"),
    }
}

/// The `host:port`s of a URL.
pub fn ports(url: &str) -> Vec<u16> {
    let hosts = url
        .split("://")
        .nth(1)
        .unwrap()
        .split(['/', '?'])
        .next()
        .unwrap();
    hosts
        .split(',')
        .map(|h| h.rsplit(':').next().unwrap().parse().unwrap())
        .collect()
}

/// A fault proxy in front of each Redlock master, and the `redlock://` URL through them.
pub async fn redlock_proxies() -> (Vec<distlock_core::fault::FaultProxy>, String) {
    let mut proxies = Vec::new();
    for p in ports(&redlock_url()) {
        let proxy = distlock_core::fault::FaultProxy::start(([127, 0, 0, 1], p).into());
        proxies.push(proxy.await.unwrap());
    }
    let hosts: Vec<String> = proxies
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.addr().port()))
        .collect();
    let url = format!("redlock://{}", hosts.join(","));
    (proxies, url)
}

/// A fresh lock name for one test.
pub fn unique(what: &str) -> String {
    format!(
        "redis-{what}-{}",
        &distlock_core::backend::owner_token()[..10]
    )
}

/// distlock's own key `what` (`fence`, `queue`, `qexp`) beside the lock key `lock`, as
/// `src/keys.rs` lays it out.
pub fn aux_key(lock: &str, what: &str) -> String {
    format!("{{{lock}}}\0{what}")
}

/// Runs one raw command on the server at `port`.
pub async fn run<T: redis::FromRedisValue>(port: u16, cmd: &mut redis::Cmd) -> T {
    let mut c = raw(port).await;
    cmd.query_async(&mut c).await.unwrap()
}

pub async fn connect_or_explain(url: &str) -> Arc<dyn DistributedLock> {
    match distlock_redis::connect(url).await {
        Ok(l) => l,
        Err(e) => {
            panic!("cannot reach {url}: {e}\nstart the test stores with `scripts/services.sh up`")
        }
    }
}

/// A plain connection to the server at `port` for a test's own setup and checks, answering
/// within 5 s (the client's default, 500 ms, is short for two busy cores running two suites:
/// a test's cleanup `DEL` once failed under such load, most likely on it).
pub async fn raw(port: u16) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(std::time::Duration::from_secs(5)));
    match client
        .get_multiplexed_async_connection_with_config(&config)
        .await
    {
        Ok(c) => c,
        Err(e) => panic!("cannot reach redis on {port}: {e}\nstart the test stores with `scripts/services.sh up`"),
    }
}

pub struct RedisHarness {
    pub url: String,
    pub ports: Vec<u16>,
    /// The servers speak TLS only (the URL's host is `localhost`, the name on their certificate).
    pub tls: bool,
    /// The URL names sentinels; `ports` is the master they named when the harness was made.
    pub sentinel: bool,
    /// The URL names Redis Cluster seeds (`ports`); looking underneath goes through the cluster.
    pub cluster: bool,
}

impl RedisHarness {
    pub fn single() -> Self {
        let url = single_url();
        RedisHarness {
            ports: ports(&url),
            url,
            tls: false,
            sentinel: false,
            cluster: false,
        }
    }

    pub fn redlock() -> Self {
        let url = redlock_url();
        RedisHarness {
            ports: ports(&url),
            url,
            tls: false,
            sentinel: false,
            cluster: false,
        }
    }

    /// The shared Redis Cluster (16410–16415).
    pub fn cluster() -> Self {
        let url = cluster_url();
        RedisHarness {
            ports: ports(&url),
            url,
            tls: false,
            sentinel: false,
            cluster: true,
        }
    }

    /// One command through the cluster (routed by its key).
    pub async fn on_cluster<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let seeds: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect();
        let client = redis::cluster::ClusterClient::new(seeds).unwrap();
        let mut c = client.get_async_connection().await.unwrap_or_else(|e| {
            panic!("cannot reach the Redis cluster: {e}\nstart the test stores with `scripts/services.sh up`")
        });
        cmd.query_async(&mut c).await.unwrap()
    }

    /// The shared Sentinel set; looking underneath goes to its master (never failed over:
    /// failover tests make their own sets).
    pub fn sentinel() -> Self {
        let url = sentinel_url();
        RedisHarness {
            ports: vec![sentinel_master_port(&url)],
            url,
            tls: false,
            sentinel: true,
            cluster: false,
        }
    }

    pub fn tls() -> Self {
        let url = tls_url();
        RedisHarness {
            ports: ports(&url),
            url,
            tls: true,
            sentinel: false,
            cluster: false,
        }
    }

    /// A plain connection to the server on `port` for looking underneath.
    pub async fn raw(&self, port: u16) -> redis::aio::MultiplexedConnection {
        if self.tls {
            raw_tls(port).await
        } else {
            raw(port).await
        }
    }

    /// The URL with its hosts replaced (by fault proxies' `127.0.0.1:port`s): user and query
    /// kept, and `localhost` for TLS, whose certificate names no IP address.
    /// For Sentinel, a plain `redis://` URL of the master through the proxies (a proxied
    /// sentinel would still name the master's own address).
    fn with_hosts(&self, hosts: &str) -> String {
        if self.sentinel {
            return format!("redis://{hosts}");
        }
        let (scheme, rest) = self.url.split_once("://").unwrap();
        let user = rest
            .split_once('@')
            .map(|(u, _)| format!("{u}@"))
            .unwrap_or_default();
        let query = rest
            .split_once('?')
            .map(|(_, q)| format!("?{q}"))
            .unwrap_or_default();
        let hosts = if self.tls {
            hosts.replace("127.0.0.1", "localhost")
        } else {
            hosts.to_owned()
        };
        format!("{scheme}://{user}{hosts}{query}")
    }
}

#[async_trait]
impl Harness for RedisHarness {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        connect_or_explain(&self.url).await
    }

    async fn crashable_client(&self) -> CrashableClient {
        if self.cluster {
            // The cluster names its nodes' own addresses: a proxy in front of a seed would not
            // carry the client's connections. A crash is the client's guards abandoned.
            return CrashableClient::in_process(self.client().await);
        }
        CrashableClient::through_proxies(&self.ports, |hosts| {
            let url = self.with_hosts(&hosts);
            async move { connect_or_explain(&url).await }
        })
        .await
    }

    async fn remove_underneath(&self, name: &str) {
        if self.cluster {
            let _: i64 = self.on_cluster(redis::cmd("DEL").arg(name)).await;
            return;
        }
        for p in &self.ports {
            let mut c = self.raw(*p).await;
            let _: i64 = redis::cmd("DEL")
                .arg(name)
                .query_async(&mut c)
                .await
                .unwrap();
        }
    }

    async fn traces(&self, name: &str) -> usize {
        if self.cluster {
            let exists: i64 = self.on_cluster(redis::cmd("EXISTS").arg(name)).await;
            let queued: i64 = self
                .on_cluster(redis::cmd("ZCARD").arg(aux_key(name, "queue")))
                .await;
            return (exists + queued) as usize;
        }
        let mut n = 0;
        for p in &self.ports {
            let mut c = self.raw(*p).await;
            let exists: i64 = redis::cmd("EXISTS")
                .arg(name)
                .query_async(&mut c)
                .await
                .unwrap();
            let queued: i64 = redis::cmd("ZCARD")
                .arg(aux_key(name, "queue"))
                .query_async(&mut c)
                .await
                .unwrap();
            n += (exists + queued) as usize;
        }
        n
    }

    async fn unreachable(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        let url = if self.tls {
            self.with_hosts("127.0.0.1:1") + "&timeout=1s"
        } else if self.cluster {
            "redis+cluster://127.0.0.1:1?timeout=1s".to_owned()
        } else if self.sentinel {
            "redis+sentinel://127.0.0.1:1/distlock?timeout=1s".to_owned()
        } else if self.ports.len() == 1 {
            "redis://127.0.0.1:1?timeout=1s".to_owned()
        } else {
            "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?timeout=1s".to_owned()
        };
        distlock_redis::connect(&url).await
    }
}

/// A fenced register at a fresh key on the server at `port`, written by
/// `distlock_redis::fence::set`, as the fenced-register checks
/// (`distlock_core::conformance::fence`) take it: the key, and its `(Write, Read)`.
pub fn fenced_register(
    port: u16,
) -> (
    String,
    distlock_core::conformance::fence::Write,
    distlock_core::conformance::fence::Read,
) {
    use futures::FutureExt;
    let key = format!("fence-reg-{}", distlock_core::backend::owner_token());
    let write: distlock_core::conformance::fence::Write = Box::new({
        let key = key.clone();
        move |token, body| {
            let key = key.clone();
            async move {
                let mut conn = raw(port).await;
                distlock_redis::fence::set(&mut conn, &key, body, token)
                    .await
                    .map_err(|e| e.map_store(|e| e.to_string()))
            }
            .boxed()
        }
    });
    let read: distlock_core::conformance::fence::Read = Box::new({
        let key = key.clone();
        move || {
            let key = key.clone();
            async move { run::<String>(port, redis::cmd("GET").arg(&key)).await }.boxed()
        }
    });
    (key, write, read)
}

/// `scripts/services.sh ARGS` (on the shared set); its output. Panics when it fails.
pub fn services(args: &[&str]) -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = std::process::Command::new(format!("{root}/scripts/services.sh"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "services.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
