//! What held ZooKeeper guards cost while they renew, on a real server: one shared `sync` per
//! session, no request per guard (the guard's own-node watch vouches for its node), and that
//! watch still reports a deletion by someone else at once — also after a data change on the
//! node spent the watch once. A release is one request: the delete.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::DistributedLock;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// Packets ZooKeeper received on session `sid`'s connection (`recved` in `cons`).
async fn received(url: &str, sid: i64) -> u64 {
    let port = ports(url)[0];
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    conn.write_all(b"cons").await.unwrap();
    let mut out = String::new();
    conn.read_to_string(&mut out).await.unwrap();
    let line = out
        .lines()
        .find(|l| l.contains(&format!("sid={sid:#x},")))
        .unwrap_or_else(|| panic!("no connection of session {sid:#x} in `cons`:\n{out}"));
    let recved = line.split("recved=").nth(1).unwrap();
    recved[..recved.find(',').unwrap()].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_guards_renew_with_the_sessions_sync_not_a_request_each() {
    let url = standalone_url();
    let lock = zk_lock(&format!("{url}?session_timeout={SESSION}")).await;
    let sid = lock.session_id().await.unwrap();
    const GUARDS: usize = 60;
    let mut guards = Vec::new();
    for i in 0..GUARDS {
        let name = unique(&format!("renewals-{i}"));
        guards.push(lock.acquire(&name, &wait(10)).await.unwrap());
    }
    // Every guard renews every third of its validity (a ninth of the session timeout, 1.1 s).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = received(&url, sid).await;
    let window = Duration::from_secs(3);
    tokio::time::sleep(window).await;
    let during = received(&url, sid).await - before;
    // 60 guards renewing 2-3 times each asked for their node 120-180 times; the session's
    // shared `sync` (joined by every renewal within 1/20 of the validity) and its pings are a
    // few dozen at most.
    assert!(
        during <= 60,
        "{GUARDS} held guards sent {during} requests in {window:?}"
    );
    for g in &guards {
        assert!(!g.is_lost(), "a held guard was lost: {g:?}");
    }
    // Each release is one delete: the deletion's own event ends the guard's watch, with no
    // request to remove it (a dropped watch would send one).
    let before = received(&url, sid).await;
    for g in guards {
        g.release().await.unwrap();
    }
    let released = received(&url, sid).await - before;
    assert!(
        released <= GUARDS as u64 + 10,
        "{GUARDS} releases sent {released} requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_after_a_data_change_is_reported_at_once() {
    let url = standalone_url();
    let lock = zk_lock(&format!("{url}?session_timeout={SESSION}")).await;
    let name = unique("renewals-deleted");
    let g = lock.acquire(&name, &wait(10)).await.unwrap();
    let zk = raw(&url).await;
    let dir = distlock_zk::path::lock_path(&lock.config().base, &name).unwrap();
    let children = zk.list_children(&dir).await.unwrap();
    assert_eq!(children.len(), 1, "{children:?}");
    let node = format!("{dir}/{}", children[0]);
    // Let the guard's watch register, then spend it on a data change: the guard watches again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    zk.set_data(&node, b"someone else", None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!g.is_lost(), "a data change made the guard lost: {g:?}");
    zk.delete(&node, None).await.unwrap();
    let deleted = Instant::now();
    // A renewal would find out within a renewal period (1.1 s); the watch within a round trip.
    let lost = tokio::time::timeout(Duration::from_millis(500), g.lost()).await;
    assert!(
        lost.is_ok(),
        "not reported lost {:?} after its node was deleted",
        deleted.elapsed()
    );
}

/// A data change and the node's deletion in one transaction: the watch fires on the data
/// change, and registering again finds the node gone. With renewal off nothing else would ever
/// ask, so this is the watch's own report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_found_gone_when_watching_again_is_reported() {
    let url = standalone_url();
    let lock = zk_lock(&format!("{url}?session_timeout={SESSION}")).await;
    let name = unique("renewals-gone");
    let opts = wait(10).renew(false).ttl(Duration::from_secs(300));
    let g = lock.acquire(&name, &opts).await.unwrap();
    let zk = raw(&url).await;
    let dir = distlock_zk::path::lock_path(&lock.config().base, &name).unwrap();
    let children = zk.list_children(&dir).await.unwrap();
    let node = format!("{dir}/{}", children[0]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut both = zk.new_multi_writer();
    both.add_set_data(&node, b"someone else", None).unwrap();
    both.add_delete(&node, None).unwrap();
    both.commit().await.unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(2), g.lost()).await;
    assert!(
        lost.is_ok(),
        "a guard whose node is gone was not reported lost"
    );
}
