//! What gets measured: one [`Target`] per backend and mode, with its raw store primitive.

use std::sync::Arc;

use distlock_core::{DistributedLock, LockError};

/// The raw store primitive a lock is compared against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Raw {
    /// `INSERT` + `DELETE` of a row.
    SqlInsertDelete,
    /// `BEGIN; SELECT … FOR UPDATE; COMMIT`.
    SqlForUpdate,
    /// An advisory lock and unlock on one connection (`pg_advisory_lock` /
    /// `pg_advisory_unlock`, `GET_LOCK` / `RELEASE_LOCK`).
    SqlAdvisory,
    /// `SET NX PX` + compare-and-delete `EVALSHA` (on every node concurrently for Redlock).
    RedisSetDel,
    /// Create an ephemeral-sequential node + delete it.
    ZkCreateDelete,
    /// Put a key under a lease + delete it (the benches' `etcd` feature).
    EtcdPutDelete,
}

/// One backend and mode to benchmark.
#[derive(Clone, Debug)]
pub struct Target {
    /// Label in the report, e.g. `postgres-row`.
    pub label: String,
    /// The distlock URL.
    pub url: String,
    /// The raw primitive.
    pub raw: Raw,
}

/// The stores `scripts/services.sh up` provides.
pub fn all_service_urls() -> Vec<String> {
    vec![
        "postgres://postgres@127.0.0.1:15432/distlock?mode=row".into(),
        "postgres://postgres@127.0.0.1:15432/distlock?mode=for_update".into(),
        "postgres://postgres@127.0.0.1:15432/distlock?mode=advisory".into(),
        "mysql://root@127.0.0.1:13306/distlock?mode=row".into(),
        "mysql://root@127.0.0.1:13306/distlock?mode=for_update".into(),
        "mysql://root@127.0.0.1:13306/distlock?mode=advisory".into(),
        "redis://127.0.0.1:16379".into(),
        redis_tls_url(),
        "redis+cluster://127.0.0.1:16410,127.0.0.1:16411,127.0.0.1:16412".into(),
        "redlock://127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005"
            .into(),
        "zk://127.0.0.1:12181".into(),
        #[cfg(feature = "etcd")]
        "etcd://127.0.0.1:12379".into(),
    ]
}

/// The TLS-only Redis `scripts/services.sh up` starts (16390): beside `redis`, the cost of TLS.
fn redis_tls_url() -> String {
    let dir = std::env::var("DISTLOCK_TEST_TLS_DIR")
        .unwrap_or_else(|_| "/tmp/distlock-services/tls".into());
    format!("rediss://distlock@localhost:16390?ca={dir}/ca.crt&password_file={dir}/redis-password")
}

/// Builds the target for a URL.
///
/// # Errors
/// [`LockError::InvalidConfig`] for an unknown scheme.
pub fn target(url: &str) -> Result<Target, LockError> {
    let scheme = url.split("://").next().unwrap_or("");
    let for_update = url.contains("mode=for_update");
    let advisory = url.contains("mode=advisory");
    let (label, raw) = match scheme {
        "sqlite" => ("sqlite-row".to_owned(), Raw::SqlInsertDelete),
        "postgres" | "postgresql" | "mysql" | "mariadb" => {
            let db = if scheme.starts_with("postgres") {
                "postgres"
            } else {
                "mysql"
            };
            if for_update {
                (format!("{db}-for_update"), Raw::SqlForUpdate)
            } else if advisory {
                (format!("{db}-advisory"), Raw::SqlAdvisory)
            } else {
                (format!("{db}-row"), Raw::SqlInsertDelete)
            }
        }
        "redis" => ("redis".to_owned(), Raw::RedisSetDel),
        "rediss" => ("redis-tls".to_owned(), Raw::RedisSetDel),
        "redis+cluster" => ("redis-cluster".to_owned(), Raw::RedisSetDel),
        "redlock" => ("redlock".to_owned(), Raw::RedisSetDel),
        "zk" | "zookeeper" => ("zookeeper".to_owned(), Raw::ZkCreateDelete),
        "etcd" => {
            let members = url
                .split(['/', '?'])
                .nth(2)
                .map_or(1, |h| h.split(',').count());
            let label = if members > 1 {
                format!("etcd-{members}")
            } else {
                "etcd".to_owned()
            };
            (label, Raw::EtcdPutDelete)
        }
        other => {
            return Err(LockError::invalid_config(format!(
                "no benchmark target for scheme {other:?}"
            )))
        }
    };
    Ok(Target {
        label,
        url: url.to_owned(),
        raw,
    })
}

/// Connects a distlock client for a URL (through the facade's scheme registry).
///
/// # Errors
/// The backend's connect errors.
pub async fn connect(url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    distlock::connect(url).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--all` covers every backend the conformance suite runs (SQLite is added beside it).
    #[test]
    fn all_covers_every_service_backend() {
        let labels: Vec<String> = all_service_urls()
            .iter()
            .map(|u| target(u).map(|t| t.label).unwrap_or_else(|e| e.to_string()))
            .collect();
        for want in [
            "postgres-row",
            "postgres-for_update",
            "mysql-row",
            "mysql-for_update",
            "postgres-advisory",
            "mysql-advisory",
            "redis",
            "redis-tls",
            "redis-cluster",
            "redlock",
            "zookeeper",
            #[cfg(feature = "etcd")]
            "etcd",
        ] {
            assert!(
                labels.iter().any(|l| l == want),
                "--all misses {want}: {labels:?}"
            );
        }
    }
}
