//! The shared conformance suite on a single etcd member, on the 3-member cluster, and on a member
//! with TLS and authentication.

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

/// `etcds://` to the member with TLS (client certificates required) and authentication on, as
/// a user whose role covers only the lock's key prefix.
mod secure {
    use super::*;
    distlock_core::conformance_suite!(EtcdHarness::secure());
}
