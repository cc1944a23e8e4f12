//! Redis Cluster (`redis+cluster://`) on the shared 6-node cluster of `scripts/services.sh`:
//! a held lock survives its hash slot moving to another primary (every key of the lock moves
//! with the slot; renewals and the release follow the `MOVED` redirection) and its primary's
//! failover to the replica (`CLUSTER FAILOVER`) and losing its primary without a word (SIGKILL,
//! or SIGSTOP with its connections open, while the cluster promotes the replica); `replicas=`
//! refuses a grant a stalled replica did not acknowledge and `lock_delay=` keeps a promoted
//! replica quiet; and a name
//! whose braces would split its keys across slots is refused. The tests that change the
//! cluster's layout take turns, each once the last change has settled. The conformance suite
//! runs on the same cluster (tests/conformance.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock, LockError};
use redis::Value;
use support::*;

/// Held by each test that moves slots or primaries.
static LAYOUT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether every replica among the `CLUSTER NODES` lines has its replication link up (a
/// node that just rejoined may still be syncing, and refuses a manual failover).
async fn replicas_in_sync(lines: &[Vec<&str>]) -> bool {
    for f in lines.iter().filter(|f| f[2].contains("slave")) {
        let port: u16 = f[1].split(['@', ':']).nth(1).unwrap().parse().unwrap();
        let role: Value = run(port, &mut redis::cmd("ROLE")).await;
        let Value::Array(items) = role else {
            return false;
        };
        if !matches!(items.get(3), Some(Value::BulkString(s)) if s == b"connected") {
            return false;
        }
    }
    true
}

/// Takes the layout turn once the cluster has settled from the last change (at most 30 s):
/// three primaries, each with a replica in sync, and no node failing or out of touch.
async fn layout_turn() -> tokio::sync::MutexGuard<'static, ()> {
    let turn = LAYOUT.lock().await;
    let started = std::time::Instant::now();
    loop {
        let nodes: String = run(16410, &mut redis::cmd("CLUSTER").arg("NODES").clone()).await;
        let lines: Vec<Vec<&str>> = nodes
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        let healthy = lines.len() == 6
            && lines
                .iter()
                .all(|f| !f[2].contains("fail") && f[7] == "connected");
        let primaries: Vec<&str> = lines
            .iter()
            .filter(|f| f[2].contains("master") && f.len() > 8)
            .map(|f| f[0])
            .collect();
        let covered = primaries.len() == 3
            && primaries
                .iter()
                .all(|id| lines.iter().any(|f| f[2].contains("slave") && f[3] == *id));
        if healthy && covered && replicas_in_sync(&lines).await {
            return turn;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the cluster did not settle:\n{nodes}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `(node id, port)` of every primary, and the id of the primary serving `slot`.
async fn primaries(slot: i64) -> (Vec<(String, u16)>, String) {
    let nodes: String = run(16410, &mut redis::cmd("CLUSTER").arg("NODES").clone()).await;
    let mut masters = Vec::new();
    let mut owner = None;
    for line in nodes.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if !f[2].contains("master") || f[2].contains("fail") {
            continue;
        }
        let port: u16 = f[1].split(['@', ':']).nth(1).unwrap().parse().unwrap();
        for range in &f[8..] {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            if let (Ok(lo), Ok(hi)) = (lo.parse::<i64>(), hi.parse::<i64>()) {
                if (lo..=hi).contains(&slot) {
                    owner = Some(f[0].to_owned());
                }
            }
        }
        masters.push((f[0].to_owned(), port));
    }
    (masters, owner.expect("the slot has a primary"))
}

/// Moves `slot` from its primary to another one, keys and all, as `redis-cli --cluster
/// reshard` does; returns the new primary's port.
async fn move_slot(slot: i64) -> u16 {
    let (masters, from) = primaries(slot).await;
    let port = |id: &str| masters.iter().find(|(m, _)| m == id).unwrap().1;
    let (to, to_port) = masters.iter().find(|(m, _)| *m != from).unwrap().clone();
    let from_port = port(&from);
    let setslot = |how: &str, id: &str| {
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .arg(id)
            .clone()
    };
    let _: () = run(to_port, &mut setslot("IMPORTING", &from)).await;
    let _: () = run(from_port, &mut setslot("MIGRATING", &to)).await;
    loop {
        let keys: Vec<String> = run(
            from_port,
            redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100),
        )
        .await;
        if keys.is_empty() {
            break;
        }
        let _: Value = run(
            from_port,
            redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(to_port)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys),
        )
        .await;
    }
    for (_, p) in &masters {
        let _: () = run(*p, &mut setslot("NODE", &to)).await;
    }
    to_port
}

