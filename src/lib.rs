//! # distlock
//!
//! One [`DistributedLock`] API over ZooKeeper, Redis (single and Redlock), SQL (PostgreSQL,
//! MySQL/MariaDB, SQLite) and, with the `etcd` feature, etcd. Pick the backend with a URL; write the lock code once.
//!
//! ```no_run
//! # async fn demo() -> Result<(), distlock::LockError> {
//! use std::time::Duration;
//! use distlock::AcquireOptions;
//!
//! let lock = distlock::connect("sqlite://./distlock.db").await?;
//! let guard = lock.acquire("nightly-report", &AcquireOptions::new().wait(Duration::from_secs(10))).await?;
//! println!("fencing token {}", guard.fencing_token());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! | scheme | backend | cargo feature |
//! |---|---|---|
//! | `postgres://`, `postgresql://` | `distlock-sql` (`mode=row`, `for_update` or `advisory`) | `postgres` |
//! | `mysql://`, `mariadb://` | `distlock-sql` (the same three modes) | `mysql` |
//! | `sqlite://` | `distlock-sql` (row mode; a file, nothing to run) | `sqlite` |
//! | `redis://`, `rediss://` (TLS), `redis+sentinel://`, `redis+cluster://`, `redlock://` | `distlock-redis` | `redis` |
//! | `zk://`, `zookeeper://`, `zks://` (TLS) | `distlock-zk` | `zookeeper` |
//! | `etcd://` | `distlock-etcd` (`etcdctl lock`-compatible; building it needs `protoc`) | `etcd` (not default) |
//!
//! URL parameters `ttl`, `wait` and `renew` are acquisition defaults: every entry point
//! ([`connect`], [`connect_from_env`], [`connect_config`]) returns a lock that applies them to
//! the options a caller leaves unset (see [`AcquireOptions::or_defaults`]); everything else goes to the
//! backend, which rejects parameters it does not know.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod blocking;
mod config;
mod configured;
pub mod fence;
mod registry;

use std::sync::Arc;

pub use config::LockConfig;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use distlock_core::metrics;
pub use distlock_core::operator::{DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT};
pub use distlock_core::{
    elect, elect_with, observe, observe_every, Access, AcquireOptions, BoxError, Broken,
    Capabilities, CrashRelease, DistributedLock, DistributedRwLock, DistributedSemaphore, Leader,
    LeaderChange, LeaderChanges, Leadership, Listed, Listing, LockContext, LockError, LockExt,
    LockGuard, LockInfo, MultiGuard, RwLockInfo, Secret, SecretUrl, SemaphoreInfo, Wakeup,
    DEFAULT_TTL, MAX_IDENTITY_BYTES, MAX_PERMITS,
};

/// Typed configuration structs for people who prefer code to URLs: each parses the same URL
/// (`from_url`) and has public fields to adjust before connecting (`RedisLock::connect(cfg)`,
/// …). Their `Debug` never shows a password.
pub mod configs {
    #[cfg(feature = "etcd")]
    #[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
    pub use distlock_etcd::{EtcdConfig, EtcdLock};
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub use distlock_redis::{EvictionCheck, RedisConfig, RedisLock, Topology};
    #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    #[cfg_attr(
        docsrs,
        doc(cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite")))
    )]
    pub use distlock_sql::{liveness as sql_liveness, Dialect, Mode, SqlConfig, SqlLock};
    #[cfg(feature = "zookeeper")]
    #[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
    pub use distlock_zk::{ZkConfig, ZkLock};
}

/// The environment variable [`connect_from_env`] reads.
pub const URL_ENV: &str = "DISTLOCK_URL";

/// Connects to the backend a URL names. `ttl`/`wait`/`renew` parameters become the lock's
/// acquisition defaults (applied to every option the caller leaves unset).
///
/// # Errors
/// [`LockError::InvalidConfig`] for an unknown or compiled-out scheme and bad parameters;
/// [`LockError::Unavailable`] when the store cannot be reached.
pub async fn connect(url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    Ok(connect_config(&LockConfig::from_url(url)).await?.0)
}

