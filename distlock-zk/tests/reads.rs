//! `inspect` and `leader()` answer with the ensemble's state as of the call, not a lagging
//! member's: a client connected to one member sees at once a lock taken or let go, or a
//! leadership won, through another member — and so never names a holder that has let go.
//!
//! A ZooKeeper member serves reads from its own copy, which may not have applied a write the
//! ensemble has already committed (and another client has already been told about). The
//! conformance case `election_loss_ends_leadership` once saw `leader()` answer "nobody" on the
//! ensemble right after another client had won; here the lagging member was the leader, where
//! a `sync` orders nothing (see `src/read.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use support::*;

/// Rounds per ordered pair of members: a follower's lag is a short window, so one round
/// rarely finds it.
const ROUNDS: usize = 40;

/// Every ordered pair of the ensemble's members, as `zk://` URLs pinned to one member each:
/// whichever member leads, some pair writes through it and reads through a follower (the
/// read that can lag).
fn member_pairs() -> Vec<(String, String)> {
    let hosts = hosts(&ensemble_url());
    let members: Vec<&str> = hosts.split(',').collect();
    let mut pairs = Vec::new();
    for a in &members {
        for b in &members {
            if a != b {
                pairs.push((format!("zk://{a}"), format!("zk://{b}")));
            }
        }
    }
    pairs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_through_another_member_sees_a_lock_just_taken_or_let_go() {
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    let mut missed = Vec::new();
    for (a, b) in member_pairs() {
        let (taker, observer) = (zk_lock(&a).await, zk_lock(&b).await);
        for i in 0..ROUNDS {
            let name = unique(&format!("read-{i}"));
            let g = taker.acquire(&name, &opts).await.unwrap();
            let info = observer.inspect(&name).await.unwrap();
            if !info.held || info.fencing_token != Some(g.fencing_token()) {
                missed.push(format!(
                    "taken through {a}, inspected through {b}: {info:?}"
                ));
            }
            g.release().await.unwrap();
            let info = observer.inspect(&name).await.unwrap();
            if info.held {
                missed.push(format!(
                    "released through {a}, still held through {b}: {info:?}"
                ));
            }
        }
    }
    assert!(
        missed.is_empty(),
        "{} inspects through another member missed a lock taken or let go before them: {missed:#?}",
        missed.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_through_another_member_names_a_leader_just_elected() {
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    let mut missed = Vec::new();
    for (a, b) in member_pairs() {
        let candidate = std::sync::Arc::new(zk_lock(&a).await);
        let observer = zk_lock(&b).await;
        for i in 0..ROUNDS / 2 {
            let group = unique(&format!("read-lead-{i}"));
            let me = distlock_core::elect_with(candidate.clone(), &group, "a", &opts).unwrap();
            let token = me.await_leadership().await.unwrap();
            let seen = observer.leader(&group).await.unwrap();
            let seen = seen.map(|l| (l.identity, l.fencing_token));
            if seen != Some(("a".to_owned(), token)) {
                missed.push(format!("elected through {a}, asked through {b}: {seen:?}"));
            }
            me.resign().await.unwrap();
        }
    }
    assert!(
        missed.is_empty(),
        "{} leader() calls through another member missed the leader: {missed:#?}",
        missed.len()
    );
}
