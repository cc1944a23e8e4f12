//! Nothing of ours blocks a lock, on real servers (issue 14): a node a lost create reply left
//! behind is never waited on and never outlives the acquisition, and a lost guard's node goes
//! at once instead of keeping the name locked until the process exits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::fault::FaultProxy;
use distlock_core::{DistributedLock, LockGuard};
use distlock_zk::{BeforeCreate, ZkLock};
use support::*;
use tokio::time::Instant;
use zookeeper_client::{Acls, Client, CreateMode};

/// A before-create hook: makes the lock directory (so the create that follows is the client's
/// contender create), then runs `f`.
fn hook<F, Fut>(f: F) -> BeforeCreate
where
    F: Fn(Client, String, String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let f = Arc::new(f);
    Arc::new(move |client: Client, dir: String, prefix: String| {
        let f = Arc::clone(&f);
        Box::pin(async move {
            let parent = CreateMode::Persistent.with_acls(Acls::anyone_all());
            let _ = client.mkdir(&dir, &parent).await;
            f(client, dir, prefix).await;
        })
    })
}

/// The contender nodes under `name`'s directory.
async fn contenders(url: &str, name: &str) -> Vec<String> {
    let zk = raw(url).await;
    match zk.get_children(&format!("/distlock/{name}")).await {
        Ok((kids, _)) => distlock_zk::path::sorted_contenders(kids),
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("{e}"),
    }
}

/// The state a create whose reply was lost leaves when a lagging server hid its node from the
/// recovery listing: a node with this acquisition's prefix already queued, made by our own
/// session, before the create that succeeds. The client must take the lowest node of its own as
/// its contender (never wait on it: that waited forever with the default wait) and delete the
/// other.
async fn orphan_of_ours_is_not_waited_on(url: &str) {
    let lock = zk_lock(&format!("{url}?session_timeout=4s")).await;
    let name = unique("orphan");
    let orphans = Arc::new(std::sync::Mutex::new(Vec::new()));
    let found = Arc::clone(&orphans);
    lock.set_before_create(Some(hook(move |client, dir, prefix| {
        let found = Arc::clone(&found);
        async move {
            let eph = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
            let path = format!("{dir}/{prefix}lock-");
            let (_, seq) = client.create(&path, &[], &eph).await.unwrap();
            found.lock().unwrap().push(format!("{prefix}lock-{seq}"));
        }
    })));
    let t = Instant::now();
    let g = match lock.acquire(&name, &wait(3)).await {
        Ok(g) => g,
        Err(e) => panic!(
            "{url}: waited on its own orphan node: {e} after {:?}",
            t.elapsed()
        ),
    };
    lock.set_before_create(None);
    let orphan = orphans.lock().unwrap().pop().expect("the hook ran");
    assert_eq!(
        contenders(url, &name).await,
        vec![orphan.clone()],
        "{url}: the lowest node of ours is the contender and the newer one is gone"
    );
    let info = lock.inspect(&name).await.unwrap();
    assert_eq!(info.owner.as_deref(), Some(orphan.as_str()));
    assert_eq!(info.fencing_token, Some(g.fencing_token()));
    g.release().await.unwrap();
    assert!(
        contenders(url, &name).await.is_empty(),
        "{url}: a node was left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orphan_of_ours_is_not_waited_on_standalone() {
    orphan_of_ours_is_not_waited_on(&standalone_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orphan_of_ours_is_not_waited_on_ensemble() {
    orphan_of_ours_is_not_waited_on(&ensemble_url()).await;
}

/// A real `ConnectionLoss` right after the create went out: the reply is cut (the proxy to the
/// member in use is killed while the reply is held back by latency), the client moves to another
/// member, finds what the create made behind a `sync`, holds the lock with one node, and leaves
/// nothing after release.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connection_cut_after_create_leaves_one_node_and_nothing_after_release() {
    let mut proxies = Vec::new();
    for p in ports(&ensemble_url()) {
        proxies.push(Arc::new(
            FaultProxy::start(([127, 0, 0, 1], p).into()).await.unwrap(),
        ));
    }
    let hosts: Vec<String> = proxies
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.addr().port()))
        .collect();
    let lock = zk_lock(&format!("zk://{}?session_timeout=6s", hosts.join(","))).await;
    let name = unique("cut");
    let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (to_cut, flag) = (proxies.clone(), Arc::clone(&cut));
    lock.set_before_create(Some(hook(move |_client, _dir, _prefix| {
        let used = to_cut
            .iter()
            .find(|p| p.open_connections() > 0)
            .cloned()
            .expect("the client's connection");
        let flag = Arc::clone(&flag);
        async move {
            // The create reaches the server after 300 ms; its reply would be back after
            // 600 ms: the connection dies at 450 ms.
            used.set_latency(Duration::from_millis(300));
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(450)).await;
                used.kill();
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
            });
        }
    })));
    holds_with_one_node_then_none(&lock, &ensemble_url(), &name).await;
    assert!(cut.load(std::sync::atomic::Ordering::SeqCst));
}

