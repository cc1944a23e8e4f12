//! The fault scenarios. Each runs against one backend and returns an [`Outcome`].

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;

use crate::backends::{connect, Target};
use crate::fenced::FencedResource;
use crate::history::History;
pub use crate::outcome::Outcome;
pub use crate::takeover::LEASE;
use crate::takeover::{after_take_over, opts, proxies, resource, take_over, writer};

async fn spawn_holder(
    t: &Target,
    name: &str,
    pg: &str,
    res: &FencedResource,
    exe: &std::path::Path,
) -> Result<
    (
        tokio::process::Child,
        tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
        u64,
    ),
    String,
> {
    let mut child = tokio::process::Command::new(exe)
        .args([
            "holder",
            "--url",
            &t.url(),
            "--name",
            name,
            "--pg",
            pg,
            "--resource",
            res.id(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut out = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    let held = tokio::time::timeout(Duration::from_secs(20), out.next_line())
        .await
        .map_err(|_| "holder silent")?
        .map_err(|e| e.to_string())?;
    let token = held
        .as_deref()
        .and_then(|l| l.strip_prefix("HELD "))
        .and_then(|t| t.parse().ok())
        .ok_or(format!("holder said {held:?}"))?;
    Ok((child, out, token))
}

/// A holder process is paused (SIGSTOP) past its lease, someone else takes over and writes, the
/// holder resumes (SIGCONT) and writes with its old token: fencing must reject that write.
pub async fn paused_holder(t: &Target, pg: &str, exe: &std::path::Path) -> Result<Outcome, String> {
    let res = resource(pg, "paused", t).await?;
    let name = format!(
        "chaos-paused-{}",
        &distlock_core::backend::owner_token()[..8]
    );
    let (mut child, mut out, child_token) = spawn_holder(t, &name, pg, &res, exe).await?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let pid = Pid::from_raw(child.id().ok_or("no pid")? as i32);
    kill(pid, Signal::SIGSTOP).map_err(|e| e.to_string())?;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let lock = connect(&t.url()).await.map_err(|e| e.to_string())?;
    let mut o = Outcome {
        scenario: "holder paused past its lease".into(),
        backend: t.label.into(),
        acquisitions: 1,
        ..Default::default()
    };
    let took_over = lock
        .acquire(
            &name,
            &AcquireOptions::new()
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(5)),
        )
        .await;
    match took_over {
        Ok(g) => {
            o.acquisitions += 1;
            if !res.write("new-holder", g.fencing_token()).await? {
                return Err("the new holder's write was rejected".into());
            }
            let _ = kill(pid, Signal::SIGCONT);
            stdin
                .write_all(b"write\n")
                .await
                .map_err(|e| e.to_string())?;
            let said = tokio::time::timeout(Duration::from_secs(20), out.next_line())
                .await
                .map_err(|_| "holder silent after resume")?
                .map_err(|e| e.to_string())?;
            match said.as_deref() {
                Some("REJECTED") => o.stale_rejected += 1,
                Some("ACCEPTED") => o.stale_accepted += 1,
                other => return Err(format!("holder said {other:?}")),
            }
            o.note = format!(
                "stale token {child_token} < new token {}",
                g.fencing_token()
            );
            let _ = g.release().await;
        }
        Err(e) => {
            // Connection-bound locks stay with the paused (but connected) holder: no takeover.
            let _ = kill(pid, Signal::SIGCONT);
            stdin
                .write_all(b"write\n")
                .await
                .map_err(|e| e.to_string())?;
            let _ = tokio::time::timeout(Duration::from_secs(20), out.next_line()).await;
            o.note = format!("no takeover while the paused holder's connection lives ({e})");
        }
    }
    let _ = child.kill().await;
    o.out_of_order = res.stats().await?.out_of_order;
    Ok(o)
}

/// The holder is cut from the store (proxy black-hole) but not from the resource; another
/// client takes over. No overlap of believed-valid holds; the cut holder's late writes are
/// rejected.
pub async fn partition(t: &Target, pg: &str) -> Result<Outcome, String> {
    let ps = proxies(t).await?;
    let ports: Vec<u16> = ps.iter().map(|p| p.addr().port()).collect();
    let holder = connect(&t.url_via(&ports))
        .await
        .map_err(|e| e.to_string())?;
    let other = connect(&t.url()).await.map_err(|e| e.to_string())?;
    let res = resource(pg, "partition", t).await?;
    let name = format!(
        "chaos-partition-{}",
        &distlock_core::backend::owner_token()[..8]
    );
    let history = History::default();
    let g = holder
        .acquire(&name, &opts())
        .await
        .map_err(|e| e.to_string())?;
    let w = writer(g, res.clone(), history.clone(), "cut-holder");
    tokio::time::sleep(Duration::from_millis(300)).await;
    for p in &ps {
        p.blackhole();
    }
    let cut = Instant::now();
    let (g2, took_at) = take_over(&*other, &name, Duration::from_secs(20)).await?;
    let other_at = took_at - cut;
    let lost_at = after_take_over(g2, &res, &history, w).await?;
    for p in &ps {
        p.heal();
    }
    let stats = res.stats().await?;
    Ok(Outcome {
        scenario: "partition holder↔store (black-hole)".into(),
        backend: t.label.into(),
        acquisitions: 2,
        overlaps: history.overlaps(),
        stale_rejected: stats.rejected,
        out_of_order: stats.out_of_order,
        lost_ms: lost_at
            .map(|l| (l - cut).as_secs_f64() * 1000.0)
            .into_iter()
            .collect(),
        next_holder_ms: vec![other_at.as_secs_f64() * 1000.0],
        ..Default::default()
    })
}

/// 50 ms of added latency each way on one of two contending clients, 1 s lease, 3 s.
pub async fn latency(t: &Target, pg: &str) -> Result<Outcome, String> {
    let ps = proxies(t).await?;
    for p in &ps {
        p.set_latency(Duration::from_millis(50));
    }
    let ports: Vec<u16> = ps.iter().map(|p| p.addr().port()).collect();
    let clients: Vec<(Arc<dyn DistributedLock>, &'static str)> = vec![
        (
            connect(&t.url_via(&ports))
                .await
                .map_err(|e| e.to_string())?,
            "slow",
        ),
        (connect(&t.url()).await.map_err(|e| e.to_string())?, "fast"),
    ];
    let res = resource(pg, "latency", t).await?;
    let name = format!(
        "chaos-latency-{}",
        &distlock_core::backend::owner_token()[..8]
    );
    let history = History::default();
    let end = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for (lock, who) in clients {
        let (name, res, history) = (name.clone(), res.clone(), history.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < end {
                let g = lock
                    .acquire(&name, &opts())
                    .await
                    .map_err(|e| e.to_string())?;
                let i = history.acquired(who, g.fencing_token());
                n += 1;
                res.write(who, g.fencing_token()).await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                history.ended(i, g.is_lost());
                let _ = g.release().await;
            }
            Ok::<u64, String>(n)
        }));
    }
    let mut acquisitions = 0;
    for t in tasks {
        acquisitions += t.await.map_err(|e| e.to_string())??;
    }
    drop(ps);
    let stats = res.stats().await?;
    Ok(Outcome {
        scenario: "50 ms latency, 1 s lease".into(),
        backend: t.label.into(),
        acquisitions,
        overlaps: history.overlaps(),
        stale_rejected: stats.rejected,
        out_of_order: stats.out_of_order,
        ..Default::default()
    })
}