/// Connects a counting semaphore ([`DistributedSemaphore`]) on the store a URL names, with the
/// URL's `ttl`/`wait`/`renew` as acquisition defaults (as [`connect`]).
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock::LockError> {
/// use distlock::{AcquireOptions, DistributedSemaphore};
/// let exports = distlock::connect_semaphore("redis://127.0.0.1:6379").await?;
/// // At most 4 exports hit the warehouse at once, across every process.
/// let permit = exports.acquire("warehouse", 4, &AcquireOptions::new()).await?;
/// // … export, passing permit.fencing_token() to the warehouse …
/// permit.release().await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// As [`connect`]; [`LockError::Unsupported`] where the store offers no semaphore, and
/// [`LockError::InvalidConfig`] where it cannot offer one safely in the URL's topology
/// (Redlock). `docs/guide.md` ("Semaphores and read-write locks") says which stores offer it.
pub async fn connect_semaphore(url: &str) -> Result<Arc<dyn DistributedSemaphore>, LockError> {
    let (url, opts) = LockConfig::from_url(url).resolve()?;
    let inner = registry::connect_semaphore(&url).await?;
    Ok(configured::Configured::wrap_semaphore(inner, opts))
}

/// Connects a read-write lock ([`DistributedRwLock`]) on the store a URL names, with the URL's
/// `ttl`/`wait`/`renew` as acquisition defaults (as [`connect`]).
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock::LockError> {
/// use distlock::{AcquireOptions, DistributedRwLock};
/// let ledger = distlock::connect_rwlock("redis://127.0.0.1:6379").await?;
/// let report = ledger.read("ledger", &AcquireOptions::new()).await?; // shared with readers
/// drop(report);
/// let load = ledger.write("ledger", &AcquireOptions::new()).await?; // alone
/// load.release().await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// As [`connect_semaphore`].
pub async fn connect_rwlock(url: &str) -> Result<Arc<dyn DistributedRwLock>, LockError> {
    let (url, opts) = LockConfig::from_url(url).resolve()?;
    let inner = registry::connect_rwlock(&url).await?;
    Ok(configured::Configured::wrap_rwlock(inner, opts))
}

/// Connects with a [`LockConfig`], returning the lock (which applies the defaults itself, as
/// [`connect`]'s does) and its default [`AcquireOptions`].
///
/// # Errors
/// As [`connect`].
pub async fn connect_config(
    cfg: &LockConfig,
) -> Result<(Arc<dyn DistributedLock>, AcquireOptions), LockError> {
    let (url, opts) = cfg.resolve()?;
    let lock = configured::Configured::wrap(registry::connect(&url).await?, opts.clone());
    Ok((lock, opts))
}

/// Joins the election of `group` on the store a URL names, as `identity` (see
/// [`elect_with`]; the URL's `ttl`/`wait`/`renew` are the options). On ZooKeeper this is
/// Apache Curator's `LeaderLatch` recipe, so Java services using Curator take part in the same
/// election.
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock::LockError> {
/// let me = distlock::elect_url("redis://127.0.0.1:6379?wait=30s", "scheduler", "node-a").await?;
/// let token = me.await_leadership().await?;
/// tokio::select! {
///     _ = run_scheduler(token) => me.resign().await?,       // done: hand over
///     e = me.lost() => eprintln!("no longer the leader: {e}"), // stop at once
/// }
/// # Ok(()) }
/// # async fn run_scheduler(_token: u64) {}
/// ```
///
/// # Errors
/// As [`connect`] and [`elect_with`].
pub async fn elect_url(url: &str, group: &str, identity: &str) -> Result<Leadership, LockError> {
    let (lock, opts) = connect_config(&LockConfig::from_url(url)).await?;
    elect_with(lock, group, identity, &opts)
}

/// Connects to `$DISTLOCK_URL`.
///
/// # Errors
/// [`LockError::InvalidConfig`] when the variable is unset; otherwise as [`connect`].
pub async fn connect_from_env() -> Result<Arc<dyn DistributedLock>, LockError> {
    let url = std::env::var(URL_ENV).map_err(|_| {
        LockError::invalid_config(format!(
            "{URL_ENV} is not set; set it to a lock URL such as sqlite://./distlock.db"
        ))
    })?;
    connect(&url).await
}

#[cfg(test)]
mod tests {
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn elect_url_campaigns_with_the_urls_defaults() {
        let dir = std::env::temp_dir().join(format!(
            "distlock-elect-url-{}-{}",
            std::process::id(),
            distlock_core::backend::owner_token()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}/e.db?wait=300ms", dir.display());
        let a = super::elect_url(&url, "g", "a").await.unwrap();
        let token = a.await_leadership().await.unwrap();
        let b = super::elect_url(&url, "g", "b").await.unwrap();
        // The URL's `wait` bounds await_leadership.
        let e = b.await_leadership().await.unwrap_err();
        assert!(matches!(e, super::LockError::Timeout { .. }), "{e}");
        let lock = super::connect(&url).await.unwrap();
        let now = lock.leader("g").await.unwrap().unwrap();
        assert_eq!((now.identity.as_str(), now.fencing_token), ("a", token));
        a.resign().await.unwrap();
        assert!(b.await_leadership().await.unwrap() > token);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn unknown_scheme_lists_known_ones() {
        let e = super::connect("consul://127.0.0.1:8500")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"consul\"") && e.contains("redis") && e.contains("sqlite"),
            "{e}"
        );
        let e = super::connect("zk://127.0.0.1:2181")
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("zookeeper"), "{e}");
    }

    /// Where a store offers no semaphore or read-write lock, or cannot offer one safely in the
    /// URL's topology, the caller gets a typed error naming it, never a weaker version.
    #[cfg(all(feature = "mysql", feature = "redis"))]
    #[tokio::test]
    async fn semaphores_and_rwlocks_are_refused_with_a_typed_error_where_not_offered() {
        // Every SQL mode offers both now (MariaDB advisory's read-write lock is built from
        // exclusive GET_LOCK locks): connecting it is not refused.
        let my = std::env::var("DISTLOCK_TEST_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:13306/distlock".into());
        let rw = super::connect_rwlock(&format!("{my}?mode=advisory"))
            .await
            .map(drop);
        assert!(rw.is_ok(), "{rw:?}");
        let redlock = "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3";
        for e in [
            super::connect_semaphore(redlock)
                .await
                .map(drop)
                .unwrap_err(),
            super::connect_rwlock(redlock).await.map(drop).unwrap_err(),
        ] {
            match e {
                super::LockError::InvalidConfig(m) => assert!(m.contains("single"), "{m}"),
                other => panic!("redlock gave {other}"),
            }
        }
        let e = super::connect_semaphore("consul://127.0.0.1:8500")
            .await
            .map(drop)
            .unwrap_err();
        assert!(matches!(e, super::LockError::InvalidConfig(_)), "{e}");
    }

    /// The URL's `wait` is the semaphore's and the read-write lock's default, as the mutex's.
    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn semaphore_and_rwlock_take_the_urls_defaults() {
        use super::AcquireOptions;
        let url = std::env::var("DISTLOCK_TEST_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:16379".into());
        let url = format!("{url}?wait=200ms");
        let name = format!("facade-permits-{}", distlock_core::backend::owner_token());
        let sem = super::connect_semaphore(&url).await.unwrap();
        let held = sem.acquire(&name, 1, &AcquireOptions::new()).await.unwrap();
        let e = sem
            .acquire(&name, 1, &AcquireOptions::new())
            .await
            .unwrap_err();
        assert!(matches!(e, super::LockError::Timeout { .. }), "{e}");
        held.release().await.unwrap();
        let rw = super::connect_rwlock(&url).await.unwrap();
        let r = rw.read(&name, &AcquireOptions::new()).await.unwrap();
        let e = rw.write(&name, &AcquireOptions::new()).await.unwrap_err();
        assert!(matches!(e, super::LockError::Timeout { .. }), "{e}");
        r.release().await.unwrap();
    }
}

// The Rust blocks of the README and of docs/ compile as doctests (`cargo test -p distlock --doc`);
// tests/readme.rs checks that every Markdown file with Rust blocks is listed here.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/guide.md")]
pub struct GuideDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/configuration.md")]
pub struct ConfigurationDoctests;
