//! The shared conformance suite on a single Redis, on a 5-master Redlock, on a single Redis
//! over TLS, on the master of a Sentinel set and on a Redis Cluster.

mod support;

use support::RedisHarness;

mod single {
    use super::*;
    distlock_core::conformance_suite!(RedisHarness::single());
}

mod redlock {
    use super::*;
    distlock_core::conformance_suite!(RedisHarness::redlock());
}

/// `rediss://` to the TLS-only server (private CA, ACL user, password from a file).
mod tls {
    use super::*;
    distlock_core::conformance_suite!(RedisHarness::tls());
}

/// `redis+sentinel://` to the shared Sentinel set (master found through the sentinels).
mod sentinel {
    use super::*;
    distlock_core::conformance_suite!(RedisHarness::sentinel());
}

/// `redis+cluster://` to the shared 6-node cluster (every key of a lock in one hash slot).
mod cluster {
    use super::*;
    distlock_core::conformance_suite!(RedisHarness::cluster());
}
