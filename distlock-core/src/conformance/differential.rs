//! Differential state-machine testing: generated operation sequences run against the in-memory
//! reference backend ([`crate::memory`]) and against the backend under test; the observable
//! outcomes must agree step by step.
//!
//! A sequence drives three client objects over four names drawn from a hostile alphabet: plain
//! names beside shapes that stress each store's mapping (another name's Redis counter and queue
//! key shapes `{x}:fence`, ZooKeeper contender-looking children `x/lock-0`, nested paths, case,
//! trailing-space and accent variants, names at the 256-byte limit). The operations are
//! `acquire` with a zero or a short wait, `try_acquire`, `release`, `extend` to a longer and a
//! shorter lease, dropping a guard, cancelling a waiting `acquire` mid-flight, crashing a
//! client that holds a lock (the harness's crashable client: connections cut, nothing
//! released; the reference abandons its guard), and holding a 1 s lease without renewal past
//! its end.
//!
//! Compared exactly: who gets which name (`Some` vs `None`, a guard vs `Timeout`), `release` and
//! `extend` results. Compared as the contract allows: a dropped guard and a cancelled acquire
//! release in the background, so the harness waits (bounded) until the name is free again on
//! each side before going on. Checked besides: fencing tokens strictly increase per name, and
//! nothing is left in the store after the sequence.
//!
//! Compared as the contract allows for the last two, whose outcomes differ between lease-bound
//! and session-bound stores by design: after a crash the name must be free again within the
//! harness's crash bound on both sides; past an unrenewed lease, a lease-bound store must
//! report the guard lost and the name free (as the reference does), while a session- or
//! connection-bound store ([`crate::Capabilities::lease`] false) must still hold it, unlost.
//!
//! A failing sequence is shrunk by `proptest` to a minimal one and reported with the seed that
//! replays it: `DISTLOCK_DIFF_SEED=<seed> DISTLOCK_DIFF_CASES=<n>` (see `scripts/differential.sh`).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use tokio::time::Instant;

use super::cases::{traces_at_most, traces_gone};
use super::{unique_name, Harness};
use crate::memory::MemoryStore;
use crate::{AcquireOptions, DistributedLock, LockError, LockGuard};

type CrashFn = Box<dyn FnOnce() -> futures::future::BoxFuture<'static, ()> + Send>;

const CLIENTS: usize = 3;
const NAMES: usize = 4;
/// The short wait of `Acquire { short_wait: true }`.
const SHORT_WAIT: Duration = Duration::from_millis(150);
/// The longest the harness waits for a background release to show.
const SETTLE: Duration = Duration::from_secs(5);
/// The lease of `Crash` and `PastLease` acquisitions.
const SHORT_LEASE: Duration = Duration::from_secs(1);

/// Name shapes; `B` stands for the case's unique base name.
const SHAPES: &[&str] = &[
    "B",
    "{B}:fence",
    "{B}:queue",
    "{B}:qexp",
    "B/lock-0",
    "B/lock-0000000001",
    "B/a",
    "B/block-",
    "B ",
    "B\u{e9}",
    "Be\u{301}",
    "B:x",
    "UPPER",
    "LONG",
];

fn shape(template: &str, base: &str) -> String {
    match template {
        "UPPER" => base.to_uppercase(),
        "LONG" => format!("{base}{}", "z".repeat(256 - base.len())),
        t => t.replace('B', base),
    }
}

