//! Store faults on a 3-member etcd cluster this test starts itself (`support::own_cluster`):
//! a follower (the member the clients talk to, unless it leads) and then the leader are
//! SIGKILLed and restarted while holders take turns.
//! Nobody may hold the lock while an earlier holder's guard is still not lost, fencing tokens
//! must rise hold by hold, and no guard may be lost (the 5 s leases ride out an election).
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{AcquireOptions, LockContext};
use support::own_cluster::OwnCluster;
use support::{connect_or_explain, unique};

/// Client ports of the private cluster: 12679, 12689, 12699 (peers +1); the shared servers use
/// 12379-12580 (12579: the TLS member) and the chaos set 13379-13580.
const BASE_PORT: u16 = 12679;

#[derive(Default)]
struct Ledger {
    /// The guard inside the critical section now, if any.
    holder: Option<LockContext>,
    /// Tokens in the order holders entered.
    tokens: Vec<u64>,
    /// Holders that entered while a previous holder's guard was not lost.
    overlaps: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn follower_and_leader_killed_during_holds() {
    let mut cluster = OwnCluster::start(BASE_PORT).await;
    // A member that died mid-request is given up after 1 s (the default is 5 s).
    let url = format!("{}?timeout=1s", cluster.url());
    let name = unique("kill");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let (lost, errors) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(Mutex::new(Vec::new())),
    );
    let mut workers = Vec::new();
    for w in 0..4 {
        let lock = connect_or_explain(&url).await;
        let (ledger, stop, lost, errors, name) = (
            ledger.clone(),
            stop.clone(),
            lost.clone(),
            errors.clone(),
            name.clone(),
        );
        workers.push(tokio::spawn(async move {
            let opts = AcquireOptions::new()
                .ttl(Duration::from_secs(5))
                .wait(Duration::from_secs(20));
            let mut holds = 0usize;
            for _ in 0..10_000 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let g = match lock.acquire(&name, &opts).await {
                    Ok(g) => g,
                    Err(e) if e.is_retryable() => {
                        // A request that hit the killed member: allowed, try again.
                        errors.lock().unwrap().push(format!("worker {w}: {e}"));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    Err(e) => panic!("worker {w}: {e}"),
                };
                {
                    let mut l = ledger.lock().unwrap();
                    if let Some(prev) = l.holder.as_ref().filter(|p| !p.is_lost()) {
                        let msg = format!(
                            "token {} entered while token {} was held",
                            g.fencing_token(),
                            prev.fencing_token()
                        );
                        l.overlaps.push(msg);
                    }
                    l.tokens.push(g.fencing_token());
                    l.holder = Some(g.context());
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
                {
                    let mut l = ledger.lock().unwrap();
                    if l.holder
                        .as_ref()
                        .is_some_and(|h| h.fencing_token() == g.fencing_token())
                    {
                        l.holder = None;
                    }
                }
                if g.is_lost() {
                    lost.fetch_add(1, Ordering::SeqCst);
                    drop(g);
                } else {
                    let _ = g.release().await;
                }
                holds += 1;
            }
            holds
        }));
    }
    let count = || ledger.lock().unwrap().tokens.len();
    // Phase 1: steady state; phase 2: a follower dies and comes back; phase 3: the leader.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before_follower = count();
    let leader = cluster.leader().await;
    // Clients start on the first member: kill it unless it leads.
    let follower = if leader == 0 { 1 } else { 0 };
    cluster.kill(follower);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during_follower = count();
    cluster.restart(follower).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let leader = cluster.leader().await;
    cluster.kill(leader);
    let killed_leader = count();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let during_leader = count();
    cluster.restart(leader).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let mut holds = 0;
    for w in workers {
        holds += tokio::time::timeout(Duration::from_secs(40), w)
            .await
            .expect("a worker hung")
            .unwrap();
    }
    let l = ledger.lock().unwrap();
    let errors = errors.lock().unwrap();
    eprintln!(
        "{holds} holds; {before_follower} before the follower kill, {during_follower} by its restart, {killed_leader} at the leader kill, {during_leader} 4 s later; {} retried errors: {:?}",
        errors.len(),
        errors.iter().take(3).collect::<Vec<_>>()
    );
    assert!(
        l.overlaps.is_empty(),
        "overlapping holders: {:?}",
        l.overlaps
    );
    assert!(
        l.tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens did not rise: {:?}",
        l.tokens
    );
    assert!(
        before_follower >= 3,
        "no progress before faults ({before_follower})"
    );
    assert!(
        during_follower > before_follower,
        "no holder while a follower was down"
    );
    assert!(
        during_leader > killed_leader,
        "no holder within 4 s of the leader kill"
    );
    assert!(
        l.tokens.len() > during_leader,
        "no holder after the leader came back"
    );
    assert_eq!(
        lost.load(Ordering::SeqCst),
        0,
        "guards reported lost during member kills"
    );
}

/// A holder cut off from the cluster (its proxy black-holes every byte: no reply, no reset)
/// reports `lost()` before another client can take the lock, and the next holder's token is
/// greater.
#[tokio::test]
async fn partitioned_holder_is_lost_before_anyone_else_holds() {
    let (proxy, cut, other) = proxied_and_direct().await;
    let name = unique("partition");
    let opts = AcquireOptions::new().ttl(Duration::from_secs(2));
    let g = cut.acquire(&name, &opts).await.unwrap();
    let lost_at = {
        let ctx = g.context();
        tokio::spawn(async move {
            let _ = ctx.lost().await;
            tokio::time::Instant::now()
        })
    };
    proxy.blackhole();
    let g2 = other
        .acquire(&name, &opts.clone().wait(Duration::from_secs(15)))
        .await
        .unwrap();
    let got_at = tokio::time::Instant::now();
    let lost_at = tokio::time::timeout(Duration::from_secs(1), lost_at)
        .await
        .expect("the partitioned holder never reported lost")
        .unwrap();
    assert!(
        lost_at <= got_at,
        "another client held the lock before the cut-off holder knew"
    );
    assert!(g2.fencing_token() > g.fencing_token());
    g2.release().await.unwrap();
    drop(g);
}

/// A release that finds the cluster without a leader (the leader and a follower killed, so the
/// last member refuses every request) fails, and the lock frees as soon as the cluster has a
/// leader again — not a whole lease later (a new leader extends every lease to its full TTL, so
/// a key whose release never arrived would block the name for that long).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_during_a_quorum_loss_frees_the_lock_once_a_leader_is_back() {
    let mut cluster = OwnCluster::start(12709).await;
    let url = format!("{}?timeout=1s", cluster.url());
    let (a, b) = (
        connect_or_explain(&url).await,
        connect_or_explain(&url).await,
    );
    let name = unique("quorum");
    let ttl = Duration::from_secs(10);
    let g = a
        .acquire(&name, &AcquireOptions::new().ttl(ttl))
        .await
        .unwrap();
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    cluster.kill(leader);
    cluster.kill(follower);
    let released = g.release().await;
    assert!(
        released.is_err(),
        "a release without a leader answered {released:?}"
    );
    cluster.restart(follower).await;
    let back = tokio::time::Instant::now();
    let g2 = b
        .acquire(
            &name,
            &AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    let after = back.elapsed();
    assert!(
        after < Duration::from_secs(4),
        "the lock freed {after:?} after the quorum was back (the lease is {ttl:?})"
    );
    g2.release().await.unwrap();
}

/// A waiter whose wait ends while the member does not answer returns at its deadline with the
/// store's error. Before, once the deadline had passed, its retries stopped sleeping (the
/// backoff slept until a deadline already gone) and it retried in a tight loop for as long as
/// its lease could still be alive — returning only after its 10 s lease, not its 800 ms wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_wait_ends_while_the_member_is_down_returns_at_its_deadline() {
    let (proxy, cut, other) = proxied_and_direct().await;
    let name = unique("deadline-down");
    let ttl = AcquireOptions::new().ttl(Duration::from_secs(10));
    let held = other.acquire(&name, &ttl).await.unwrap();
    let waiter = {
        let (name, opts) = (name.clone(), ttl.clone().wait(Duration::from_millis(800)));
        tokio::spawn(async move {
            let t = tokio::time::Instant::now();
            let got = cut.acquire(&name, &opts).await;
            (got.map(|g| g.fencing_token()), t.elapsed())
        })
    };
    // The waiter is queued and watching; then its member stops answering.
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.kill();
    let (got, took) = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the waiter never returned")
        .unwrap();
    assert!(
        got.is_err(),
        "the waiter got the lock {got:?} while it was held"
    );
    assert!(
        took < Duration::from_secs(3),
        "the waiter returned {took:?} after it started (its wait was 800 ms; its lease 10 s)"
    );
    held.release().await.unwrap();
}

/// A proxy to the single member, a client through it (1 s request timeout) and one straight
/// to the member.
async fn proxied_and_direct() -> (
    distlock_core::fault::FaultProxy,
    Arc<dyn distlock_core::DistributedLock>,
    Arc<dyn distlock_core::DistributedLock>,
) {
    let url = support::single_url();
    let port = support::ports(&url)[0];
    let proxy = distlock_core::fault::FaultProxy::start(([127, 0, 0, 1], port).into())
        .await
        .unwrap();
    let cut = connect_or_explain(&format!("etcd://{}?timeout=1s", proxy.addr())).await;
    let other = connect_or_explain(&url).await;
    (proxy, cut, other)
}
