//! The random fault schedule (nemesis): while several clients contend on a few names and write
//! to a [`FencedResource`] per name, faults chosen at random times from a seed hit random
//! clients — overlapping faults included — and everything is healed at the end. The
//! [`History`] checker and the resource judge the whole run.
//!
//! Fault kinds used here: a client cut from the store (proxy black-hole, then heal), added
//! latency on a client's connections, and a client that stalls past its lease after acquiring
//! and then writes with its old token (an in-process stand-in for a paused process: it stops
//! looking at `lost()`, as a frozen process would). Store-process faults (pause, kill, restart,
//! follower cut) stay in the scripted scenarios of [`crate::store_faults`]; they are not drawn
//! by this nemesis yet.
//!
//! Judged: stale writes accepted (must be 0), accepted writes out of token order (0), overlaps
//! of holds both holders believed valid (0; a hold ends the instant its guard's `lost()`
//! resolves), liveness (after the heal every client gets every name again within a bound), and
//! nothing held in the store at the end. The schedule is printed in the report, so a failure
//! replays from its seed: `scripts/chaos.sh --random --seed S --minutes M [--backend B]`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::fault::FaultProxy;
use lock_core::{AcquireOptions, DistributedLock, LockError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::backends::{connect, Target};
use crate::fenced::FencedResource;
use crate::history::History;
use crate::takeover::{proxies, LEASE};

/// Contending clients.
pub const CLIENTS: usize = 4;
/// Lock names they contend on.
pub const NAMES: usize = 2;
/// After the heal, every client must get every name within this.
pub const LIVENESS_BOUND: Duration = Duration::from_secs(20);

/// One fault in the schedule.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// The client's connections are black-holed for `for_ms`, then healed.
    Partition {
        /// Which client.
        client: usize,
        /// How long.
        for_ms: u64,
    },
    /// `ms` of latency each way on the client's connections for `for_ms`.
    Latency {
        /// Which client.
        client: usize,
        /// Added latency each way.
        ms: u64,
        /// How long.
        for_ms: u64,
    },
    /// The client's next hold freezes for 2.5 leases (its connections silent; an embedded
    /// store's guard stops renewing) without looking at `lost()`, then writes its old token.
    Stall {
        /// Which client.
        client: usize,
    },
}

/// A fault and when it starts (ms into the run).
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Start, ms after the run began.
    pub at_ms: u64,
    /// What.
    pub fault: Fault,
}

/// The schedule a seed gives for a run of `duration` (networked faults only when the target
/// has a network).
pub fn schedule(seed: u64, duration: Duration, networked: bool) -> Vec<Event> {
    let mut rng = StdRng::seed_from_u64(seed);
    let total = duration.as_millis() as u64;
    let mut at = rng.random_range(100..800u64);
    let mut v = Vec::new();
    // Bounded: at most one event per 100 ms of run.
    while at < total.saturating_sub(500) && v.len() < (total / 100) as usize {
        let client = rng.random_range(0..CLIENTS);
        let fault = match rng.random_range(0..if networked { 3 } else { 1 }) {
            0 => Fault::Stall { client },
            1 => Fault::Partition {
                client,
                for_ms: rng.random_range(200..2500),
            },
            _ => Fault::Latency {
                client,
                ms: rng.random_range(5..80),
                for_ms: rng.random_range(300..2000),
            },
        };
        v.push(Event { at_ms: at, fault });
        at += rng.random_range(150..1500);
    }
    v
}

/// What a random run found.
#[derive(Clone, Debug, Default)]
pub struct NemesisReport {
    /// Backend label.
    pub backend: String,
    /// The seed.
    pub seed: u64,
    /// The schedule it ran.
    pub schedule: Vec<Event>,
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Acquire attempts that failed (timeouts, unreachable store).
    pub failed_attempts: u64,
    /// Overlapping believed-valid holds (must be 0).
    pub overlaps: u64,
    /// Stale writes rejected by the resource.
    pub stale_rejected: u64,
    /// Writes accepted out of token order (must be 0).
    pub out_of_order: u64,
    /// Acquisitions whose token was not above the token of the hold acquired before them on
    /// the same name (must be 0).
    pub token_regressions: u64,
    /// Liveness or leftover failures after the heal.
    pub problems: Vec<String>,
}

