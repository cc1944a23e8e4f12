//! One renewal scheduler per tokio runtime, shared by every guard on it.
//!
//! A held guard is an entry in a timer heap (about 40 bytes), not a task of its own: the
//! scheduler task sleeps until the earliest entry is due, then runs that guard's one
//! renewal (or lease check) as a future beside the others in flight, and files the entry the
//! step asks for next. Ten thousand held locks cost one task and ten thousand entries, where a
//! task per guard cost each of them a task and its ~0.5 KiB future.
//!
//! # Guarantees
//! - **One live entry per guard.** Every new schedule (the guard's start, an `extend`, a
//!   finished step) takes the guard's next *generation*; only the entry of the current
//!   generation runs, so a stale entry left in the heap does nothing when it comes due.
//! - **Steps never outlive their guard's end.** [`Slot::stop`] (release, drop, abandon) makes
//!   every entry stale and aborts a step in flight (its store call is cancelled, as aborting a
//!   guard's own task did).
//! - **A runtime's guards are renewed by that runtime's scheduler**, found by
//!   [`tokio::runtime::Handle::id`]: when a runtime shuts down its scheduler ends with it, and
//!   guards on other runtimes (each test's own, say) are unaffected. A runtime that reuses a
//!   finished one's id gets a new scheduler (the old one's channel is closed).
//! - **A step that panics loses its own guard only**: the panic is caught, that guard is marked
//!   lost, and the scheduler goes on with the others. A guard whose scheduler is gone (its
//!   runtime shutting down) is marked lost when it files, rather than left unrenewed.
//! - **Finished guards do not pile up**: stale entries (a released guard's, the one an
//!   `extend` replaced) are swept from the heap whenever it has doubled since the last sweep,
//!   so the heap stays within about twice the live guards (at least [`SWEEP_AT_LEAST`]).
//! - A store call that *waits* delays only its own guard: steps run concurrently inside the
//!   task. One that blocks its thread delays every guard of the runtime (as it would stall the
//!   thread's other tasks), and one runtime's renewals run on one task at a time.
//!
//! It does not promise more than the per-guard task did: a runtime too busy to poll the
//! scheduler delays renewals as it delayed those tasks.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use std::panic::AssertUnwindSafe;

use futures::future::{AbortHandle, Abortable, BoxFuture};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The generation of a stopped slot: no entry ever matches it again.
const STOPPED: u64 = u64::MAX;

/// The heap is not swept below this many entries.
const SWEEP_AT_LEAST: usize = 1024;

/// What a guard is to the scheduler.
pub(crate) trait Renewable: Send + Sync + 'static {
    /// The guard's scheduling bookkeeping.
    fn slot(&self) -> &Slot;

    /// When the next step is due: `retry` after a step that failed and asked to retry sooner,
    /// otherwise the guard's regular renewal time (or lease deadline). `None`: nothing more to
    /// do (lost, or neither renewed nor time-bounded).
    fn due(&self, retry: Option<Duration>) -> Option<Instant>;

    /// One renewal or lease check, started by the entry of generation `gen`.
    fn step(self: Arc<Self>, gen: u64) -> BoxFuture<'static, Step>;

    /// The scheduler cannot keep this guard any longer (`why`: a step panicked, or the
    /// runtime's scheduler is gone): report the lock lost.
    fn unscheduled(&self, why: &str);
}

/// What a finished step asks for.
pub(crate) enum Step {
    /// File a new entry of generation `gen` (taken with [`Slot::next_generation`]), due
    /// `retry` from now or at the regular time.
    Again { gen: u64, retry: Option<Duration> },
    /// Nothing more: the guard is lost, stopped or rescheduled by someone else.
    Done,
}

struct Filing {
    guard: Weak<dyn Renewable>,
    gen: u64,
    retry: Option<Duration>,
}

/// A guard's place with its runtime's scheduler.
pub(crate) struct Slot {
    gen: AtomicU64,
    /// The step under way and its generation.
    in_flight: Mutex<Option<(u64, AbortHandle)>>,
    /// `None` for a guard that needs no scheduling (neither renewed nor time-bounded).
    scheduler: Option<mpsc::UnboundedSender<Message>>,
}

