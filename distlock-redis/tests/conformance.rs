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

/// `replicas=1` on the single server (its replica is on 16380): a grant or renewal goes with
/// `WAIT` in one pipeline, so a reply lost after the server applied the command is the
/// script's and `WAIT`'s at once. The gray cases run there: an `extend` whose replies are
/// lost or late is not believed, a stalled server bounds every wait, a cut-off holder knows
/// first.
mod acked {
    use super::*;
    use distlock_core::conformance as c;

    fn harness() -> RedisHarness {
        let mut h = RedisHarness::single();
        h.url.push_str("?replicas=1");
        h
    }

    #[tokio::test]
    async fn extend_of_unknown_outcome_is_not_believed() {
        c::extend_of_unknown_outcome_is_not_believed(&harness()).await;
    }

    #[tokio::test]
    async fn a_stalled_store_bounds_every_wait() {
        c::a_stalled_store_bounds_every_wait(&harness()).await;
    }

    #[tokio::test]
    async fn a_cut_off_holder_knows_first() {
        c::a_cut_off_holder_knows_first(&harness()).await;
    }
}
