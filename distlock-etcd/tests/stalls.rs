//! A stalled etcd member (its connections open, nothing answered: a paused process, a
//! blackholed route) in front of a healthy cluster: clients connect and lock through the
//! other members without waiting out a timeout.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use distlock_core::fault::FaultProxy;
use distlock_core::AcquireOptions;
use support::{cluster_url, connect_or_explain, ports, unique};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_first_endpoint_does_not_hold_up_connect_or_locks() {
    let members = ports(&cluster_url());
    let stalled = FaultProxy::start(([127, 0, 0, 1], members[0]).into())
        .await
        .unwrap();
    stalled.blackhole();
    let url = format!(
        "etcd://{},127.0.0.1:{},127.0.0.1:{}",
        stalled.addr(),
        members[1],
        members[2]
    );
    let t = Instant::now();
    let lock = connect_or_explain(&url).await;
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "connect waited {took:?} on the stalled first member (default 5 s timeouts)"
    );
    let name = unique("stalled-first");
    let t = Instant::now();
    let g = lock
        .acquire(&name, &AcquireOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap();
    g.extend(Duration::from_secs(10)).await.unwrap();
    g.release().await.unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "acquire, extend and release took {:?} beside a stalled member",
        t.elapsed()
    );
    stalled.heal();
}
