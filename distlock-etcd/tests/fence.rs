//! `distlock_etcd::fence` on a real etcd: the fenced-register check
//! (`distlock_core::conformance::fence`) with tokens from distlock's etcd lock, and tokens that
//! compare as numbers across digit counts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use distlock_core::conformance::fence::a_stalled_holders_write_is_refused;
use distlock_etcd::fence;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holders_put_is_refused() {
    let (write, read) = fenced_register(&single_url(), "fence-reg");
    a_stalled_holders_write_is_refused(&EtcdHarness::single(), &unique("fence-lock"), write, read)
        .await;
}

#[tokio::test]
async fn tokens_compare_as_numbers() {
    let mut client = raw(&single_url()).await;
    let key = unique("fence-num");
    fence::put(&mut client, &key, "nine", 9).await.unwrap();
    fence::put(&mut client, &key, "ten", 10).await.unwrap();
    let err = fence::put(&mut client, &key, "nine again", 9)
        .await
        .unwrap_err();
    assert_eq!(err.stale().map(|s| s.seen), Some(10));
    fence::put(&mut client, &key, "max", u64::MAX)
        .await
        .unwrap();
    let err = fence::put(&mut client, &key, "below", u64::MAX - 1)
        .await
        .unwrap_err();
    assert_eq!(err.stale().map(|s| s.seen), Some(u64::MAX));
    let got = client.get(key.as_str(), None).await.unwrap();
    assert_eq!(got.kvs()[0].value(), b"max");
}
