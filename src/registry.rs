//! The URL scheme registry: which backend serves which scheme, and which cargo feature
//! compiles it in (sqlx `AnyDriver` / object_store `parse` style).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use distlock_core::{DistributedLock, DistributedRwLock, DistributedSemaphore, LockError};

/// A backend's connect call for primitive `T` (`dyn DistributedLock`, …).
type Connect<T> =
    for<'a> fn(&'a str) -> Pin<Box<dyn Future<Output = Result<Arc<T>, LockError>> + Send + 'a>>;

/// One registered backend.
pub struct Backend {
    /// URL schemes it serves.
    pub schemes: &'static [&'static str],
    /// The cargo feature that compiles it in.
    pub feature: &'static str,
    /// Its connect function, when compiled in.
    pub connect: Option<Connect<dyn DistributedLock>>,
    /// Its semaphore's connect function, when compiled in and offered.
    pub semaphore: Option<Connect<dyn DistributedSemaphore>>,
    /// Its read-write lock's connect function, when compiled in and offered.
    pub rwlock: Option<Connect<dyn DistributedRwLock>>,
}

/// `Some(connect)` when the feature is compiled in.
macro_rules! connector {
    ($feature:literal, $connect:path) => {{
        #[cfg(feature = $feature)]
        let connect: Option<Connect<_>> = Some(|url| Box::pin($connect(url)));
        #[cfg(not(feature = $feature))]
        let connect: Option<Connect<_>> = None;
        connect
    }};
}

macro_rules! backend {
    ($feature:literal, $schemes:expr, $connect:path, $semaphore:path, $rwlock:path) => {
        Backend {
            schemes: $schemes,
            feature: $feature,
            connect: connector!($feature, $connect),
            semaphore: connector!($feature, $semaphore),
            rwlock: connector!($feature, $rwlock),
        }
    };
}

/// Every backend distlock knows, compiled in or not.
pub fn backends() -> Vec<Backend> {
    vec![
        backend!(
            "postgres",
            &["postgres", "postgresql"],
            distlock_sql::connect,
            distlock_sql::connect_semaphore,
            distlock_sql::connect_rwlock
        ),
        backend!(
            "mysql",
            &["mysql", "mariadb"],
            distlock_sql::connect,
            distlock_sql::connect_semaphore,
            distlock_sql::connect_rwlock
        ),
        backend!(
            "sqlite",
            &["sqlite"],
            distlock_sql::connect,
            distlock_sql::connect_semaphore,
            distlock_sql::connect_rwlock
        ),
        backend!(
            "redis",
            &[
                "redis",
                "rediss",
                "redlock",
                "redis+sentinel",
                "redis+cluster"
            ],
            distlock_redis::connect,
            distlock_redis::connect_semaphore,
            distlock_redis::connect_rwlock
        ),
        backend!(
            "zookeeper",
            &["zk", "zookeeper", "zks"],
            distlock_zk::connect,
            distlock_zk::connect_semaphore,
            distlock_zk::connect_rwlock
        ),
        backend!(
            "etcd",
            &["etcd", "etcds"],
            distlock_etcd::connect,
            distlock_etcd::connect_semaphore,
            distlock_etcd::connect_rwlock
        ),
    ]
}

/// Every scheme distlock knows.
pub fn known_schemes() -> Vec<&'static str> {
    backends()
        .iter()
        .flat_map(|b| b.schemes.iter().copied())
        .collect()
}

/// The backend serving `url`'s scheme, compiled in.
///
/// # Errors
/// [`LockError::InvalidConfig`] naming an unknown scheme (with the known ones) or the cargo
/// feature a compiled-out scheme needs.
fn route(url: &str) -> Result<Backend, LockError> {
    let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or("");
    let redacted = distlock_core::backend::redact(url);
    let Some(b) = backends().into_iter().find(|b| b.schemes.contains(&scheme)) else {
        return Err(LockError::invalid_config(format!(
            "unknown URL scheme {scheme:?} in {redacted:?}; known schemes: {}",
            known_schemes().join(", ")
        )));
    };
    if b.connect.is_none() {
        return Err(LockError::invalid_config(format!(
            "scheme {scheme:?} in {redacted:?} needs distlock's cargo feature `{}`, which this build does not include",
            b.feature
        )));
    }
    Ok(b)
}

/// `connect`, or the typed refusal of a backend that does not offer `what`.
fn offered<T: ?Sized>(
    url: &str,
    connect: Option<Connect<T>>,
    what: &str,
) -> Result<Connect<T>, LockError> {
    connect.ok_or_else(|| {
        let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or("");
        LockError::unsupported(scheme, format!("{what} (not offered by this store yet)"))
    })
}

/// Connects to the backend serving `url`'s scheme.
///
/// # Errors
/// As `route`; the backend's own errors otherwise.
pub async fn connect(url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    let b = route(url)?;
    offered(url, b.connect, "lock")?(url).await
}

/// Connects a semaphore on the backend serving `url`'s scheme.
///
/// # Errors
/// As [`connect`]; [`LockError::Unsupported`] where the backend offers no semaphore.
pub async fn connect_semaphore(url: &str) -> Result<Arc<dyn DistributedSemaphore>, LockError> {
    let b = route(url)?;
    offered(url, b.semaphore, "semaphore")?(url).await
}

/// Connects a read-write lock on the backend serving `url`'s scheme.
///
/// # Errors
/// As [`connect`]; [`LockError::Unsupported`] where the backend offers no read-write lock.
pub async fn connect_rwlock(url: &str) -> Result<Arc<dyn DistributedRwLock>, LockError> {
    let b = route(url)?;
    offered(url, b.rwlock, "read-write lock")?(url).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry is the one scheme list: every scheme it routes to a backend is one that
    /// backend's own URL parser accepts, and no two backends claim a scheme.
    #[test]
    fn every_registered_scheme_parses_in_its_backend() {
        let mut seen = std::collections::HashSet::new();
        for b in backends() {
            for scheme in b.schemes {
                assert!(seen.insert(*scheme), "scheme {scheme} registered twice");
                let parsed = match b.feature {
                    #[cfg(feature = "redis")]
                    "redis" => distlock_redis::RedisConfig::from_url(&format!(
                        "{scheme}://{}",
                        match *scheme {
                            "redlock" => "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
                            "redis+sentinel" => "127.0.0.1:1/mymaster",
                            _ => "127.0.0.1:1",
                        }
                    ))
                    .map(drop),
                    #[cfg(feature = "zookeeper")]
                    "zookeeper" => {
                        // zks:// names its CA (a file read only when connecting).
                        let ca = if *scheme == "zks" { "?ca=/ca.pem" } else { "" };
                        distlock_zk::ZkConfig::from_url(&format!("{scheme}://127.0.0.1:1{ca}"))
                            .map(drop)
                    }
                    #[cfg(feature = "etcd")]
                    "etcd" => {
                        distlock_etcd::EtcdConfig::from_url(&format!("{scheme}://127.0.0.1:1"))
                            .map(drop)
                    }
                    #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
                    "postgres" | "mysql" | "sqlite" => {
                        let url = if *scheme == "sqlite" {
                            "sqlite://./registry-test.db".to_owned()
                        } else {
                            format!("{scheme}://u@127.0.0.1:1/db")
                        };
                        distlock_sql::SqlConfig::from_url(&url).map(drop)
                    }
                    _ => Ok(()),
                };
                if let Err(e) = parsed {
                    panic!(
                        "{scheme}:// is registered for {} but its parser says: {e}",
                        b.feature
                    );
                }
            }
        }
        assert!(seen.len() >= 10, "{seen:?}");
    }
}
