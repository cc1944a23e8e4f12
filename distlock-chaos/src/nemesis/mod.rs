//! The random fault schedule (nemesis): while four clients contend on two names and write to a
//! [`FencedResource`] per name, faults drawn at random times from a seed hit the clients and
//! the store — overlapping faults included — and everything is healed at the end. The
//! [`History`] checker and the resources judge the whole run.
//!
//! # Clients
//! Clients 0 and 1 are tasks of this process (a stall freezes one of them); clients 2 and 3
//! are child processes of the `distlock-chaos` binary (`nemesis-client`), which a SIGKILL ends for
//! real: the store frees their locks by lease, session or connection, and a new process takes
//! the slot after a delay. Every client reaches a networked store through its own fault proxy.
//!
//! # Fault kinds per target
//! Store faults hit only the chaos service set (`DISTLOCK_SERVICES_SET=chaos`, ports +1000), so
//! tests running against the shared set meanwhile see none of them; on the shared set only the
//! four client faults are drawn.
//!
//! | target | stall | client SIGKILL | partition, latency, lost replies | server-side connection kill | store pause (SIGSTOP) | store kill + restart | follower cut |
//! |---|---|---|---|---|---|---|---|
//! | sqlite-row | ✓ | ✓ | – | – | – | – | – |
//! | postgres-row, postgres-for_update, postgres-advisory | ✓ | ✓ | ✓ | ✓ every lock session | ✓ postmaster and all backends | ✓ fast shutdown, start | – |
//! | mysql-row, mysql-for_update, mysql-advisory | ✓ | ✓ | ✓ | ✓ every lock session | ✓ | ✓ SIGKILL (crash recovery), start | – |
//! | redis | ✓ | ✓ | ✓ | – | ✓ | ✓ SIGKILL, restarted empty (overlaps across it excused) | – |
//! | redlock | ✓ | ✓ | ✓ | – | ✓ any master | ✓ any master, down ≥ lease + 200 ms | – |
//! | zookeeper | ✓ | ✓ | ✓ | – | ✓ | ✓ SIGKILL, restart from its log | – |
//! | zookeeper-ensemble | ✓ | ✓ | ✓ | – | ✓ any member or the leader | ✓ the leader or any member | – |
//! | zookeeper-netns | ✓ | ✓ | ✓ | – | ✓ any member or the leader | ✓ the leader or any member | ✓ a follower from its leader |
//! | etcd | ✓ | ✓ | ✓ | – | ✓ | ✓ | – |
//! | etcd-cluster | ✓ | ✓ | ✓ | – | ✓ any member or the leader | ✓ the leader or any member | – |
//!
//! At most one store fault runs at a time (Redlock: two, on distinct masters, a quorum stays);
//! client faults overlap each other and store faults freely.
//!
//! # Verdicts
//! Stale writes accepted, i.e. writes accepted with a token below one the resource had already
//! accepted (must be 0); tokens not above the previous hold's on the same name (0); overlaps of
//! holds both holders believed valid (0; a hold ends the instant its guard's `lost()` resolves,
//! a killed client's at its death). Overlaps are excused only across a fault after which the
//! backend claims nothing: a Redis single instance restarted without persistence, a `for_update`
//! or advisory lock whose session the server ended (kill or restart) — the holder learns it at its next
//! renewal; fencing must still hold there. A hold's lock was granted somewhere between the
//! acquire's call and its return, so a pair is excused when one could have been granted before
//! such a fault ended and the other returned after it began; the same excuses a token below the
//! previous acquisition's (a lock granted before the kill whose reply came after the next
//! holder's). Liveness: after the heal every client gets every
//! name again within [`LIVENESS_BOUND`]; and nothing stays held in the store. The report lists
//! the schedule, so a failure replays from its seed:
//! `scripts/chaos.sh --random --seed S --minutes M --backend B --services chaos`.

mod faults;
mod report;
mod schedule;
mod worker;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_core::DistributedLock;
use rand::rngs::StdRng;
use rand::SeedableRng;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AssertSqlSafe, Row};
use tokio::sync::watch;
use tokio::time::Instant;

pub use report::{Applied, NemesisReport, Status};
pub use schedule::{
    profile, schedule, Event, Fault, Kind, Member, Profile, CLIENTS, IN_PROCESS, PROCESSES,
};
pub use worker::{child_main, LIVENESS_BOUND};

use crate::backends::{connect, Target};
use crate::fenced::FencedResource;
use crate::history::History;
use crate::services::ServiceSet;
use crate::takeover::proxies;
use faults::{sleep_or_heal, Net, Store};
use worker::{contend, ChildArgs, Counters, Local, ProcClient, Worker};