/// One generated step.
#[derive(Clone, Debug)]
pub enum Op {
    /// `acquire` with a zero wait or [`SHORT_WAIT`].
    Acquire {
        /// Which client.
        client: usize,
        /// Which name.
        name: usize,
        /// Wait [`SHORT_WAIT`] instead of zero.
        short_wait: bool,
    },
    /// `try_acquire`.
    TryAcquire {
        /// Which client.
        client: usize,
        /// Which name.
        name: usize,
    },
    /// `release` of a held guard (slot taken modulo the number held).
    Release {
        /// Which held guard.
        slot: usize,
    },
    /// `extend` of a held guard to 20 s (longer) or 2 s (shorter).
    Extend {
        /// Which held guard.
        slot: usize,
        /// 20 s instead of 2 s.
        longer: bool,
    },
    /// Drop a held guard (background release).
    Drop {
        /// Which held guard.
        slot: usize,
    },
    /// A fresh crashable client takes `name` (zero wait, [`SHORT_LEASE`]) and crashes.
    Crash {
        /// Which name.
        name: usize,
    },
    /// `client` takes `name` on an unrenewed [`SHORT_LEASE`] (zero wait) and holds it past the
    /// lease's end.
    PastLease {
        /// Which client.
        client: usize,
        /// Which name.
        name: usize,
    },
    /// Start an `acquire` that waits forever and cancel it after `after_ms`.
    CancelAcquire {
        /// Which client.
        client: usize,
        /// Which name.
        name: usize,
        /// When to cancel it.
        after_ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let c = 0..CLIENTS;
    let n = 0..NAMES;
    prop_oneof![
        4 => (c.clone(), n.clone(), any::<bool>())
            .prop_map(|(client, name, short_wait)| Op::Acquire { client, name, short_wait }),
        3 => (c.clone(), n.clone()).prop_map(|(client, name)| Op::TryAcquire { client, name }),
        3 => (0..8usize).prop_map(|slot| Op::Release { slot }),
        1 => (0..8usize, any::<bool>()).prop_map(|(slot, longer)| Op::Extend { slot, longer }),
        1 => (0..8usize).prop_map(|slot| Op::Drop { slot }),
        1 => n.clone().prop_map(|name| Op::Crash { name }),
        1 => (c.clone(), n.clone()).prop_map(|(client, name)| Op::PastLease { client, name }),
        1 => (c, n, 0..60u64).prop_map(|(client, name, after_ms)| Op::CancelAcquire {
            client,
            name,
            after_ms
        }),
    ]
}

/// A generated case: which name shapes, and the steps.
#[derive(Clone, Debug)]
pub struct Case {
    /// Indexes into the shape alphabet, one per name.
    pub shapes: Vec<usize>,
    /// The steps.
    pub ops: Vec<Op>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::sample::subsequence((0..SHAPES.len()).collect::<Vec<_>>(), NAMES),
        proptest::collection::vec(op(), 1..24),
    )
        .prop_map(|(shapes, ops)| Case { shapes, ops })
}

/// What one step observed.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Got,
    Free,
    Busy,
    Timeout,
    Ok,
    NotHeld,
    NoGuard,
    Invalid,
    /// Past its unrenewed lease the guard was lost and the name free.
    Expired,
    /// Past its unrenewed lease the guard still held the name (session-bound stores).
    StillHeld,
    Error(String),
}

fn classify(e: &LockError) -> Outcome {
    match e {
        LockError::Timeout { .. } => Outcome::Timeout,
        LockError::NotHeld { .. } | LockError::Lost { .. } => Outcome::NotHeld,
        LockError::InvalidName { .. } => Outcome::Invalid,
        other => Outcome::Error(other.to_string()),
    }
}

/// Where a side gets a client it can crash: the harness (the store under test) or the
/// reference store (whose "crash" is an abandoned guard).
enum Crasher<'a> {
    Harness(&'a dyn Harness),
    Reference(MemoryStore),
}

/// One side of the comparison: clients of one store and the guards they hold.
struct Side<'a> {
    crasher: Crasher<'a>,
    /// The store frees an unrenewed lease at its end (false: session/connection-bound).
    leased: bool,
    clients: Vec<Arc<dyn DistributedLock>>,
    held: Vec<(usize, LockGuard)>,
    tokens: HashMap<usize, u64>,
    label: String,
}

