//! Faults on the store's side: a ZooKeeper ensemble leader SIGKILLed, one Redlock master
//! restarted empty, and a SQL holder's connections killed by the server (`pg_terminate_backend`,
//! `KILL`). Processes are driven through `scripts/services.sh stop-one/start-one`.

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, AssertSqlSafe, Row};
use tokio::time::Instant;

use crate::backends::{connect, Target};
use crate::history::History;
use crate::outcome::Outcome;
use crate::services::ServiceSet;
use crate::takeover::{after_take_over, hold_writing, resource, take_over};
use crate::undo::{Restart, Resume, Uncut};

/// `scripts/services.sh ARGS` on the set `DISTLOCK_SERVICES_SET` names (default: shared).
fn services(args: &[&str]) -> Result<String, String> {
    ServiceSet::from_env()?.run(args)
}

/// The port of the ensemble's current leader.
fn zk_leader() -> Result<u16, String> {
    ServiceSet::from_env()?.zk_leader()
}

/// Milliseconds from `from` to each instant.
fn ms_after(from: Instant, at: &[Instant]) -> Vec<f64> {
    at.iter()
        .map(|a| a.saturating_duration_since(from).as_secs_f64() * 1000.0)
        .collect()
}

/// Two clients take turns on one name (hold 150 ms, writing) for `run`; `fault` (given the
/// name) starts 1.5 s in. Acquire errors while the store recovers are counted, not fatal.
pub(crate) async fn contend_through<F, Fut>(
    t: &Target,
    url: &str,
    pg: &str,
    scenario: &str,
    run: Duration,
    fault: F,
) -> Result<Outcome, String>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<String, String>>,
{
    let res = resource(pg, scenario.split(' ').next().unwrap_or("store"), t).await?;
    let name = format!(
        "chaos-store-{}",
        &distlock_core::backend::owner_token()[..8]
    );
    let history = History::default();
    let end = Instant::now() + run;
    let mut tasks = Vec::new();
    for who in ["a", "b"] {
        let lock: Arc<dyn DistributedLock> = connect(url).await.map_err(|e| e.to_string())?;
        let (name, res, history) = (name.clone(), res.clone(), history.clone());
        tasks.push(tokio::spawn(async move {
            let (mut n, mut errors, mut lost) = (0u64, 0u64, Vec::new());
            while Instant::now() < end {
                let opts = AcquireOptions::new()
                    .ttl(Duration::from_secs(1))
                    .wait(end.saturating_duration_since(Instant::now()));
                let g = match lock.acquire(&name, &opts).await {
                    Ok(g) => g,
                    // The run's end cut the wait short: not the fault's doing.
                    Err(distlock_core::LockError::Timeout { .. }) => continue,
                    Err(_) => {
                        errors += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                n += 1;
                match hold_writing(&g, &res, &history, who, Duration::from_millis(150)).await {
                    Some(at) => {
                        lost.push(at);
                        g.abandon();
                    }
                    None => {
                        let _ = g.release().await;
                    }
                }
            }
            (n, errors, lost)
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let fault_at = Instant::now();
    let what = fault(name).await?;
    let (mut acquisitions, mut errors, mut lost) = (0, 0, Vec::new());
    for task in tasks {
        let (n, e, l) = task.await.map_err(|e| e.to_string())?;
        acquisitions += n;
        errors += e;
        lost.extend(l);
    }
    let stats = res.stats().await?;
    Ok(Outcome {
        scenario: scenario.into(),
        backend: t.label.into(),
        acquisitions,
        overlaps: history.overlaps(),
        stale_rejected: stats.rejected,
        out_of_order: stats.out_of_order,
        lost_ms: ms_after(fault_at, &lost),
        note: format!("{what}; {errors} acquire errors while it recovered"),
        ..Default::default()
    })
}

/// The ZooKeeper ensemble's or the etcd cluster's leader is SIGKILLed while two clients take
/// turns, and restarted 4 s later. No overlap; ZooKeeper holders whose session could not be
/// confirmed, and etcd holders whose lease could not be renewed, report `lost()`.
pub async fn leader_killed(t: &Target, pg: &str) -> Result<Outcome, String> {
    let etcd = t.label == "etcd-cluster";
    let url = t.url().replace("session_timeout=2s", "session_timeout=8s");
    contend_through(
        t,
        &url,
        pg,
        if etcd {
            "leader killed (3-member cluster)"
        } else {
            "leader killed (3-node ensemble)"
        },
        Duration::from_secs(9),
        |_| async move {
            let member = if etcd {
                format!("etcd-{}", ServiceSet::from_env()?.etcd_leader()?)
            } else {
                format!("zk-{}", zk_leader()?)
            };
            let leader = member.clone();
            let restart = Restart::new(ServiceSet::from_env()?, &member);
            services(&["stop-one", &member])?;
            tokio::time::sleep(Duration::from_secs(4)).await;
            restart.now().await?;
            Ok(format!("leader {leader} killed, back after 4 s"))
        },
    )
    .await
}

/// Redlock: one of five masters is SIGKILLed and restarted empty (no persistence) while two
/// clients take turns. The other four still form quorums: no overlap.
pub async fn redlock_master_restarted(t: &Target, pg: &str) -> Result<Outcome, String> {
    let port = t.port(2).ok_or("redlock needs five masters")?;
    contend_through(
        t,
        &t.url(),
        pg,
        "one master restarted empty",
        Duration::from_secs(6),
        |_| async move {
            let member = format!("redis-{port}");
            let restart = Restart::new(ServiceSet::from_env()?, &member);
            services(&["stop-one", &member])?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            restart.now().await?;
            Ok(format!("master {port} killed, restarted empty after 0.5 s"))
        },
    )
    .await
}

/// The server's sessions in database `distlock`, excluding the asking one.
pub(crate) async fn sessions(admin: &AnyPool, mysql: bool) -> Result<Vec<i64>, String> {
    let q = if mysql {
        "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST WHERE DB = 'distlock' AND ID <> CONNECTION_ID()"
    } else {
        "SELECT pid::bigint FROM pg_stat_activity WHERE datname = 'distlock' AND pid <> pg_backend_pid()"
    };
    sqlx::query(q)
        .fetch_all(admin)
        .await
        .map_err(|e| e.to_string())?
        .iter()
        .map(|r| r.try_get::<i64, _>(0).map_err(|e| e.to_string()))
        .collect()
}

pub(crate) async fn kill_sessions(admin: &AnyPool, mysql: bool, ids: &[i64]) -> Result<(), String> {
    for id in ids {
        let q = if mysql {
            format!("KILL CONNECTION {id}")
        } else {
            format!("SELECT pg_terminate_backend({id})")
        };
        // A session that already ended is fine.
        let _ = sqlx::query(AssertSqlSafe(q)).execute(admin).await;
    }
    Ok(())
}

/// PostgreSQL / MariaDB: every connection of the holder's client is killed by the server
/// (`pg_terminate_backend` / `KILL CONNECTION`) while another client waits. Row mode keeps its
/// lease (it reconnects and renews); `for_update` loses its lock at the kill, the holder learns it
/// at its next renewal, and fencing rejects its writes after the new holder's.
pub async fn server_killed_connection(t: &Target, pg: &str) -> Result<Outcome, String> {
    let mysql = t.template.starts_with("mysql");
    sqlx::any::install_default_drivers();
    let url = t.url();
    let store = url.split('?').next().unwrap_or(&url);
    let admin = AnyPoolOptions::new()
        .max_connections(1)
        .connect_with(AnyConnectOptions::from_str(store).map_err(|e| e.to_string())?)
        .await
        .map_err(|e| e.to_string())?;
    let res = resource(pg, "server-kill", t).await?;
    let other = connect(&t.url()).await.map_err(|e| e.to_string())?;
    let name = format!("chaos-kill-{}", &distlock_core::backend::owner_token()[..8]);
    let before = sessions(&admin, mysql).await?;
    let holder = connect(&t.url()).await.map_err(|e| e.to_string())?;
    let g = holder
        .acquire(&name, &crate::takeover::opts())
        .await
        .map_err(|e| e.to_string())?;
    let theirs: Vec<i64> = sessions(&admin, mysql)
        .await?
        .into_iter()
        .filter(|id| !before.contains(id))
        .collect();
    let history = History::default();
    // The holder writes for 3 s, then releases (if it still believes it holds the lock).
    let w = tokio::spawn({
        let (res, history) = (res.clone(), history.clone());
        async move {
            let lost =
                hold_writing(&g, &res, &history, "killed-holder", Duration::from_secs(3)).await;
            if lost.is_none() {
                let _ = g.release().await;
            }
            lost
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiting = tokio::spawn({
        let name = name.clone();
        async move { take_over(&*other, &name, Duration::from_secs(15)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let killed_at = Instant::now();
    kill_sessions(&admin, mysql, &theirs).await?;
    let (g2, took_at) = waiting.await.map_err(|e| e.to_string())??;
    let lost_at = after_take_over(g2, &res, &history, w).await?;
    let stats = res.stats().await?;
    let lease = t.lease;
    Ok(Outcome {
        scenario: "holder's connections killed by the server".into(),
        backend: t.label.into(),
        acquisitions: 2,
        overlaps: history.overlaps(),
        // A connection-bound lock ends at the kill; its holder learns it at the next renewal.
        overlap_expected: !lease,
        stale_rejected: stats.rejected,
        out_of_order: stats.out_of_order,
        lost_ms: ms_after(killed_at, &lost_at.into_iter().collect::<Vec<_>>()),
        next_holder_ms: ms_after(killed_at, &[took_at]),
        note: format!("{} sessions killed", theirs.len()),
        ..Default::default()
    })
}

/// How [`zk_follower_cut`]'s error starts where network namespaces cannot be made.
pub const UNSUPPORTED: &str = "network namespaces unsupported here";

/// The `zk-netns` members of `set` as `(index, address, mode)`.
pub(crate) fn netns_members(set: ServiceSet) -> Result<Vec<(String, String, String)>, String> {
    let status = set.run(&["status", "zk-netns"])?;
    if status.contains("unsupported") {
        return Err(format!("{UNSUPPORTED}: {}", status.trim()));
    }
    let members: Vec<_> = status
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                ["zk-netns", n, ip, "up", mode] => Some((
                    (*n).to_owned(),
                    (*ip).to_owned(),
                    mode.trim_matches(|c| c == '(' || c == ')').to_owned(),
                )),
                _ => None,
            }
        })
        .collect();
    if members.len() != 3 {
        return Err(format!(
            "the zk-netns ensemble is not up ({status:?}); run `{}={} scripts/services.sh up zk-netns` as root",
            crate::services::ENV,
            set.name()
        ));
    }
    Ok(members)
}

/// ZooKeeper in network namespaces: the holder's only server is a follower, and that follower
/// is cut from its leader (both directions) while the holder stays connected to it. The leader
/// stops hearing of the holder's session and expires it; the follower only notices the lost
/// leader after `syncLimit` ticks. The holder's guard must report `lost()` before another client
/// (talking to the leader's side) gets the lock.
pub async fn zk_follower_cut(pg: &str) -> Result<Outcome, String> {
    let set = ServiceSet::from_env()?;
    let members = netns_members(set)?;
    let leader = members
        .iter()
        .find(|m| m.2 == "leader")
        .ok_or("no zk-netns leader")?;
    let mut followers = members.iter().filter(|m| m.2 == "follower");
    let (cut, other_side) = (
        followers.next().ok_or("no follower")?,
        followers.next().ok_or("one follower only")?,
    );
    let t = Target {
        label: "zookeeper-netns",
        template: "zk://{hosts}?session_timeout=2s".into(),
        hosts: vec![],
        lease: false,
    };
    let holder = connect(&format!("zk://{}:2181?session_timeout=2s", cut.1))
        .await
        .map_err(|e| e.to_string())?;
    let other = connect(&format!(
        "zk://{}:2181,{}:2181?session_timeout=2s",
        leader.1, other_side.1
    ))
    .await
    .map_err(|e| e.to_string())?;
    let res = resource(pg, "follower-cut", &t).await?;
    let name = format!(
        "chaos-follower-{}",
        &distlock_core::backend::owner_token()[..8]
    );
    let history = History::default();
    let g = holder
        .acquire(&name, &crate::takeover::opts())
        .await
        .map_err(|e| e.to_string())?;
    let w = tokio::spawn({
        let (res, history) = (res.clone(), history.clone());
        async move {
            let lost =
                hold_writing(&g, &res, &history, "cut-follower", Duration::from_secs(15)).await;
            g.abandon();
            lost
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let heal = Uncut(set, cut.0.clone(), leader.0.clone());
    services(&["netns-cut", &cut.0, &leader.0])?;
    let cut_at = Instant::now();
    let (g2, took_at) = take_over(&*other, &name, Duration::from_secs(20)).await?;
    let lost_at = after_take_over(g2, &res, &history, w).await?;
    drop(heal);
    let stats = res.stats().await?;
    Ok(Outcome {
        scenario: "follower cut from its leader (network namespaces)".into(),
        backend: t.label.into(),
        acquisitions: 2,
        overlaps: history.overlaps(),
        stale_rejected: stats.rejected,
        out_of_order: stats.out_of_order,
        lost_ms: ms_after(cut_at, &lost_at.into_iter().collect::<Vec<_>>()),
        next_holder_ms: ms_after(cut_at, &[took_at]),
        note: format!("holder on follower {}, leader {}", cut.1, leader.1),
        ..Default::default()
    })
}

/// Pauses the store process `member` (a `services.sh` instance name) with SIGSTOP for
/// `pause`, then resumes it with SIGCONT.
async fn pause_process(member: &str, pause: Duration) -> Result<String, String> {
    let pid: i32 = services(&["pid", member])?
        .trim()
        .parse()
        .map_err(|_| format!("no pid for {member}; run `scripts/services.sh up`"))?;
    let pid = nix::unistd::Pid::from_raw(pid);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).map_err(|e| e.to_string())?;
    let resume = Resume(vec![pid]);
    tokio::time::sleep(pause).await;
    drop(resume);
    Ok(format!("{member} paused (SIGSTOP) for {pause:?}"))
}

/// The store process paused (SIGSTOP) for 2.5 leases while two clients take turns, then resumed:
/// the Redis server, one Redlock master, the ZooKeeper ensemble's leader, etcd (a member or the
/// cluster's leader) or MariaDB (every mode; the fenced resource lives in PostgreSQL). No
/// overlap: a holder whose renewals cannot get through reports `lost()` before its lease (or
/// validity) runs out, and the store hands the lock on only after it resumes.
pub async fn store_paused(t: &Target, pg: &str) -> Result<Outcome, String> {
    let (member, url) = match t.label {
        "redis" => (format!("redis-{}", t.port(0).unwrap_or_default()), t.url()),
        "redlock" => (format!("redis-{}", t.port(2).unwrap_or_default()), t.url()),
        "zookeeper-ensemble" => (
            format!("zk-{}", zk_leader()?),
            t.url().replace("session_timeout=2s", "session_timeout=8s"),
        ),
        "etcd" => (format!("etcd-{}", t.port(0).unwrap_or_default()), t.url()),
        "etcd-cluster" => (
            format!("etcd-{}", ServiceSet::from_env()?.etcd_leader()?),
            t.url(),
        ),
        _ if t.template.starts_with("mysql") => ("mysql".to_owned(), t.url()),
        other => return Err(format!("no store pause scenario for {other}")),
    };
    contend_through(
        t,
        &url,
        pg,
        "store process paused (SIGSTOP 2.5 s)",
        Duration::from_secs(8),
        |_| pause_process(&member, Duration::from_millis(2500)),
    )
    .await
}

/// MariaDB SIGKILLed during holds and started again (crash recovery included) while two
/// clients take turns. Nobody can take the lock while the database is down; row-mode holders
/// report `lost()` when their lease runs out unrenewed, `for_update` holders at their next
/// renewal. No overlap.
pub async fn database_restarted(t: &Target, pg: &str) -> Result<Outcome, String> {
    if !t.template.starts_with("mysql") {
        return Err(format!(
            "no restart scenario for {} (the fenced resource lives in PostgreSQL)",
            t.label
        ));
    }
    contend_through(
        t,
        &t.url(),
        pg,
        "database SIGKILLed and restarted",
        Duration::from_secs(12),
        |_| async {
            let pid: i32 = services(&["pid", "mysql"])?
                .trim()
                .parse()
                .map_err(|_| "no MariaDB pid; run `scripts/services.sh up`".to_owned())?;
            let restart = Restart::new(ServiceSet::from_env()?, "mysql");
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .map_err(|e| e.to_string())?;
            let down = Instant::now();
            // Wait for the process to be gone before starting it again.
            for _ in 0..100 {
                if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            restart.now().await?;
            Ok(format!(
                "MariaDB down for {:.1} s",
                down.elapsed().as_secs_f64()
            ))
        },
    )
    .await
}
