//! The conformance harness for the ZooKeeper backend: real ZooKeeper from
//! `scripts/services.sh up` (standalone 12181, ensemble 12281–12283).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use distlock_zk::path::NodeKind;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::conformance::{CrashableClient, Harness};
use distlock_core::{DistributedLock, LockError};

/// Session timeout of harness clients, in seconds: the library's default.
///
/// A guard is valid for a third of it after each check through the leader, and rides out a
/// store stall of at most `ZkConfig::stall_tolerance` (tests/stalls.rs): 0.4 s with 2 s
/// sessions whatever the `ttl`. This machine's ZooKeeper servers showed fsync stalls of up to
/// 0.84 s and write-pipeline stalls of 1.16 s (`mntr`; all servers share one disk of a 2-core
/// machine running the suite), which lost the 1 s lease of `renewal_keeps_short_lease` 2 runs
/// in 10 with 2 s sessions, and lost some of `thousand_locks_held_at_once`'s guards now and then
/// with 6 s sessions (tolerance 1.2 s at the default `ttl`). 10 s sessions ride out 2 s.
pub const SESSION_SECS: u64 = 10;

/// [`SESSION_SECS`] as a URL value.
pub const SESSION: &str = "10s";

pub fn standalone_url() -> String {
    std::env::var("DISTLOCK_TEST_ZK_URL").unwrap_or_else(|_| "zk://127.0.0.1:12181".into())
}

pub fn ensemble_url() -> String {
    std::env::var("DISTLOCK_TEST_ZK_ENSEMBLE_URL")
        .unwrap_or_else(|_| "zk://127.0.0.1:12281,127.0.0.1:12282,127.0.0.1:12283".into())
}

/// The standalone server as digest user `distlock` (`scripts/services.sh urls` prints it; the
/// password is in the TLS directory's `zk-password`).
pub fn auth_url() -> String {
    std::env::var("DISTLOCK_TEST_ZK_AUTH_URL").unwrap_or_else(|_| {
        format!(
            "zk://distlock@127.0.0.1:12181?password_file={}/zk-password",
            tls_dir().display()
        )
    })
}

/// The standalone server's TLS port as digest user `distlock`, with the private CA and a
/// client certificate (`scripts/services.sh urls` prints it).
pub fn tls_url() -> String {
    std::env::var("DISTLOCK_TEST_ZK_TLS_URL").unwrap_or_else(|_| {
        let d = tls_dir().display().to_string();
        format!(
            "zks://distlock@localhost:12191?ca={d}/ca.crt&cert={d}/client.crt&key={d}/client.key&password_file={d}/zk-password"
        )
    })
}

pub use distlock_core::conformance::refusals::tls_dir;

/// The digest password of [`auth_url`]'s user.
pub fn zk_password() -> String {
    std::fs::read_to_string(tls_dir().join("zk-password"))
        .unwrap()
        .trim()
        .to_owned()
}

pub fn hosts(url: &str) -> String {
    let authority = url
        .split("://")
        .nth(1)
        .unwrap()
        .split(['/', '?'])
        .next()
        .unwrap();
    authority.rsplit('@').next().unwrap().to_owned()
}

pub fn ports(url: &str) -> Vec<u16> {
    hosts(url)
        .split(',')
        .map(|h| h.rsplit(':').next().unwrap().parse().unwrap())
        .collect()
}

pub async fn connect_or_explain(url: &str) -> Arc<dyn DistributedLock> {
    match distlock_zk::connect(url).await {
        Ok(l) => l,
        Err(e) => {
            panic!("cannot reach {url}: {e}\nstart the test stores with `scripts/services.sh up`")
        }
    }
}

/// A plain client of `url`'s servers; for a URL with a user (always `distlock` here),
/// authenticated as that digest identity.
pub async fn raw(url: &str) -> zookeeper_client::Client {
    let mut connector = zookeeper_client::Client::connector();
    if url.contains('@') {
        connector = connector.with_auth("digest", format!("distlock:{}", zk_password()).as_bytes());
    }
    match connector.connect(&hosts(url)).await {
        Ok(c) => c,
        Err(e) => {
            panic!("cannot reach {url}: {e}\nstart the test stores with `scripts/services.sh up`")
        }
    }
}

/// A lock name unique to this run. The random part starts with a letter: ten random hex
/// digits are all decimal about once in a hundred names, and `latch-` followed by ten digits
/// is a recipe node's shape, which names refuse (`unique("latch")` failed so in a clean run).
pub fn unique(what: &str) -> String {
    format!(
        "zk-{what}-x{}",
        &distlock_core::backend::owner_token()[..10]
    )
}

/// Acquire options waiting at most `secs`.
pub fn wait(secs: u64) -> distlock_core::AcquireOptions {
    distlock_core::AcquireOptions::new().wait(Duration::from_secs(secs))
}

/// A client of this crate's concrete type (its test hooks), from a URL.
pub async fn zk_lock(url: &str) -> distlock_zk::ZkLock {
    distlock_zk::ZkLock::connect(distlock_zk::ZkConfig::from_url(url).unwrap())
        .await
        .unwrap_or_else(|e| panic!("{e}; run `scripts/services.sh up`"))
}

/// A client reaching `url`'s first server through a fresh fault proxy, with session timeout
/// `session` (e.g. `"4s"`).
pub async fn proxied(
    url: &str,
    session: &str,
) -> (distlock_zk::ZkLock, distlock_core::fault::FaultProxy) {
    let proxy = distlock_core::fault::FaultProxy::start(([127, 0, 0, 1], ports(url)[0]).into())
        .await
        .unwrap();
    let port = proxy.addr().port();
    let lock = zk_lock(&format!("zk://127.0.0.1:{port}?session_timeout={session}")).await;
    (lock, proxy)
}

