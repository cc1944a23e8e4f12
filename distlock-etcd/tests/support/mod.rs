//! Test support for the etcd backend: real etcd from `scripts/services.sh up` (a single member
//! on 12379, a 3-member cluster on 12479/12489/12499), the conformance harness, and raw
//! etcd-client access for looking underneath.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod own_cluster;

use std::sync::Arc;

use async_trait::async_trait;
use distlock_core::conformance::{CrashableClient, Harness};
use distlock_core::{DistributedLock, LockError};
use distlock_etcd::key::LockKeys;

pub fn single_url() -> String {
    std::env::var("DISTLOCK_TEST_ETCD_URL").unwrap_or_else(|_| "etcd://127.0.0.1:12379".into())
}

pub fn cluster_url() -> String {
    std::env::var("DISTLOCK_TEST_ETCD_CLUSTER_URL")
        .unwrap_or_else(|_| "etcd://127.0.0.1:12479,127.0.0.1:12489,127.0.0.1:12499".into())
}

/// The member with TLS (client certificates required) and authentication on
/// (`scripts/services.sh up`: 12579; user `distlock` may use keys under `locks/` only).
pub fn secure_url() -> String {
    std::env::var("DISTLOCK_TEST_ETCD_SECURE_URL").unwrap_or_else(|_| {
        let d = tls_dir().display().to_string();
        format!("etcds://distlock@localhost:12579/locks?ca={d}/ca.crt&cert={d}/client.crt&key={d}/client.key&password_file={d}/etcd-password")
    })
}

pub use distlock_core::conformance::refusals::tls_dir;

/// The `host:port`s of an `etcd://` URL (the toolkit's URL parser).
fn host_ports(url: &str) -> Vec<distlock_core::backend::HostPort> {
    distlock_core::backend::DistlockUrl::parse(url, distlock_etcd::config::DEFAULT_PORT)
        .unwrap()
        .hosts
}

/// `host:port,…` of an `etcd://` URL.
pub fn hosts(url: &str) -> String {
    let hosts: Vec<String> = host_ports(url).iter().map(ToString::to_string).collect();
    hosts.join(",")
}

pub fn ports(url: &str) -> Vec<u16> {
    host_ports(url).iter().map(|h| h.port).collect()
}

/// `http://host:port` endpoints of an `etcd://` URL (`https://` of an `etcds://` one), for
/// etcd-client and etcdctl.
pub fn endpoints(url: &str) -> Vec<String> {
    let scheme = if url.starts_with("etcds://") {
        "https"
    } else {
        "http"
    };
    host_ports(url)
        .iter()
        .map(|h| format!("{scheme}://{h}"))
        .collect()
}

/// The member's `/metrics` page (Prometheus text), read over plain HTTP.
pub async fn metrics(url: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = hosts(url);
    let mut conn = tokio::net::TcpStream::connect(&host).await.unwrap();
    conn.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut body = String::new();
    conn.read_to_string(&mut body).await.unwrap();
    body
}

/// One counter or gauge (`name` without labels) from a [`metrics`] page.
pub fn metric(page: &str, name: &str) -> i64 {
    page.lines()
        .find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or_else(|| panic!("{name} not in the member's /metrics"))
        .round() as i64
}

/// A lock name unique to this run.
pub fn unique(what: &str) -> String {
    format!(
        "etcd-{what}-{}",
        &distlock_core::backend::owner_token()[..10]
    )
}

fn explain(url: &str, e: impl std::fmt::Display) -> ! {
    panic!("cannot reach {url}: {e}\nstart the test stores with `scripts/services.sh up`")
}

pub async fn connect_or_explain(url: &str) -> Arc<dyn DistributedLock> {
    distlock_etcd::connect(url)
        .await
        .unwrap_or_else(|e| explain(url, e))
}

pub async fn etcd_lock(url: &str) -> distlock_etcd::EtcdLock {
    distlock_etcd::EtcdLock::connect(distlock_etcd::EtcdConfig::from_url(url).unwrap())
        .await
        .unwrap_or_else(|e| explain(url, e))
}

/// A plain etcd-client of the members of `url`: for `etcds://`, with the test CA, client
/// certificate and the `distlock` user.
pub async fn raw(url: &str) -> etcd_client::Client {
    let options = url.starts_with("etcds://").then(|| {
        let d = tls_dir();
        let read = |f: &str| std::fs::read(d.join(f)).unwrap();
        let tls = etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(read("ca.crt")))
            .identity(etcd_client::Identity::from_pem(
                read("client.crt"),
                read("client.key"),
            ));
        let pw = String::from_utf8(read("etcd-password")).unwrap();
        etcd_client::ConnectOptions::new()
            .with_tls(tls)
            .with_user("distlock", pw.trim())
    });
    etcd_client::Client::connect(endpoints(url), options)
        .await
        .unwrap_or_else(|e| explain(url, e))
}

