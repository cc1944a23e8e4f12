//! [`PermitStore`]: the in-process reference semaphore ([`MemorySemaphore`]) and read-write
//! lock ([`MemoryRwLock`]), as [`crate::memory`] is the reference mutex.
//!
//! A name holds leased grants (expiring after `ttl` unless renewed) and a queue of waiting
//! requests in arrival order; one admission rule per primitive decides who may take a grant:
//! * semaphore: the head of the queue, while fewer than `max_count` grants are out;
//! * read: no writer holds, and no writer waits ahead of it;
//! * write: nobody holds, and it is the head of the queue.
//!
//! Tokens come from the name's one counter (kept when the name is otherwise forgotten).
//! Waiters are woken on every release, cancellation and expiry. It does not coordinate between
//! processes; it exists for the conformance suite and examples.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{
    Attempt, Deadline, GuardParts, Lease, LostSignal, RwLockBackend, SemaphoreBackend,
};
use crate::info::{Access, RwLockInfo, SemaphoreInfo};
use crate::{AcquireOptions, Capabilities, LockError, LockGuard, Wakeup};

/// What a request or grant is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A semaphore permit.
    Permit,
    /// One side of a read-write lock.
    Rw(Access),
}

/// One name's grants and waiters.
#[derive(Debug, Default)]
struct Name {
    /// A semaphore's count, while it has grants or waiters.
    max: Option<u32>,
    /// Owner id → (kind, lease end).
    grants: HashMap<u64, (Kind, Instant)>,
    /// Waiting requests, in arrival order.
    queue: VecDeque<(u64, Kind)>,
}

impl Name {
    /// Drops grants whose lease ran out; the earliest lease end left.
    fn expire(&mut self, now: Instant) -> Option<Instant> {
        self.grants.retain(|_, (_, until)| *until > now);
        self.grants.values().map(|(_, until)| *until).min()
    }

    /// Whether request `id` of `kind` may take a grant now (`id` not queued: a try).
    fn admits(&self, id: u64, kind: Kind) -> bool {
        let pos = self.queue.iter().position(|(q, _)| *q == id);
        let ahead = &self.queue.as_slices();
        let ahead: Vec<&(u64, Kind)> = ahead
            .0
            .iter()
            .chain(ahead.1.iter())
            .take(pos.unwrap_or(self.queue.len()))
            .collect();
        match kind {
            Kind::Permit => ahead.is_empty() && self.grants.len() < self.max.unwrap_or(0) as usize,
            Kind::Rw(Access::Read) => {
                !self
                    .grants
                    .values()
                    .any(|(k, _)| *k == Kind::Rw(Access::Write))
                    && !ahead.iter().any(|(_, k)| *k == Kind::Rw(Access::Write))
            }
            Kind::Rw(Access::Write) => ahead.is_empty() && self.grants.is_empty(),
        }
    }

    fn is_empty(&self) -> bool {
        self.grants.is_empty() && self.queue.is_empty()
    }
}

#[derive(Debug, Default)]
struct State {
    names: HashMap<String, Name>,
    /// Each name's last token (never forgotten).
    counters: HashMap<String, u64>,
    next_id: u64,
}

impl State {
    /// Forgets `name` once nothing of it is left but its counter.
    fn tidy(&mut self, name: &str) {
        if self.names.get(name).is_some_and(Name::is_empty) {
            self.names.remove(name);
        }
    }
}

/// The shared "server" of [`MemorySemaphore`] and [`MemoryRwLock`] clients. Semaphores and
/// read-write locks of one store are separate namespaces: a semaphore `x` and a read-write
/// lock `x` never meet.
#[derive(Clone, Debug, Default)]
pub struct PermitStore {
    semaphores: Arc<Shared>,
    rwlocks: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Woken on every release, cancellation and expiry.
    changed: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl PermitStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new semaphore client of this store.
    pub fn semaphore(&self) -> Arc<MemorySemaphore> {
        Arc::new(MemorySemaphore {
            shared: Arc::clone(&self.semaphores),
        })
    }

    /// A new read-write lock client of this store.
    pub fn rwlock(&self) -> Arc<MemoryRwLock> {
        Arc::new(MemoryRwLock {
            shared: Arc::clone(&self.rwlocks),
        })
    }

    /// Whether anything of semaphore `name` is left but its counter (no grants, no waiters).
    pub fn semaphore_in_use(&self, name: &str) -> bool {
        self.semaphores.lock().names.contains_key(name)
    }

    /// Whether anything of read-write lock `name` is left but its counter.
    pub fn rwlock_in_use(&self, name: &str) -> bool {
        self.rwlocks.lock().names.contains_key(name)
    }
}

const BACKEND: &str = "memory";

/// Takes a queued place out again if the acquisition is dropped or gives up.
struct Queued<'a> {
    shared: &'a Shared,
    name: &'a str,
    id: u64,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        if let Some(n) = s.names.get_mut(self.name) {
            n.queue.retain(|(q, _)| *q != self.id);
        }
        s.tidy(self.name);
        drop(s);
        // Whoever queued behind us may go now.
        self.shared.changed.notify_waiters();
    }
}