/// The holder process is killed with SIGKILL; the next holder gets a greater token.
pub async fn client_killed(t: &Target, pg: &str, exe: &std::path::Path) -> Result<Outcome, String> {
    let res = resource(pg, "killed", t).await?;
    let name = format!(
        "chaos-killed-{}",
        &distlock_core::backend::owner_token()[..8]
    );
    let (mut child, _out, child_token) = spawn_holder(t, &name, pg, &res, exe).await?;
    child.start_kill().map_err(|e| e.to_string())?;
    let killed = Instant::now();
    let _ = child.wait().await;
    let lock = connect(&t.url()).await.map_err(|e| e.to_string())?;
    let g = lock
        .acquire(&name, &opts())
        .await
        .map_err(|e| e.to_string())?;
    let took = killed.elapsed();
    if g.fencing_token() <= child_token {
        return Err(format!(
            "token {} after the killed holder's {child_token}",
            g.fencing_token()
        ));
    }
    res.write("next", g.fencing_token()).await?;
    let _ = g.release().await;
    Ok(Outcome {
        scenario: "client killed (SIGKILL)".into(),
        backend: t.label.into(),
        acquisitions: 2,
        out_of_order: res.stats().await?.out_of_order,
        next_holder_ms: vec![took.as_secs_f64() * 1000.0],
        ..Default::default()
    })
}