impl Slot {
    /// A slot on the current runtime's scheduler (started on first use), or an idle one when
    /// `scheduled` is false. Needs a tokio runtime when `scheduled`.
    pub(crate) fn new(scheduled: bool) -> Self {
        Slot {
            gen: AtomicU64::new(0),
            in_flight: Mutex::new(None),
            scheduler: scheduled.then(scheduler_for_this_runtime),
        }
    }

    /// Takes the next generation (making every earlier entry stale); `None` once stopped.
    pub(crate) fn next_generation(&self) -> Option<u64> {
        self.gen
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |g| {
                (g < STOPPED - 1).then(|| g + 1)
            })
            .ok()
            .map(|g| g + 1)
    }

    /// Whether [`stop`](Self::stop) was called.
    pub(crate) fn is_stopped(&self) -> bool {
        self.gen.load(Ordering::Acquire) == STOPPED
    }

    /// Whether `gen` is still the generation that counts.
    pub(crate) fn is_current(&self, gen: u64) -> bool {
        gen != STOPPED && self.gen.load(Ordering::Acquire) == gen
    }

    /// Files `guard` (whose slot this is) for its regular next step under a new generation:
    /// at the start, and after `extend` changed the lease. A no-op for an idle or stopped slot.
    pub(crate) fn reschedule(&self, guard: Weak<dyn Renewable>) {
        let Some(tx) = &self.scheduler else { return };
        if let Some(gen) = self.next_generation() {
            let filing = Filing {
                guard,
                gen,
                retry: None,
            };
            // Closed: the runtime is shutting down, and nothing would renew this guard.
            if let Err(mpsc::error::SendError(Message::File(f))) = tx.send(Message::File(filing)) {
                if let Some(g) = f.guard.upgrade() {
                    g.unscheduled(
                        "its runtime's renewal scheduler is gone (the runtime is shutting down)",
                    );
                }
            }
        }
    }

    /// Ends scheduling for good: every entry goes stale and a step in flight is aborted.
    pub(crate) fn stop(&self) {
        self.gen.store(STOPPED, Ordering::Release);
        let running = self
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some((_, h)) = running {
            h.abort();
        }
    }

    fn start_step(&self, gen: u64, h: AbortHandle) {
        *self.in_flight.lock().unwrap_or_else(|p| p.into_inner()) = Some((gen, h));
    }

    /// Forgets the abort handle of the step of generation `gen`, unless a later one replaced it.
    fn end_step(&self, gen: u64) {
        let mut cur = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        if cur.as_ref().is_some_and(|(g, _)| *g == gen) {
            *cur = None;
        }
    }
}

/// The senders of the live schedulers, one per runtime id.
static SCHEDULERS: Mutex<Vec<(tokio::runtime::Id, mpsc::UnboundedSender<Message>)>> =
    Mutex::new(Vec::new());

/// The current runtime's scheduler, started on first use (panics outside a runtime, as
/// `tokio::spawn` does).
fn scheduler_for_this_runtime() -> mpsc::UnboundedSender<Message> {
    let handle = tokio::runtime::Handle::current();
    let id = handle.id();
    let mut all = SCHEDULERS.lock().unwrap_or_else(|p| p.into_inner());
    // A scheduler whose runtime ended has dropped its receiver.
    all.retain(|(_, tx)| !tx.is_closed());
    if let Some((_, tx)) = all.iter().find(|(i, _)| *i == id) {
        return tx.clone();
    }
    let (tx, rx) = mpsc::unbounded_channel();
    handle.spawn(run(rx));
    all.push((id, tx.clone()));
    tx
}

/// How many entries the current runtime's scheduler holds (stale ones included).
#[cfg(test)]
pub(crate) async fn entries_on_this_runtime() -> usize {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let _ = scheduler_for_this_runtime().send(Message::Count(reply));
    answer.await.unwrap_or(0)
}

/// A filed step: due at `at`, counts only while its guard's generation is `gen`.
struct Entry {
    at: Instant,
    gen: u64,
    guard: Weak<dyn Renewable>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed, so `BinaryHeap` (a max-heap) pops the earliest entry first.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other.at.cmp(&self.at)
    }
}

