//! `distlock_zk::fence` on a real ZooKeeper: the fenced-register check
//! (`distlock_core::conformance::fence`) with tokens from distlock's ZooKeeper lock, and
//! concurrent fenced writers that leave the highest token's data.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use distlock_core::conformance::fence::{a_stalled_holders_write_is_refused, Read, Write};
use distlock_zk::fence;
use futures::FutureExt;
use support::*;
use zookeeper_client::{Acls, CreateMode};

async fn register(client: &zookeeper_client::Client, what: &str) -> String {
    let path = format!("/{}", unique(what));
    let opts = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client.create(&path, b"", &opts).await.unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holders_set_data_is_refused() {
    let url = standalone_url();
    let client = raw(&url).await;
    let path = register(&client, "fence-reg").await;
    let write: Write = Box::new({
        let (client, path) = (client.clone(), path.clone());
        move |token, body| {
            let (client, path) = (client.clone(), path.clone());
            async move {
                fence::set_data(&client, &path, body.as_bytes(), token)
                    .await
                    .map_err(|e| e.map_store(|e| e.to_string()))
            }
            .boxed()
        }
    });
    let read: Read = Box::new({
        let (client, path) = (client.clone(), path.clone());
        move || {
            let (client, path) = (client.clone(), path.clone());
            async move { String::from_utf8(client.get_data(&path).await.unwrap().0).unwrap() }
                .boxed()
        }
    });
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
    let client = raw(&standalone_url()).await;
    let path = register(&client, "fence-race").await;
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
