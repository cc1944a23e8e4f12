//! Helpers of the direct-grant tests (`direct_grant.rs`, `redlock_grant.rs`): clients whose
//! every connection goes through a fault proxy per server, waiters started in a task, and the
//! lock key's remaining lease on each server.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::fault::FaultProxy;
use distlock_core::{AcquireOptions, DistributedLock, LockGuard};
use distlock_redis::{RedisConfig, RedisLock};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{connect_or_explain, ports, run, unique};

/// A client of `url` (single or Redlock) whose connections to each server go through a proxy
/// of its own; `query` is appended to the URL (e.g. `?timeout=20s`).
pub async fn proxied_with(url: &str, query: &str) -> (Arc<dyn DistributedLock>, Vec<FaultProxy>) {
    let (through, proxies) = proxies_for(url).await;
    let lock = connect_or_explain(&format!("{through}{query}")).await;
    (lock, proxies)
}

/// [`proxied`], with `hook` applied to the client's configuration (its test hooks).
pub async fn proxied_with_hooks(
    url: &str,
    hook: impl FnOnce(&mut RedisConfig),
) -> (Arc<dyn DistributedLock>, Vec<FaultProxy>) {
    let (through, proxies) = proxies_for(url).await;
    let mut cfg = RedisConfig::from_url(&through).unwrap();
    hook(&mut cfg);
    let lock = match RedisLock::connect(cfg).await {
        Ok(l) => Arc::new(l),
        Err(e) => {
            panic!("cannot reach {url}: {e}\nstart the test stores with `scripts/services.sh up`")
        }
    };
    (lock, proxies)
}

/// A proxy per server of `url`, and the URL that reaches the servers through them.
async fn proxies_for(url: &str) -> (String, Vec<FaultProxy>) {
    let scheme = url.split("://").next().unwrap();
    let mut proxies = Vec::new();
    for port in ports(url) {
        proxies.push(
            FaultProxy::start(([127, 0, 0, 1], port).into())
                .await
                .unwrap(),
        );
    }
    let hosts: Vec<String> = proxies
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.addr().port()))
        .collect();
    (format!("{scheme}://{}", hosts.join(",")), proxies)
}

/// [`proxied_with`] with the URL's defaults.
pub async fn proxied(url: &str) -> (Arc<dyn DistributedLock>, Vec<FaultProxy>) {
    proxied_with(url, "").await
}

/// Everything the client behind `proxies` sent so far.
pub fn sent(proxies: &[FaultProxy]) -> u64 {
    proxies.iter().map(FaultProxy::chunks_sent).sum()
}

/// Waits (at most 3 s) until the client behind `proxies` sends something — a waiter's
/// heartbeat round, once a second — and returns when it did.
pub async fn after_a_heartbeat(proxies: &[FaultProxy]) -> Instant {
    let seen = sent(proxies);
    let beat = Instant::now();
    while sent(proxies) == seen && beat.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Instant::now()
}

