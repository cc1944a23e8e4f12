//! Contended across processes: W child processes (one client each) on one name, started
//! together. The in-process `contended` scenario measures what waiters of ONE process see
//! (they queue in-process on the SQL and memory backends); this one measures the store's own
//! handoff between processes, as separate services sharing a lock would see it.
//!
//! Every child reports each acquisition as (token, asked, got, releasing) on the machine's
//! monotonic clock; the parent orders them by token and checks that each holder got the lock
//! only after the previous one began to release (mutual exclusion) and that tokens follow the
//! acquisition order (fencing).

use std::process::Stdio;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock, LockError};
use nix::time::{clock_gettime, ClockId};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdout};

use super::{fresh_name, ResultRow};
use crate::stats::{jain, worst_share, Latencies};

/// One acquisition as a child reports it (times in ns on CLOCK_MONOTONIC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquisition {
    /// The child that held.
    pub worker: usize,
    /// Fencing token.
    pub token: u64,
    /// acquire() called.
    pub asked: u64,
    /// acquire() returned.
    pub got: u64,
    /// release() called (the critical section had ended).
    pub releasing: u64,
}

fn now_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| (t.tv_sec() as u64) * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// A child process speaking the worker protocol: `READY`, then on `GO` one
/// `ACQ token asked got releasing` line per acquisition and `DONE`.
#[derive(Clone, Debug)]
pub struct WorkerCmd {
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
}

impl WorkerCmd {
    /// This benchmark's own hidden `worker` subcommand, with `extra` arguments after its own.
    pub fn own(
        url: &str,
        name: &str,
        duration: Duration,
        extra: &[String],
    ) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut args: Vec<String> = ["worker", "--url", url, "--name", name, "--millis"]
            .map(str::to_owned)
            .into();
        args.push(duration.as_millis().to_string());
        args.extend_from_slice(extra);
        Ok(WorkerCmd {
            program: exe.display().to_string(),
            args,
        })
    }
}

/// Runs `workers` child processes against `url` for `duration`.
pub async fn run(
    label: &str,
    url: &str,
    workers: usize,
    duration: Duration,
) -> Result<ResultRow, String> {
    let cmd = WorkerCmd::own(url, &fresh_name("contended-procs"), duration, &[])?;
    let all = run_workers(&vec![cmd; workers], duration).await?;
    Ok(summarize(label, workers, duration, all))
}

/// Starts every command, lets them all begin at once, and gathers their acquisitions (each
/// tagged with its command's index).
pub async fn run_workers(
    cmds: &[WorkerCmd],
    duration: Duration,
) -> Result<Vec<Acquisition>, String> {
    let mut children = Vec::new();
    for cmd in cmds {
        let mut child = tokio::process::Command::new(&cmd.program)
            .args(&cmd.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e}", cmd.program))?;
        let out = child.stdout.take().ok_or("no child stdout")?;
        children.push((child, BufReader::new(out)));
    }
    // Everyone connected first, then all start at once.
    for (_, out) in &mut children {
        let line = read_line(out, Duration::from_secs(60)).await?;
        if line.trim() != "READY" {
            return Err(format!("worker failed to start: {}", line.trim()));
        }
    }
    for (child, _) in &mut children {
        let stdin = child.stdin.as_mut().ok_or("no child stdin")?;
        stdin.write_all(b"GO\n").await.map_err(|e| e.to_string())?;
    }
    let mut all = Vec::new();
    for (id, (child, out)) in children.iter_mut().enumerate() {
        all.extend(collect(id, child, out, duration + Duration::from_secs(60)).await?);
    }
    Ok(all)
}

async fn read_line(out: &mut BufReader<ChildStdout>, within: Duration) -> Result<String, String> {
    let mut line = String::new();
    tokio::time::timeout(within, out.read_line(&mut line))
        .await
        .map_err(|_| format!("worker silent for {within:?}"))?
        .map_err(|e| e.to_string())?;
    Ok(line)
}

async fn collect(
    worker: usize,
    child: &mut Child,
    out: &mut BufReader<ChildStdout>,
    within: Duration,
) -> Result<Vec<Acquisition>, String> {
    let mut got = Vec::new();
    loop {
        let line = read_line(out, within).await?;
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["ACQ", t, a, g, r] => {
                let n = |s: &str| {
                    s.parse::<u64>()
                        .map_err(|e| format!("bad report {line:?}: {e}"))
                };
                got.push(Acquisition {
                    worker,
                    token: n(t)?,
                    asked: n(a)?,
                    got: n(g)?,
                    releasing: n(r)?,
                });
            }
            ["DONE"] => break,
            [] if line.is_empty() => {
                let status = child.wait().await.map_err(|e| e.to_string())?;
                return Err(format!("worker {worker} ended without DONE ({status})"));
            }
            _ => {
                let _ = child.start_kill();
                return Err(format!("worker {worker}: {}", line.trim()));
            }
        }
    }
    let _ = child.wait().await;
    Ok(got)
}

/// What every child's acquisitions add up to.
pub struct Tally {
    /// Acquisitions per child.
    pub counts: Vec<u64>,
    /// Wait for the lock: acquire() called → returned.
    pub waits: Latencies,
    /// release() called → the next holder's acquire() returned.
    pub handoffs: Latencies,
    /// Overlapping holds and repeated tokens.
    pub violations: u64,
    /// Share of handoffs where the releasing child took the lock straight back.
    pub re_takes: f64,
}