impl Side<'_> {
    /// Checks that `token` is above every earlier token of name `#name`, and remembers it.
    fn note_token(&mut self, name: usize, token: u64) -> Result<(), String> {
        if let Some(prev) = self.tokens.get(&name) {
            if token <= *prev {
                return Err(format!(
                    "{}: fencing token {token} for name #{name} not above the earlier {prev}",
                    self.label
                ));
            }
        }
        self.tokens.insert(name, token);
        Ok(())
    }

    fn record(&mut self, name: usize, g: LockGuard) -> Result<Outcome, String> {
        self.note_token(name, g.fencing_token())?;
        self.held.push((name, g));
        Ok(Outcome::Got)
    }

    /// Waits until `client` can take `name` again (a background release finished), then
    /// gives it back; `Err` if it stayed taken for [`SETTLE`].
    async fn settle(&mut self, client: usize, name: &str, idx: usize) -> Result<(), String> {
        self.settle_within(client, name, idx, SETTLE).await
    }

    async fn settle_within(
        &mut self,
        client: usize,
        name: &str,
        idx: usize,
        within: Duration,
    ) -> Result<(), String> {
        if self.held.iter().any(|(n, _)| *n == idx) {
            return Ok(());
        }
        let until = Instant::now() + within;
        let mut delay = Duration::from_millis(5);
        loop {
            match self.clients[client]
                .try_acquire(name, &AcquireOptions::new())
                .await
            {
                Ok(Some(g)) => {
                    self.note_token(idx, g.fencing_token())?;
                    return g
                        .release()
                        .await
                        .map_err(|e| format!("{}: settle release: {e}", self.label));
                }
                Ok(None) if Instant::now() < until => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_millis(200));
                }
                Ok(None) => {
                    return Err(format!(
                        "{}: {name:?} still taken {within:?} after a background release or crash",
                        self.label
                    ))
                }
                Err(e) => return Err(format!("{}: settle {name:?}: {e}", self.label)),
            }
        }
    }

    async fn step(&mut self, op: &Op, names: &[String]) -> Result<Outcome, String> {
        let zero = AcquireOptions::new().wait(Duration::ZERO);
        match *op {
            Op::Acquire {
                client,
                name,
                short_wait,
            } => {
                let o = if short_wait {
                    AcquireOptions::new().wait(SHORT_WAIT)
                } else {
                    zero
                };
                match self.clients[client].acquire(&names[name], &o).await {
                    Ok(g) => self.record(name, g),
                    Err(e) => Ok(classify(&e)),
                }
            }
            Op::TryAcquire { client, name } => {
                match self.clients[client].try_acquire(&names[name], &zero).await {
                    Ok(Some(g)) => self.record(name, g),
                    Ok(None) => Ok(Outcome::Busy),
                    Err(e) => Ok(classify(&e)),
                }
            }
            Op::Release { .. } | Op::Drop { .. } | Op::Extend { .. } if self.held.is_empty() => {
                Ok(Outcome::NoGuard)
            }
            Op::Release { slot } => {
                let (_, g) = self.held.remove(slot % self.held.len());
                Ok(match g.release().await {
                    Ok(()) => Outcome::Ok,
                    Err(e) => classify(&e),
                })
            }
            Op::Extend { slot, longer } => {
                let ttl = Duration::from_secs(if longer { 20 } else { 2 });
                let i = slot % self.held.len();
                Ok(match self.held[i].1.extend(ttl).await {
                    Ok(()) => Outcome::Ok,
                    Err(e) => classify(&e),
                })
            }
            Op::Drop { slot } => {
                let (name, g) = self.held.remove(slot % self.held.len());
                drop(g);
                self.settle(0, &names[name], name).await?;
                Ok(Outcome::Free)
            }
            Op::Crash { name } => self.crash(&names[name], name).await,
            Op::PastLease { client, name } => self.past_lease(client, &names[name], name).await,
            Op::CancelAcquire {
                client,
                name,
                after_ms,
            } => {
                let lock = Arc::clone(&self.clients[client]);
                let n = names[name].clone();
                let before = match &self.crasher {
                    Crasher::Harness(h) => Some(h.traces(&n).await),
                    Crasher::Reference(_) => None,
                };
                let task = tokio::spawn(async move {
                    if let Ok(g) = lock.acquire(&n, &AcquireOptions::new()).await {
                        // Won before the cancel: hold until cancelled (drop releases).
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        drop(g);
                    }
                });
                tokio::time::sleep(Duration::from_millis(after_ms)).await;
                task.abort();
                let _ = task.await;
                // A cancelled waiter leaves its place in the store from a background task
                // started by the cancel: wait (bounded, best effort) until the store holds no
                // more than before it came, so that the next step does not race that leave
                // (a release in between could grant the departing waiter; cc8 saw a try
                // answered Busy so). The reference's leave is synchronous.
                if let (Crasher::Harness(h), Some(before)) = (&self.crasher, before) {
                    let _ = traces_at_most(*h, &names[name], before, SETTLE).await;
                }
                self.settle(client, &names[name], name).await?;
                Ok(Outcome::Free)
            }
        }
    }

    /// `Op::Crash`: take `name` from a fresh client, crash it, and wait (bounded) until the
    /// store frees the name on its own.
    async fn crash(&mut self, name: &str, idx: usize) -> Result<Outcome, String> {
        let o = AcquireOptions::new().wait(Duration::ZERO).ttl(SHORT_LEASE);
        let (lock, crash, bound): (_, Option<CrashFn>, _) = match &self.crasher {
            Crasher::Harness(h) => {
                let c = h.crashable_client().await;
                (c.lock, Some(c.crash), h.crash_release_bound(SHORT_LEASE))
            }
            Crasher::Reference(store) => (
                store.client() as Arc<dyn DistributedLock>,
                None,
                SHORT_LEASE + Duration::from_secs(2),
            ),
        };
        let g = match lock.acquire(name, &o).await {
            Ok(g) => g,
            Err(e) => return Ok(classify(&e)),
        };
        self.note_token(idx, g.fencing_token())?;
        if let Some(crash) = crash {
            crash().await;
        }
        g.abandon();
        self.settle_within(0, name, idx, bound + Duration::from_secs(3))
            .await?;
        Ok(Outcome::Got)
    }

    /// `Op::PastLease`: hold `name` on an unrenewed short lease past its end; report whether
    /// the guard was lost and the name free, then leave the name free.
    async fn past_lease(
        &mut self,
        client: usize,
        name: &str,
        idx: usize,
    ) -> Result<Outcome, String> {
        let o = AcquireOptions::new()
            .wait(Duration::ZERO)
            .ttl(SHORT_LEASE)
            .renew(false);
        let g = match self.clients[client].acquire(name, &o).await {
            Ok(g) => g,
            Err(e) => return Ok(classify(&e)),
        };
        self.note_token(idx, g.fencing_token())?;
        tokio::time::sleep(SHORT_LEASE + SHORT_LEASE / 2).await;
        let other = (client + 1) % self.clients.len();
        let taken = match self.clients[other]
            .try_acquire(name, &AcquireOptions::new())
            .await
        {
            Ok(t) => t,
            Err(e) => return Err(format!("{}: probe past the lease: {e}", self.label)),
        };
        let outcome =
            match (g.is_lost(), taken) {
                (true, Some(g2)) => {
                    self.note_token(idx, g2.fencing_token())?;
                    g2.release()
                        .await
                        .map_err(|e| format!("{}: release after the lease: {e}", self.label))?;
                    Outcome::Expired
                }
                (false, None) => Outcome::StillHeld,
                // A session- or connection-bound store may report the lease's end while its
                // session still holds the lock until the guard is released.
                (true, None) if !self.leased => Outcome::StillHeld,
                (lost, taken) => {
                    return Err(format!(
                    "{}: past an unrenewed {SHORT_LEASE:?} lease the guard is {} and the name {}",
                    self.label,
                    if lost { "lost" } else { "not lost (two holders)" },
                    if taken.is_some() { "was taken by another client" } else { "still taken" },
                ))
                }
            };
        let _ = g.release().await;
        self.settle(client, name, idx).await?;
        Ok(outcome)
    }

    async fn release_all(&mut self) -> Result<(), String> {
        for (_, g) in self.held.drain(..) {
            g.release()
                .await
                .map_err(|e| format!("{}: final release: {e}", self.label))?;
        }
        Ok(())
    }
}

