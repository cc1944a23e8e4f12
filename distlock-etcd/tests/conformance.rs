//! The shared conformance suite on a single etcd member and on the 3-member cluster.

mod support;

use support::EtcdHarness;

mod single {
    use super::*;
    distlock_core::conformance_suite!(EtcdHarness::single());
}

mod cluster {
    use super::*;
    distlock_core::conformance_suite!(EtcdHarness::cluster());
}
