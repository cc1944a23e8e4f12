//! Redis Sentinel (`redis+sentinel://`) on private Sentinel sets (tests/support/sentinel.rs):
//! distlock follows a failover, and what a failover costs a lock is shown and then prevented.
//!
//! The cost: a grant the old master had not passed on to the promoted replica is lost, so a
//! second client is granted the name while the first still holds a valid lease. Replication is
//! held back (a black-holing proxy) while the first client takes the lock, then the master is
//! killed and what was held back dropped: the promoted replica never saw the grant. Each mitigation gets the same run:
//! * `replicas=1` (`WAIT`): the unreplicated grant is refused and given back;
//! * `lock_delay=`: the new master grants nothing until the old holder's lease is over;
//! * fencing tokens: the second holder's token is above the first's (the clock floor), so a
//!   fenced resource refuses the first holder's late write.
//!
//! The conformance suite runs on the shared set of `scripts/services.sh` (tests/conformance.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use distlock_core::fault::FaultProxy;
use distlock_core::{AcquireOptions, DistributedLock, LockError};
use support::sentinel::SentinelSet;
use support::*;

const TTL: Duration = Duration::from_secs(6);

fn opts(wait: Duration) -> AcquireOptions {
    AcquireOptions::new().ttl(TTL).wait(wait)
}

/// Takes `name` and gives it back (on the master the client works on now).
async fn take_and_release(lock: &dyn DistributedLock, name: &str) {
    let g = lock.acquire(name, &opts(Duration::from_secs(10))).await;
    g.unwrap().release().await.unwrap();
}

/// Holds replication back, has `a` take `name` on the master alone, kills the master and
/// drops what was held back, until the sentinels promote a replica: the acquisition's result
/// and instant, and the new master's port.
async fn grant_then_lose_the_master(
    set: &mut SentinelSet,
    a: &dyn DistributedLock,
    name: &str,
) -> (Result<distlock_core::LockGuard, LockError>, Instant, u16) {
    let old = set.master().await;
    set.hold_replication();
    let at = Instant::now();
    let got = a.acquire(name, &opts(Duration::from_secs(2))).await;
    set.kill(old);
    set.drop_replication();
    let new = set.new_master(old).await;
    (got, at, new)
}