impl NemesisReport {
    /// Every safety or liveness violation, as text (empty: the run passed).
    pub fn violations(&self) -> Vec<String> {
        let mut v = self.problems.clone();
        if self.overlaps > 0 {
            v.push(format!(
                "{} overlapping believed-valid holds",
                self.overlaps
            ));
        }
        if self.out_of_order > 0 {
            v.push(format!(
                "{} writes accepted out of token order",
                self.out_of_order
            ));
        }
        if self.token_regressions > 0 {
            v.push(format!(
                "{} tokens not above the previous holder's",
                self.token_regressions
            ));
        }
        if self.acquisitions == 0 {
            v.push("no acquisition at all".into());
        }
        v
    }

    /// The Markdown report: results, then the schedule.
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "# Random fault schedule: {} (seed {})\n\nReplay: `scripts/chaos.sh --random --seed {} --backend {}`\n\n",
            self.backend, self.seed, self.seed, self.backend
        );
        let _ = writeln!(
            s,
            "| acquisitions | failed attempts | overlaps | token regressions | stale writes rejected | out-of-order writes accepted | violations |\n|---:|---:|---:|---:|---:|---:|---|\n| {} | {} | {} | {} | {} | {} | {} |\n",
            self.acquisitions,
            self.failed_attempts,
            self.overlaps,
            self.token_regressions,
            self.stale_rejected,
            self.out_of_order,
            if self.violations().is_empty() {
                "none".to_owned()
            } else {
                self.violations().join("; ")
            }
        );
        s.push_str("## Schedule\n\n| at ms | fault |\n|---:|---|\n");
        for e in &self.schedule {
            let _ = writeln!(s, "| {} | {:?} |", e.at_ms, e.fault);
        }
        s
    }
}

struct Client {
    lock: Arc<dyn DistributedLock>,
    proxies: Vec<FaultProxy>,
    stall_next: AtomicBool,
}

