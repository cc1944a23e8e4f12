//! The backends under test, as rows of a table: a URL builder that can route through proxies.

use std::sync::Arc;

use lock_core::{DistributedLock, LockError};

/// One backend and mode.
#[derive(Clone, Debug)]
pub struct Target {
    /// Label in the report.
    pub label: &'static str,
    /// URL with `{hosts}` where the host list goes.
    pub template: String,
    /// The real `host:port`s behind `{hosts}` (empty: no network, e.g. SQLite).
    pub hosts: Vec<u16>,
    /// Lease-based (`true`) or session/connection-bound.
    pub lease: bool,
}

impl Target {
    /// The URL with the real hosts.
    pub fn url(&self) -> String {
        self.url_via(&self.hosts)
    }

    /// The URL with the given ports on 127.0.0.1 (proxies).
    pub fn url_via(&self, ports: &[u16]) -> String {
        let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        self.template.replace("{hosts}", &hosts.join(","))
    }
}

/// Connects any scheme (through the facade's scheme registry).
pub async fn connect(url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    distlock::connect(url).await
}

/// Every backend `scripts/services.sh up` provides (plus SQLite in `dir`).
pub fn all(sqlite_dir: &str) -> Vec<Target> {
    vec![
        Target {
            label: "sqlite-row",
            template: format!("sqlite://{sqlite_dir}/chaos.db"),
            hosts: vec![],
            lease: true,
        },
        Target {
            label: "postgres-row",
            template: "postgres://postgres@{hosts}/distlock?mode=row".into(),
            hosts: vec![15432],
            lease: true,
        },
        Target {
            label: "postgres-for_update",
            template: "postgres://postgres@{hosts}/distlock?mode=for_update".into(),
            hosts: vec![15432],
            lease: false,
        },
        Target {
            label: "mysql-row",
            template: "mysql://root@{hosts}/distlock?mode=row".into(),
            hosts: vec![13306],
            lease: true,
        },
        Target {
            label: "mysql-for_update",
            template: "mysql://root@{hosts}/distlock?mode=for_update".into(),
            hosts: vec![13306],
            lease: false,
        },
        Target {
            label: "redis",
            template: "redis://{hosts}".into(),
            hosts: vec![16379],
            lease: true,
        },
        Target {
            label: "redlock",
            template: "redlock://{hosts}?timeout=500ms".into(),
            hosts: vec![17001, 17002, 17003, 17004, 17005],
            lease: true,
        },
        Target {
            label: "zookeeper",
            template: "zk://{hosts}?session_timeout=2s".into(),
            hosts: vec![12181],
            lease: false,
        },
        Target {
            label: "zookeeper-ensemble",
            template: "zk://{hosts}?session_timeout=2s".into(),
            hosts: vec![12281, 12282, 12283],
            lease: false,
        },
    ]
}