/// Orders the acquisitions by token and checks each against the one before it. Peers without
/// fencing tokens hand out 0: they are ordered by when they got the lock, and checked for
/// overlap only.
pub fn tally(workers: usize, mut all: Vec<Acquisition>) -> Tally {
    let mut counts = vec![0u64; workers];
    let (mut waits, mut handoffs) = (Latencies::default(), Latencies::default());
    for a in &all {
        counts[a.worker] += 1;
        waits.record(Duration::from_nanos(a.got.saturating_sub(a.asked)));
    }
    all.sort_by_key(|a| (a.token, a.got));
    let (mut violations, mut same) = (0u64, 0u64);
    for w in all.windows(2) {
        let (prev, next) = (w[0], w[1]);
        if (next.token != 0 && next.token == prev.token) || next.got < prev.releasing {
            violations += 1;
        }
        handoffs.record(Duration::from_nanos(
            next.got.saturating_sub(prev.releasing),
        ));
        if next.worker == prev.worker {
            same += 1;
        }
    }
    let n_handoffs = all.len().saturating_sub(1).max(1) as f64;
    Tally {
        counts,
        waits,
        handoffs,
        violations,
        re_takes: same as f64 / n_handoffs,
    }
}

impl Tally {
    /// The figures every multi-process row carries, under `scenario`.
    pub fn row(&self, label: &str, scenario: &str, duration: Duration) -> ResultRow {
        let total: u64 = self.counts.iter().sum();
        ResultRow {
            backend: label.to_owned(),
            scenario: scenario.to_owned(),
            ops_per_sec: total as f64 / duration.as_secs_f64(),
            p50_us: self.waits.quantile_us(0.5),
            p99_us: self.waits.quantile_us(0.99),
            p999_us: self.waits.quantile_us(0.999),
            same_holder_fraction: Some(self.re_takes),
            jain_index: Some(jain(&self.counts)),
            worst_share: Some(worst_share(&self.counts)),
            wait_ladder_us: self.waits.ladder(),
            violations: self.violations,
            handoff_p50_us: Some(self.handoffs.quantile_us(0.5)),
            handoff_p99_us: Some(self.handoffs.quantile_us(0.99)),
            param: Some(self.counts.len() as u64),
            ..Default::default()
        }
    }
}

/// Figures and violations from every child's acquisitions.
pub fn summarize(
    label: &str,
    workers: usize,
    duration: Duration,
    all: Vec<Acquisition>,
) -> ResultRow {
    ResultRow {
        note: format!("{workers} processes, one client each; p50/p99 = wait for the lock"),
        ..tally(workers, all).row(label, "contended-procs", duration)
    }
}

/// How a worker child uses the lock.
#[derive(Clone, Copy, Debug)]
pub struct WorkerPlan {
    /// How long it keeps taking the lock.
    pub duration: Duration,
    /// How long it holds each time (zero: one task yield).
    pub hold: Duration,
    /// Whether a wait ends with the window (the grid counts what was got within it) rather
    /// than after 30 s.
    pub window: bool,
}

/// The child side: wait for `GO` on stdin, then acquire and release `name` for
/// `plan.duration`, printing one `ACQ token asked got releasing` line per acquisition and
/// `DONE` at the end.
pub async fn worker(
    lock: &dyn DistributedLock,
    name: &str,
    plan: WorkerPlan,
) -> Result<(), String> {
    println!("READY");
    let mut go = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut go)
        .await
        .map_err(|e| e.to_string())?;
    let end = tokio::time::Instant::now() + plan.duration;
    let mut lines = Vec::new();
    while tokio::time::Instant::now() < end {
        let wait = if plan.window {
            end.saturating_duration_since(tokio::time::Instant::now())
        } else {
            Duration::from_secs(30)
        };
        let asked = now_ns();
        let g = match lock.acquire(name, &AcquireOptions::new().wait(wait)).await {
            Ok(g) => g,
            Err(LockError::Timeout { .. }) if plan.window => break,
            Err(e) => return Err(e.to_string()),
        };
        let got = now_ns();
        if plan.hold.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(plan.hold).await;
        }
        let releasing = now_ns();
        let token = g.fencing_token();
        g.release().await.map_err(|e| e.to_string())?;
        lines.push(format!("ACQ {token} {asked} {got} {releasing}"));
    }
    lines.push("DONE".into());
    println!("{}", lines.join("\n"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acq(worker: usize, token: u64, got: u64, releasing: u64) -> Acquisition {
        Acquisition {
            worker,
            token,
            asked: got.saturating_sub(5),
            got,
            releasing,
        }
    }

    #[test]
    fn overlapping_and_reused_tokens_are_violations_and_re_takes_are_counted() {
        // Clean: 0 → 1 → 1 (a re-take) → 0.
        let clean = vec![
            acq(0, 1, 10, 20),
            acq(1, 2, 25, 30),
            acq(1, 3, 31, 40),
            acq(0, 4, 45, 50),
        ];
        let row = summarize("t", 2, Duration::from_secs(1), clean);
        assert_eq!(row.violations, 0);
        assert!((row.same_holder_fraction.unwrap() - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(row.ops_per_sec, 4.0);
        // Token 2 got the lock before token 1 began releasing, and token 3 came twice.
        let bad = vec![
            acq(0, 1, 10, 20),
            acq(1, 2, 15, 30),
            acq(0, 3, 35, 40),
            acq(1, 3, 45, 50),
        ];
        assert_eq!(summarize("t", 2, Duration::from_secs(1), bad).violations, 2);
    }

    #[test]
    fn peers_without_tokens_are_ordered_by_time_and_checked_for_overlap() {
        let clean = vec![acq(1, 0, 25, 30), acq(0, 0, 10, 20), acq(0, 0, 35, 40)];
        let t = tally(2, clean);
        assert_eq!((t.violations, t.counts.clone()), (0, vec![2, 1]));
        let overlapping = vec![acq(0, 0, 10, 20), acq(1, 0, 15, 30)];
        assert_eq!(tally(2, overlapping).violations, 1);
    }
}
