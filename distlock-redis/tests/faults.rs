//! Redis-specific behaviour on real servers: Redlock with masters down or restarted empty,
//! redis-py interop, bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::fault::FaultProxy;
use distlock_core::{AcquireOptions, LockError};
use support::*;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// The tests below stop masters: run them one at a time.
static SERIAL: Mutex<()> = Mutex::const_new(());

fn opts(ttl_ms: u64) -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_millis(ttl_ms))
        .wait(Duration::from_secs(5))
}

async fn exists_on(port: u16, key: &str) -> bool {
    let mut c = raw(port).await;
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap();
    n == 1
}

/// A Redlock client whose five masters sit behind proxies we can kill.
async fn proxied_redlock() -> (
    Vec<FaultProxy>,
    std::sync::Arc<dyn distlock_core::DistributedLock>,
) {
    let (proxies, url) = redlock_proxies().await;
    let lock = connect_or_explain(&format!("{url}?timeout=500ms")).await;
    (proxies, lock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_works_with_two_of_five_masters_down() {
    let _s = SERIAL.lock().await;
    let (proxies, lock) = proxied_redlock().await;
    proxies[0].kill();
    proxies[3].kill();
    let name = unique("two-down");
    let g = lock.acquire(&name, &opts(5000)).await.unwrap();
    assert!(g.fencing_token() > 0);
    let other = connect_or_explain(&redlock_url()).await;
    assert!(
        other
            .try_acquire(&name, &opts(5000))
            .await
            .unwrap()
            .is_none(),
        "second holder with 2 masters down"
    );
    g.release().await.unwrap();
    let g2 = other
        .try_acquire(&name, &opts(5000))
        .await
        .unwrap()
        .expect("free after release");
    g2.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_with_three_of_five_down_is_unavailable_and_leaves_nothing() {
    let _s = SERIAL.lock().await;
    let (proxies, lock) = proxied_redlock().await;
    for i in [0, 2, 4] {
        proxies[i].kill();
    }
    let name = unique("three-down");
    let ttl = Duration::from_secs(3);
    let t = Instant::now();
    let r = lock
        .acquire(
            &name,
            &AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(10)),
        )
        .await;
    assert!(matches!(r, Err(LockError::Unavailable { .. })), "{r:?}");
    assert!(t.elapsed() < ttl, "took {:?}", t.elapsed());
    let ports = ports(&redlock_url());
    for i in [1, 3] {
        assert!(
            !exists_on(ports[i], &name).await,
            "lock left on surviving master {}",
            ports[i]
        );
    }
}

struct Restart(&'static str);

impl Drop for Restart {
    fn drop(&mut self) {
        services(&["start-one", self.0]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_master_restarted_empty_gives_no_second_holder() {
    let _s = SERIAL.lock().await;
    let a = connect_or_explain(&redlock_url()).await;
    let b = connect_or_explain(&redlock_url()).await;
    let name = unique("restart");
    let g = a.acquire(&name, &opts(8000)).await.unwrap();
    {
        let _restart = Restart("redis-17005");
        services(&["stop-one", "redis-17005"]);
        services(&["start-one", "redis-17005"]);
    }
    assert!(
        !exists_on(17005, &name).await,
        "the restarted master kept data"
    );
    for _ in 0..5 {
        assert!(
            b.try_acquire(&name, &opts(8000)).await.unwrap().is_none(),
            "second holder after a master restarted empty"
        );
    }
    assert!(!g.is_lost());
    let first = g.fencing_token();
    g.release().await.unwrap();
    let g2 = b.acquire(&name, &opts(8000)).await.unwrap();
    assert!(g2.fencing_token() > first);
    g2.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_py_style_holders_and_ours_exclude_each_other() {
    let lock = connect_or_explain(&single_url()).await;
    let port = ports(&single_url())[0];
    let mut c = raw(port).await;
    let name = unique("py");
    // A redis-py Lock holds: raw SET NX PX with its own token.
    let ok: Option<String> = redis::cmd("SET")
        .arg(&name)
        .arg("py-token")
        .arg("NX")
        .arg("PX")
        .arg(5000)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(ok.is_some());
    assert!(
        lock.try_acquire(&name, &opts(5000))
            .await
            .unwrap()
            .is_none(),
        "ignored a redis-py holder"
    );
    let r = lock
        .acquire(
            &name,
            &AcquireOptions::new().wait(Duration::from_millis(300)),
        )
        .await;
    assert!(matches!(r, Err(LockError::Timeout { .. })), "{r:?}");
    let v: String = redis::cmd("GET")
        .arg(&name)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(v, "py-token", "we touched the redis-py holder's key");
    let _: i64 = redis::cmd("DEL")
        .arg(&name)
        .query_async(&mut c)
        .await
        .unwrap();
    // We hold: redis-py's SET NX fails.
    let g = lock.acquire(&name, &opts(5000)).await.unwrap();
    let ok: Option<String> = redis::cmd("SET")
        .arg(&name)
        .arg("py-token")
        .arg("NX")
        .arg("PX")
        .arg(5000)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(ok.is_none(), "redis-py got a lock we hold");
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_gives_typed_errors_and_never_deletes_other_data() {
    let lock = connect_or_explain(&single_url()).await;
    let port = ports(&single_url())[0];
    let mut c = raw(port).await;
    // Another application's string without expiry: we wait (it may be a lock), never delete it.
    let name = unique("appdata");
    let _: () = redis::cmd("SET")
        .arg(&name)
        .arg("precious")
        .query_async(&mut c)
        .await
        .unwrap();
    let r = lock
        .acquire(
            &name,
            &AcquireOptions::new().wait(Duration::from_millis(300)),
        )
        .await;
    assert!(matches!(r, Err(LockError::Timeout { .. })), "{r:?}");
    // Another application's hash: a clear error naming the type.
    let hash = unique("apphash");
    let _: i64 = redis::cmd("HSET")
        .arg(&hash)
        .arg("f")
        .arg("v")
        .query_async(&mut c)
        .await
        .unwrap();
    let r = lock.acquire(&hash, &opts(1000)).await;
    assert!(
        matches!(&r, Err(LockError::Backend { message, .. }) if message.contains("hash")),
        "{r:?}"
    );
    let v: String = redis::cmd("GET")
        .arg(&name)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(v, "precious");
    let t: String = redis::cmd("TYPE")
        .arg(&hash)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(t, "hash");
    // ttl = 0, even Redlock, unreachable, wrong password.
    let r = lock
        .acquire("x", &AcquireOptions::new().ttl(Duration::ZERO))
        .await;
    assert!(matches!(r, Err(LockError::InvalidConfig(_))), "{r:?}");
    let r = distlock_redis::connect(
        "redlock://127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004",
    )
    .await;
    assert!(matches!(r, Err(LockError::InvalidConfig(_))), "{r:?}");
    let t = Instant::now();
    let r = distlock_redis::connect("redis://127.0.0.1:1?timeout=1s").await;
    assert!(matches!(r, Err(LockError::Unavailable { .. })), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(5));
    let r = distlock_redis::connect(&format!("redis://nosuchuser:s3cretpw@127.0.0.1:{port}")).await;
    let e = r.unwrap_err();
    assert!(matches!(e, LockError::InvalidConfig(_)), "{e:?}");
    assert!(
        !e.to_string().contains("s3cretpw") && !format!("{e:?}").contains("s3cretpw"),
        "{e}"
    );
}
