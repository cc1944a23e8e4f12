//! Every waiter learns of a release by its push message, never by its heartbeat (1 s): many
//! waiters that register on a client's one subscriber at once are each subscribed before they
//! look at the lock again, so no release falls between a waiter's last look and its
//! subscription. A lost message shows as a gap of about a heartbeat between two grants.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::AcquireOptions;
use support::*;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crowd_of_waiters_is_woken_by_releases_not_heartbeats() {
    let clients = [
        connect_or_explain(&single_url()).await,
        connect_or_explain(&single_url()).await,
        connect_or_explain(&single_url()).await,
    ];
    for round in 0..12 {
        let name = unique("crowd");
        let start = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..100 {
            let (lock, name) = (Arc::clone(&clients[i % clients.len()]), name.clone());
            tasks.push(tokio::spawn(async move {
                let o = AcquireOptions::new().wait(Duration::from_secs(30));
                let g = lock.acquire(&name, &o).await.unwrap();
                let at = start.elapsed();
                g.release().await.unwrap();
                at
            }));
        }
        let mut grants = Vec::new();
        for t in tasks {
            grants.push(t.await.unwrap());
        }
        grants.sort();
        let mut gap = grants[0];
        for w in grants.windows(2) {
            gap = gap.max(w[1] - w[0]);
        }
        // A handoff takes well under a millisecond here; a waiter left to its heartbeat holds
        // everyone behind it for about a second.
        assert!(
            gap < Duration::from_millis(700),
            "round {round}: {gap:?} between two grants (all 100 in {:?})",
            grants.last().unwrap()
        );
    }
}