/// How to run the nemesis.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The seed: the schedule and every client's choices follow from it.
    pub seed: u64,
    /// How long faults are drawn.
    pub duration: Duration,
    /// The service set the target lives on; store faults only on [`ServiceSet::Chaos`].
    pub services: ServiceSet,
    /// The `distlock-chaos` binary, for client processes (None: every client in this process, no
    /// client SIGKILL).
    pub exe: Option<std::path::PathBuf>,
}

/// Creates the PostgreSQL database `url` names if it does not exist (the fenced resources
/// live apart from the lock database, so a server-side kill of lock sessions spares them).
async fn ensure_database(url: &str) -> Result<(), String> {
    let (server, db) = url
        .rsplit_once('/')
        .ok_or_else(|| format!("no database in {url}"))?;
    let db = db.split('?').next().unwrap_or(db);
    if db.is_empty() || !db.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("unexpected database name {db:?} in {url}"));
    }
    sqlx::any::install_default_drivers();
    let admin = AnyPoolOptions::new()
        .max_connections(1)
        .connect_with(
            AnyConnectOptions::from_str(&format!("{server}/postgres"))
                .map_err(|e| e.to_string())?,
        )
        .await
        .map_err(|e| format!("{e}; is the resource database up (`scripts/services.sh up`)?"))?;
    let exists = sqlx::query("SELECT COUNT(*) FROM pg_database WHERE datname = $1")
        .bind(db)
        .fetch_one(&admin)
        .await
        .map_err(|e| e.to_string())?
        .try_get::<i64, _>(0)
        .map_err(|e| e.to_string())?;
    if exists == 0 {
        // Two runs creating it at once: one wins, the other's error is harmless.
        let _ = sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {db}")))
            .execute(&admin)
            .await;
    }
    admin.close().await;
    Ok(())
}

/// What the fault tasks share.
struct Ctx {
    nets: Vec<Arc<Net>>,
    stalls: HashMap<usize, Arc<AtomicBool>>,
    procs: HashMap<usize, Arc<ProcClient>>,
    store: Store,
    heal: watch::Receiver<bool>,
}

/// Applies one fault, heals it after its duration (or at the run's heal), and says how it went.
async fn apply(ctx: Arc<Ctx>, e: Event) -> Applied {
    let t0 = Instant::now();
    let mut heal = ctx.heal.clone();
    let ms = Duration::from_millis;
    let net = |c: usize| ctx.nets.get(c).filter(|n| !n.is_empty());
    let r: Result<String, String> = match e.fault {
        Fault::Stall { client } => match ctx.stalls.get(&client) {
            Some(f) => {
                f.store(true, Ordering::SeqCst);
                Ok(format!("client-{client}'s next hold freezes"))
            }
            None => Err(format!("skipped: client-{client} is not in this process")),
        },
        Fault::ClientKill { client, respawn_ms } => match ctx.procs.get(&client) {
            Some(pc) => match pc.kill().await {
                Ok(note) => {
                    sleep_or_heal(ms(respawn_ms), &mut heal).await;
                    pc.spawn()
                        .await
                        .map(|()| format!("{note}; replaced after {respawn_ms} ms"))
                }
                Err(e) => Err(e),
            },
            None => Err(format!("skipped: client-{client} is not a process")),
        },
        Fault::Partition { client, for_ms } => match net(client) {
            Some(n) => {
                n.cut();
                sleep_or_heal(ms(for_ms), &mut heal).await;
                n.uncut();
                Ok(format!("client-{client} cut"))
            }
            None => Err("skipped: no network".into()),
        },
        Fault::LostReplies { client, for_ms } => match net(client) {
            Some(n) => {
                n.hold_replies();
                sleep_or_heal(ms(for_ms), &mut heal).await;
                n.release_replies();
                Ok(format!("client-{client}'s replies held"))
            }
            None => Err("skipped: no network".into()),
        },
        Fault::Latency {
            client,
            ms: l,
            for_ms,
        } => match net(client) {
            Some(n) => {
                n.add_latency(l);
                sleep_or_heal(ms(for_ms), &mut heal).await;
                n.remove_latency(l);
                Ok(format!("client-{client} +{l} ms each way"))
            }
            None => Err("skipped: no network".into()),
        },
        Fault::ServerKill => ctx.store.server_kill().await,
        Fault::StorePause { member, for_ms } => {
            ctx.store.pause(member, ms(for_ms), &mut heal).await
        }
        Fault::StoreRestart { member, down_ms } => {
            ctx.store.restart(member, ms(down_ms), &mut heal).await
        }
        Fault::FollowerCut { follower, for_ms } => {
            ctx.store
                .follower_cut(follower, ms(for_ms), &mut heal)
                .await
        }
    };
    let (status, note) = match r {
        Ok(n) => (Status::Done, n),
        Err(e) if e.starts_with("skipped") => (Status::Skipped, e),
        Err(e) => (Status::Failed, e),
    };
    Applied {
        at_ms: e.at_ms,
        fault: e.fault,
        took_ms: t0.elapsed().as_millis() as u64,
        status,
        note,
    }
}

