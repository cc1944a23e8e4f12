//! Redis Sentinel and Redis Cluster failovers while two clients take turns on one name, on the
//! service set's Sentinel set and cluster. Redis replicates asynchronously and a failover does
//! not wait for the old master's last writes, so these deployments make no claim across one
//! (docs/safety.md): overlap is reported, not a violation; the fenced resource must still accept
//! no stale write.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::time::Instant;

use crate::backends::Target;
use crate::outcome::Outcome;
use crate::services::ServiceSet;
use crate::store_faults::contend_through;
use crate::undo::{Restart, Resume};

/// `redis-cli -p PORT ARGS…` (given 5 s): its output; an error reply is an error.
fn redis_cli(port: u16, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("timeout")
        .args(["5", "redis-cli", "-p"])
        .arg(port.to_string())
        .args(args)
        .output()
        .map_err(|e| format!("redis-cli: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || text.starts_with("ERR") || text.starts_with("NOGOODSLAVE") {
        return Err(format!("redis-cli -p {port} {args:?}: {text}"));
    }
    Ok(text)
}

/// Polls `check` every 100 ms for at most 20 s; how long it took.
async fn until(
    what: &str,
    mut check: impl FnMut() -> Result<bool, String>,
) -> Result<Duration, String> {
    let started = Instant::now();
    while !check()? {
        if started.elapsed() > Duration::from_secs(20) {
            return Err(format!("{what}: not within 20 s"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(started.elapsed())
}

/// Whether the server on `port` says it is a master (`ROLE`); `false` when it does not answer.
fn is_master(port: u16) -> bool {
    redis_cli(port, &["role"]).is_ok_and(|r| r.starts_with("master"))
}

/// The two clients through `url`, labelled `label`, with the fault; overlap is expected.
async fn contend<F, Fut>(
    label: &'static str,
    url: String,
    pg: &str,
    scenario: &str,
    fault: F,
) -> Result<Outcome, String>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<String, String>>,
{
    let t = Target {
        label,
        template: url.clone(),
        hosts: Vec::new(),
        lease: true,
    };
    let mut o = contend_through(&t, &url, pg, scenario, Duration::from_secs(12), fault).await?;
    o.overlap_expected = true;
    Ok(o)
}

/// The Sentinel set's master fails over while two clients take turns: on request
/// (`SENTINEL FAILOVER`, retried while the sentinels have no replica to promote yet) or
/// SIGKILLed (started again once a replica is promoted; the sentinels make it a replica).
pub async fn sentinel_failover(pg: &str, killed: bool) -> Result<Outcome, String> {
    let set = ServiceSet::from_env()?;
    let sentinel = set.port(26400);
    let hosts: Vec<String> = [26400, 26401, 26402]
        .map(|p| format!("127.0.0.1:{}", set.port(p)))
        .to_vec();
    let url = format!("redis+sentinel://{}/distlock", hosts.join(","));
    let master = move || -> Result<u16, String> {
        let out = redis_cli(
            sentinel,
            &["sentinel", "get-master-addr-by-name", "distlock"],
        )?;
        (out.lines().nth(1).and_then(|p| p.trim().parse().ok()))
            .ok_or_else(|| format!("sentinel {sentinel} names no master: {out:?}"))
    };
    let scenario = if killed {
        "master SIGKILLed (Sentinel failover)"
    } else {
        "SENTINEL FAILOVER"
    };
    contend("redis-sentinel", url, pg, scenario, move |_| async move {
        let old = master()?;
        let restart = if killed {
            let member = format!("redis-{old}");
            let restart = Restart::new(set, &member);
            set.run(&["stop-one", &member])?;
            Some(restart)
        } else {
            until("SENTINEL FAILOVER accepted", || {
                Ok(redis_cli(sentinel, &["sentinel", "failover", "distlock"]).is_ok())
            })
            .await?;
            None
        };
        let mut new = old;
        let took = until("a new master", || {
            new = master()?;
            Ok(new != old && is_master(new))
        })
        .await?;
        if let Some(restart) = restart {
            restart.now().await?;
        }
        Ok(format!("master {old} → {new} in {} ms", took.as_millis()))
    })
    .await
}

/// The primary of the lock's hash slot lost without a word while two clients take turns:
/// SIGKILLed (started again once its replica is promoted; it rejoins as a replica) or stalled
/// by SIGSTOP (resumed 2 s after the promotion), the cluster promoting the replica by itself.
pub async fn cluster_primary_lost(pg: &str, signal: Signal) -> Result<Outcome, String> {
    let set = ServiceSet::from_env()?;
    let ports: Vec<u16> = (16410..=16415).map(|p| set.port(p)).collect();
    let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let url = format!("redis+cluster://{}", hosts.join(","));
    let scenario = if signal == Signal::SIGKILL {
        "slot's primary SIGKILLed (Cluster failover)"
    } else {
        "slot's primary stalled (SIGSTOP, Cluster failover)"
    };
    contend(
        "redis-cluster",
        url,
        pg,
        scenario,
        move |name: String| async move {
            let slot: u16 = redis_cli(ports[0], &["cluster", "keyslot", &name])?
                .trim()
                .parse()
                .map_err(|e| format!("CLUSTER KEYSLOT: {e}"))?;
            let nodes = redis_cli(ports[0], &["cluster", "nodes"])?;
            let (old, replica) = primary_and_replica(&nodes, slot)?;
            // A replica that just rejoined (the row before killed its primary) must be in
            // sync, or the cluster will not promote it.
            until("the replica in sync", || {
                Ok(redis_cli(replica, &["role"])?.lines().nth(3) == Some("connected"))
            })
            .await?;
            let member = format!("redis-{old}");
            let pid: i32 = (set.run(&["pid", &member])?.trim().parse())
                .map_err(|_| format!("no pid for {member}"))?;
            kill(Pid::from_raw(pid), signal).map_err(|e| e.to_string())?;
            let (restart, resume) = if signal == Signal::SIGKILL {
                (Some(Restart::new(set, &member)), None)
            } else {
                (None, Some(Resume(vec![Pid::from_raw(pid)])))
            };
            let took = until("the replica's promotion", || Ok(is_master(replica))).await?;
            tokio::time::sleep(Duration::from_secs(2)).await;
            drop(resume);
            if let Some(restart) = restart {
                restart.now().await?;
            }
            Ok(format!(
                "primary {old} → replica {replica} promoted in {} ms",
                took.as_millis()
            ))
        },
    )
    .await
}

/// From `CLUSTER NODES`: the ports of the primary serving `slot` and of its replica.
fn primary_and_replica(nodes: &str, slot: u16) -> Result<(u16, u16), String> {
    let lines: Vec<Vec<&str>> = nodes
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let port = |f: &[&str]| f.get(1)?.split(['@', ':']).nth(1)?.parse::<u16>().ok();
    let serves = |f: &[&str]| {
        f.iter().skip(8).any(|r| {
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            matches!((lo.parse::<u16>(), hi.parse::<u16>()), (Ok(lo), Ok(hi)) if (lo..=hi).contains(&slot))
        })
    };
    let primary = (lines.iter())
        .find(|f| f.len() > 8 && f[2].contains("master") && serves(f))
        .ok_or_else(|| format!("no primary serves slot {slot}:\n{nodes}"))?;
    let replica = (lines.iter())
        .find(|f| f.len() > 3 && f[2].contains("slave") && f[3] == primary[0])
        .ok_or_else(|| format!("primary {} has no replica:\n{nodes}", primary[1]))?;
    port(primary)
        .zip(port(replica))
        .ok_or_else(|| format!("unreadable CLUSTER NODES:\n{nodes}"))
}
