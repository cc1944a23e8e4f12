//! Redlock: a holder's release hands the lock to the head of the queue on every master, and
//! the head holds once a quorum of those grants reached it — the messages that wake it are its
//! grants, so it needs no quorum round of its own. A grant from fewer masters than a quorum is
//! never the lock, the token stays above every earlier holder's, and a head that died while
//! queued holds the lock back no longer than its place in the queues would have.
//!
//! The client under test connects to every master through a fault proxy of its own, which
//! counts what it sends (its command and pub/sub connections both go through it) or cuts it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::AcquireOptions;
use support::grants::*;
use support::*;
use tokio::time::Instant;

/// One thread: nothing runs between the head's grant and its count of what it sent (see
/// `direct_grant.rs`).
#[tokio::test(flavor = "current_thread")]
async fn the_head_holds_on_a_quorum_of_grants_without_a_round_of_its_own() {
    the_head_holds_on_grants_without_a_request(&redlock_url(), None).await;
}

/// A holder whose release reaches only 2 of the 5 masters grants the head there and nowhere
/// else: 2 grants are no quorum, so the head keeps waiting until the holder's keys on the other
/// 3 masters run out, and then holds with a token above the holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_from_fewer_masters_than_a_quorum_are_not_the_lock() {
    let (holder, proxies) = proxied(&redlock_url()).await;
    let waiter = connect_or_explain(&redlock_url()).await;
    let name = unique("redlock-minority");
    let ttl = Duration::from_secs(4);
    let opts = AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(20));
    let held = holder.acquire(&name, &opts).await.unwrap();
    let token = held.fencing_token();
    let task = queued(&waiter, &name, opts.clone()).await;
    for p in &proxies[2..] {
        p.blackhole();
    }
    let released = Instant::now();
    assert!(
        held.release().await.is_err(),
        "a release that reached 2 of 5 masters reported success"
    );
    // The holder's keys on the 3 cut masters run out 4 s after its last renewal (at most
    // ttl/3 ago); until then the lock is the holder's on a quorum, not the head's.
    let watch_until = released + Duration::from_millis(1_500);
    while Instant::now() < watch_until {
        assert!(
            !task.is_finished(),
            "the head held on grants from a minority of masters ({:?} after the release)",
            released.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let held_elsewhere = pttls(&redlock_url(), &name).await[2..]
        .iter()
        .filter(|&&p| p > 0)
        .count();
    assert_eq!(
        held_elsewhere, 3,
        "the test meant the holder's keys on the cut masters to outlive the watch"
    );
    let g = tokio::time::timeout(ttl + Duration::from_secs(4), task)
        .await
        .expect("the head never held after the holder's keys ran out")
        .unwrap();
    assert!(g.fencing_token() > token);
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_died_while_queued_holds_the_lock_back_at_most_its_place() {
    a_dead_head_holds_the_lock_back_at_most_its_place(&redlock_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_lease_granted_directly_is_renewed() {
    a_long_lease_granted_directly_is_renewed_not_lost(&redlock_url()).await;
}

/// A waiter that cannot reach one of the five masters still holds in its turn: its rounds wait
/// out that master's timeout and undo only there, so the other masters' grants count (undoing
/// everywhere removed them, and woke the waiter behind it, which took the lock first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cut_from_one_master_keeps_its_turn() {
    let holder = connect_or_explain(&redlock_url()).await;
    let (first, proxies) = proxied_with(&redlock_url(), "?timeout=500ms").await;
    let second = connect_or_explain(&redlock_url()).await;
    let name = unique("redlock-cut-one");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(20));
    let held = holder.acquire(&name, &opts).await.unwrap();
    let first_task = queued(&first, &name, opts.clone()).await;
    let second_task = queued(&second, &name, opts.clone()).await;
    // From now on each of the first waiter's heartbeat rounds waits 500 ms for master 5; the
    // release lands while one of them does.
    proxies[4].blackhole();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    after_a_heartbeat(&proxies[..4]).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let token = held.fencing_token();
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(8), first_task)
        .await
        .expect("the first waiter did not get the lock in its turn")
        .unwrap();
    assert!(
        !second_task.is_finished(),
        "the second waiter held before the first"
    );
    assert!(g.fencing_token() > token);
    let first_token = g.fencing_token();
    g.release().await.unwrap();
    let g2 = tokio::time::timeout(Duration::from_secs(8), second_task)
        .await
        .expect("the second waiter was never served")
        .unwrap();
    assert!(g2.fencing_token() > first_token);
    g2.release().await.unwrap();
}

/// A holder on a bare quorum (3 of 5 masters; the other two free) does not make a waiter spin:
/// the waiter's rounds win the two free masters and no quorum, and it then waits for the
/// holder's release (or its heartbeat) instead of retrying within milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_does_not_spin_beside_a_holder_on_a_bare_quorum() {
    let (holder, holder_proxies) = proxied_with(&redlock_url(), "?timeout=500ms").await;
    let (waiter, proxies) = proxied(&redlock_url()).await;
    let name = unique("redlock-bare-quorum");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(20));
    // The holder reaches only masters 1-3 while it acquires.
    for p in &holder_proxies[3..] {
        p.kill();
    }
    let held = holder.acquire(&name, &opts).await.unwrap();
    for p in &holder_proxies[3..] {
        p.heal();
    }
    assert_eq!(
        pttls(&redlock_url(), &name)
            .await
            .iter()
            .filter(|&&p| p > 0)
            .count(),
        3,
        "the holder should hold exactly 3 masters"
    );
    let task = queued(&waiter, &name, opts.clone()).await;
    let before = sent(&proxies);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let requests = sent(&proxies) - before;
    // A heartbeat round a second (5 requests, and its undo on the two free masters); a spin
    // retries every 0.5-2.5 ms.
    assert!(
        requests <= 30,
        "the waiter sent {requests} requests in 1.5 s beside a holder on a bare quorum"
    );
    assert!(!task.is_finished());
    let token = held.fencing_token();
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the waiter was not served after the release")
        .unwrap();
    assert!(g.fencing_token() > token);
    g.release().await.unwrap();
}

