//! Redis Cluster (`redis+cluster://`) on the shared 6-node cluster of `scripts/services.sh`:
//! a held lock survives its hash slot moving to another primary (every key of the lock moves
//! with the slot; renewals and the release follow the `MOVED` redirection) and its primary's
//! failover to the replica (`CLUSTER FAILOVER`), and a name whose braces would split its keys
//! across slots is refused. The two tests that change the cluster's layout take turns. The conformance suite runs on the same
//! cluster (tests/conformance.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock, LockError};
use redis::Value;
use support::*;

/// Held by each test that moves slots or primaries.
static LAYOUT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `(node id, port)` of every primary, and the id of the primary serving `slot`.
async fn primaries(slot: i64) -> (Vec<(String, u16)>, String) {
    let nodes: String = run(16410, &mut redis::cmd("CLUSTER").arg("NODES").clone()).await;
    let mut masters = Vec::new();
    let mut owner = None;
    for line in nodes.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if !f[2].contains("master") || f[2].contains("fail") {
            continue;
        }
        let port: u16 = f[1].split(['@', ':']).nth(1).unwrap().parse().unwrap();
        for range in &f[8..] {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            if let (Ok(lo), Ok(hi)) = (lo.parse::<i64>(), hi.parse::<i64>()) {
                if (lo..=hi).contains(&slot) {
                    owner = Some(f[0].to_owned());
                }
            }
        }
        masters.push((f[0].to_owned(), port));
    }
    (masters, owner.expect("the slot has a primary"))
}

/// Moves `slot` from its primary to another one, keys and all, as `redis-cli --cluster
/// reshard` does; returns the new primary's port.
async fn move_slot(slot: i64) -> u16 {
    let (masters, from) = primaries(slot).await;
    let port = |id: &str| masters.iter().find(|(m, _)| m == id).unwrap().1;
    let (to, to_port) = masters.iter().find(|(m, _)| *m != from).unwrap().clone();
    let from_port = port(&from);
    let setslot = |how: &str, id: &str| {
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .arg(id)
            .clone()
    };
    let _: () = run(to_port, &mut setslot("IMPORTING", &from)).await;
    let _: () = run(from_port, &mut setslot("MIGRATING", &to)).await;
    loop {
        let keys: Vec<String> = run(
            from_port,
            redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100),
        )
        .await;
        if keys.is_empty() {
            break;
        }
        let _: Value = run(
            from_port,
            redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(to_port)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys),
        )
        .await;
    }
    for (_, p) in &masters {
        let _: () = run(*p, &mut setslot("NODE", &to)).await;
    }
    to_port
}

#[tokio::test]
async fn a_held_lock_follows_its_slot_to_another_primary() {
    let _turn = LAYOUT.lock().await;
    let lock = connect_or_explain(&cluster_url()).await;
    let name = unique("cluster-reshard");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(2))
        .wait(Duration::from_secs(10));
    let g = lock.acquire(&name, &opts).await.unwrap();
    let slot: i64 = run(16410, redis::cmd("CLUSTER").arg("KEYSLOT").arg(&name)).await;
    let fence_slot: i64 = run(
        16410,
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(aux_key(&name, "fence")),
    )
    .await;
    assert_eq!(slot, fence_slot, "the fencing counter is in another slot");
    let to = move_slot(slot).await;
    let there: i64 = run(to, redis::cmd("EXISTS").arg(&name)).await;
    assert_eq!(there, 1, "the lock key did not move with its slot");
    // Three leases later the guard has renewed through the redirection.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        !g.is_lost(),
        "the lock was lost after its slot moved: {g:?}"
    );
    let other = connect_or_explain(&cluster_url()).await;
    assert!(other.try_acquire(&name, &opts).await.unwrap().is_none());
    let token = g.fencing_token();
    g.release().await.unwrap();
    let next = other.acquire(&name, &opts).await.unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
}

/// The port of the replica of the primary `id`.
async fn replica_of(id: &str) -> u16 {
    let nodes: String = run(16410, &mut redis::cmd("CLUSTER").arg("NODES").clone()).await;
    nodes
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f[2].contains("slave") && f[3] == id)
        .map(|f| f[1].split(['@', ':']).nth(1).unwrap().parse().unwrap())
        .expect("the primary has a replica")
}

#[tokio::test]
async fn a_held_lock_survives_its_primarys_failover() {
    let _turn = LAYOUT.lock().await;
    let lock = connect_or_explain(&cluster_url()).await;
    let name = unique("cluster-failover");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(2))
        .wait(Duration::from_secs(10));
    let g = lock.acquire(&name, &opts).await.unwrap();
    let slot: i64 = run(16410, redis::cmd("CLUSTER").arg("KEYSLOT").arg(&name)).await;
    let (_, owner) = primaries(slot).await;
    let replica = replica_of(&owner).await;
    let _: () = run(replica, redis::cmd("CLUSTER").arg("FAILOVER")).await;
    let started = std::time::Instant::now();
    loop {
        let role: Value = run(replica, &mut redis::cmd("ROLE")).await;
        if matches!(&role, Value::Array(r) if matches!(r.first(), Some(Value::BulkString(m)) if m == b"master"))
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no failover: {role:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Three leases later the guard has renewed on the new primary.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        !g.is_lost(),
        "the lock was lost in its primary's failover: {g:?}"
    );
    let there: i64 = run(replica, redis::cmd("EXISTS").arg(&name)).await;
    assert_eq!(there, 1, "the lock is not on the new primary");
    let token = g.fencing_token();
    g.release().await.unwrap();
    let other = connect_or_explain(&cluster_url()).await;
    let next = other.acquire(&name, &opts).await.unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_name_whose_braces_split_its_keys_is_refused() {
    let lock = connect_or_explain(&cluster_url()).await;
    let opts = AcquireOptions::new().wait(Duration::ZERO);
    for name in ["a{x}b", "x}"] {
        match lock.try_acquire(name, &opts).await {
            Err(LockError::InvalidName { .. }) => {}
            other => panic!("{name:?}: {other:?}"),
        }
    }
    // An unclosed brace is no hash tag: the whole key is hashed, as for the keys beside it.
    let lock: std::sync::Arc<dyn DistributedLock> = lock;
    let name = format!("{}a{{x", unique("brace"));
    let g = lock.try_acquire(&name, &opts).await.unwrap();
    g.expect("a free name").release().await.unwrap();
}
