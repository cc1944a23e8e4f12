//! `distlock_zk::fence` on a real ZooKeeper: the fenced-register check
//! (`distlock_core::conformance::fence`) with tokens from distlock's ZooKeeper lock, and
//! concurrent fenced writers that leave the highest token's data.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use distlock_core::conformance::fence::a_stalled_holders_write_is_refused;
use distlock_zk::fence;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holders_set_data_is_refused() {
    let (_, _, write, read) = fenced_register(&standalone_url(), "fence-reg").await;
    a_stalled_holders_write_is_refused(
        &ZkHarness::standalone(),
        &unique("fence-lock"),
        write,
        read,
    )
    .await;
}

/// Writers racing on one path with tokens 1..=12: whatever the order, the highest token is
/// never refused and its data is what stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_fenced_writers_leave_the_highest_tokens_data() {
    let (client, path, _, _) = fenced_register(&standalone_url(), "fence-race").await;
    let writers: Vec<_> = (1..=12u64)
        .map(|t| {
            let (client, path) = (client.clone(), path.clone());
            tokio::spawn(async move {
                (
                    t,
                    fence::set_data(&client, &path, t.to_string().as_bytes(), t).await,
                )
            })
        })
        .collect();
    for w in writers {
        let (t, got) = w.await.unwrap();
        if let Err(e) = got {
            assert!(e.stale().is_some(), "token {t}: {e}");
            assert!(t < 12, "the highest token was refused: {e}");
        }
    }
    assert_eq!(client.get_data(&path).await.unwrap().0, b"12");
    let (fence, _) = client.get_data(&fence::fence_path(&path)).await.unwrap();
    assert_eq!(fence, b"12");
}
