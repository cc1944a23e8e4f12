//! distlock: one distributed lock API over ZooKeeper, Redis and SQL.
pub use lock_core::*;
