//! Key layout on real servers (single and Redlock): a name shaped like another name's counter
//! or queue key is a lock of its own, and distlock never changes a key whose type or shape it
//! did not write (old-layout look-alikes, foreign data at its own counter and queue keys).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock, LockError};
use support::*;

fn quick() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_millis(1500))
}

async fn must(lock: &dyn DistributedLock, name: &str, why: &str) -> distlock_core::LockGuard {
    match lock.acquire(name, &quick()).await {
        Ok(g) => g,
        Err(e) => panic!("{}: {name:?} {why}: {e}", lock.backend_name()),
    }
}

/// The names whose keys the old layout (`{X}:fence`, `{X}:queue`, `{X}:qexp`) shared with
/// name `X`'s counter and queue.
fn look_alikes(x: &str) -> Vec<String> {
    ["fence", "queue", "qexp"]
        .iter()
        .map(|s| format!("{{{x}}}:{s}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn names_shaped_like_another_names_counter_or_queue_are_locks_of_their_own() {
    for url in [single_url(), redlock_url()] {
        let (a, b) = (
            connect_or_explain(&url).await,
            connect_or_explain(&url).await,
        );
        let x = unique("alias");
        // X held: every look-alike is free, and taking it neither frees X nor makes it lost.
        let gx = must(&*a, &x, "first").await;
        for alias in look_alikes(&x) {
            must(&*b, &alias, "while X is held")
                .await
                .release()
                .await
                .unwrap();
        }
        assert!(!gx.is_lost(), "{url}: look-alikes made X lost");
        assert!(
            b.try_acquire(&x, &quick()).await.unwrap().is_none(),
            "{url}: X freed by its look-alikes"
        );
        let mut last = gx.fencing_token();
        gx.release().await.unwrap();
        // The look-alikes held: X is free, twice, with rising tokens; they stay held.
        let mut held = Vec::new();
        for alias in look_alikes(&x) {
            held.push((alias.clone(), must(&*b, &alias, "first").await));
        }
        for round in 0..2 {
            let g = must(&*a, &x, &format!("round {round}, look-alikes held")).await;
            assert!(g.fencing_token() > last, "{url}: token went back");
            last = g.fencing_token();
            g.release().await.unwrap();
        }
        for (alias, g) in held {
            assert!(!g.is_lost(), "{url}: taking X made {alias:?} lost");
            assert!(
                a.try_acquire(&alias, &quick()).await.unwrap().is_none(),
                "{url}: taking X freed {alias:?}"
            );
            g.release().await.unwrap();
        }
    }
}

/// Foreign data a test plants: (key, Redis type, how to write it).
async fn plant(port: u16, key: &str, kind: &str) {
    match kind {
        "zset" => run::<i64>(port, redis::cmd("ZADD").arg(key).arg(1).arg("app")).await,
        "hash" => run::<i64>(port, redis::cmd("HSET").arg(key).arg("f").arg("app")).await,
        _ => {
            run::<()>(port, redis::cmd("SET").arg(key).arg(kind)).await;
            0
        }
    };
}

/// Asserts the planted data is exactly as written: same type and content, still no expiry.
async fn untouched(port: u16, key: &str, kind: &str) {
    let t: String = run(port, redis::cmd("TYPE").arg(key)).await;
    let pttl: i64 = run(port, redis::cmd("PTTL").arg(key)).await;
    let content = match kind {
        "zset" => {
            let v: Vec<String> = run(port, redis::cmd("ZRANGE").arg(key).arg(0).arg(-1)).await;
            v.join(",")
        }
        "hash" => {
            let v: Option<String> = run(port, redis::cmd("HGET").arg(key).arg("f")).await;
            v.unwrap_or_default()
        }
        _ => {
            let v: Option<String> = run(port, redis::cmd("GET").arg(key)).await;
            v.unwrap_or_default()
        }
    };
    let (want_type, want) = match kind {
        "zset" | "hash" => (kind, "app"),
        _ => ("string", kind),
    };
    assert_eq!(
        (t.as_str(), content.as_str(), pttl),
        (want_type, want, -1),
        "{key:?} on {port} was changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn foreign_data_at_old_and_new_auxiliary_keys_is_never_touched() {
    for url in [single_url(), redlock_url()] {
        let lock = connect_or_explain(&url).await;
        let all = ports(&url);
        // On Redlock the data sits on one master only: the others must not be changed either.
        let port = all[all.len() / 2];
        // What the old layout used as X's counter and queues: now unrelated keys.
        let x = unique("oldlayout");
        let old = [
            (format!("{{{x}}}:fence"), "zset"),
            (format!("{{{x}}}:queue"), "hash"),
            (format!("{{{x}}}:qexp"), "app-data"),
        ];
        for (key, kind) in &old {
            plant(port, key, kind).await;
        }
        let mut last = 0;
        for _ in 0..2 {
            let g = must(&*lock, &x, "beside old-layout look-alikes").await;
            assert!(g.fencing_token() > last);
            last = g.fencing_token();
            g.release().await.unwrap();
        }
        for (key, kind) in &old {
            untouched(port, key, kind).await;
            run::<i64>(port, redis::cmd("DEL").arg(key)).await;
        }
        // Foreign data at distlock's own keys: a typed error naming the key; nothing changed,
        // no lock key left anywhere.
        for (what, kind, says) in [
            ("fence", "zset", "zset"),
            ("fence", "hash", "hash"),
            ("fence", "not-a-number", "not a fencing counter"),
            ("fence", "99999999999999999999", "not a fencing counter"),
            ("queue", "hash", "hash"),
            ("queue", "app-data", "string"),
            ("qexp", "hash", "hash"),
            ("qexp", "app-data", "string"),
        ] {
            let y = unique("foreign");
            let key = aux_key(&y, what);
            plant(port, &key, kind).await;
            for try_only in [false, true] {
                let r = if try_only {
                    lock.try_acquire(&y, &quick()).await.map(|_| ())
                } else {
                    lock.acquire(&y, &quick()).await.map(|_| ())
                };
                match r {
                    Err(LockError::Backend { ref message, .. })
                        if message.contains(&format!("{key:?}")) && message.contains(says) => {}
                    other => panic!("{url}: {kind} at {key:?}: {other:?}"),
                }
                untouched(port, &key, kind).await;
                for p in &all {
                    let n: i64 = run(*p, redis::cmd("EXISTS").arg(&y)).await;
                    assert_eq!(n, 0, "{url}: lock key left on {p} after {kind} at {key:?}");
                }
            }
            run::<i64>(port, redis::cmd("DEL").arg(&key)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn release_and_extend_meet_foreign_data_with_typed_errors() {
    let url = single_url();
    let port = ports(&url)[0];
    let lock = connect_or_explain(&url).await;
    // A held lock whose queue key turns into another application's hash: release refuses,
    // names the key and leaves the hash (the lock frees itself with its lease).
    let y = unique("relforeign");
    let g = lock
        .acquire(&y, &quick().ttl(Duration::from_millis(1500)))
        .await
        .unwrap();
    let key = aux_key(&y, "queue");
    plant(port, &key, "hash").await;
    match g.release().await {
        Err(LockError::Backend { message, .. }) if message.contains(&format!("{key:?}")) => {}
        other => panic!("release beside a foreign queue: {other:?}"),
    }
    untouched(port, &key, "hash").await;
    run::<i64>(port, redis::cmd("DEL").arg(&key)).await;
    // A held lock whose key was replaced by a hash: extend says NotHeld, naming the key.
    let z = unique("extforeign");
    let g = lock.acquire(&z, &quick().renew(false)).await.unwrap();
    run::<i64>(port, redis::cmd("DEL").arg(&z)).await;
    plant(port, &z, "hash").await;
    match g.extend(Duration::from_secs(5)).await {
        Err(LockError::NotHeld { reason, .. }) if reason.contains(&format!("{z:?}")) => {}
        other => panic!("extend of a key replaced by a hash: {other:?}"),
    }
    untouched(port, &z, "hash").await;
    run::<i64>(port, redis::cmd("DEL").arg(&z)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inspect_meets_foreign_data_with_typed_errors() {
    let url = single_url();
    let port = ports(&url)[0];
    let lock = connect_or_explain(&url).await;
    for (what, kind) in [
        ("lock", "hash"),
        ("fence", "zset"),
        ("fence", "x1"),
        ("queue", "hash"),
    ] {
        let y = unique("inspforeign");
        let key = if what == "lock" {
            y.clone()
        } else {
            aux_key(&y, what)
        };
        plant(port, &key, kind).await;
        match lock.inspect(&y).await {
            Err(LockError::Backend { message, .. }) if message.contains(&format!("{key:?}")) => {}
            other => panic!("inspect with {kind} at {key:?}: {other:?}"),
        }
        untouched(port, &key, kind).await;
        run::<i64>(port, redis::cmd("DEL").arg(&key)).await;
    }
}
