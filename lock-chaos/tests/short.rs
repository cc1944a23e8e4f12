//! The short chaos run for `scripts/test.sh` (about a minute): every fault kind on a spread of
//! backends; fails on any stale write accepted, any write accepted out of token order, and any
//! overlap where the backend claims safety.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use lock_chaos::backends::{all, Target};
use lock_chaos::scenarios::{self, Outcome};
use lock_chaos::store_faults;

const PG: &str = "postgres://postgres@127.0.0.1:15432/distlock";

fn target(label: &str, dir: &str) -> Target {
    all(dir).into_iter().find(|t| t.label == label).unwrap()
}

fn check(o: &Outcome, overlap_claimed_safe: bool) {
    assert_eq!(o.stale_accepted, 0, "stale write accepted: {o:?}");
    assert_eq!(
        o.out_of_order, 0,
        "write accepted out of token order: {o:?}"
    );
    if overlap_claimed_safe && !o.overlap_expected {
        assert_eq!(o.overlaps, 0, "overlapping holds: {o:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn short_chaos_run() {
    let dir = std::env::temp_dir().join(format!("distlock-chaos-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.display().to_string();
    let exe = Path::new(env!("CARGO_BIN_EXE_lock-chaos"));
    for label in ["sqlite-row", "redis", "zookeeper", "mysql-row"] {
        let o = scenarios::paused_holder(&target(label, &dir), PG, exe)
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}; is `scripts/services.sh up` running?"));
        assert_eq!(
            o.stale_rejected, 1,
            "the paused holder's late write was not rejected on {label}: {o:?}"
        );
        check(&o, true);
    }
    for label in ["postgres-for_update", "redlock"] {
        check(
            &scenarios::client_killed(&target(label, &dir), PG, exe)
                .await
                .unwrap(),
            true,
        );
    }
    for label in ["postgres-row", "zookeeper"] {
        check(
            &scenarios::latency(&target(label, &dir), PG).await.unwrap(),
            true,
        );
    }
    // Partitions: fencing must hold everywhere; ZooKeeper also claims no overlap.
    for (label, claims) in [
        ("zookeeper", true),
        ("redis", false),
        ("postgres-for_update", false),
    ] {
        check(
            &scenarios::partition(&target(label, &dir), PG)
                .await
                .unwrap(),
            claims,
        );
    }
    // Store faults: ZooKeeper and Redlock claim no overlap through them; a connection-bound
    // SQL lock ends at a server-side kill before its holder can know (fencing must hold).
    check(
        &store_faults::zk_leader_killed(&target("zookeeper-ensemble", &dir), PG)
            .await
            .unwrap(),
        true,
    );
    check(
        &store_faults::redlock_master_restarted(&target("redlock", &dir), PG)
            .await
            .unwrap(),
        true,
    );
    check(
        &store_faults::store_paused(&target("redis", &dir), PG)
            .await
            .unwrap(),
        true,
    );
    for (label, claims) in [("mysql-row", true), ("postgres-for_update", false)] {
        let o = store_faults::server_killed_connection(&target(label, &dir), PG)
            .await
            .unwrap();
        check(&o, claims);
        if !claims {
            assert!(
                !o.lost_ms.is_empty(),
                "{label}: the holder never learned its connection was killed: {o:?}"
            );
        }
    }
    // A follower cut from its leader (network namespaces): the leader expires the holder's
    // session while the holder is still connected to the follower; its guard must be lost first.
    match store_faults::zk_follower_cut(PG).await {
        Ok(o) => {
            check(&o, true);
            assert_eq!(
                o.lost_ms.len(),
                1,
                "the cut holder's guard was never lost: {o:?}"
            );
        }
        // Only where `services.sh up` could not make network namespaces (it warns so).
        Err(e) if e.starts_with(store_faults::UNSUPPORTED) => eprintln!("NOT RUN: {e}"),
        Err(e) => panic!("follower cut: {e}"),
    }
    let o = scenarios::redis_restarted(PG).await.unwrap();
    assert_eq!(o.stale_rejected, 1, "{o:?}");
    check(&o, false);
}

/// A short random fault schedule (the nemesis) over a spread of backends, 12 s each, from a
/// fresh seed (printed: replay with `scripts/chaos.sh --random --seed S --backend B`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn short_random_nemesis_run() {
    let dir = std::env::temp_dir().join(format!("distlock-nemesis-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.display().to_string();
    let seed: u64 = std::env::var("DISTLOCK_NEMESIS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    for label in [
        "redis",
        "postgres-row",
        "zookeeper",
        "mysql-for_update",
        "sqlite-row",
    ] {
        let r = lock_chaos::nemesis::run(
            &target(label, &dir),
            PG,
            seed,
            std::time::Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|e| {
            panic!("{label} (seed {seed}): {e}; is `scripts/services.sh up` running?")
        });
        assert!(
            r.violations().is_empty(),
            "{label}, seed {seed}: {:?}\n{}",
            r.violations(),
            r.markdown()
        );
        eprintln!(
            "nemesis {label} seed {seed}: {} acquisitions, {} stale writes rejected",
            r.acquisitions, r.stale_rejected
        );
    }
}
