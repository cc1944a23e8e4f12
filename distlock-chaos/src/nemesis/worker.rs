//! The contending clients. Each loops: pick a name, acquire (lease [`LEASE`], or now and then
//! for a client of this process the default lease; waiting up to [`WAIT`]), now and then
//! `extend` to a shorter or longer lease, write to the name's fenced resource with its token
//! for 5-60 ms while `lost()` has not fired, release. An acquire that returns later than its
//! wait plus [`OVERRUN_BOUND`] is a wait overrun. A [`Recorder`] takes each hold's start and end: in this process straight
//! into the [`History`]; in a client process ([`child_main`]) as lines on standard output with
//! `CLOCK_MONOTONIC` times, which [`ProcClient`] turns back into holds on the parent's clock —
//! so a SIGKILLed client's holds are judged like any other, ending at its death.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock, LockError, LockGuard};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::faults::Net;
use crate::backends::connect;
use crate::fenced::FencedResource;
use crate::history::History;
use crate::takeover::LEASE;

/// After the heal, every client must get every name within this: the longest lease a worker
/// takes (the default, [`distlock_core::DEFAULT_TTL`]) and 10 s more. A release the store never
/// got (a store killed or a client cut off just then) leaves the lock held until its lease runs
/// out, as a crashed holder's would (seed 2026112802 on mysql-row failed a 20 s bound so).
pub const LIVENESS_BOUND: Duration = Duration::from_secs(distlock_core::DEFAULT_TTL.as_secs() + 10);

/// How long an acquire waits.
pub const WAIT: Duration = Duration::from_secs(3);

/// How late past its wait an acquire may return: the library's stated
/// [`STALL_BOUND`](distlock_core::backend::STALL_BOUND) for a store that does not answer, and
/// half a second for the timers of a loaded 2-core machine.
pub const OVERRUN_BOUND: Duration =
    Duration::from_millis(distlock_core::backend::STALL_BOUND.as_millis() as u64 + 500);

/// Where a client's holds go.
pub(crate) trait Recorder: Send + Sync + 'static {
    /// A hold of name `n` began now, from an acquire called at `asked`; its id.
    fn acquired(&self, n: usize, token: u64, asked: Instant) -> usize;
    /// Hold `hold` of name `n` ended at `at`.
    fn ended(&self, n: usize, hold: usize, at: Instant, lost: bool);
    /// An acquire attempt failed.
    fn failed(&self);
    /// An acquire returned `late` after its wait plus [`OVERRUN_BOUND`].
    fn overran(&self, late: Duration);
}

/// Counts shared by every client of a run.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) acquisitions: AtomicU64,
    pub(crate) failed: AtomicU64,
    /// Acquires that returned past their wait plus [`OVERRUN_BOUND`], and the latest (ms).
    pub(crate) overruns: AtomicU64,
    pub(crate) worst_overrun_ms: AtomicU64,
}

impl Counters {
    fn overran(&self, late_ms: u64) {
        self.overruns.fetch_add(1, Ordering::SeqCst);
        self.worst_overrun_ms.fetch_max(late_ms, Ordering::SeqCst);
    }
}

/// A client of this process: holds go straight into the histories.
pub(crate) struct Local {
    pub(crate) who: String,
    pub(crate) histories: Vec<History>,
    pub(crate) counters: Arc<Counters>,
}

impl Recorder for Local {
    fn acquired(&self, n: usize, token: u64, asked: Instant) -> usize {
        self.counters.acquisitions.fetch_add(1, Ordering::SeqCst);
        self.histories[n].acquired_at(&self.who, token, asked, Instant::now())
    }

    fn ended(&self, n: usize, hold: usize, at: Instant, lost: bool) {
        self.histories[n].ended_at(hold, at, lost);
    }

    fn failed(&self) {
        self.counters.failed.fetch_add(1, Ordering::SeqCst);
    }

    fn overran(&self, late: Duration) {
        self.counters.overran(late.as_millis() as u64);
    }
}

/// One contending client.
pub(crate) struct Worker {
    pub(crate) lock: Arc<dyn DistributedLock>,
    pub(crate) names: Vec<String>,
    pub(crate) resources: Vec<FencedResource>,
    pub(crate) who: String,
    /// Set by the nemesis: the next hold stalls past its lease (clients of this process).
    pub(crate) stall: Option<Arc<AtomicBool>>,
    /// The client's connections (empty: an embedded store).
    pub(crate) net: Option<Arc<Net>>,
}