#[tokio::test]
async fn a_held_lock_follows_its_slot_to_another_primary() {
    let _turn = layout_turn().await;
    let lock = connect_or_explain(&cluster_url()).await;
    let name = unique("cluster-reshard");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(2))
        .wait(Duration::from_secs(10));
    let g = lock.acquire(&name, &opts).await.unwrap();
    let slot: i64 = run(16410, redis::cmd("CLUSTER").arg("KEYSLOT").arg(&name)).await;
    let fence_slot: i64 = run(
        16410,
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(aux_key(&name, "fence")),
    )
    .await;
    assert_eq!(slot, fence_slot, "the fencing counter is in another slot");
    let to = move_slot(slot).await;
    let there: i64 = run(to, redis::cmd("EXISTS").arg(&name)).await;
    assert_eq!(there, 1, "the lock key did not move with its slot");
    // Three leases later the guard has renewed through the redirection.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        !g.is_lost(),
        "the lock was lost after its slot moved: {g:?}"
    );
    let other = connect_or_explain(&cluster_url()).await;
    assert!(other.try_acquire(&name, &opts).await.unwrap().is_none());
    let token = g.fencing_token();
    g.release().await.unwrap();
    let next = other.acquire(&name, &opts).await.unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
}

/// The port of the replica of the primary `id`.
async fn replica_of(id: &str) -> u16 {
    let nodes: String = run(16410, &mut redis::cmd("CLUSTER").arg("NODES").clone()).await;
    nodes
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f[2].contains("slave") && f[3] == id)
        .map(|f| f[1].split(['@', ':']).nth(1).unwrap().parse().unwrap())
        .expect("the primary has a replica")
}

/// The ports of the primary serving `name`'s slot and of its replica.
async fn serving(name: &str) -> (u16, u16) {
    let slot: i64 = run(16410, redis::cmd("CLUSTER").arg("KEYSLOT").arg(name)).await;
    let (masters, owner) = primaries(slot).await;
    let primary = masters.iter().find(|(m, _)| *m == owner).unwrap().1;
    (primary, replica_of(&owner).await)
}

/// Sends `signal` to the cluster node on `port`: what undoes it, when dropped.
fn signal(signal: &'static str, port: u16) -> Revive {
    let pid = services(&["pid", &format!("redis-{port}")]);
    let sent = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{signal} {pid}");
    Revive(signal, port)
}

/// Undoes a signal to a cluster node when dropped: a stalled node resumes, a killed one is
/// started again (it rejoins as its successor's replica). Never panics: it may run while a
/// failed test unwinds.
struct Revive(&'static str, u16);

impl Drop for Revive {
    fn drop(&mut self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services.sh");
        let node = format!("redis-{}", self.1);
        if self.0 == "KILL" {
            let _ = std::process::Command::new(script)
                .args(["start-one", &node])
                .output();
        } else if let Ok(out) = std::process::Command::new(script)
            .args(["pid", &node])
            .output()
        {
            let pid = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &pid])
                .status();
        }
    }
}