/// A head whose round is slow on one master (150 ms), and during which another master turns
/// free with the head first in line (a wake-up without a grant, as another client's failed
/// round undoing itself there sends) and two masters grant it the lock (a release that reached
/// only them), runs its next round as soon as its round returns: the free master and the two
/// grants are a quorum a round takes at once. A wake-up that came while the round was out is
/// news — it was counted as old when the count was read after the round returned, and the head
/// then waited the whole gather for grants from the other masters that never came (the
/// 2-process wait tail of `docs/bench/speed-breakdown.md`). These tests set the gather to 1 s
/// (50 ms in use), so a wait that ran out stands apart from a loaded machine's stalls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_during_the_round_ends_the_wait_for_more_grants() {
    let mut scene = Scene::ghost_holds_and_a_head_queues("redlock-wake-in-round").await;
    let slow = Duration::from_millis(150);
    // The head's next heartbeat round reaches master 5 150 ms late; the others answer at once
    // that the ghost holds the lock.
    scene.proxies[4].set_upward_latency(slow);
    let sent = after_a_heartbeat(&scene.proxies[..4]).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    // While the round waits for master 5: master 1 turns free with the head first in line, and
    // masters 2 and 3 grant the head the lock in one release.
    scene.free(0).await;
    scene.grant(1, 7).await;
    scene.grant(2, 7).await;
    let wrote = sent.elapsed();
    assert!(
        wrote < slow - Duration::from_millis(50),
        "the test meant to write while the round was out, but took {wrote:?}"
    );
    // The round already sent to master 5 keeps its delay; the next one does not.
    scene.proxies[4].heal();
    let g = scene.held().await;
    let took = sent.elapsed();
    assert!(
        took < slow + EARLY,
        "the head held {took:?} after its round was sent ({slow:?} on master 5); a master \
         turned free and two granted it while the round was out (a round right after it \
         returns holds a few ms later; waiting for more grants, {GATHER:?} or more)"
    );
    scene.done(g).await;
}

/// Grants of two releases that together reach a quorum (masters 1 and 2 granted the head in
/// one release, 3 in a later one: the later holder's release found the first two masters'
/// keys the head's and left them) end the head's wait for more grants at once: the keys on
/// three masters hold its token, so a round takes them. Grants of different releases never
/// make the lock by themselves (a token drawn before a later holder's could be below it); the
/// head used to wait the whole gather for more grants of the later release (seen in the
/// benchmark as a head four masters had granted running its next round ~50 ms later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_of_two_releases_on_a_quorum_end_the_wait_for_more() {
    let mut scene = Scene::ghost_holds_and_a_head_queues("redlock-two-releases").await;
    // Right after a heartbeat round, so the next one is a second away.
    after_a_heartbeat(&scene.proxies).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    scene.grant(0, 1).await;
    scene.grant(1, 1).await;
    scene.grant(2, 2).await;
    let wrote = Instant::now();
    let g = scene.held().await;
    let took = wrote.elapsed();
    assert!(
        took < EARLY,
        "the head held {took:?} after three masters granted it in two releases (a round right \
         after the third grant holds within a few ms; waiting for more grants, {GATHER:?} or \
         more)"
    );
    scene.done(g).await;
}

/// A wake-up without a grant that makes no quorum with the grants in does not end the head's
/// wait for the rest of a release: one grant and then one free master are two of five, and a
/// round then wins two, undoes both (the grant with them) and, once the release's second grant
/// comes, waits the whole gather for more grants. The head holds as soon as that second grant
/// comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_short_of_a_quorum_keeps_the_wait_for_the_release() {
    let mut scene = Scene::ghost_holds_and_a_head_queues("redlock-short-wake").await;
    after_a_heartbeat(&scene.proxies).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    scene.grant(1, 3).await;
    // The grant reaches the head first (each master's messages come on a connection of their
    // own, so two sent back to back may arrive either way round; a wake-up without a grant
    // that comes first is a round of its own, which this test is not about).
    tokio::time::sleep(Duration::from_millis(10)).await;
    scene.free(0).await;
    tokio::time::sleep(Duration::from_millis(15)).await;
    scene.grant(2, 3).await;
    let wrote = Instant::now();
    let g = scene.held().await;
    let took = wrote.elapsed();
    assert!(
        took < EARLY,
        "the head held {took:?} after the release's second grant (a round right after it holds \
         within a few ms; an early round undid the first grant and then waited {GATHER:?})"
    );
    scene.done(g).await;
}