#[tokio::test]
async fn a_failover_is_followed() {
    let set = SentinelSet::start().await;
    let lock = connect_or_explain(&set.url("")).await;
    let name = unique("sentinel-follow");
    take_and_release(&*lock, &name).await;
    let old = set.master().await;
    set.failover().await;
    let new = set.new_master(old).await;
    // Within a few polls the client works on the new master. (Until the old master is told to
    // replicate, a grant there is lost with the rest of its writes: the failover's cost.)
    let started = Instant::now();
    let held = loop {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "not on {new} within 10 s"
        );
        if let Ok(g) = lock.acquire(&name, &opts(Duration::from_secs(1))).await {
            if run::<i64>(new, redis::cmd("EXISTS").arg(&name)).await == 1 {
                break g;
            }
            let _ = g.release().await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    held.release().await.unwrap();
}

/// Five handoffs of `name` between two tasks of `lock`: how many of the waiters were woken
/// under 300 ms after the release (by their 1 s heartbeat alone, each would be with a chance
/// of about 0.3).
async fn quick_handoffs(lock: &std::sync::Arc<dyn DistributedLock>, name: &str) -> usize {
    let mut held = lock
        .acquire(name, &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    let mut quick = 0;
    for _ in 0..5 {
        let waiter = {
            let (lock, name) = (lock.clone(), name.to_owned());
            tokio::spawn(async move {
                let g = lock.acquire(&name, &opts(Duration::from_secs(10))).await;
                (g, Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        held.release().await.unwrap();
        let (g, woke) = waiter.await.unwrap();
        held = g.unwrap();
        quick += usize::from(woke - released < Duration::from_millis(300));
    }
    held.release().await.unwrap();
    quick
}

/// A master that stalls (SIGSTOP) keeps its connections open: the pub/sub connection waiters
/// listen on must move to the new master too, or every later handoff waits for a heartbeat.
#[tokio::test]
async fn waiters_follow_a_stalled_master_to_the_new_one() {
    let mut set = SentinelSet::start().await;
    let lock = connect_or_explain(&set.url("?timeout=1s")).await;
    let name = unique("sentinel-stall");
    assert!(
        quick_handoffs(&lock, &name).await >= 4,
        "no quick handoffs before the stall"
    );
    let old = set.master().await;
    set.signal(old, "STOP");
    let new = set.new_master(old).await;
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "not on {new} within 10 s"
        );
        if let Ok(g) = lock.try_acquire(&name, &opts(Duration::ZERO)).await {
            let g = g.expect("nobody holds it");
            let on_new = run::<i64>(new, redis::cmd("EXISTS").arg(&name)).await == 1;
            g.release().await.unwrap();
            if on_new {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let quick = quick_handoffs(&lock, &name).await;
    assert!(
        quick >= 4,
        "only {quick} of 5 handoffs on the new master were woken by the release"
    );
}

/// A sentinel that stalls (its connections open, nothing answered: a paused process, a
/// blackholed route) in front of healthy ones: neither `connect` nor following a failover waits
/// out the timeout on it.
#[tokio::test]
async fn a_stalled_sentinel_holds_up_neither_connect_nor_a_failover() {
    let mut set = SentinelSet::start().await;
    let url = set.url("?timeout=10s");
    let first = ports(&url)[0];
    let stalled = FaultProxy::start(([127, 0, 0, 1], first).into())
        .await
        .unwrap();
    stalled.blackhole();
    let url = url.replacen(
        &format!("127.0.0.1:{first}"),
        &stalled.addr().to_string(),
        1,
    );
    let started = Instant::now();
    let lock = connect_or_explain(&url).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "connect waited {:?} on the stalled first sentinel (10 s timeout)",
        started.elapsed()
    );
    let name = unique("sentinel-stalled");
    take_and_release(&*lock, &name).await;
    let old = set.master().await;
    set.signal(old, "STOP");
    let new = set.new_master(old).await;
    // The client follows within a poll; a try still on the stalled old master ends at the
    // core's 2 s bound. Asking the stalled sentinel first would cost 10 s a poll.
    let known = Instant::now();
    loop {
        if let Ok(Some(g)) = lock.try_acquire(&name, &opts(Duration::ZERO)).await {
            let on_new = run::<i64>(new, redis::cmd("EXISTS").arg(&name)).await == 1;
            g.release().await.unwrap();
            if on_new {
                break;
            }
        }
        assert!(
            known.elapsed() < Duration::from_secs(7),
            "not on {new} within 7 s of the failover"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn without_mitigation_a_failover_grants_a_held_name_again_and_fencing_tells() {
    let mut set = SentinelSet::start().await;
    let a = connect_or_explain(&set.url("")).await;
    let name = unique("sentinel-lost");
    let (got, a_at, new) = grant_then_lose_the_master(&mut set, &*a, &name).await;
    let a_guard = got.unwrap();
    let b = connect_or_explain(&set.url("")).await;
    let b_guard = b
        .acquire(&name, &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    // The cost, as documented: B holds while A's lease, as A was told, still runs.
    let b_after = a_at.elapsed();
    assert!(
        b_after < TTL,
        "B was granted {b_after:?} after A: not inside A's lease"
    );
    // Fencing still tells them apart: B's token is above A's, so a fenced resource that took
    // B's write refuses A's.
    assert!(
        b_guard.fencing_token() > a_guard.fencing_token(),
        "tokens {} then {}",
        a_guard.fencing_token(),
        b_guard.fencing_token()
    );
    let key = format!("{name}-resource");
    let mut conn = raw(new).await;
    distlock_redis::fence::set(&mut conn, &key, "b", b_guard.fencing_token())
        .await
        .unwrap();
    let late = distlock_redis::fence::set(&mut conn, &key, "a", a_guard.fencing_token()).await;
    assert!(late.is_err(), "the old holder's write was accepted");
    let value: String = run(new, redis::cmd("GET").arg(&key)).await;
    assert_eq!(value, "b");
}

#[tokio::test]
async fn replicas_refuse_a_grant_the_replicas_did_not_acknowledge() {
    let mut set = SentinelSet::start().await;
    let url = set.url("?replicas=1&timeout=2s");
    let a = connect_or_explain(&url).await;
    let name = unique("sentinel-wait");
    take_and_release(&*a, &name).await;
    let (got, _, new) = grant_then_lose_the_master(&mut set, &*a, &name).await;
    let e = got.expect_err("a grant no replica acknowledged was handed out");
    assert!(
        matches!(e, LockError::Unavailable { .. }) && e.to_string().contains("replica"),
        "{e}"
    );
    // Nobody is left waiting out a lease: B takes the name at once on the new master.
    let b = connect_or_explain(&url).await;
    let started = Instant::now();
    let g = b
        .acquire(&name, &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    let on_new: i64 = run(new, redis::cmd("EXISTS").arg(&name)).await;
    assert_eq!(on_new, 1);
    g.release().await.unwrap();
}

#[tokio::test]
async fn lock_delay_keeps_a_new_master_quiet_until_the_old_lease_is_over() {
    let mut set = SentinelSet::start().await;
    let url = set.url(&format!("?lock_delay={}s", TTL.as_secs()));
    let a = connect_or_explain(&url).await;
    let name = unique("sentinel-delay");
    // The first grant on a master distlock has not seen waits the delay too; its record
    // (the master's run id) reaches the replicas before they are paused.
    let warm = Instant::now();
    a.acquire(&name, &opts(TTL * 2))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert!(
        warm.elapsed() >= TTL - Duration::from_millis(100),
        "no quiet time on a fresh master"
    );
    let master = set.master().await;
    let acked: i64 = run(master, redis::cmd("WAIT").arg(2).arg(2000)).await;
    assert_eq!(acked, 2);
    let (got, a_at, _) = grant_then_lose_the_master(&mut set, &*a, &name).await;
    let a_guard = got.unwrap();
    let b = connect_or_explain(&url).await;
    let b_guard = b.acquire(&name, &opts(TTL * 3)).await.unwrap();
    let b_at = Instant::now();
    assert!(
        b_at >= a_at + TTL,
        "B was granted {:?} after A, inside A's {TTL:?} lease",
        b_at - a_at
    );
    assert!(b_guard.fencing_token() > a_guard.fencing_token());
}

/// `replicas=1` on a master that lacks distlock's scripts (a promoted replica has none) while
/// replication lags: the `EVALSHA` that meets `NOSCRIPT` goes with a `WAIT` that takes its whole
/// bound, and the `EVAL` that follows gets only what is left, so the refusal comes within the
/// call's bound (a refusal, its grant given back) rather than as a timeout that leaves the grant.
#[tokio::test]
async fn a_missing_script_costs_no_second_wait() {
    let set = SentinelSet::start().await;
    let url = set.url("?replicas=1&timeout=2s");
    let a = connect_or_explain(&url).await;
    let name = unique("sentinel-noscript");
    take_and_release(&*a, &name).await;
    let master = set.master().await;
    set.hold_replication();
    // An unacknowledged write on the connection, so that every `WAIT` after it blocks.
    let first = a.try_acquire(&name, &opts(Duration::ZERO)).await;
    assert!(first.is_err(), "granted without a replica: {first:?}");
    let _: () = run(master, redis::cmd("SCRIPT").arg("FLUSH")).await;
    let started = Instant::now();
    let e = a
        .try_acquire(&name, &opts(Duration::ZERO))
        .await
        .expect_err("granted without a replica");
    assert!(
        matches!(e, LockError::Unavailable { .. }) && e.to_string().contains("replica"),
        "not the refusal, after {:?}: {e}",
        started.elapsed()
    );
    let left: i64 = run(master, redis::cmd("EXISTS").arg(&name)).await;
    assert_eq!(left, 0, "the refused grant was left on the master");
    set.drop_replication();
}
