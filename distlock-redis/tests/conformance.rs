//! The shared conformance suite on a single Redis, on a 5-master Redlock, on a single Redis
//! over TLS and on the master of a Sentinel set.

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