/// The connection goes silent right after the create went out, until the client gives it up
/// (no reply within its connection timeout, 2/5 of the session timeout) and the proxy heals: the
/// create may land late, on the old connection. The client reconnects, holds the lock with one
/// node, and leaves nothing after release. It used to fail with a non-retryable error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn silent_connection_during_create_leaves_one_node_and_nothing_after_release() {
    let url = standalone_url();
    let (lock, proxy) = proxied(&url, "4s").await;
    let proxy = Arc::new(proxy);
    let name = unique("silent");
    let silenced = Arc::clone(&proxy);
    lock.set_before_create(Some(hook(move |_client, _dir, _prefix| {
        let proxy = Arc::clone(&silenced);
        async move {
            proxy.blackhole();
            tokio::spawn(async move {
                // The client gives the connection up after 1.6 s of silence.
                tokio::time::sleep(Duration::from_millis(2200)).await;
                proxy.heal();
            });
        }
    })));
    holds_with_one_node_then_none(&lock, &url, &name).await;
}

/// Acquires `name` through `lock` (whose hook does the damage, and is then removed), and checks
/// that one node of ours is queued while held and none after release.
async fn holds_with_one_node_then_none(lock: &ZkLock, url: &str, name: &str) {
    let g = match lock.acquire(name, &wait(20)).await {
        Ok(g) => g,
        Err(e) => panic!("{url}: the acquisition failed: {e}"),
    };
    lock.set_before_create(None);
    let nodes = contenders(url, name).await;
    assert_eq!(nodes.len(), 1, "{url}: not one node of ours: {nodes:?}");
    g.release().await.unwrap();
    let nodes = contenders(url, name).await;
    assert!(nodes.is_empty(), "{url}: left behind: {nodes:?}");
}

/// A holder client reaching `url`'s first server through a proxy, with a 4 s session.
async fn proxied_holder(url: &str) -> (Arc<ZkLock>, FaultProxy) {
    let (holder, proxy) = proxied(url, "4s").await;
    (Arc::new(holder), proxy)
}

/// Black-holes the proxy for `cut`, checks that `g` was reported lost, and heals.
async fn cut_until_lost(proxy: &FaultProxy, g: &LockGuard, cut: Duration) {
    proxy.blackhole();
    tokio::time::sleep(cut).await;
    assert!(g.is_lost(), "not lost after a {cut:?} black hole: {g:?}");
    proxy.heal();
}

/// After the loss, another client gets the name within `bound` of the heal while the lost
/// guard and its client live on, and no node of the first client remains.
async fn another_gets_it_promptly(url: &str, name: &str, bound: Duration) {
    let other = zk_lock(&format!("{url}?session_timeout=4s")).await;
    let healed = Instant::now();
    let g2 = match other.acquire(name, &wait(8)).await {
        Ok(g) => g,
        Err(e) => panic!(
            "the lost guard's node still blocks {name:?}: {e} after {:?}",
            healed.elapsed()
        ),
    };
    assert!(
        healed.elapsed() < bound,
        "took {:?} after the heal",
        healed.elapsed()
    );
    assert_eq!(
        contenders(url, name).await.len(),
        1,
        "a node of the lost holder is still queued"
    );
    g2.release().await.unwrap();
    assert!(contenders(url, name).await.is_empty());
}