/// Replaces names the backend under test rejects with `InvalidName` (a store may refuse a
/// shape it cannot represent) by plain ones, so both sides run the same names.
async fn usable_names(lock: &dyn DistributedLock, case: &Case, base: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (i, s) in case.shapes.iter().enumerate() {
        let n = shape(SHAPES[*s], base);
        let n = match lock.try_acquire(&n, &AcquireOptions::new()).await {
            Ok(Some(g)) => {
                let _ = g.release().await;
                n
            }
            Err(LockError::InvalidName { .. }) => format!("{base}-plain{i}"),
            _ => n,
        };
        names.push(n);
    }
    names
}

async fn run_case(h: &dyn Harness, case: &Case) -> Result<(), String> {
    let base = unique_name("diff");
    let mut real = Side {
        crasher: Crasher::Harness(h),
        leased: true,
        clients: Vec::new(),
        held: Vec::new(),
        tokens: HashMap::new(),
        label: String::new(),
    };
    for _ in 0..CLIENTS {
        real.clients.push(h.client().await);
    }
    real.label = real.clients[0].backend_name().to_owned();
    real.leased = real.clients[0].capabilities().lease;
    let store = MemoryStore::new();
    let mut reference = Side {
        crasher: Crasher::Reference(store.clone()),
        leased: true,
        clients: (0..CLIENTS)
            .map(|_| store.client() as Arc<dyn DistributedLock>)
            .collect(),
        held: Vec::new(),
        tokens: HashMap::new(),
        label: "memory reference".into(),
    };
    let names = usable_names(&*real.clients[0], case, &base).await;
    // The probe above drew a token per name; count from it.
    real.tokens.clear();
    let mut outcome = Ok(());
    for (i, op) in case.ops.iter().enumerate() {
        let want = reference.step(op, &names).await;
        let got = real.step(op, &names).await;
        let (want, got) = match (want, got) {
            // As the contract allows: a session-bound store may keep an unrenewed lock (or
            // free it, if its own bound ended the session).
            (Ok(Outcome::Expired), Ok(g @ (Outcome::StillHeld | Outcome::Expired)))
                if !real.leased =>
            {
                (g.clone(), g)
            }
            (Ok(w), Ok(g)) => (w, g),
            (Err(e), _) | (_, Err(e)) => {
                outcome = Err(format!("step {i} {op:?}: {e}"));
                break;
            }
        };
        if want != got {
            outcome = Err(format!(
                "step {i} {op:?} on {:?}: the reference gave {want:?}, {} gave {got:?}",
                match op {
                    Op::Acquire { name, .. }
                    | Op::TryAcquire { name, .. }
                    | Op::CancelAcquire { name, .. }
                    | Op::Crash { name }
                    | Op::PastLease { name, .. } => names[*name].clone(),
                    _ => "a held guard".into(),
                },
                real.label
            ));
            break;
        }
    }
    let cleanup = real.release_all().await;
    let _ = reference.release_all().await;
    outcome?;
    cleanup?;
    for n in &names {
        traces_gone(h, n, SETTLE)
            .await
            .map_err(|e| format!("{}: after the sequence, {e}", real.label))?;
    }
    Ok(())
}