/// Contends until `stop`.
pub(crate) async fn contend<R: Recorder>(
    w: &Worker,
    rec: &Arc<R>,
    rng: &mut StdRng,
    stop: &AtomicBool,
) {
    let short = AcquireOptions::new().ttl(LEASE).wait(WAIT);
    let default_lease = AcquireOptions::new().wait(WAIT);
    while !stop.load(Ordering::SeqCst) {
        let n = rng.random_range(0..w.names.len());
        // One hold in four of a client of this process (never SIGKILLed, so it never leaves a
        // long lease behind) takes the default lease; a stall is only applied to a short one.
        let stall_due = w.stall.as_ref().is_none_or(|s| s.load(Ordering::SeqCst));
        let long = !stall_due && rng.random_ratio(1, 4);
        let opts = if long { &default_lease } else { &short };
        let asked = Instant::now();
        let got = w.lock.acquire(&w.names[n], opts).await;
        if let Some(late) = asked.elapsed().checked_sub(WAIT + OVERRUN_BOUND) {
            rec.overran(late);
        }
        let g = match got {
            Ok(g) => g,
            Err(e) => {
                rec.failed();
                if !matches!(e, LockError::Timeout { .. }) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                continue;
            }
        };
        let token = g.fencing_token();
        let i = rec.acquired(n, token, asked);
        let watcher = {
            let (lost, rec) = (g.lost(), Arc::clone(rec));
            tokio::spawn(async move {
                let _ = lost.await;
                rec.ended(n, i, Instant::now(), true);
            })
        };
        let res = &w.resources[n];
        let stall = !long
            && w.stall
                .as_ref()
                .is_some_and(|s| s.swap(false, Ordering::SeqCst));
        if stall {
            // Frozen for 2.5 leases without looking at lost(), then a write with the old token.
            let late = format!("{}/late", w.who);
            match w.net.as_deref().filter(|n| !n.is_empty()) {
                // Embedded: renewal stops (abandon) and the hold ends at the guard's own lease
                // deadline, when a frozen process would have known.
                None => {
                    let deadline = Instant::now() + g.remaining_validity().unwrap_or(LEASE);
                    g.abandon();
                    tokio::time::sleep(LEASE * 5 / 2).await;
                    rec.ended(n, i, deadline, true);
                    let _ = res.write(&late, token).await;
                    watcher.abort();
                    continue;
                }
                // Networked: the client's connections go silent (no renewal reaches the
                // store); the guard's own lost() ends the hold.
                Some(net) => {
                    net.cut();
                    tokio::time::sleep(LEASE * 5 / 2).await;
                    net.uncut();
                    let _ = res.write(&late, token).await;
                }
            }
        } else {
            // Now and then a shorter or a longer lease, mid-hold; a failed extend may end it.
            if rng.random_ratio(1, 3) {
                let ttl = LEASE * rng.random_range(1..=4) / 2;
                let _ = g.extend(ttl).await;
            }
            let end = Instant::now() + Duration::from_millis(rng.random_range(5..60));
            while Instant::now() < end && !g.is_lost() {
                if res.write(&w.who, token).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        rec.ended(n, i, Instant::now(), g.is_lost());
        watcher.abort();
        let _ = g.release().await;
    }
}

/// This machine's `CLOCK_MONOTONIC` in ns (the clock `Instant` reads on Linux), shared by the
/// client processes and the parent.
pub(crate) fn mono_ns() -> i128 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec()))
        .unwrap_or_default()
}

/// Turns a client process's `CLOCK_MONOTONIC` reading into an `Instant` of this process.
#[derive(Clone, Copy)]
pub(crate) struct Clock(Instant, i128);

impl Clock {
    pub(crate) fn now() -> Self {
        Clock(Instant::now(), mono_ns())
    }

    fn at(self, ns: i128) -> Instant {
        let d = Duration::from_nanos((ns - self.1).unsigned_abs() as u64);
        if ns >= self.1 {
            self.0 + d
        } else {
            self.0.checked_sub(d).unwrap_or(self.0)
        }
    }
}