/// The grant gather of the head in these tests (50 ms in use).
const GATHER: Duration = Duration::from_secs(1);

/// How soon after the writes a head that did not wait out the gather holds, at most: a round
/// and a few ms in use, and far below [`GATHER`] on a loaded machine.
const EARLY: Duration = Duration::from_millis(400);

/// A lock a ghost holds on every master for 10 s (its fencing counter at 100), a head queued
/// behind it through a proxy per master (its grant gather [`GATHER`]), and plain connections
/// to the masters to play the releases that wake and grant it.
struct Scene {
    name: String,
    channel: String,
    member: String,
    proxies: Vec<distlock_core::fault::FaultProxy>,
    conns: Vec<redis::aio::MultiplexedConnection>,
    task: Option<tokio::task::JoinHandle<distlock_core::LockGuard>>,
    _head: std::sync::Arc<dyn distlock_core::DistributedLock>,
}

impl Scene {
    async fn ghost_holds_and_a_head_queues(what: &str) -> Scene {
        let url = redlock_url();
        let (head, proxies) =
            proxied_with_hooks(&url, |c| c.test_hooks.grant_gather = Some(GATHER)).await;
        let name = unique(what);
        let mut conns = Vec::new();
        for p in ports(&url) {
            conns.push(raw(p).await);
        }
        for c in &mut conns {
            hold_as(c, &name, "ghost", 10_000, 100).await;
        }
        let opts = AcquireOptions::new()
            .ttl(Duration::from_secs(10))
            .wait(Duration::from_secs(10));
        let task = queued(&head, &name, opts).await;
        let member = queue_head(&mut conns[0], &name).await;
        Scene {
            channel: format!("distlock:released:{name}"),
            name,
            member,
            proxies,
            conns,
            task: Some(task),
            _head: head,
        }
    }

    /// Master `i` hands the head the lock, as release `release` would (a token above the
    /// counter).
    async fn grant(&mut self, i: usize, release: u64) {
        let c = &mut self.conns[i];
        hold_as(c, &self.name, &self.member, 2_500, 101).await;
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&self.channel)
            .arg(format!("{}\t101\t{release}", self.member))
            .query_async(c)
            .await
            .unwrap();
    }

    /// Master `i` turns free and wakes the head without a grant.
    async fn free(&mut self, i: usize) {
        let _: () = redis::pipe()
            .cmd("DEL")
            .arg(&self.name)
            .ignore()
            .cmd("PUBLISH")
            .arg(&self.channel)
            .arg(&self.member)
            .ignore()
            .query_async(&mut self.conns[i])
            .await
            .unwrap();
    }

    /// The head's guard, once it holds (at most 5 s).
    async fn held(&mut self) -> distlock_core::LockGuard {
        let task = self
            .task
            .take()
            .expect("the head's guard was taken already");
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the head never held")
            .unwrap()
    }

    /// Releases `g` and removes the lock's keys.
    async fn done(mut self, g: distlock_core::LockGuard) {
        g.release().await.unwrap();
        for c in &mut self.conns {
            let _: i64 = redis::cmd("DEL")
                .arg(&self.name)
                .arg(aux_key(&self.name, "fence"))
                .arg(aux_key(&self.name, "queue"))
                .arg(aux_key(&self.name, "qexp"))
                .query_async(c)
                .await
                .unwrap();
        }
    }
}

/// Makes `holder` hold `lock` on the server behind `c` for `px` ms, its fencing counter at
/// `counter`, as a grant or another client's acquisition would leave them.
async fn hold_as(
    c: &mut redis::aio::MultiplexedConnection,
    lock: &str,
    holder: &str,
    px: u64,
    counter: u64,
) {
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(lock)
        .arg(holder)
        .arg("PX")
        .arg(px)
        .ignore()
        .cmd("SET")
        .arg(aux_key(lock, "fence"))
        .arg(counter)
        .ignore()
        .query_async(c)
        .await
        .unwrap();
}

/// The first member of `lock`'s queue on the server behind `c`.
async fn queue_head(c: &mut redis::aio::MultiplexedConnection, lock: &str) -> String {
    let head: Vec<String> = redis::cmd("ZRANGE")
        .arg(aux_key(lock, "queue"))
        .arg(0)
        .arg(0)
        .query_async(c)
        .await
        .unwrap();
    head.into_iter().next().expect("nobody is queued")
}