/// The contender keys of lock `name` (under `prefix`), oldest first: (key, create revision).
pub async fn contenders(url: &str, prefix: &str, name: &str) -> Vec<(String, i64)> {
    let range = LockKeys::new(prefix, name).range;
    let opts = etcd_client::GetOptions::new().with_prefix().with_sort(
        etcd_client::SortTarget::Create,
        etcd_client::SortOrder::Ascend,
    );
    let resp = raw(url).await.get(range, Some(opts)).await.unwrap();
    resp.kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                kv.create_revision(),
            )
        })
        .collect()
}

pub struct EtcdHarness {
    /// The servers (`etcd://h:p,…`).
    pub url: String,
    /// The key prefix the harness's clients use (the URL path).
    pub prefix: &'static str,
}

impl EtcdHarness {
    /// The single member, with no key prefix (the layout `etcdctl lock NAME` uses).
    pub fn single() -> Self {
        EtcdHarness {
            url: single_url(),
            prefix: "",
        }
    }

    /// The 3-member cluster, with a key prefix.
    pub fn cluster() -> Self {
        EtcdHarness {
            url: cluster_url(),
            prefix: "distlock-test",
        }
    }

    /// The member with TLS and authentication, under the prefix its user may use.
    pub fn secure() -> Self {
        EtcdHarness {
            url: secure_url(),
            prefix: "locks",
        }
    }

    pub fn client_url(&self, hosts: &str) -> String {
        if let Some(rest) = self.url.strip_prefix("etcds://") {
            // User and query kept; `localhost`, the name on the server's certificate.
            let user = rest.split_once('@').map(|(u, _)| u).unwrap_or_default();
            let query = rest.split_once('?').map(|(_, q)| q).unwrap_or_default();
            let hosts = hosts.replace("127.0.0.1", "localhost");
            return format!("etcds://{user}@{hosts}/{}?{query}", self.prefix);
        }
        if self.prefix.is_empty() {
            format!("etcd://{hosts}")
        } else {
            format!("etcd://{hosts}/{}", self.prefix)
        }
    }
}

#[async_trait]
impl Harness for EtcdHarness {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        connect_or_explain(&self.client_url(&hosts(&self.url))).await
    }

    async fn crashable_client(&self) -> CrashableClient {
        CrashableClient::through_proxies(&ports(&self.url), |hosts| {
            let url = self.client_url(&hosts);
            async move { connect_or_explain(&url).await }
        })
        .await
    }

    async fn remove_underneath(&self, name: &str) {
        let holder = contenders(&self.url, self.prefix, name).await;
        let (key, _) = holder.first().expect("no contender key to remove");
        let deleted = raw(&self.url)
            .await
            .delete(key.as_str(), None)
            .await
            .unwrap();
        assert_eq!(deleted.deleted(), 1, "{key} was not deleted");
    }

    async fn traces(&self, name: &str) -> usize {
        contenders(&self.url, self.prefix, name).await.len()
    }

    async fn unreachable(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        if self.url.starts_with("etcds://") {
            return distlock_etcd::connect(
                &self
                    .client_url("127.0.0.1:1")
                    .replace('?', "?connect_timeout=1s&"),
            )
            .await;
        }
        distlock_etcd::connect("etcd://127.0.0.1:1?connect_timeout=1s").await
    }
}

/// A fenced register at a fresh key of `url`'s cluster, written by `distlock_etcd::fence::put`,
/// as the fenced-register checks (`distlock_core::conformance::fence`) take it: `(Write, Read)`.
pub fn fenced_register(
    url: &str,
    what: &str,
) -> (
    distlock_core::conformance::fence::Write,
    distlock_core::conformance::fence::Read,
) {
    use futures::FutureExt;
    let (url, key) = (url.to_owned(), unique(what));
    let write: distlock_core::conformance::fence::Write = Box::new({
        let (url, key) = (url.clone(), key.clone());
        move |token, body| {
            let (url, key) = (url.clone(), key.clone());
            async move {
                let mut client = raw(&url).await;
                distlock_etcd::fence::put(&mut client, &key, body, token)
                    .await
                    .map_err(|e| e.map_store(|e| e.to_string()))
            }
            .boxed()
        }
    });
    let read: distlock_core::conformance::fence::Read = Box::new(move || {
        let (url, key) = (url.clone(), key.clone());
        async move {
            let got = raw(&url).await.get(key, None).await.unwrap();
            String::from_utf8(got.kvs()[0].value().to_vec()).unwrap()
        }
        .boxed()
    });
    (write, read)
}
