//! The shared conformance suite on standalone ZooKeeper and on the 3-node ensemble.

mod support;

use support::ZkHarness;

mod standalone {
    use super::*;
    distlock_core::conformance_suite!(ZkHarness::standalone());
}

mod ensemble {
    use super::*;
    distlock_core::conformance_suite!(ZkHarness::ensemble());
}
