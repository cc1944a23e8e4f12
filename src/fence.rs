//! Fencing enforced where the write lands: each adapter accepts a write only with a fencing
//! token at least as high as any it accepted for that resource, atomically with the write, so
//! a holder that stalled past its lease cannot overwrite the next holder's work.
//!
//! | resource | adapter | how |
//! |---|---|---|
//! | a local file | [`write_file`] | a `<path>.fence` file, locked while checked; the write renamed in |
//! | PostgreSQL, MySQL/MariaDB, SQLite | `sql::{postgres, mysql, sqlite}::check` | a `distlock_fences` row raised in the caller's transaction |
//! | Redis | `redis::set` | one Lua script over the value and its fence key |
//! | etcd | `etcd::put` | one transaction whose compare is the fence |
//! | ZooKeeper | `zk::set_data` | one `multi` with the fence node's version |
//!
//! A refusal is [`FenceError::Stale`]; anything else is the store's error.

pub use distlock_core::fence::{fence_path, write_file, FenceError, Stale};
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use distlock_etcd::fence as etcd;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use distlock_redis::fence as redis;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite")))
)]
pub use distlock_sql::fence as sql;
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub use distlock_zk::fence as zk;
