//! The backends under test, as rows of a table: a URL builder that can route through proxies.

use std::net::SocketAddr;
use std::sync::Arc;

use distlock_core::{DistributedLock, LockError};

use crate::services::ServiceSet;

/// One backend and mode.
#[derive(Clone, Debug)]
pub struct Target {
    /// Label in the report.
    pub label: &'static str,
    /// URL with `{hosts}` where the host list goes.
    pub template: String,
    /// The real store addresses behind `{hosts}` (empty: no network, e.g. SQLite).
    pub hosts: Vec<SocketAddr>,
    /// Lease-based (`true`) or session/connection-bound.
    pub lease: bool,
}

impl Target {
    /// The URL with the real hosts.
    pub fn url(&self) -> String {
        self.with_hosts(self.hosts.iter().map(ToString::to_string))
    }

    /// The URL with the given ports on 127.0.0.1 (proxies).
    pub fn url_via(&self, ports: &[u16]) -> String {
        self.with_hosts(ports.iter().map(|p| format!("127.0.0.1:{p}")))
    }

    fn with_hosts(&self, hosts: impl Iterator<Item = String>) -> String {
        self.template
            .replace("{hosts}", &hosts.collect::<Vec<_>>().join(","))
    }

    /// The port of host `i`.
    pub fn port(&self, i: usize) -> Option<u16> {
        self.hosts.get(i).map(SocketAddr::port)
    }

    /// SQL (PostgreSQL or MySQL/MariaDB) over the network.
    pub fn is_sql_server(&self) -> bool {
        self.template.starts_with("postgres") || self.template.starts_with("mysql")
    }
}

/// The in-process reference store behind [`MEMORY_URL`] (one per process).
static MEMORY: std::sync::OnceLock<distlock_core::memory::MemoryStore> = std::sync::OnceLock::new();

/// The URL of the in-process reference backend (nemesis only: its clients share one process).
pub const MEMORY_URL: &str = "memory://chaos";

/// Connects any scheme (through the facade's scheme registry), plus [`MEMORY_URL`].
pub async fn connect(url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    if url == MEMORY_URL {
        return Ok(MEMORY.get_or_init(Default::default).client());
    }
    distlock::connect(url).await
}

/// The in-process reference backend as a target: only the nemesis runs it (its clients must
/// share one process, so no client processes and no network; the stall fault applies).
pub fn memory() -> Target {
    Target {
        label: "memory",
        template: MEMORY_URL.into(),
        hosts: vec![],
        lease: true,
    }
}

fn local(set: ServiceSet, ports: &[u16]) -> Vec<SocketAddr> {
    ports
        .iter()
        .map(|p| ([127, 0, 0, 1], set.port(*p)).into())
        .collect()
}

/// Every backend `scripts/services.sh up` provides in the shared set (plus SQLite in `dir`).
pub fn all(sqlite_dir: &str) -> Vec<Target> {
    all_in(sqlite_dir, ServiceSet::Shared)
}

/// Every backend of `set` (plus SQLite in `dir`), the ensemble in namespaces excepted; etcd
/// only when built with the `etcd` feature.
pub fn all_in(sqlite_dir: &str, set: ServiceSet) -> Vec<Target> {
    let mut all = vec![
        Target {
            label: "sqlite-row",
            template: format!("sqlite://{sqlite_dir}/chaos.db"),
            hosts: vec![],
            lease: true,
        },
        Target {
            label: "postgres-row",
            template: "postgres://postgres@{hosts}/distlock?mode=row".into(),
            hosts: local(set, &[15432]),
            lease: true,
        },
        Target {
            label: "postgres-for_update",
            template: "postgres://postgres@{hosts}/distlock?mode=for_update".into(),
            hosts: local(set, &[15432]),
            lease: false,
        },
        Target {
            label: "postgres-advisory",
            template: "postgres://postgres@{hosts}/distlock?mode=advisory".into(),
            hosts: local(set, &[15432]),
            lease: false,
        },
        Target {
            label: "mysql-row",
            template: "mysql://root@{hosts}/distlock?mode=row".into(),
            hosts: local(set, &[13306]),
            lease: true,
        },
        Target {
            label: "mysql-for_update",
            template: "mysql://root@{hosts}/distlock?mode=for_update".into(),
            hosts: local(set, &[13306]),
            lease: false,
        },
        Target {
            label: "mysql-advisory",
            template: "mysql://root@{hosts}/distlock?mode=advisory".into(),
            hosts: local(set, &[13306]),
            lease: false,
        },
        Target {
            label: "redis",
            template: "redis://{hosts}".into(),
            hosts: local(set, &[16379]),
            lease: true,
        },
        Target {
            label: "redlock",
            template: "redlock://{hosts}?timeout=500ms".into(),
            hosts: local(set, &[17001, 17002, 17003, 17004, 17005]),
            lease: true,
        },
        Target {
            label: "zookeeper",
            template: "zk://{hosts}?session_timeout=2s".into(),
            hosts: local(set, &[12181]),
            lease: false,
        },
        Target {
            label: "zookeeper-ensemble",
            template: "zk://{hosts}?session_timeout=2s".into(),
            hosts: local(set, &[12281, 12282, 12283]),
            lease: false,
        },
    ];
    if cfg!(feature = "etcd") {
        all.extend(etcd(set));
    }
    all
}

/// The single etcd member and the 3-member cluster of `set` (leases: a holder cut off loses
/// its lock when its lease runs out unrenewed).
pub fn etcd(set: ServiceSet) -> [Target; 2] {
    [
        Target {
            label: "etcd",
            template: "etcd://{hosts}".into(),
            hosts: local(set, &[12379]),
            lease: true,
        },
        Target {
            label: "etcd-cluster",
            template: "etcd://{hosts}".into(),
            hosts: local(set, &[12479, 12489, 12499]),
            lease: true,
        },
    ]
}

/// The 3-node ensemble in network namespaces of `set` (`services.sh up zk-netns`, as root).
pub fn zookeeper_netns(set: ServiceSet) -> Target {
    Target {
        label: "zookeeper-netns",
        template: "zk://{hosts}?session_timeout=2s".into(),
        hosts: (1..=3).map(|n| (set.netns_ip(n), 2181).into()).collect(),
        lease: false,
    }
}
