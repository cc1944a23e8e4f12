//! `distlock::blocking` on SQLite (no server) and Redis (`scripts/services.sh up`; URL from
//! `DISTLOCK_TEST_REDIS_URL`): renewal while the caller's thread sleeps, mutual exclusion
//! between threads, `try_acquire` on a held lock, release on drop, election, `observe`, and
//! the typed error for a call inside a Tokio runtime; exclusion, release on drop, election and
//! `observe` on every other store of `scripts/services.sh up`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock::blocking::{self, Guard, Lock};
use distlock::{AcquireOptions, LockError};

fn sqlite_url() -> String {
    let dir = std::env::temp_dir().join(format!(
        "distlock-blocking-{}-{}",
        std::process::id(),
        distlock_core::backend::owner_token()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    format!("sqlite://{}/locks.db", dir.display())
}

fn redis_url() -> String {
    std::env::var("DISTLOCK_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:16379".into())
}

fn unique(case: &str) -> String {
    format!(
        "blocking-{case}-{}",
        &distlock_core::backend::owner_token()[..12]
    )
}

fn connect(url: &str) -> Lock {
    blocking::connect(url).unwrap_or_else(|e| {
        panic!("cannot connect to {url}: {e} (is the store running? `scripts/services.sh up`)")
    })
}

fn opts() -> AcquireOptions {
    AcquireOptions::new().wait(Duration::from_secs(20))
}

/// A free `name` on `lock` within `bound` (the other client's release is asynchronous there).
fn taken_within(lock: &Lock, name: &str, bound: Duration) -> Guard {
    let until = Instant::now() + bound;
    loop {
        if let Some(g) = lock.try_acquire(name, &opts()).unwrap() {
            return g;
        }
        assert!(Instant::now() < until, "{name} still held after {bound:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A 1 s lease stays held for 3 s while the holder's thread sleeps: the facade's runtime renews
/// it in the background.
fn renewal_keeps_a_short_lease_held(url: &str) {
    let (holder, other) = (connect(url), connect(url));
    let name = unique("renew");
    let g = holder
        .acquire(&name, &opts().ttl(Duration::from_secs(1)))
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(!g.is_lost(), "{}: the lease ran out", holder.backend_name());
    assert!(other.try_acquire(&name, &opts()).unwrap().is_none());
    let info = other.inspect(&name).unwrap();
    assert!(info.held);
    assert_eq!(info.fencing_token, Some(g.fencing_token()));
    g.extend(Duration::from_secs(2)).unwrap();
    g.release().unwrap();
    let next = other.try_acquire(&name, &opts()).unwrap().expect("free");
    next.release().unwrap();
}

/// Two threads, each with its own client, take turns: never both inside, tokens increasing in
/// the order the holders held.
fn mutual_exclusion_between_threads(url: &str) {
    let name = unique("mutex");
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let lock = connect(url);
            let (name, inside, overlaps, tokens) = (
                name.clone(),
                Arc::clone(&inside),
                Arc::clone(&overlaps),
                Arc::clone(&tokens),
            );
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let g = lock.acquire(&name, &opts()).unwrap();
                    if inside.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokens.lock().unwrap().push(g.fencing_token());
                    std::thread::sleep(Duration::from_millis(5));
                    inside.store(false, Ordering::SeqCst);
                    g.release().unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 20);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not increasing: {tokens:?}"
    );
}

/// `try_acquire` on a held lock answers `None` at once.
fn try_acquire_on_a_held_lock(url: &str) {
    let (holder, other) = (connect(url), connect(url));
    let name = unique("try");
    let g = holder.acquire(&name, &opts()).unwrap();
    let t = Instant::now();
    assert!(other.try_acquire(&name, &opts()).unwrap().is_none());
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // A bounded wait on it is a timeout.
    let e = other
        .acquire(
            &name,
            &AcquireOptions::new().wait(Duration::from_millis(200)),
        )
        .unwrap_err();
    assert!(matches!(e, LockError::Timeout { .. }), "{e}");
    g.release().unwrap();
}

/// Dropping a guard releases the lock before the drop returns.
fn drop_releases(url: &str) {
    let (holder, other) = (connect(url), connect(url));
    let name = unique("drop");
    let g = holder.acquire(&name, &opts()).unwrap();
    let token = g.fencing_token();
    drop(g);
    let next = other
        .try_acquire(&name, &opts())
        .unwrap()
        .expect("the drop released it");
    assert!(next.fencing_token() > token);
    // Dropping the client with a guard out keeps the guard working: they share the runtime.
    drop(other);
    assert!(!next.is_lost());
    next.release().unwrap();
}

/// Inside a Tokio runtime every call is `InvalidConfig` (never a panic or a deadlock), and
/// dropping a guard or a client there does not block: the guard is released in the background.
fn inside_a_runtime_is_a_typed_error(url: &str) {
    let lock = connect(url);
    let name = unique("in-rt");
    let g = lock.acquire(&name, &opts()).unwrap();
    for rt in [
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap(),
    ] {
        let mut changes = lock.observe(&name).unwrap();
        let errors = rt.block_on(async {
            let spawned = {
                let url = url.to_owned();
                tokio::task::spawn_blocking(move || blocking::connect(&url).map(drop))
                    .await
                    .unwrap()
            };
            vec![
                blocking::connect(url).map(drop),
                blocking::connect_semaphore(url).map(drop),
                blocking::connect_rwlock(url).map(drop),
                lock.acquire(&name, &opts()).map(drop),
                lock.try_acquire(&name, &opts()).map(drop),
                lock.inspect(&name).map(drop),
                g.extend(Duration::from_secs(5)),
                lock.observe(&name).map(drop),
                changes.next().unwrap().map(drop),
                spawned,
            ]
        });
        assert!(changes.next().is_none(), "the refused iterator ended");
        for e in errors {
            match e {
                Err(LockError::InvalidConfig(m)) => assert!(m.contains("async API"), "{m}"),
                other => panic!("inside a runtime: {other:?}"),
            }
        }
    }
    assert!(!g.is_lost());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let e = rt.block_on(async { g.release() }).unwrap_err();
    assert!(matches!(e, LockError::InvalidConfig(_)), "{e}");
    // That release went on in the background.
    taken_within(&lock, &name, Duration::from_secs(10))
        .release()
        .unwrap();

    let g = lock.acquire(&name, &opts()).unwrap();
    rt.block_on(async { drop(g) });
    let other = connect(url);
    taken_within(&other, &name, Duration::from_secs(10))
        .release()
        .unwrap();
    // The last owner of the facade's runtime goes inside another runtime: no panic.
    rt.block_on(async { drop(lock) });
}

/// Leader election through the facade: a campaign blocks until the leader steps down, and
/// `leader` names whoever leads in between.
fn campaign_and_leader(url: &str) {
    let lock = Arc::new(connect(url));
    let group = unique("elect");
    assert!(lock.leader(&group).unwrap().is_none());
    let first = lock.campaign(&group, "first", &opts()).unwrap();
    let seen = lock.leader(&group).unwrap().expect("a leader");
    assert_eq!(seen.identity, "first");
    assert_eq!(seen.fencing_token, first.fencing_token());
    let second = {
        let (lock, group) = (Arc::clone(&lock), group.clone());
        std::thread::spawn(move || lock.campaign(&group, "second", &opts()))
    };
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(lock.leader(&group).unwrap().unwrap().identity, "first");
    first.release().unwrap();
    let second = second.join().unwrap().unwrap();
    assert_eq!(lock.leader(&group).unwrap().unwrap().identity, "second");
    second.release().unwrap();
}

/// `observe` through the facade: an iterator that yields each leader change once, blocking
/// the thread between changes, and stops when dropped.
fn observe_yields_each_leader(url: &str) {
    let lock = connect(url);
    let group = unique("observe");
    let mut changes = lock
        .observe_every(&group, Duration::from_millis(20))
        .unwrap();
    assert_eq!(changes.next().unwrap().unwrap(), None, "nobody leads yet");
    let first = lock.campaign(&group, "first", &opts()).unwrap();
    let seen = changes.next().unwrap().unwrap().expect("a leader");
    assert_eq!(
        (seen.identity.as_str(), seen.fencing_token),
        ("first", first.fencing_token())
    );
    let first_token = first.fencing_token();
    first.release().unwrap();
    assert_eq!(changes.next().unwrap().unwrap(), None, "nobody leads again");
    let second = lock.campaign(&group, "second", &opts()).unwrap();
    let seen = changes.next().unwrap().unwrap().expect("a leader");
    assert_eq!(
        (seen.identity.as_str(), seen.fencing_token),
        ("second", second.fencing_token())
    );
    assert!(seen.fencing_token > first_token);
    second.release().unwrap();
    // A bad interval is a typed error, not a panic.
    assert!(matches!(
        lock.observe_every(&group, Duration::from_millis(1)),
        Err(LockError::InvalidConfig(_))
    ));
}

macro_rules! on_store {
    ($url:expr; $($case:ident),* $(,)?) => {$(
        #[test]
        fn $case() {
            super::$case(&$url);
        }
    )*};
}

mod sqlite {
    on_store!(super::sqlite_url();
        renewal_keeps_a_short_lease_held,
        mutual_exclusion_between_threads,
        try_acquire_on_a_held_lock,
        drop_releases,
        inside_a_runtime_is_a_typed_error,
        campaign_and_leader,
        observe_yields_each_leader,
    );
}

mod redis {
    on_store!(super::redis_url();
        renewal_keeps_a_short_lease_held,
        mutual_exclusion_between_threads,
        try_acquire_on_a_held_lock,
        drop_releases,
        inside_a_runtime_is_a_typed_error,
        campaign_and_leader,
        observe_yields_each_leader,
    );
}

/// A store's URL from `scripts/services.sh urls`, or its default private port.
fn service_url(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.into())
}

/// The facade on every other store: exclusion, release on drop, election and observation.
macro_rules! on_service {
    ($($store:ident: $var:literal, $default:literal;)*) => {$(
        mod $store {
            on_store!(super::service_url($var, $default);
                mutual_exclusion_between_threads,
                drop_releases,
                campaign_and_leader,
                observe_yields_each_leader,
            );
        }
    )*};
}

on_service! {
    postgres: "DISTLOCK_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:15432/distlock";
    mysql: "DISTLOCK_TEST_MYSQL_URL", "mysql://root@127.0.0.1:13306/distlock";
    zookeeper: "DISTLOCK_TEST_ZK_URL", "zk://127.0.0.1:12181";
    etcd: "DISTLOCK_TEST_ETCD_URL", "etcd://127.0.0.1:12379";
    redlock: "DISTLOCK_TEST_REDLOCK_URL",
        "redlock://127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005";
}

/// Semaphore and read-write lock through the facade: the same guards.
#[test]
fn semaphore_and_rwlock_block_too() {
    let url = sqlite_url();
    let name = unique("permits");
    let sem = blocking::connect_semaphore(&url).unwrap();
    let a = sem.acquire(&name, 2, &opts()).unwrap();
    let b = sem
        .try_acquire(&name, 2, &opts())
        .unwrap()
        .expect("a second permit");
    assert!(sem.try_acquire(&name, 2, &opts()).unwrap().is_none());
    assert!(b.fencing_token() > a.fencing_token());
    assert_eq!(sem.inspect(&name).unwrap().holders, 2);
    drop(a);
    b.release().unwrap();

    let rw = blocking::connect_rwlock(&url).unwrap();
    let r1 = rw.read(&name, &opts()).unwrap();
    let r2 = rw.try_read(&name, &opts()).unwrap().expect("readers share");
    assert!(rw.try_write(&name, &opts()).unwrap().is_none());
    drop(r1);
    r2.release().unwrap();
    let w = rw.write(&name, &opts()).unwrap();
    assert!(rw.try_read(&name, &opts()).unwrap().is_none());
    w.release().unwrap();
}

#[test]
fn the_facade_types_are_send_sync_static() {
    fn check<T: Send + Sync + 'static>() {}
    check::<Lock>();
    check::<Guard>();
    check::<blocking::Semaphore>();
    check::<blocking::RwLock>();
    fn check_send<T: Send + 'static>() {}
    check_send::<blocking::LeaderChanges>();
}