/// A private Redis (no persistence) restarted during a hold: a second holder appears (the
/// single-instance backend makes no claim here) and fencing rejects the first one's late write.
pub async fn redis_restarted(pg: &str) -> Result<Outcome, String> {
    const PORT: u16 = 18379;
    let dir = std::env::temp_dir().join("distlock-chaos-redis");
    let _ = std::fs::create_dir_all(&dir);
    let start = || {
        std::process::Command::new("redis-server")
            .args([
                "--port",
                &PORT.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "yes",
            ])
            .arg("--pidfile")
            .arg(dir.join("redis.pid"))
            .arg("--dir")
            .arg(&dir)
            .status()
            .map_err(|e| e.to_string())
    };
    let stop = || {
        if let Ok(pid) = std::fs::read_to_string(dir.join("redis.pid")) {
            if let Ok(pid) = pid.trim().parse::<i32>() {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    };
    stop();
    tokio::time::sleep(Duration::from_millis(200)).await;
    start()?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let url = format!("redis://127.0.0.1:{PORT}");
    let a = connect(&url).await.map_err(|e| e.to_string())?;
    let res = FencedResource::create(
        pg,
        &format!(
            "restart-redis-{}",
            &distlock_core::backend::owner_token()[..6]
        ),
    )
    .await?;
    let name = "chaos-restart";
    let history = History::default();
    let g1 = a
        .acquire(name, &AcquireOptions::new().ttl(Duration::from_secs(10)))
        .await
        .map_err(|e| e.to_string())?;
    let i1 = history.acquired("first", g1.fencing_token());
    res.write("first", g1.fencing_token()).await?;
    stop();
    tokio::time::sleep(Duration::from_millis(300)).await;
    start()?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = connect(&url).await.map_err(|e| e.to_string())?;
    let g2 = b
        .acquire(
            name,
            &AcquireOptions::new()
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(5)),
        )
        .await
        .map_err(|e| e.to_string())?;
    let i2 = history.acquired("second", g2.fencing_token());
    res.write("second", g2.fencing_token()).await?;
    let late = res.write("first", g1.fencing_token()).await?;
    let note = format!(
        "tokens {} then {} (server TIME keeps them monotonic)",
        g1.fencing_token(),
        g2.fencing_token()
    );
    history.ended(i1, false);
    history.ended(i2, false);
    let _ = g2.release().await;
    g1.abandon();
    stop();
    let stats = res.stats().await?;
    Ok(Outcome {
        scenario: "Redis restarted without persistence".into(),
        backend: "redis".into(),
        acquisitions: 2,
        overlaps: history.overlaps(),
        overlap_expected: true,
        stale_accepted: u64::from(late),
        stale_rejected: u64::from(!late),
        out_of_order: stats.out_of_order,
        note,
        ..Default::default()
    })
}

/// The child side: hold, report, wait for "write", write with the old token, report.
pub async fn holder(url: &str, name: &str, pg: &str, resource_id: &str) -> Result<(), String> {
    let lock = connect(url).await.map_err(|e| e.to_string())?;
    let res = FencedResource::open(pg, resource_id).await?;
    let g = lock
        .acquire(name, &opts())
        .await
        .map_err(|e| e.to_string())?;
    println!("HELD {}", g.fencing_token());
    let mut line = String::new();
    let mut stdin = BufReader::new(tokio::io::stdin());
    stdin
        .read_line(&mut line)
        .await
        .map_err(|e| e.to_string())?;
    let accepted = res.write("paused-holder", g.fencing_token()).await?;
    println!("{}", if accepted { "ACCEPTED" } else { "REJECTED" });
    g.abandon();
    Ok(())
}