/// A client process's recorder: one line per event on standard output.
struct Lines(AtomicUsize);

impl Recorder for Lines {
    fn acquired(&self, n: usize, token: u64, asked: Instant) -> usize {
        let id = self.0.fetch_add(1, Ordering::SeqCst);
        let now = mono_ns();
        let waited = asked.elapsed().as_nanos() as i128;
        println!("HELD {id} {n} {token} {now} {}", now - waited);
        id
    }

    fn ended(&self, n: usize, hold: usize, _at: Instant, lost: bool) {
        // `at` is now or earlier (an embedded stall's lease deadline): send the offset.
        let back = Instant::now().saturating_duration_since(_at).as_nanos() as i128;
        println!("END {hold} {n} {} {}", mono_ns() - back, u8::from(lost));
    }

    fn failed(&self) {
        println!("FAIL");
    }

    fn overran(&self, late: Duration) {
        println!("OVERRUN {}", late.as_millis());
    }
}

/// What a client process is told to do.
#[derive(Clone, Debug)]
pub(crate) struct ChildArgs {
    pub(crate) exe: PathBuf,
    pub(crate) url: String,
    pub(crate) pg: String,
    pub(crate) names: Vec<String>,
    pub(crate) resources: Vec<String>,
    pub(crate) who: String,
    pub(crate) seed: u64,
}

