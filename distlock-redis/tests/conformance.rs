//! The shared conformance suite on a single Redis and on a 5-master Redlock.

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