/// Runs the nemesis on `t` for `duration` from `seed`, with fenced resources in `pg`.
///
/// # Errors
/// Setup failures (a store or the resource database not reachable).
pub async fn run(
    t: &Target,
    pg: &str,
    seed: u64,
    duration: Duration,
) -> Result<NemesisReport, String> {
    let networked = !t.hosts.is_empty();
    let plan = schedule(seed, duration, networked);
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (lock, ps) = if networked {
            let ps = proxies(t).await?;
            let ports: Vec<u16> = ps.iter().map(|p| p.addr().port()).collect();
            (connect(&t.url_via(&ports)).await, ps)
        } else {
            (connect(&t.url()).await, Vec::new())
        };
        clients.push(Arc::new(Client {
            lock: lock.map_err(|e| e.to_string())?,
            proxies: ps,
            stall_next: AtomicBool::new(false),
        }));
    }
    let tag = &lock_core::owner_token()[..8];
    let names: Vec<String> = (0..NAMES)
        .map(|i| format!("chaos-nemesis-{tag}-{i}"))
        .collect();
    let mut resources = Vec::new();
    let mut histories = Vec::new();
    for n in &names {
        resources.push(FencedResource::create(pg, &format!("{n}-{}", t.label)).await?);
        histories.push(History::default());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let acquisitions = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for (ci, c) in clients.iter().enumerate() {
        let c = Arc::clone(c);
        let (names, resources, histories) = (names.clone(), resources.clone(), histories.clone());
        let (stop, acquisitions, failed) = (
            Arc::clone(&stop),
            Arc::clone(&acquisitions),
            Arc::clone(&failed),
        );
        let mut rng = StdRng::seed_from_u64(seed ^ (ci as u64 + 1).wrapping_mul(0x9E37_79B9));
        workers.push(tokio::spawn(async move {
            let who = format!("client-{ci}");
            let opts = AcquireOptions::new()
                .ttl(LEASE)
                .wait(Duration::from_secs(3));
            while !stop.load(Ordering::SeqCst) {
                let n = rng.random_range(0..NAMES);
                let g = match c.lock.acquire(&names[n], &opts).await {
                    Ok(g) => g,
                    Err(e) => {
                        failed.fetch_add(1, Ordering::SeqCst);
                        if !matches!(e, LockError::Timeout { .. }) {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        continue;
                    }
                };
                acquisitions.fetch_add(1, Ordering::SeqCst);
                let token = g.fencing_token();
                let i = histories[n].acquired(&who, token);
                let watcher = histories[n].end_when_lost(i, &g);
                if c.stall_next.swap(false, Ordering::SeqCst) {
                    // Frozen for 2.5 leases, then a write with the old token. Networked: the
                    // client's connections go silent (no renewal reaches the store, the guard's
                    // own lost() ends the hold). Embedded: renewal stops (abandon) and the
                    // hold ends at the guard's own lease deadline, when a frozen process
                    // would have known.
                    if c.proxies.is_empty() {
                        let deadline = Instant::now() + g.remaining_validity().unwrap_or(LEASE);
                        g.abandon();
                        tokio::time::sleep(LEASE * 5 / 2).await;
                        histories[n].ended_at(i, deadline, true);
                        let _ = resources[n].write(&who, token).await;
                        watcher.abort();
                        continue;
                    }
                    for p in &c.proxies {
                        p.blackhole();
                    }
                    tokio::time::sleep(LEASE * 5 / 2).await;
                    for p in &c.proxies {
                        p.heal();
                    }
                    let _ = resources[n].write(&who, token).await;
                } else {
                    let hold = Duration::from_millis(rng.random_range(5..60));
                    let end = Instant::now() + hold;
                    while Instant::now() < end && !g.is_lost() {
                        if resources[n].write(&who, token).await.is_err() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                histories[n].ended(i, g.is_lost());
                watcher.abort();
                let _ = g.release().await;
            }
        }));
    }
    // The nemesis itself.
    let started = Instant::now();
    let mut heals = Vec::new();
    for e in &plan {
        tokio::time::sleep_until(started + Duration::from_millis(e.at_ms)).await;
        match e.fault {
            Fault::Stall { client } => clients[client].stall_next.store(true, Ordering::SeqCst),
            Fault::Partition { client, for_ms } => {
                for p in &clients[client].proxies {
                    p.blackhole();
                }
                heals.push((Instant::now() + Duration::from_millis(for_ms), client));
            }
            Fault::Latency { client, ms, for_ms } => {
                for p in &clients[client].proxies {
                    p.set_latency(Duration::from_millis(ms));
                }
                heals.push((Instant::now() + Duration::from_millis(for_ms), client));
            }
        }
        let now = Instant::now();
        heals.retain(|(at, client)| {
            if *at <= now {
                for p in &clients[*client].proxies {
                    p.heal();
                }
                false
            } else {
                true
            }
        });
    }
    tokio::time::sleep_until(started + duration).await;
    // Heal everything, stop the workers (bounded), then judge.
    for c in &clients {
        c.stall_next.store(false, Ordering::SeqCst);
        for p in &c.proxies {
            p.heal();
        }
    }
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        if tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .is_err()
        {
            return Err("a worker did not stop within 30 s of the heal".into());
        }
    }
    let mut report = NemesisReport {
        backend: t.label.into(),
        seed,
        schedule: plan,
        acquisitions: acquisitions.load(Ordering::SeqCst),
        failed_attempts: failed.load(Ordering::SeqCst),
        ..Default::default()
    };
    for h in &histories {
        report.overlaps += h.overlaps();
        let mut holds = h.holds();
        holds.sort_by_key(|x| x.acquired_at);
        report.token_regressions += holds
            .windows(2)
            .filter(|w| w[1].token <= w[0].token)
            .count() as u64;
    }
    for r in &resources {
        let s = r.stats().await?;
        report.stale_rejected += s.rejected;
        report.out_of_order += s.out_of_order;
    }
    // Liveness: every client gets every name again, and nothing stays held afterwards.
    for (ci, c) in clients.iter().enumerate() {
        for n in &names {
            let t0 = Instant::now();
            match c
                .lock
                .acquire(n, &AcquireOptions::new().ttl(LEASE).wait(LIVENESS_BOUND))
                .await
            {
                Ok(g) => {
                    if let Err(e) = g.release().await {
                        report
                            .problems
                            .push(format!("client-{ci}: release of {n} after the heal: {e}"));
                    }
                }
                Err(e) => report.problems.push(format!(
                    "liveness: client-{ci} could not get {n} within {:?} of the heal: {e}",
                    t0.elapsed()
                )),
            }
        }
    }
    for n in &names {
        match clients[0].lock.inspect(n).await {
            Ok(info) if info.held => report.problems.push(format!("{n} still held at the end")),
            _ => {}
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_schedule() {
        let a = schedule(42, Duration::from_secs(10), true);
        assert_eq!(a, schedule(42, Duration::from_secs(10), true));
        assert_ne!(a, schedule(43, Duration::from_secs(10), true));
        assert!(!a.is_empty());
        assert!(a.iter().all(|e| e.at_ms < 10_000));
        // Without a network only stalls are drawn.
        assert!(schedule(42, Duration::from_secs(10), false)
            .iter()
            .all(|e| matches!(e.fault, Fault::Stall { .. })));
    }
}
