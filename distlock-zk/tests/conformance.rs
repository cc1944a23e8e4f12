//! The shared conformance suite on standalone ZooKeeper (plain, with digest ACLs, and over TLS)
//! and on the 3-node ensemble.

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

/// As digest user `distlock` (`zk://distlock@…?password_file=…`): contender nodes carry ACLs.
mod auth {
    use super::*;
    distlock_core::conformance_suite!(ZkHarness::auth());
}

/// Over TLS (`zks://`, the private CA, a client certificate), as digest user `distlock`.
mod tls {
    use super::*;
    distlock_core::conformance_suite!(ZkHarness::tls());
}