/// One acquisition of `kind` on `name` (`max`: a semaphore's count).
async fn attempt(
    shared: &Arc<Shared>,
    name: &str,
    kind: Kind,
    max: Option<u32>,
    opts: &AcquireOptions,
    how: Attempt,
) -> Result<Option<LockGuard>, LockError> {
    let deadline = Deadline::after(opts.wait);
    let id = {
        let mut s = shared.lock();
        s.next_id += 1;
        s.next_id
    };
    let mut queued: Option<Queued<'_>> = None;
    loop {
        let notified = shared.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let next_expiry = {
            let mut s = shared.lock();
            let now = Instant::now();
            let n = s.names.entry(name.to_owned()).or_default();
            // Expired grants go first: a name nobody holds or waits for takes a new count.
            let next_expiry = n.expire(now);
            if n.is_empty() {
                n.max = None;
            }
            if let Some(max) = max {
                match n.max {
                    Some(m) if m != max => {
                        drop(s);
                        return Err(crate::semaphore::other_count(name, m, max));
                    }
                    _ => n.max = Some(max),
                }
            }

            if n.admits(id, kind) {
                n.queue.retain(|(q, _)| *q != id);
                n.grants.insert(id, (kind, now + opts.ttl));
                let counter = s.counters.entry(name.to_owned()).or_insert(0);
                *counter += 1;
                let token = *counter;
                drop(s);
                if let Some(mut q) = queued.take() {
                    // Granted: nothing to take out of the queue.
                    q.id = 0;
                }
                return Ok(Some(guard(shared, name, id, token, opts, now)));
            }
            if how == Attempt::Try || deadline.expired() {
                s.tidy(name);
                return Ok(None);
            }
            if queued.is_none() {
                n.queue.push_back((id, kind));
                queued = Some(Queued { shared, name, id });
            }
            next_expiry
        };
        let wake = match (next_expiry, deadline.remaining()) {
            (Some(e), Some(r)) => Some(e.min(Instant::now() + r)),
            (Some(e), None) => Some(e),
            (None, Some(r)) => Some(Instant::now() + r),
            (None, None) => None,
        };
        match wake {
            Some(at) => {
                let _ = tokio::time::timeout_at(at, notified).await;
            }
            None => notified.await,
        }
    }
}

fn guard(
    shared: &Arc<Shared>,
    name: &str,
    owner: u64,
    token: u64,
    opts: &AcquireOptions,
    at: Instant,
) -> LockGuard {
    GuardParts {
        name: name.to_owned(),
        backend: BACKEND.to_owned(),
        fencing_token: token,
        ttl: opts.ttl,
        renew: opts.renew,
        acquired_at: at,
        validity: Some(opts.ttl),
        lease: Arc::new(Grant {
            shared: Arc::clone(shared),
            name: name.to_owned(),
            owner,
        }),
        lost: LostSignal::new(),
    }
    .into_guard()
}

/// The store side of one grant.
struct Grant {
    shared: Arc<Shared>,
    name: String,
    owner: u64,
}

#[async_trait]
impl Lease for Grant {
    async fn renew(&self, ttl: Duration) -> Result<Option<Duration>, LockError> {
        let mut s = self.shared.lock();
        let now = Instant::now();
        match s
            .names
            .get_mut(&self.name)
            .and_then(|n| n.grants.get_mut(&self.owner))
        {
            Some((_, until)) if *until > now => {
                *until = now + ttl;
                Ok(Some(ttl))
            }
            _ => Err(LockError::not_held(
                &self.name,
                BACKEND,
                "the lease expired or the grant was removed",
            )),
        }
    }

    async fn release(&self) -> Result<(), LockError> {
        let removed = {
            let mut s = self.shared.lock();
            let now = Instant::now();
            let removed = s.names.get_mut(&self.name).is_some_and(|n| {
                n.grants
                    .remove(&self.owner)
                    .is_some_and(|(_, until)| until > now)
            });
            s.tidy(&self.name);
            removed
        };
        self.shared.changed.notify_waiters();
        if removed {
            Ok(())
        } else {
            Err(LockError::not_held(
                &self.name,
                BACKEND,
                "the lease expired before the release",
            ))
        }
    }
}

/// A semaphore client of a [`PermitStore`].
#[derive(Debug)]
pub struct MemorySemaphore {
    shared: Arc<Shared>,
}

#[async_trait]
impl SemaphoreBackend for MemorySemaphore {
    async fn attempt(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        attempt(&self.shared, name, Kind::Permit, Some(max_count), opts, how).await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leased(Wakeup::Notify, true)
    }

    fn backend_name(&self) -> &str {
        BACKEND
    }

    async fn inspect(&self, name: &str) -> Result<SemaphoreInfo, LockError> {
        let mut s = self.shared.lock();
        let Some(n) = s.names.get_mut(name) else {
            return Ok(SemaphoreInfo::default());
        };
        n.expire(Instant::now());
        if n.is_empty() {
            s.tidy(name);
            return Ok(SemaphoreInfo::default());
        }
        Ok(SemaphoreInfo {
            max_count: n.max,
            holders: n.grants.len(),
            waiters: n.queue.len(),
        })
    }
}

/// A read-write lock client of a [`PermitStore`].
#[derive(Debug)]
pub struct MemoryRwLock {
    shared: Arc<Shared>,
}

#[async_trait]
impl RwLockBackend for MemoryRwLock {
    async fn attempt(
        &self,
        name: &str,
        access: Access,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        attempt(&self.shared, name, Kind::Rw(access), None, opts, how).await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leased(Wakeup::Notify, true)
    }

    fn backend_name(&self) -> &str {
        BACKEND
    }

    async fn inspect(&self, name: &str) -> Result<RwLockInfo, LockError> {
        let mut s = self.shared.lock();
        let Some(n) = s.names.get_mut(name) else {
            return Ok(RwLockInfo::default());
        };
        n.expire(Instant::now());
        if n.is_empty() {
            s.tidy(name);
            return Ok(RwLockInfo::default());
        }
        Ok(RwLockInfo {
            readers: n
                .grants
                .values()
                .filter(|(k, _)| *k == Kind::Rw(Access::Read))
                .count(),
            writer: n
                .grants
                .values()
                .any(|(k, _)| *k == Kind::Rw(Access::Write)),
            waiters: n.queue.len(),
        })
    }
}
