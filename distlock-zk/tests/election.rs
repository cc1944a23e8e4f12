//! Leader election on ZooKeeper as Curator's `LeaderLatch` lays it out: participant nodes
//! `_c_<uuid>-latch-<10 digits>` holding the identity, the first in sequence order leads,
//! a node put there the way a Curator participant would (its id as data) is led by and
//! followed in that order, and a handoff wakes only the next participant (no herd).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use support::*;
use zookeeper_client::{Acls, CreateMode};

fn latch_shaped(child: &str) -> bool {
    // _c_ + 36-char uuid + "-latch-" + 10 digits
    let Some(rest) = child.strip_prefix("_c_") else {
        return false;
    };
    rest.len() == 36 + 7 + 10
        && rest[36..43] == *"-latch-"
        && rest[43..].bytes().all(|b| b.is_ascii_digit())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn participants_are_latch_nodes_with_their_identity_in_curators_order() {
    let zk = raw(&standalone_url()).await;
    let group = unique("latch");
    let dir = format!("/distlock/{group}");
    let opts = AcquireOptions::new().wait(Duration::from_secs(20));

    // A Curator-style participant first: it leads, distlock waits behind it.
    zk.mkdir(&dir, &CreateMode::Persistent.with_acls(Acls::anyone_all()))
        .await
        .unwrap();
    let eph = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let (_, seq) = zk
        .create(
            &format!("{dir}/_c_11111111-2222-4333-8444-555555555555-latch-"),
            b"java-1",
            &eph,
        )
        .await
        .unwrap();
    let java_node = format!("{dir}/_c_11111111-2222-4333-8444-555555555555-latch-{seq}");
    let lock = zk_lock(&standalone_url()).await;
    let me = distlock_core::elect_with(Arc::new(lock), &group, "rust-1", &opts).unwrap();
    let observer = zk_lock(&standalone_url()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!me.is_leader(), "led while a Curator participant was first");
    assert_eq!(
        observer.leader(&group).await.unwrap().unwrap().identity,
        "java-1"
    );
    let kids = zk.get_children(&dir).await.unwrap().0;
    assert_eq!(kids.len(), 2, "{kids:?}");
    let ours: Vec<&String> = kids.iter().filter(|k| !java_node.ends_with(*k)).collect();
    assert!(
        latch_shaped(ours[0]),
        "not Curator's latch naming: {ours:?}"
    );
    let (data, _) = zk.get_data(&format!("{dir}/{}", ours[0])).await.unwrap();
    assert_eq!(data, b"rust-1", "the participant id is the node's data");

    // The Curator participant goes: we lead, with our node's czxid as token.
    zk.delete(&java_node, None).await.unwrap();
    let token = me.await_leadership().await.unwrap();
    let stat = zk
        .check_stat(&format!("{dir}/{}", ours[0]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(token, stat.czxid as u64);
    let l = observer.leader(&group).await.unwrap().unwrap();
    assert_eq!((l.identity.as_str(), l.fencing_token), ("rust-1", token));
    me.resign().await.unwrap();
    assert_eq!(observer.leader(&group).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_handoff_wakes_only_the_next_participant() {
    let url = format!("{}?session_timeout=4s", standalone_url());
    let shared = Arc::new(zk_lock(&url).await);
    let group = unique("latch-herd");
    let opts = AcquireOptions::new().wait(Duration::from_secs(60));
    let n = 20;
    // The first participant leads before the others campaign: campaigns are spawned tasks,
    // and the first also creates the group's directory (a write ZooKeeper must fsync), so a
    // participant started 20 ms after it could create its node first on a machine whose disk
    // is busy (seen in a CI-style run: ZooKeeper's log had p1 at sequence 0, p0 at 1).
    let l: Arc<dyn DistributedLock> = shared.clone();
    let mut all = vec![distlock_core::elect_with(l, &group, "p0", &opts).unwrap()];
    all[0].await_leadership().await.unwrap();
    for i in 1..n {
        let l: Arc<dyn DistributedLock> = shared.clone();
        all.push(distlock_core::elect_with(l, &group, &format!("p{i}"), &opts).unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let leading = |all: &[distlock_core::Leadership]| all.iter().position(|p| p.is_leader());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(all[0].is_leader(), "the first participant stopped leading");
    assert_eq!(shared.watch_events(), 0, "participants woken while one led");
    let mut last = 0;
    while !all.is_empty() {
        // Whoever leads next (bounded: 30 s per handoff).
        let mut idx = None;
        for _ in 0..3000 {
            idx = leading(&all);
            if idx.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let p = all.remove(idx.expect("nobody led within 30 s"));
        let t = p.fencing_token().unwrap();
        assert!(t > last);
        last = t;
        p.resign().await.unwrap();
    }
    // One wake-up per handoff: a herd would wake every waiting participant on each (~190).
    let events = shared.watch_events();
    assert!(
        events <= n as u64,
        "{events} watch events for {} handoffs",
        n - 1
    );
}

/// README: on ZooKeeper the group's election (Curator `LeaderLatch` nodes) is a namespace apart
/// from the lock of the same name, as in Curator: a holder of the lock `g` and the leader of
/// group `g` do not exclude each other, and each still excludes its own kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_election_and_a_lock_of_one_name_are_apart() {
    let group = unique("apart");
    let opts = AcquireOptions::new().wait(Duration::from_secs(10));
    let (a, b) = (
        zk_lock(&standalone_url()).await,
        zk_lock(&standalone_url()).await,
    );
    let held = a.acquire(&group, &opts).await.unwrap();
    let leader = b
        .campaign(&group, "leader-1", &opts)
        .await
        .expect("a campaign waited for the lock of the same name");
    assert!(a.try_acquire(&group, &opts).await.unwrap().is_none());
    let second = b
        .campaign(
            &group,
            "leader-2",
            &AcquireOptions::new().wait(Duration::from_millis(300)),
        )
        .await;
    assert!(second.is_err(), "two leaders of one group: {second:?}");
    leader.release().await.unwrap();
    held.release().await.unwrap();
}
