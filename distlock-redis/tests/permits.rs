//! The semaphore and read-write lock on a single Redis (16379, `scripts/services.sh up`): the
//! shared conformance cases, Redlock's typed refusal, key layout and cleanup.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::conformance::{RwLockHarness, SemaphoreHarness};
use distlock_core::{AcquireOptions, DistributedRwLock, DistributedSemaphore, LockError};
use distlock_redis::{RedisConfig, RedisLock};
use support::{ports, redlock_url, run, single_url, unique};

async fn client(url: &str) -> Arc<RedisLock> {
    match RedisLock::connect(RedisConfig::from_url(url).unwrap()).await {
        Ok(l) => Arc::new(l),
        Err(e) => panic!("cannot reach {url}: {e}\nstart the stores with `scripts/services.sh up`"),
    }
}

struct Single;

#[async_trait]
impl SemaphoreHarness for Single {
    async fn semaphore(&self) -> Arc<dyn DistributedSemaphore> {
        client(&single_url()).await
    }
}

#[async_trait]
impl RwLockHarness for Single {
    async fn rwlock(&self) -> Arc<dyn DistributedRwLock> {
        client(&single_url()).await
    }
}

mod semaphore {
    use super::*;
    distlock_core::semaphore_suite!(Single);
}

mod rwlock {
    use super::*;
    distlock_core::rwlock_suite!(Single);
}

/// Redlock offers neither primitive: a typed error naming why, never a weaker version.
#[tokio::test]
async fn redlock_refuses_semaphores_and_rwlocks() {
    let r = client(&redlock_url()).await;
    let opts = AcquireOptions::new();
    let name = unique("redlock-permits");
    for res in [
        DistributedSemaphore::try_acquire(&*r, &name, 2, &opts)
            .await
            .map(drop),
        r.try_read(&name, &opts).await.map(drop),
        r.try_write(&name, &opts).await.map(drop),
    ] {
        match res {
            Err(LockError::InvalidConfig(m)) => assert!(m.contains("single"), "{m}"),
            other => panic!("redlock gave {other:?}"),
        }
    }
}

/// Once every permit is released, nothing of the name is left but its fencing counter, and
/// a semaphore, a read-write lock and a mutex of one name never share a key.
#[tokio::test]
async fn nothing_is_left_but_the_counter_and_families_stay_apart() {
    let r = client(&single_url()).await;
    let name = unique("permit-keys");
    let opts = AcquireOptions::new().wait(Duration::from_secs(5));
    let p = DistributedSemaphore::acquire(&*r, &name, 1, &opts)
        .await
        .unwrap();
    // The same name as a read-write lock and as a mutex is free: other namespaces.
    let w = r.write(&name, &opts).await.unwrap();
    let m = distlock_core::DistributedLock::try_acquire(&*r, &name, &opts)
        .await
        .unwrap()
        .expect("the mutex of a semaphore's name was taken");
    let port = ports(&single_url())[0];
    let pattern = format!("*{name}*");
    let mut keys: Vec<String> = run(port, redis::cmd("KEYS").arg(&pattern)).await;
    keys.sort();
    let held: Vec<String> = [
        "",
        "{N}\0fence",
        "{N}\0rw.fence",
        "{N}\0rw.holders",
        "{N}\0sem.fence",
        "{N}\0sem.holders",
        "{N}\0sem.max",
    ]
    .iter()
    .map(|k| {
        if k.is_empty() {
            name.clone()
        } else {
            k.replace('N', &name)
        }
    })
    .collect();
    assert_eq!(
        keys, held,
        "a name's three primitives must use their own keys"
    );
    p.release().await.unwrap();
    w.release().await.unwrap();
    m.release().await.unwrap();
    let mut left: Vec<String> = run(port, redis::cmd("KEYS").arg(&pattern)).await;
    left.sort();
    let want = vec![
        format!("{{{name}}}\0fence"),
        format!("{{{name}}}\0rw.fence"),
        format!("{{{name}}}\0sem.fence"),
    ];
    assert_eq!(left, want, "left behind");
}

/// Another application's data at a semaphore key is reported, naming the key, and left as it
/// was.
#[tokio::test]
async fn foreign_data_is_reported_and_left_alone() {
    let r = client(&single_url()).await;
    let name = unique("permit-foreign");
    let port = ports(&single_url())[0];
    let key = format!("{{{name}}}\0sem.holders");
    let _: () = run(port, redis::cmd("SET").arg(&key).arg("theirs")).await;
    let res = DistributedSemaphore::try_acquire(&*r, &name, 2, &AcquireOptions::new()).await;
    match res {
        Err(LockError::Backend { message, .. }) => {
            assert!(message.contains("holder set"), "{message}")
        }
        other => panic!("foreign data gave {other:?}"),
    }
    let v: String = run(port, redis::cmd("GET").arg(&key)).await;
    assert_eq!(v, "theirs");
    let _: () = run(port, redis::cmd("DEL").arg(&key)).await;
}

/// A permit's `extend` whose request reaches Redis late, or whose reply is lost, never leaves
/// the holder believing in more lease than Redis keeps (`permit_extend` under a gray fault).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permit_extend_of_unknown_outcome_is_not_believed() {
    let proxy =
        distlock_core::fault::FaultProxy::start(([127, 0, 0, 1], ports(&single_url())[0]).into())
            .await
            .unwrap();
    let a = client(&format!(
        "redis://127.0.0.1:{}?timeout=1s",
        proxy.addr().port()
    ))
    .await;
    let b = client(&single_url()).await;
    distlock_core::conformance::permit_extend_of_unknown_outcome_is_not_believed(
        &*a,
        std::slice::from_ref(&proxy),
        &*b,
    )
    .await;
}