/// The timer heap, swept of stale entries whenever it has doubled since the last sweep.
struct Timers {
    heap: BinaryHeap<Entry>,
    sweep_at: usize,
}

impl Timers {
    fn new() -> Self {
        Timers {
            heap: BinaryHeap::new(),
            sweep_at: SWEEP_AT_LEAST,
        }
    }

    /// Files `f` if its generation still counts and its guard wants another step.
    fn file(&mut self, f: Filing) {
        let Some(g) = f.guard.upgrade() else { return };
        if !g.slot().is_current(f.gen) {
            return;
        }
        if let Some(at) = g.due(f.retry) {
            self.heap.push(Entry {
                at,
                gen: f.gen,
                guard: f.guard,
            });
        }
        if self.heap.len() >= self.sweep_at {
            self.sweep();
        }
    }

    /// Drops every entry whose guard is gone, stopped or filed again since.
    fn sweep(&mut self) {
        self.heap.retain(|e| {
            e.guard
                .upgrade()
                .is_some_and(|g| g.slot().is_current(e.gen))
        });
        self.sweep_at = (self.heap.len() * 2).max(SWEEP_AT_LEAST);
    }
}

/// Runs one step, turning a panic into the loss of that guard alone.
async fn guarded(g: Arc<dyn Renewable>, gen: u64) -> Step {
    match AssertUnwindSafe(Arc::clone(&g).step(gen))
        .catch_unwind()
        .await
    {
        Ok(step) => step,
        Err(_) => {
            // A guard released meanwhile is not lost: its release stopped the slot.
            if !g.slot().is_stopped() {
                g.unscheduled("its lease renewal panicked");
            }
            Step::Done
        }
    }
}

/// What a scheduler is asked.
enum Message {
    File(Filing),
    /// How many entries the heap holds (tests).
    #[cfg(test)]
    Count(tokio::sync::oneshot::Sender<usize>),
}

