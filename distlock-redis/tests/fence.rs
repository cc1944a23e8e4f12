//! `distlock_redis::fence` on a real Redis: the fenced-register check
//! (`distlock_core::conformance::fence`) with tokens from distlock's own Redis lock, and the
//! value and its fence as another redis-rs client sees them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use distlock_core::conformance::fence::a_stalled_holders_write_is_refused;
use distlock_redis::fence;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holders_set_is_refused() {
    let port = ports(&single_url())[0];
    let (key, write, read) = fenced_register(port);
    let h = RedisHarness::single();
    let name = format!("fence-lock-{}", distlock_core::backend::owner_token());
    a_stalled_holders_write_is_refused(&h, &name, write, read).await;
    // The fence holds the highest token, beside the value in its hash slot.
    let fence_token: u64 = run(port, redis::cmd("GET").arg(fence::fence_key(&key))).await;
    assert!(fence_token > 0);
    let _: () = run(
        port,
        redis::cmd("DEL").arg(&key).arg(fence::fence_key(&key)),
    )
    .await;
}

/// Tokens compare as numbers, not strings ("10" after "9"), at any size a `u64` takes.
#[tokio::test]
async fn tokens_compare_as_numbers() {
    let port = ports(&single_url())[0];
    let key = format!("fence-num-{}", distlock_core::backend::owner_token());
    let mut conn = raw(port).await;
    fence::set(&mut conn, &key, "nine", 9).await.unwrap();
    fence::set(&mut conn, &key, "ten", 10).await.unwrap();
    let err = fence::set(&mut conn, &key, "nine again", 9)
        .await
        .unwrap_err();
    assert_eq!(err.stale().map(|s| s.seen), Some(10));
    fence::set(&mut conn, &key, "max", u64::MAX).await.unwrap();
    let err = fence::set(&mut conn, &key, "below max", u64::MAX - 1)
        .await
        .unwrap_err();
    assert_eq!(err.stale().map(|s| s.seen), Some(u64::MAX));
    let got: String = run(port, redis::cmd("GET").arg(&key)).await;
    assert_eq!(got, "max");
    let _: () = run(
        port,
        redis::cmd("DEL").arg(&key).arg(fence::fence_key(&key)),
    )
    .await;
}