/// Starts `lock.acquire(name)` in a task and gives it time to try once and queue.
pub async fn queued(
    lock: &Arc<dyn DistributedLock>,
    name: &str,
    opts: AcquireOptions,
) -> JoinHandle<LockGuard> {
    let task = tokio::spawn({
        let (lock, name) = (Arc::clone(lock), name.to_owned());
        async move { lock.acquire(&name, &opts).await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    task
}

/// The lock key's remaining lease on each server of `url`, once every server's is a grant's
/// claim (more than 0 and at most the waiter ttl, 3 s) or after 1 s of looking (a Redlock
/// release returns once a quorum released; the others follow in the background).
pub async fn grant_claims(url: &str, key: &str) -> Vec<i64> {
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        let claims = pttls(url, key).await;
        if claims.iter().all(|&c| c > 0 && c <= 3_000) || Instant::now() > until {
            return claims;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The lock key's remaining lease on each server of `url`.
pub async fn pttls(url: &str, key: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for port in ports(url) {
        out.push(run(port, redis::cmd("PTTL").arg(key)).await);
    }
    out
}

/// The head of the queue holds on the grants of a holder's release (every server's, here)
/// without sending a request of its own, with a token above the holder's, its grant's claim
/// at most the waiter ttl (3 s) and, after its guard's first renewal, the caller's 20 s lease
/// on every server. Run it on a current-thread runtime: nothing then runs between the head's
/// grant and its count of what it sent (its client unsubscribing from the lock's channel as
/// the last waiter there would otherwise look like a request of the handoff's); every request
/// of the acquisition itself was answered, so counted by the proxy, before the acquire
/// returned.
pub async fn the_head_holds_on_grants_without_a_request(url: &str, identity: Option<&str>) {
    let holder = connect_or_explain(url).await;
    let (waiter, proxies) = proxied(url).await;
    let proxies = Arc::new(proxies);
    let name = unique("grant");
    let mut opts = AcquireOptions::new()
        .ttl(Duration::from_secs(20))
        .wait(Duration::from_secs(10));
    if let Some(identity) = identity {
        opts = opts.holder(identity);
    }
    let held = holder.acquire(&name, &opts).await.unwrap();
    let task = tokio::spawn({
        let (waiter, name, opts, proxies) = (
            Arc::clone(&waiter),
            name.clone(),
            opts.clone(),
            Arc::clone(&proxies),
        );
        async move {
            let g = waiter.acquire(&name, &opts).await.unwrap();
            (g, sent(&proxies))
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Right after one of the waiter's heartbeat rounds (once a second), so the next one cannot
    // fall between the release and the grants.
    after_a_heartbeat(&proxies).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = sent(&proxies);
    let released_at = Instant::now();
    let token = held.fencing_token();
    held.release().await.unwrap();
    let (g, at_grant) = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the head was not granted")
        .unwrap();
    let requests = at_grant - before;
    assert_eq!(
        requests, 0,
        "the head sent {requests} requests between the release and holding (the release's \
         messages should be its grants)"
    );
    assert!(
        g.fencing_token() > token,
        "tokens: {token} then {}",
        g.fencing_token()
    );
    assert!(
        holder.try_acquire(&name, &opts).await.unwrap().is_none(),
        "the lock granted to the head is free for anyone"
    );
    let claims = grant_claims(url, &name).await;
    assert!(
        claims.iter().all(|&c| c > 0 && c <= 3_000),
        "a grant's claim is at most the waiter ttl: {claims:?}"
    );
    tokio::time::sleep_until(released_at + Duration::from_millis(2_000)).await;
    let leases = pttls(url, &name).await;
    assert!(
        leases.iter().all(|&l| l > 15_000),
        "2 s after the grant the lease should be the caller's 20 s one: {leases:?}"
    );
    assert!(!g.is_lost());
    g.release().await.unwrap();
}

/// A release grants the head of the queue even when the head's process died while queued:
/// the lock is then held back for no longer than the rest of the head's place (3 s from its
/// last refresh), never for the lock's 30 s lease, and the next waiter holds with a higher
/// token.
pub async fn a_dead_head_holds_the_lock_back_at_most_its_place(url: &str) {
    let holder = connect_or_explain(url).await;
    let (dead, proxies) = proxied(url).await;
    let next = connect_or_explain(url).await;
    let name = unique("grant-dead");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(20));
    let held = holder.acquire(&name, &opts).await.unwrap();
    let dead_task = queued(&dead, &name, opts.clone()).await;
    let next_task = queued(&next, &name, opts.clone()).await;
    // The head's process "dies": nothing it sends arrives any more, and it never leaves.
    for p in &proxies {
        p.blackhole();
    }
    let died = Instant::now();
    let token = held.fencing_token();
    held.release().await.unwrap();
    // The release granted the dead head on every server (nobody else holds it yet), for no
    // longer than the rest of its place.
    let claims = grant_claims(url, &name).await;
    assert!(
        claims.iter().all(|&c| c > 0 && c <= 3_000),
        "the release should have granted the queue's head for the rest of its place: {claims:?}"
    );
    let g = tokio::time::timeout(Duration::from_secs(10), next_task)
        .await
        .expect("the lock stayed with the dead head")
        .unwrap();
    let waited = died.elapsed();
    assert!(
        waited < Duration::from_millis(4_500),
        "the next waiter got the lock {waited:?} after the head died (its place lapses 3 s \
         after its last refresh; the lock's lease is 30 s)"
    );
    assert!(g.fencing_token() > token);
    g.release().await.unwrap();
    dead_task.abort();
}

/// A head granted the lock with a long lease (300 s, whose 1% safety margin is longer than the
/// grant's 3 s claim) keeps it: the guard renews to the caller's lease instead of reporting it
/// lost before its first renewal.
pub async fn a_long_lease_granted_directly_is_renewed_not_lost(url: &str) {
    let holder = connect_or_explain(url).await;
    let waiter = connect_or_explain(url).await;
    let name = unique("grant-long");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(300))
        .wait(Duration::from_secs(10));
    let held = holder.acquire(&name, &opts).await.unwrap();
    let task = queued(&waiter, &name, opts.clone()).await;
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the head was not granted")
        .unwrap();
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert!(
        !g.is_lost(),
        "a directly granted 300 s lease was reported lost within 3.5 s"
    );
    let leases = pttls(url, &name).await;
    assert!(
        leases.iter().all(|&l| l > 290_000),
        "the granted lock should hold the caller's 300 s lease by now: {leases:?}"
    );
    g.release().await.unwrap();
}