/// A guard lost while its session lives (the renewals through the leader did not come back in
/// time, the connection held): its node is deleted once the store answers again. It used to
/// stay until the process exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_guard_node_goes_while_its_session_lives() {
    let url = standalone_url();
    let name = unique("lost-live");
    let (holder, proxy) = proxied_holder(&url).await;
    let g = holder.acquire(&name, &wait(10)).await.unwrap();
    // A third of the 4 s session is the guard's validity: lost after at most 1.33 s of silence,
    // while the session is retired only 1 s after the client notices (≥ 1.1 s) the silence.
    cut_until_lost(&proxy, &g, Duration::from_millis(1500)).await;
    another_gets_it_promptly(&url, &name, Duration::from_secs(3)).await;
    assert!(
        g.release().await.is_err(),
        "release of a lost guard reported success"
    );
    drop(holder);
}

/// A disconnection longer than a quarter of the session timeout retires the session; it is now
/// closed on the server as soon as the server can be reached, so every node of it goes: the
/// lost guard's and a waiter's (the reconnected session used to keep both), and the waiter
/// queues again on a new session within its wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retired_session_is_closed_and_leaves_nothing() {
    let url = standalone_url();
    let (name, queued) = (unique("lost-retired"), unique("lost-waiter"));
    let (holder, proxy) = proxied_holder(&url).await;
    // Any other node of the session (here a plain ephemeral one) must go with it too.
    let marker = format!("/distlock/{name}-marker");
    let path = marker.clone();
    holder.set_before_create(Some(hook(move |client, _dir, _prefix| {
        let path = path.clone();
        async move {
            let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
            client.create(&path, &[], &eph).await.unwrap();
        }
    })));
    let g = holder.acquire(&name, &wait(10)).await.unwrap();
    holder.set_before_create(None);
    // The holder's client also waits for a name someone else holds.
    let other = zk_lock(&format!("{url}?session_timeout=4s")).await;
    let blocker = other.acquire(&queued, &wait(10)).await.unwrap();
    let waiter = tokio::spawn({
        let (holder, queued) = (Arc::clone(&holder), queued.clone());
        async move { holder.acquire(&queued, &wait(60)).await.map(drop) }
    });
    let until = Instant::now() + Duration::from_secs(5);
    while contenders(&url, &queued).await.len() < 2 {
        assert!(Instant::now() < until, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let queued_before = contenders(&url, &queued).await;
    cut_until_lost(&proxy, &g, Duration::from_secs(3)).await;
    another_gets_it_promptly(&url, &name, Duration::from_secs(4)).await;
    // The waiter's node went with the session (the waiter may have queued again since, on a
    // new session, with a node of its own).
    let healed = Instant::now();
    while (contenders(&url, &queued).await.iter())
        .filter(|c| queued_before.contains(c))
        .count()
        > 1
    {
        assert!(
            healed.elapsed() < Duration::from_secs(4),
            "the retired session's waiter node is still queued"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The waiter rides it out within its wait: it queues again on a new session and gets the
    // name once the blocker releases it.
    blocker.release().await.unwrap();
    let w = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter whose session was retired never got the name")
        .unwrap();
    assert!(w.is_ok(), "{w:?}");
    while !contenders(&url, &queued).await.is_empty() {
        assert!(
            healed.elapsed() < Duration::from_secs(15),
            "the waiter's node stayed after its guard was dropped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let zk = raw(&url).await;
    while zk.check_stat(&marker).await.unwrap().is_some() {
        assert!(
            healed.elapsed() < Duration::from_secs(6),
            "the retired session still lives on the server"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(g);
}