pub struct ZkHarness {
    pub url: String,
    /// What the test's own plain client reads through (the same server's plain port for TLS).
    pub admin: String,
}

impl ZkHarness {
    /// The standalone server, authenticated as digest user `distlock`: its contender nodes carry
    /// ACLs that only that identity may change or delete.
    pub fn auth() -> Self {
        ZkHarness {
            url: auth_url(),
            admin: auth_url(),
        }
    }

    /// The standalone server over TLS (`zks://`, client certificate), as digest user
    /// `distlock`.
    pub fn tls() -> Self {
        ZkHarness {
            url: tls_url(),
            admin: auth_url(),
        }
    }

    pub fn standalone() -> Self {
        ZkHarness {
            url: standalone_url(),
            admin: standalone_url(),
        }
    }

    pub fn ensemble() -> Self {
        ZkHarness {
            url: ensemble_url(),
            admin: ensemble_url(),
        }
    }

    pub fn client_url(&self, hosts: &str) -> String {
        match self.url.split_once('@') {
            Some((user, rest)) => {
                let query = rest.split_once('?').map(|(_, q)| q).unwrap_or_default();
                format!("{user}@{hosts}?session_timeout={SESSION}&{query}")
            }
            None => format!("zk://{hosts}?session_timeout={SESSION}"),
        }
    }

    pub fn dir(name: &str) -> String {
        format!("/distlock/{name}")
    }
}

#[async_trait]
impl Harness for ZkHarness {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        connect_or_explain(&self.client_url(&hosts(&self.url))).await
    }

    async fn crashable_client(&self) -> CrashableClient {
        let url = self.client_url("{hosts}");
        CrashableClient::through_proxies(&ports(&self.url), |hosts| async move {
            // The server's certificate names `localhost` (the proxies listen on 127.0.0.1).
            let hosts = if url.starts_with("zks://") {
                hosts.replace("127.0.0.1", "localhost")
            } else {
                hosts
            };
            connect_or_explain(&url.replace("{hosts}", &hosts)).await
        })
        .await
    }

    async fn remove_underneath(&self, name: &str) {
        let zk = raw(&self.admin).await;
        let dir = Self::dir(name);
        let kids = zk.get_children(&dir).await.unwrap().0;
        // The holder: the first lock contender, or else the first election participant.
        let first = [NodeKind::Lock, NodeKind::Latch]
            .into_iter()
            .find_map(|k| k.sorted(kids.clone()).into_iter().next())
            .unwrap_or_else(|| panic!("nothing holds {dir}"));
        zk.delete(&format!("{dir}/{first}"), None).await.unwrap();
    }

    async fn traces(&self, name: &str) -> usize {
        let zk = raw(&self.admin).await;
        match zk.get_children(&Self::dir(name)).await {
            Ok((kids, _)) => [NodeKind::Lock, NodeKind::Latch]
                .into_iter()
                .map(|k| k.sorted(kids.clone()).len())
                .sum(),
            Err(zookeeper_client::Error::NoNode) => 0,
            Err(e) => panic!("{e}"),
        }
    }

    async fn unreachable(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        distlock_zk::connect("zk://127.0.0.1:1?connect_timeout=1s").await
    }

    fn crash_release_bound(&self, _ttl: Duration) -> Duration {
        // The session timeout frees a crashed holder's node; allow the server's expiry tick.
        Duration::from_secs(SESSION_SECS) + Duration::from_secs(3)
    }
}

/// Runs `scripts/services.sh` with `args`; its standard output.
pub fn services(args: &[&str]) -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = std::process::Command::new(format!("{root}/scripts/services.sh"))
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The client port of the ensemble's leader.
pub fn leader_port() -> u16 {
    let status = services(&["status", "zk-ensemble"]);
    status
        .lines()
        .find(|l| l.contains("(leader)"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .expect("no ensemble leader; run `scripts/services.sh up`")
}

/// A fenced register at a fresh node under the root of `url`'s ensemble, written by
/// `distlock_zk::fence::set_data`, as the fenced-register checks
/// (`distlock_core::conformance::fence`) take it: the raw client, the node's path, and its
/// `(Write, Read)`.
pub async fn fenced_register(
    url: &str,
    what: &str,
) -> (
    zookeeper_client::Client,
    String,
    distlock_core::conformance::fence::Write,
    distlock_core::conformance::fence::Read,
) {
    use futures::FutureExt;
    let client = raw(url).await;
    let path = format!("/{}", unique(what));
    let opts =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    client.create(&path, b"", &opts).await.unwrap();
    let write: distlock_core::conformance::fence::Write = Box::new({
        let (client, path) = (client.clone(), path.clone());
        move |token, body| {
            let (client, path) = (client.clone(), path.clone());
            async move {
                distlock_zk::fence::set_data(&client, &path, body.as_bytes(), token)
                    .await
                    .map_err(|e| e.map_store(|e| e.to_string()))
            }
            .boxed()
        }
    });
    let read: distlock_core::conformance::fence::Read = Box::new({
        let (client, path) = (client.clone(), path.clone());
        move || {
            let (client, path) = (client.clone(), path.clone());
            async move { String::from_utf8(client.get_data(&path).await.unwrap().0).unwrap() }
                .boxed()
        }
    });
    (client, path, write, read)
}