/// The scheduler task: files entries, sleeps until the earliest is due, runs due steps.
async fn run(mut messages: mpsc::UnboundedReceiver<Message>) {
    let mut timers = Timers::new();
    let mut running = FuturesUnordered::new();
    let mut open = true;
    let sleep = tokio::time::sleep(Duration::from_secs(3600));
    tokio::pin!(sleep);
    loop {
        if let Some(e) = timers.heap.peek() {
            if sleep.deadline() != e.at {
                sleep.as_mut().reset(e.at);
            }
        }
        tokio::select! {
            m = messages.recv(), if open => match m {
                Some(Message::File(f)) => timers.file(f),
                #[cfg(test)]
                Some(Message::Count(reply)) => {
                    let _ = reply.send(timers.heap.len());
                }
                // Only once the registry dropped its sender; the runtime's end stops the task.
                None => open = false,
            },
            Some(done) = running.next(), if !running.is_empty() => {
                let (guard, gen, step): (Weak<dyn Renewable>, u64, Result<Step, _>) = done;
                if let Some(g) = guard.upgrade() {
                    g.slot().end_step(gen);
                }
                if let Ok(Step::Again { gen, retry }) = step {
                    timers.file(Filing { guard, gen, retry });
                }
            }
            () = &mut sleep, if !timers.heap.is_empty() => {
                let now = Instant::now();
                while timers.heap.peek().is_some_and(|e| e.at <= now) {
                    let Some(e) = timers.heap.pop() else { break };
                    let Some(g) = e.guard.upgrade() else { continue };
                    if !g.slot().is_current(e.gen) {
                        continue;
                    }
                    let (abort, registration) = AbortHandle::new_pair();
                    g.slot().start_step(e.gen, abort);
                    let step = Abortable::new(guarded(g, e.gen), registration);
                    let (guard, gen) = (e.guard, e.gen);
                    running.push(async move { (guard, gen, step.await) });
                }
            }
            else => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Idle(Slot);

    impl Renewable for Idle {
        fn slot(&self) -> &Slot {
            &self.0
        }
        fn due(&self, _: Option<Duration>) -> Option<Instant> {
            None
        }
        fn step(self: Arc<Self>, _: u64) -> BoxFuture<'static, Step> {
            Box::pin(async { Step::Done })
        }
        fn unscheduled(&self, _: &str) {}
    }

    #[test]
    fn generations_advance_until_stopped_and_then_never_match() {
        let s = Slot::new(false);
        let g1 = s.next_generation().unwrap();
        let g2 = s.next_generation().unwrap();
        assert!(g2 > g1);
        assert!(!s.is_current(g1) && s.is_current(g2));
        s.stop();
        assert!(!s.is_current(g2));
        assert_eq!(s.next_generation(), None);
        assert!(!s.is_current(STOPPED));
    }

    /// A guard that records why it was left unscheduled.
    struct Recorder(Slot, Mutex<Option<String>>);

    impl Renewable for Recorder {
        fn slot(&self) -> &Slot {
            &self.0
        }
        fn due(&self, _: Option<Duration>) -> Option<Instant> {
            Some(Instant::now() + Duration::from_secs(3600))
        }
        fn step(self: Arc<Self>, _: u64) -> BoxFuture<'static, Step> {
            Box::pin(async { Step::Done })
        }
        fn unscheduled(&self, why: &str) {
            *self.1.lock().unwrap() = Some(why.to_owned());
        }
    }

    #[test]
    fn a_guard_filed_after_its_runtime_ended_is_told_so() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let guard = Arc::new(Recorder(
            rt.block_on(async { Slot::new(true) }),
            Mutex::default(),
        ));
        let weak: Weak<dyn Renewable> = Arc::downgrade(&(Arc::clone(&guard) as Arc<dyn Renewable>));
        // Filed while the runtime lives: nothing to report.
        guard.0.reschedule(weak.clone());
        rt.block_on(tokio::task::yield_now());
        assert_eq!(*guard.1.lock().unwrap(), None);
        drop(rt);
        // Filed again (as `extend` does) once the scheduler is gone: the guard hears why.
        guard.0.reschedule(weak);
        let why = guard.1.lock().unwrap().clone();
        assert!(
            why.as_deref()
                .is_some_and(|w| w.contains("scheduler is gone")),
            "the guard was not told: {why:?}"
        );
    }

    #[tokio::test]
    async fn a_finished_step_forgets_only_its_own_abort_handle() {
        let slot = Slot::new(false);
        let pending = || {
            let (step, handle) = futures::future::abortable(std::future::pending::<()>());
            (tokio::spawn(step), handle)
        };
        let ((first, h1), (second, h2)) = (pending(), pending());
        let g1 = slot.next_generation().unwrap();
        slot.start_step(g1, h1.clone());
        let g2 = slot.next_generation().unwrap();
        slot.start_step(g2, h2);
        // The first step ends after the second started: the second's handle stays.
        slot.end_step(g1);
        slot.stop();
        let ended = tokio::time::timeout(Duration::from_secs(5), second).await;
        assert!(
            matches!(ended, Ok(Ok(Err(futures::future::Aborted)))),
            "stop did not abort the step in flight: {ended:?}"
        );
        h1.abort();
        assert!(first.await.unwrap().is_err());
    }

    #[test]
    fn each_runtime_gets_its_own_scheduler_and_a_dead_one_is_replaced() {
        let rt = |()| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        };
        let (a, b) = (rt(()), rt(()));
        let ta = a.block_on(async { scheduler_for_this_runtime() });
        let tb = b.block_on(async { scheduler_for_this_runtime() });
        assert!(!ta.same_channel(&tb), "two runtimes shared a scheduler");
        let ta2 = a.block_on(async { scheduler_for_this_runtime() });
        assert!(ta.same_channel(&ta2), "one runtime got two schedulers");
        drop(a);
        assert!(ta.is_closed(), "the scheduler outlived its runtime");
        assert!(!tb.is_closed());
        // Filing into a live scheduler an entry that wants nothing leaves it running.
        let idle: Arc<dyn Renewable> = Arc::new(Idle(Slot::new(false)));
        let weak = Arc::downgrade(&idle);
        tb.send(Message::File(Filing {
            guard: weak,
            gen: 1,
            retry: None,
        }))
        .unwrap();
        b.block_on(tokio::task::yield_now());
        assert!(!tb.is_closed());
    }
}