/// How a test takes a held lock's primary away.
#[derive(Clone, Copy)]
enum Loss {
    /// `CLUSTER FAILOVER` on the replica: coordinated, nothing lost.
    Failover,
    /// The primary lost without a word (`KILL`, or `STOP` past the cluster's node timeout with
    /// its connections open): the cluster promotes the replica by itself.
    Signal(&'static str),
}

/// Takes away the primary serving `name`, once its replica holds `name`'s key: the replica's
/// port, once it is the primary, and what brings the old one back.
async fn lose_primary(name: &str, loss: Loss) -> (u16, Option<Revive>) {
    let (old, replica) = serving(name).await;
    let mut on_replica = raw(replica).await;
    let _: () = redis::cmd("READONLY")
        .query_async(&mut on_replica)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    while redis::cmd("EXISTS")
        .arg(name)
        .query_async::<i64>(&mut on_replica)
        .await
        .unwrap()
        == 0
    {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the replica never got the lock's key"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let revive = match loss {
        Loss::Failover => {
            let _: () = run(replica, redis::cmd("CLUSTER").arg("FAILOVER")).await;
            None
        }
        Loss::Signal(how) => Some(signal(how, old)),
    };
    loop {
        let role: Value = run(replica, &mut redis::cmd("ROLE")).await;
        if matches!(&role, Value::Array(r) if matches!(r.first(), Some(Value::BulkString(m)) if m == b"master"))
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(25),
            "no failover: {role:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (replica, revive)
}

/// A held lock's primary goes (`loss`); once the replica is promoted, the guard, whose grant
/// the replica has, renews there and stays held while the old primary is still gone. (A grant
/// not yet replicated is lost in a failover: tests/sentinel.rs shows that cost and its
/// remedies.) A killed primary is started again at the end, a stalled one resumed.
async fn a_held_lock_survives_losing_its_primary(loss: Loss, ttl: Duration, then: Duration) {
    let _turn = layout_turn().await;
    let lock = connect_or_explain(&cluster_url()).await;
    let name = unique("cluster-lost-primary");
    let opts = AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(10));
    let g = lock.acquire(&name, &opts).await.unwrap();
    let (replica, _revive) = lose_primary(&name, loss).await;
    tokio::time::sleep(then).await;
    assert!(!g.is_lost(), "the lock was lost with its primary: {g:?}");
    let there: i64 = run(replica, redis::cmd("EXISTS").arg(&name)).await;
    assert_eq!(there, 1, "the lock is not on the new primary");
    let other = connect_or_explain(&cluster_url()).await;
    let quick = AcquireOptions::new().wait(Duration::ZERO);
    assert!(
        other.try_acquire(&name, &quick).await.unwrap().is_none(),
        "a second holder on the new primary"
    );
    let token = g.fencing_token();
    g.release().await.unwrap();
    let next = other.acquire(&name, &opts).await.unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
}

/// A client that only tries (each try cut off at the core's 2 s bound, before its 5 s
/// `timeout`) follows a stalled primary's promoted replica too: a call given up on after a
/// second unanswered marks the node.
#[tokio::test]
async fn tries_alone_follow_a_stalled_primary() {
    let _turn = layout_turn().await;
    // Another client holds the name over the stall, then stops renewing; `lock` only tries.
    let holder = connect_or_explain(&cluster_url()).await;
    let lock = connect_or_explain(&format!("{}?timeout=5s", cluster_url())).await;
    let name = unique("cluster-tries");
    let short = AcquireOptions::new().ttl(Duration::from_secs(2));
    let g = holder.try_acquire(&name, &short).await.unwrap().unwrap();
    let (replica, _revive) = lose_primary(&name, Loss::Signal("STOP")).await;
    g.abandon();
    let quick = AcquireOptions::new().wait(Duration::ZERO);
    let started = std::time::Instant::now();
    loop {
        if let Ok(Some(g)) = lock.try_acquire(&name, &quick).await {
            let there: i64 = run(replica, redis::cmd("EXISTS").arg(&name)).await;
            g.release().await.unwrap();
            assert_eq!(there, 1, "granted elsewhere than on the new primary");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "still not on the new primary {replica} 15 s after its promotion"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Three leases after the promotion.
#[tokio::test]
async fn a_held_lock_survives_its_primarys_failover() {
    let ttl = Duration::from_secs(2);
    a_held_lock_survives_losing_its_primary(Loss::Failover, ttl, ttl * 3).await;
}

#[tokio::test]
async fn a_held_lock_survives_its_primary_killed() {
    let ttl = Duration::from_secs(10);
    a_held_lock_survives_losing_its_primary(Loss::Signal("KILL"), ttl, ttl * 4 / 5).await;
}

/// A renewal reaches the new primary about two timeouts (3 s each) after the first one that
/// met the stall: a 10 s lease rides it out.
#[tokio::test]
async fn a_held_lock_survives_its_primary_stalled() {
    let ttl = Duration::from_secs(10);
    a_held_lock_survives_losing_its_primary(Loss::Signal("STOP"), ttl, ttl * 4 / 5).await;
}

/// `replicas=1`: `WAIT` goes with the script to the lock's primary and counts its replica, so
/// with the replica stalled a grant is given back and reported unavailable, while a client
/// without the option is granted the name at once.
#[tokio::test]
async fn a_grant_the_replica_did_not_acknowledge_is_refused() {
    let _turn = layout_turn().await;
    let acked = connect_or_explain(&format!("{}?replicas=1&timeout=2s", cluster_url())).await;
    let name = unique("cluster-wait");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(2));
    // A primary without distlock's scripts (a promoted replica has none): redis-rs's `SCRIPT
    // LOAD` fallback must reach it, not ride with `WAIT` to a random node.
    let (primary, replica) = serving(&name).await;
    let _: () = run(primary, redis::cmd("SCRIPT").arg("FLUSH")).await;
    let g = acked.acquire(&name, &opts).await.unwrap();
    g.release().await.unwrap();
    let _revive = signal("STOP", replica);
    let e = acked
        .acquire(&name, &opts)
        .await
        .expect_err("a grant no replica acknowledged was handed out");
    assert!(
        matches!(e, LockError::Unavailable { .. }) && e.to_string().contains("replica"),
        "{e}"
    );
    // Given back, and out of the queue, by the time the error is returned.
    let left: i64 = run(
        primary,
        redis::cmd("EXISTS").arg(&name).arg(aux_key(&name, "queue")),
    )
    .await;
    assert_eq!(
        left, 0,
        "the refused acquisition left its grant or queue entry"
    );
    let plain = connect_or_explain(&cluster_url()).await;
    let quick = AcquireOptions::new().wait(Duration::ZERO);
    let g = plain.try_acquire(&name, &quick).await.unwrap();
    g.expect("the name is free without replicas=")
        .release()
        .await
        .unwrap();
}

/// `lock_delay=`: a promoted replica grants nothing in the lock's slot until the delay has run
/// from its first acquisition there, though the name is free (a client without the option is
/// granted it at once).
#[tokio::test]
async fn lock_delay_keeps_a_promoted_replica_quiet() {
    const DELAY: Duration = Duration::from_secs(4);
    let _turn = layout_turn().await;
    let delayed = connect_or_explain(&format!("{}?lock_delay=4s", cluster_url())).await;
    let name = unique("cluster-delay");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(2))
        .wait(DELAY * 3);
    // The first grant in a slot of a primary not granted on before waits the delay too.
    let g = delayed.acquire(&name, &opts).await.unwrap();
    lose_primary(&name, Loss::Failover).await;
    let promoted = std::time::Instant::now();
    g.release().await.unwrap();
    let plain = connect_or_explain(&cluster_url()).await;
    let quick = AcquireOptions::new().wait(Duration::ZERO);
    let g = plain.try_acquire(&name, &quick).await.unwrap();
    g.expect("the name is free without lock_delay=")
        .release()
        .await
        .unwrap();
    let g = delayed.acquire(&name, &opts).await.unwrap();
    let after = promoted.elapsed();
    assert!(
        after >= DELAY,
        "granted {after:?} after the promotion, inside the {DELAY:?} delay"
    );
    g.release().await.unwrap();
}

/// A primary without distlock's scripts (a promoted replica has none; `SCRIPT FLUSH` empties
/// one) is given the one a call needs with that call, even while another node is stalled:
/// redis-rs's own fallback sends `SCRIPT LOAD` to every node and fails on the stalled one.
#[tokio::test]
async fn a_missing_script_is_run_while_another_node_is_stalled() {
    let _turn = layout_turn().await;
    let lock = connect_or_explain(&format!("{}?timeout=2s", cluster_url())).await;
    let name = unique("cluster-noscript");
    let (primary, replica) = serving(&name).await;
    let _revive = signal("STOP", replica);
    let _: () = run(primary, redis::cmd("SCRIPT").arg("FLUSH")).await;
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .wait(Duration::ZERO);
    let g = lock.try_acquire(&name, &opts).await.unwrap();
    g.expect("a free name").release().await.unwrap();
}

#[tokio::test]
async fn a_name_whose_braces_split_its_keys_is_refused() {
    let _turn = layout_turn().await;
    let lock = connect_or_explain(&cluster_url()).await;
    let opts = AcquireOptions::new().wait(Duration::ZERO);
    for name in ["a{x}b", "x}"] {
        match lock.try_acquire(name, &opts).await {
            Err(LockError::InvalidName { .. }) => {}
            other => panic!("{name:?}: {other:?}"),
        }
    }
    // An unclosed brace is no hash tag: the whole key is hashed, as for the keys beside it.
    let lock: std::sync::Arc<dyn DistributedLock> = lock;
    let name = format!("{}a{{x", unique("brace"));
    let g = lock.try_acquire(&name, &opts).await.unwrap();
    g.expect("a free name").release().await.unwrap();
}

/// A seed address that accepts connections and answers nothing (a blackholed route) holds up
/// neither `connect` nor the first acquisition: the seeds are asked at once and the first to
/// read the slot map wins.
#[tokio::test]
async fn a_stalled_seed_holds_up_no_connect() {
    let _turn = layout_turn().await;
    let stalled = distlock_core::fault::FaultProxy::start(([127, 0, 0, 1], 16410).into())
        .await
        .unwrap();
    stalled.blackhole();
    let url = format!(
        "redis+cluster://{},127.0.0.1:16411,127.0.0.1:16412?timeout=5s",
        stalled.addr()
    );
    let started = std::time::Instant::now();
    let lock = connect_or_explain(&url).await;
    let name = unique("cluster-stalled-seed");
    let g = lock
        .try_acquire(&name, &AcquireOptions::new())
        .await
        .unwrap()
        .expect("a free name");
    let took = started.elapsed();
    g.release().await.unwrap();
    assert!(
        took < Duration::from_secs(2),
        "connect and a try took {took:?} with one seed stalled (timeout 5 s)"
    );
}