/// How a run is configured: `DISTLOCK_DIFF_CASES` (default 6) and `DISTLOCK_DIFF_SEED`
/// (default: a fresh random seed, printed).
struct Settings {
    cases: u32,
    seed: u64,
}

impl fmt::Display for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DISTLOCK_DIFF_SEED={} DISTLOCK_DIFF_CASES={}",
            self.seed, self.cases
        )
    }
}

fn settings() -> Settings {
    let cases = std::env::var("DISTLOCK_DIFF_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let seed = std::env::var("DISTLOCK_DIFF_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    Settings { cases, seed }
}

/// Generated operation sequences agree with the in-memory reference backend (see the module
/// docs). Panics with the minimal failing sequence and the seed that replays it.
pub async fn differential_against_reference(h: &dyn Harness) {
    let s = settings();
    if let Err(e) = differential_run(h, s.cases, s.seed).await {
        panic!("differential test failed; replay with {s}: {e}");
    }
    eprintln!("differential: {} cases passed ({s})", s.cases);
}

/// Runs `cases` generated sequences from `seed`; the minimal failing sequence on failure.
///
/// # Errors
/// The shrunk failing case and what went wrong.
pub async fn differential_run(h: &dyn Harness, cases: u32, seed: u64) -> Result<(), String> {
    let s = Settings { cases, seed };
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&s.seed.to_le_bytes());
    let config = Config {
        cases: s.cases,
        max_shrink_iters: 64,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let handle = tokio::runtime::Handle::current();
    let result = tokio::task::block_in_place(|| {
        runner.run(&case(), |c| {
            handle
                .block_on(run_case(h, &c))
                .map_err(TestCaseError::fail)
        })
    });
    result.map(|_| ()).map_err(|e| e.to_string())
}