/// The client process (`distlock-chaos nemesis-client`): contends until "stop" on standard input,
/// then acquires every name once (liveness) and reports `LIVE n OK` or `LIVE n ERR …`; at the
/// end of standard input it just stops.
///
/// # Errors
/// The store or the resource database cannot be reached.
pub async fn child_main(
    url: &str,
    pg: &str,
    names: Vec<String>,
    resources: Vec<String>,
    who: String,
    seed: u64,
) -> Result<(), String> {
    let stop = Arc::new(AtomicBool::new(false));
    let live = Arc::new(AtomicBool::new(false));
    tokio::spawn({
        let (stop, live) = (Arc::clone(&stop), Arc::clone(&live));
        async move {
            let mut lines = BufReader::new(tokio::io::stdin()).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                if l.trim() == "stop" {
                    live.store(true, Ordering::SeqCst);
                    break;
                }
            }
            stop.store(true, Ordering::SeqCst);
        }
    });
    // A replacement may start while the store (or the resource database) is down: it keeps
    // trying, as a restarted service would, until told to stop.
    let (lock, res) = loop {
        let r = async {
            let lock = connect(url).await.map_err(|e| e.to_string())?;
            let mut res = Vec::new();
            for r in &resources {
                res.push(FencedResource::open(pg, r).await?);
            }
            Ok::<_, String>((lock, res))
        };
        match r.await {
            Ok(x) => break x,
            Err(e) if stop.load(Ordering::SeqCst) => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let w = Worker {
        lock,
        names,
        resources: res,
        who,
        stall: None,
        net: None,
    };
    let rec = Arc::new(Lines(AtomicUsize::new(0)));
    contend(&w, &rec, &mut StdRng::seed_from_u64(seed), &stop).await;
    if live.load(Ordering::SeqCst) {
        for (n, name) in w.names.iter().enumerate() {
            match acquire_after_heal(&*w.lock, name).await {
                Ok(g) => match g.release().await {
                    Ok(()) => println!("LIVE {n} OK"),
                    Err(e) => println!("LIVE {n} ERR release: {}", one_line(&e.to_string())),
                },
                Err(e) => println!("LIVE {n} ERR {}", one_line(&e.to_string())),
            }
        }
    }
    println!("BYE");
    Ok(())
}

/// Calls that may meet a pooled connection a fault killed moments before its last use: the
/// SQL row and advisory modes skip the liveness ping for such a connection and document that
/// it fails the one call that meets it, with `Unavailable` from an I/O or protocol error
/// (`distlock-sql/src/liveness.rs`; `distlock-sql/tests/pool.rs` holds them to one failed call per
/// pooled connection).
const DEAD_CONNECTION_CALLS: usize = 3;

/// Whether `e` is that documented call: `Unavailable` caused by the connection itself failing.
fn dead_pooled_connection(e: &LockError) -> bool {
    let LockError::Unavailable {
        source: Some(source),
        ..
    } = e
    else {
        return false;
    };
    matches!(
        source.downcast_ref::<sqlx::Error>(),
        Some(sqlx::Error::Io(_) | sqlx::Error::Protocol(_))
    )
}

/// The liveness probe after the heal: `name` acquired within [`LIVENESS_BOUND`], calling again
/// after a dead pooled connection's `Unavailable` at most [`DEAD_CONNECTION_CALLS`] times
/// within that bound (any other error, or the bound, is the probe's answer).
pub(crate) async fn acquire_after_heal(
    lock: &dyn DistributedLock,
    name: &str,
) -> Result<LockGuard, LockError> {
    let t0 = Instant::now();
    let mut calls = 0;
    loop {
        let opts = AcquireOptions::new()
            .ttl(LEASE)
            .wait(LIVENESS_BOUND.saturating_sub(t0.elapsed()));
        match lock.acquire(name, &opts).await {
            Err(e)
                if dead_pooled_connection(&e)
                    && calls < DEAD_CONNECTION_CALLS
                    && t0.elapsed() < LIVENESS_BOUND =>
            {
                calls += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

struct Running {
    child: Child,
    stdin: ChildStdin,
    /// Yields the holds the process never reported ended.
    reader: JoinHandle<Vec<(usize, usize)>>,
}

/// A client slot filled by a child process; a killed one is replaced by a new one.
pub(crate) struct ProcClient {
    pub(crate) args: ChildArgs,
    pub(crate) histories: Vec<History>,
    pub(crate) counters: Arc<Counters>,
    clock: Clock,
    generation: AtomicU64,
    running: tokio::sync::Mutex<Option<Running>>,
    /// Liveness reports: the names got again, and the failures.
    live: Arc<Mutex<(usize, Vec<String>)>>,
}

impl ProcClient {
    pub(crate) fn new(args: ChildArgs, histories: Vec<History>, counters: Arc<Counters>) -> Self {
        ProcClient {
            args,
            histories,
            counters,
            clock: Clock::now(),
            generation: AtomicU64::new(0),
            running: tokio::sync::Mutex::new(None),
            live: Arc::new(Mutex::new((0, Vec::new()))),
        }
    }

    /// Starts a client process in the slot (if it is empty).
    pub(crate) async fn spawn(&self) -> Result<(), String> {
        let mut slot = self.running.lock().await;
        if slot.is_some() {
            return Ok(());
        }
        let a = &self.args;
        let g = self.generation.fetch_add(1, Ordering::SeqCst);
        // Each process of the slot is its own client in the history: a replacement's holds
        // must not overlap its killed predecessor's either.
        let who = format!("{}#{g}", a.who);
        let mut child = tokio::process::Command::new(&a.exe)
            .args([
                "nemesis-client",
                "--url",
                &a.url,
                "--pg",
                &a.pg,
                "--names",
                &a.names.join(","),
                "--resources",
                &a.resources.join(","),
                "--who",
                &who,
                "--seed",
                &(a.seed ^ g.wrapping_mul(0x2545_F491_4F6C_DD1D)).to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e}", a.exe.display()))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let (histories, counters, clock, live) = (
            self.histories.clone(),
            Arc::clone(&self.counters),
            self.clock,
            Arc::clone(&self.live),
        );
        let reader = tokio::spawn(async move {
            // Hold id -> (name, index in its history, ended).
            let mut holds: HashMap<usize, (usize, usize, bool)> = HashMap::new();
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                let f: Vec<&str> = l.split(' ').collect();
                let int = |i: usize| f.get(i).and_then(|x| x.parse::<i128>().ok());
                match f.first().copied() {
                    Some("HELD") => {
                        let (Some(id), Some(n), Some(token), Some(ns)) =
                            (int(1), int(2), int(3), int(4))
                        else {
                            continue;
                        };
                        let asked = clock.at(int(5).unwrap_or(ns));
                        if let Some(h) = histories.get(n as usize) {
                            counters.acquisitions.fetch_add(1, Ordering::SeqCst);
                            let idx = h.acquired_at(&who, token as u64, asked, clock.at(ns));
                            holds.insert(id as usize, (n as usize, idx, false));
                        }
                    }
                    // The earliest report of a hold's end wins (History::ended_at).
                    Some("END") => {
                        if let (Some(id), Some(ns)) = (int(1), int(3)) {
                            if let Some((n, idx, ended)) = holds.get_mut(&(id as usize)) {
                                histories[*n].ended_at(*idx, clock.at(ns), f.get(4) == Some(&"1"));
                                *ended = true;
                            }
                        }
                    }
                    Some("FAIL") => {
                        counters.failed.fetch_add(1, Ordering::SeqCst);
                    }
                    Some("OVERRUN") => {
                        counters.overran(int(1).unwrap_or(0) as u64);
                    }
                    Some("LIVE") => {
                        let mut live = live.lock().unwrap_or_else(|p| p.into_inner());
                        if f.get(2) == Some(&"OK") {
                            live.0 += 1;
                        } else {
                            live.1.push(format!(
                                "liveness: {who} could not get name {} within {LIVENESS_BOUND:?} of the heal: {l}",
                                f.get(1).unwrap_or(&"?")
                            ));
                        }
                    }
                    _ => {}
                }
            }
            holds
                .into_values()
                .filter(|h| !h.2)
                .map(|(n, idx, _)| (n, idx))
                .collect::<Vec<_>>()
        });
        *slot = Some(Running {
            child,
            stdin,
            reader,
        });
        Ok(())
    }

    /// SIGKILLs the client process; its open holds end at its death.
    pub(crate) async fn kill(&self) -> Result<String, String> {
        let Some(mut r) = self.running.lock().await.take() else {
            return Err(format!(
                "skipped: {} is down (its replacement has not started yet)",
                self.args.who
            ));
        };
        let pid = r.child.id().unwrap_or_default();
        r.child.start_kill().map_err(|e| e.to_string())?;
        // The holds end when the signal is sent: the process does nothing after that, and the
        // store frees its locks only once the kernel has closed its sockets. Taking the time
        // after `wait` returned (a loaded machine schedules this task late) charged the dead
        // process with the milliseconds in which the next holder, rightly, already held the
        // lock (the 0-2 ms "overlaps" of the postgres-for_update rerun with seed 2026112312 and
        // of postgres-advisory with seed 7).
        let dead = Instant::now();
        let _ = r.child.wait().await;
        let open = r.reader.await.unwrap_or_default();
        for (n, idx) in &open {
            self.histories[*n].ended_at(*idx, dead, true);
        }
        Ok(format!(
            "{} (pid {pid}) killed holding {} lock(s)",
            self.args.who,
            open.len()
        ))
    }

    /// Ends the client: a process is started if the slot is empty, told to stop, and reports
    /// whether it got every name again (liveness). Problems found, as text.
    pub(crate) async fn finish(&self) -> Vec<String> {
        if let Err(e) = self.spawn().await {
            return vec![format!("{}: replacement did not start: {e}", self.args.who)];
        }
        let Some(mut r) = self.running.lock().await.take() else {
            return vec![format!("{}: no process", self.args.who)];
        };
        let mut problems = Vec::new();
        if let Ok(Some(status)) = r.child.try_wait() {
            problems.push(format!(
                "{}: the client process had exited on its own ({status})",
                self.args.who
            ));
        }
        let _ = r.stdin.write_all(b"stop\n").await;
        let _ = r.stdin.flush().await;
        let bound = Duration::from_secs(30) + LIVENESS_BOUND * (self.args.names.len() as u32 + 1);
        if tokio::time::timeout(bound, r.child.wait()).await.is_err() {
            problems.push(format!(
                "{}: the client process did not stop within {bound:?}",
                self.args.who
            ));
            let _ = r.child.kill().await;
        }
        let done = Instant::now();
        let open = r.reader.await.unwrap_or_default();
        for (n, idx) in &open {
            self.histories[*n].ended_at(*idx, done, false);
        }
        let (got, mut failed) =
            std::mem::take(&mut *self.live.lock().unwrap_or_else(|p| p.into_inner()));
        if got + failed.len() < self.args.names.len() {
            problems.push(format!(
                "liveness: {} reported {got} of {} names got again after the heal",
                self.args.who,
                self.args.names.len()
            ));
        }
        problems.append(&mut failed);
        problems
    }
}