/// Runs the nemesis on `t` with fenced resources in the PostgreSQL database `pg` (created if
/// missing; keep it apart from the lock database `distlock`).
///
/// # Errors
/// Setup failures (a store, the resource database or the client binary not reachable).
pub async fn run(t: &Target, pg: &str, o: &RunOptions) -> Result<NemesisReport, String> {
    let networked = !t.hosts.is_empty();
    // The in-process reference store cannot be shared with client processes.
    let exe = o
        .exe
        .as_ref()
        .filter(|_| t.template != crate::backends::MEMORY_URL);
    let p = profile(
        t.label,
        networked,
        exe.is_some(),
        o.services == ServiceSet::Chaos,
    );
    let plan = schedule(o.seed, o.duration, &p);
    ensure_database(pg).await?;
    let tag = &distlock_core::backend::owner_token()[..8];
    let names: Vec<String> = (0..2).map(|i| format!("chaos-nemesis-{tag}-{i}")).collect();
    let (mut resources, mut histories) = (Vec::new(), Vec::new());
    for n in &names {
        resources.push(FencedResource::create(pg, &format!("{n}-{}", t.label)).await?);
        histories.push(History::default());
    }
    let counters = Arc::new(Counters::default());
    let mut nets = Vec::new();
    for _ in 0..CLIENTS {
        nets.push(Arc::new(Net::new(if networked {
            proxies(t).await?
        } else {
            Vec::new()
        })));
    }
    let url_of = |net: &Net| {
        if networked {
            t.url_via(&net.ports())
        } else {
            t.url()
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (mut locals, mut stalls, mut workers, mut procs) =
        (Vec::new(), HashMap::new(), Vec::new(), HashMap::new());
    for (ci, net) in nets.iter().enumerate() {
        let who = format!("client-{ci}");
        if let (Some(exe), true) = (exe, PROCESSES.contains(&ci)) {
            let pc = Arc::new(ProcClient::new(
                ChildArgs {
                    exe: exe.clone(),
                    url: url_of(net),
                    pg: pg.to_owned(),
                    names: names.clone(),
                    resources: resources.iter().map(|r| r.id().to_owned()).collect(),
                    who,
                    seed: o.seed ^ (ci as u64 + 1).wrapping_mul(0x9E37_79B9),
                },
                histories.clone(),
                Arc::clone(&counters),
            ));
            pc.spawn().await?;
            procs.insert(ci, pc);
            continue;
        }
        let lock: Arc<dyn DistributedLock> =
            connect(&url_of(net)).await.map_err(|e| e.to_string())?;
        let stall = Arc::new(AtomicBool::new(false));
        stalls.insert(ci, Arc::clone(&stall));
        locals.push((ci, Arc::clone(&lock)));
        let w = Worker {
            lock,
            names: names.clone(),
            resources: resources.clone(),
            who: who.clone(),
            stall: Some(stall),
            net: Some(Arc::clone(net)),
        };
        let rec = Arc::new(Local {
            who,
            histories: histories.clone(),
            counters: Arc::clone(&counters),
        });
        let (stop, seed) = (
            Arc::clone(&stop),
            o.seed ^ (ci as u64 + 1).wrapping_mul(0x9E37_79B9),
        );
        workers.push(tokio::spawn(async move {
            contend(&w, &rec, &mut StdRng::seed_from_u64(seed), &stop).await;
        }));
    }
    let (heal_tx, heal_rx) = watch::channel(false);
    let ctx = Arc::new(Ctx {
        nets: nets.clone(),
        stalls,
        procs,
        store: Store::new(o.services, t, &p),
        heal: heal_rx,
    });
    // The nemesis itself: each fault runs as its own task, so faults overlap.
    let started = Instant::now();
    let mut tasks = Vec::new();
    for e in &plan {
        tokio::time::sleep_until(started + Duration::from_millis(e.at_ms)).await;
        tasks.push(tokio::spawn(apply(Arc::clone(&ctx), e.clone())));
    }
    tokio::time::sleep_until(started + o.duration).await;
    // Heal everything, stop the clients (bounded), then judge.
    let _ = heal_tx.send(true);
    let mut report = NemesisReport {
        backend: t.label.into(),
        seed: o.seed,
        minutes: o.duration.as_secs_f64() / 60.0,
        services: o.services.name().into(),
        schedule: plan,
        ..Default::default()
    };
    for (task, e) in tasks.into_iter().zip(report.schedule.clone()) {
        match tokio::time::timeout(Duration::from_secs(180), task).await {
            Ok(Ok(a)) => {
                if a.status == Status::Failed && a.fault.kind().is_store() {
                    report
                        .problems
                        .push(format!("{:?} at {} ms: {}", a.fault, a.at_ms, a.note));
                }
                report.applied.push(a);
            }
            _ => report.problems.push(format!(
                "{:?} at {} ms did not heal within 180 s of the end",
                e.fault, e.at_ms
            )),
        }
    }
    for s in ctx.stalls.values() {
        s.store(false, Ordering::SeqCst);
    }
    for n in &nets {
        n.heal_all();
    }
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        if tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .is_err()
        {
            report
                .problems
                .push("a client did not stop within 30 s of the heal".into());
        }
    }
    // Liveness: every client gets every name again (client processes check for themselves).
    let in_process = async {
        let mut problems = Vec::new();
        for (ci, lock) in &locals {
            for n in &names {
                let t0 = Instant::now();
                match worker::acquire_after_heal(&**lock, n).await {
                    Ok(g) => {
                        if let Err(e) = g.release().await {
                            problems
                                .push(format!("client-{ci}: release of {n} after the heal: {e}"));
                        }
                    }
                    Err(e) => problems.push(format!(
                        "liveness: client-{ci} could not get {n} within {:?} of the heal: {e}",
                        t0.elapsed()
                    )),
                }
            }
        }
        problems
    };
    let processes = async {
        let mut problems = Vec::new();
        for pc in ctx.procs.values() {
            problems.extend(pc.finish().await);
        }
        problems
    };
    let (a, b) = tokio::join!(in_process, processes);
    report.liveness = a.into_iter().chain(b).collect();
    // Judge.
    report.acquisitions = counters.acquisitions.load(Ordering::SeqCst);
    report.failed_attempts = counters.failed.load(Ordering::SeqCst);
    report.wait_overruns = counters.overruns.load(Ordering::SeqCst);
    report.worst_overrun_ms = counters.worst_overrun_ms.load(Ordering::SeqCst);
    let windows = ctx.store.windows();
    for h in &histories {
        let j = h.judge(&windows, started);
        report.overlaps += j.overlaps;
        report.overlaps_excused += j.overlaps_excused;
        report.token_regressions += j.regressions;
        report.token_regressions_excused += j.regressions_excused;
        report.examples.extend(j.examples);
    }
    for r in &resources {
        let s = r.stats().await?;
        report.writes_accepted += s.accepted;
        report.stale_rejected += s.rejected;
        report.out_of_order += s.out_of_order;
    }
    if let Some((_, lock)) = locals.first() {
        for (n, h) in names.iter().zip(&histories) {
            if let Ok(info) = lock.inspect(n).await {
                if info.held {
                    report.leftovers.push(format!(
                        "{n} still held at the end (token {:?}): {}",
                        info.fencing_token,
                        holder(h, info.fencing_token, started)
                    ));
                }
            }
        }
    }
    Ok(report)
}

/// Which hold of `h` has token `token`, for a leftover's diagnosis.
fn holder(h: &History, token: Option<u64>, started: Instant) -> String {
    let ms = |at: Instant| at.saturating_duration_since(started).as_millis();
    let found: Vec<String> = h
        .holds()
        .iter()
        .filter(|x| Some(x.token) == token)
        .map(|x| {
            format!(
                "{} acquired it {} ms into the run and {}",
                x.client,
                ms(x.acquired_at),
                match x.ended_at {
                    Some(e) if x.lost => format!("lost it at {} ms", ms(e)),
                    Some(e) => format!("released it at {} ms", ms(e)),
                    None => "never let go".to_owned(),
                }
            )
        })
        .collect();
    if found.is_empty() {
        "no client was ever given that token (an acquisition that returned no guard)".to_owned()
    } else {
        found.join("; ")
    }
}
