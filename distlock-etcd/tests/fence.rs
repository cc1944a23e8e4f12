//! `distlock_etcd::fence` on a real etcd: the fenced-register check
//! (`distlock_core::conformance::fence`) with tokens from distlock's etcd lock, and tokens that
//! compare as numbers across digit counts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use distlock_core::conformance::fence::{a_stalled_holders_write_is_refused, Read, Write};
use distlock_etcd::fence;
use futures::FutureExt;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holders_put_is_refused() {
    let url = single_url();
    let key = unique("fence-reg");
    let write: Write = Box::new({
        let (url, key) = (url.clone(), key.clone());
        move |token, body| {
            let (url, key) = (url.clone(), key.clone());
            async move {
                let mut client = raw(&url).await;
                fence::put(&mut client, &key, body, token)
                    .await
                    .map_err(|e| e.map_store(|e| e.to_string()))
            }
            .boxed()
        }
    });
    let read: Read = Box::new({
        let (url, key) = (url.clone(), key.clone());
        move || {
            let (url, key) = (url.clone(), key.clone());
            async move {
                let got = raw(&url).await.get(key, None).await.unwrap();
                String::from_utf8(got.kvs()[0].value().to_vec()).unwrap()
            }
            .boxed()
        }
    });
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
