//! [`MemoryLock`]: an in-process reference backend.
//!
//! Several [`MemoryLock`] clients over one [`MemoryStore`] behave like clients of one lease-based
//! store: locks expire after `ttl` unless renewed, fencing tokens come from a per-name counter,
//! and waiters queue in arrival order and are woken on release (and at the holder's expiry).
//! It lists the unexpired entries and breaks one by removing it and bumping its counter.
//! It exists to test the guard machinery with paused time and to run the conformance suite
//! without a server; it does not coordinate between processes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::backend::local_queue::{self, LocalQueue};
use crate::backend::{Attempt, Deadline, GuardParts, Lease, LockBackend, LostSignal};
use crate::operator::{nobody_holds, Broken, Listed, Listing};
use crate::{AcquireOptions, Capabilities, LockError, LockGuard, LockInfo, Wakeup};

const BACKEND: &str = "memory";

#[derive(Debug)]
struct Entry {
    owner: u64,
    token: u64,
    expires: Instant,
    holder: Option<String>,
}

impl Entry {
    /// What `inspect` reports of this entry at `now`: `None` once it expired.
    fn info(&self, now: Instant) -> Option<LockInfo> {
        (self.expires > now).then(|| {
            LockInfo::held(
                Some(self.token),
                Some(self.owner.to_string()),
                Some(self.expires - now),
                None,
            )
            .with_holder(self.holder.clone())
        })
    }
}

#[derive(Debug, Default)]
struct State {
    held: HashMap<String, Entry>,
    counters: HashMap<String, u64>,
    next_owner: u64,
    renewals: u64,
}

/// The shared "server" several [`MemoryLock`] clients talk to.
#[derive(Clone, Debug)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    /// Names this store's waiter queues ([`LocalQueue`]) apart from other stores'.
    id: u64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        MemoryStore {
            state: Arc::default(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn queue_key(&self, name: &str) -> String {
        local_queue::key(&format!("memory:{}", self.id), "", name)
    }

    /// A new client of this store.
    pub fn client(&self) -> Arc<MemoryLock> {
        Arc::new(MemoryLock {
            store: self.clone(),
        })
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Removes `name` underneath its holder (as an operator or a bug elsewhere would).
    pub fn remove(&self, name: &str) {
        self.lock_state().held.remove(name);
        LocalQueue::wake(&self.queue_key(name));
    }

    /// Whether an entry (held or expired but not yet taken over) exists for `name`.
    pub fn has_entry(&self, name: &str) -> bool {
        self.lock_state().held.contains_key(name)
    }

    /// How many lease renewals the store has served (to prove renewals stop).
    pub fn renewals(&self) -> u64 {
        self.lock_state().renewals
    }

    /// One attempt: take `name` if free or expired. `Ok((owner, token))` or `Err(holder expiry)`.
    fn try_take(&self, name: &str, opts: &AcquireOptions) -> Result<(u64, u64), Instant> {
        let mut s = self.lock_state();
        let now = Instant::now();
        if let Some(e) = s.held.get(name) {
            if e.expires > now {
                return Err(e.expires);
            }
        }
        s.next_owner += 1;
        let owner = s.next_owner;
        let counter = s.counters.entry(name.to_owned()).or_insert(0);
        *counter += 1;
        let token = *counter;
        s.held.insert(
            name.to_owned(),
            Entry {
                owner,
                token,
                expires: now + opts.ttl,
                holder: opts.holder.clone(),
            },
        );
        Ok((owner, token))
    }
}

/// A client of a [`MemoryStore`].
#[derive(Debug)]
pub struct MemoryLock {
    store: MemoryStore,
}

struct MemoryLease {
    store: MemoryStore,
    name: String,
    owner: u64,
}

#[async_trait]
impl Lease for MemoryLease {
    async fn renew(&self, ttl: Duration) -> Result<Option<Duration>, LockError> {
        let mut s = self.store.lock_state();
        s.renewals += 1;
        let now = Instant::now();
        match s.held.get_mut(&self.name) {
            Some(e) if e.owner == self.owner && e.expires > now => {
                e.expires = now + ttl;
                Ok(Some(ttl))
            }
            _ => Err(LockError::not_held(
                &self.name,
                BACKEND,
                "the lease expired or the lock was removed",
            )),
        }
    }

    async fn release(&self) -> Result<(), LockError> {
        let removed = {
            let mut s = self.store.lock_state();
            match s.held.get(&self.name) {
                Some(e) if e.owner == self.owner => s.held.remove(&self.name).is_some(),
                _ => false,
            }
        };
        LocalQueue::wake(&self.store.queue_key(&self.name));
        if removed {
            Ok(())
        } else {
            Err(LockError::not_held(
                &self.name,
                BACKEND,
                "the lease expired and the lock was taken over or removed",
            ))
        }
    }
}

impl MemoryLock {
    fn guard(
        &self,
        name: &str,
        opts: &AcquireOptions,
        owner: u64,
        token: u64,
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
            lease: Arc::new(MemoryLease {
                store: self.store.clone(),
                name: name.to_owned(),
                owner,
            }),
            lost: LostSignal::new(),
        }
        .into_guard()
    }
}

#[async_trait]
impl LockBackend for MemoryLock {
    async fn attempt(
        &self,
        name: &str,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        if how == Attempt::Try {
            let at = Instant::now();
            return Ok(self
                .store
                .try_take(name, opts)
                .ok()
                .map(|(owner, token)| self.guard(name, opts, owner, token, at)));
        }
        let deadline = Deadline::after(opts.wait);
        // Waiters queue in arrival order; only the head tries the store.
        let turn = LocalQueue::wait_turn(self.store.queue_key(name), &deadline).await;
        loop {
            // Armed before the attempt so a release in between still wakes us.
            let notified = turn.released();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let at = Instant::now();
            match self.store.try_take(name, opts) {
                Ok((owner, token)) => return Ok(Some(self.guard(name, opts, owner, token, at))),
                Err(expires) => {
                    crate::backend::handoff::waited();
                    if deadline.expired() {
                        return Ok(None);
                    }
                    let until_expiry = expires.saturating_duration_since(Instant::now());
                    tokio::select! {
                        _ = notified => {}
                        _ = deadline.sleep(until_expiry) => {}
                    }
                }
            }
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leased(Wakeup::Notify, false)
            .with_holder_identity(true)
            .with_operator(true, true)
    }

    fn backend_name(&self) -> &str {
        BACKEND
    }

    async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        let s = self.store.lock_state();
        let now = Instant::now();
        Ok(s.held
            .get(name)
            .and_then(|e| e.info(now))
            .unwrap_or_else(LockInfo::free))
    }

    /// Every unexpired entry whose name starts with `prefix`.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Listing, LockError> {
        let s = self.store.lock_state();
        let now = Instant::now();
        let found = s
            .held
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .filter_map(|(name, e)| Some(Listed::new(name.clone(), e.info(now)?)))
            .collect();
        Ok(Listing::page(found, limit, false))
    }

    /// Removes the unexpired entry and bumps the name's counter past its token, at once.
    async fn break_lock(&self, name: &str) -> Result<Broken, LockError> {
        let broken = {
            let mut s = self.store.lock_state();
            let now = Instant::now();
            match s.held.remove(name) {
                Some(e) if e.expires > now => {
                    let counter = s.counters.entry(name.to_owned()).or_insert(0);
                    *counter = (*counter).max(e.token) + 1;
                    Broken::new(name, Some(e.token)).with_owner(Some(e.owner.to_string()), e.holder)
                }
                _ => return Err(nobody_holds(name, BACKEND)),
            }
        };
        LocalQueue::wake(&self.store.queue_key(name));
        Ok(broken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DistributedLock;

    fn assert_send_sync_static<T: Send + Sync + 'static>() {}

    #[test]
    fn guard_and_lock_are_send_sync_static() {
        assert_send_sync_static::<LockGuard>();
        assert_send_sync_static::<Arc<dyn DistributedLock>>();
    }

    #[tokio::test(start_paused = true)]
    async fn renewal_keeps_lease_and_stops_with_guard() {
        let store = MemoryStore::new();
        let c = store.client();
        let opts = AcquireOptions::new().ttl(Duration::from_secs(3));
        let g = c.acquire("a", &opts).await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!g.is_lost());
        let renewed = store.renewals();
        assert!(renewed >= 3, "renewed {renewed} times");
        g.release().await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(store.renewals(), renewed, "renewals outlived their guard");

        let g = c.acquire("b", &opts).await.unwrap();
        drop(g);
        let before = store.renewals();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            store.renewals(),
            before,
            "renewals outlived a dropped guard"
        );
        assert!(!store.has_entry("b"), "drop did not release");
    }

    #[tokio::test(start_paused = true)]
    async fn unrenewed_lease_is_lost_at_expiry_and_stale_release_is_not_held() {
        let store = MemoryStore::new();
        let (c1, c2) = (store.client(), store.client());
        let opts = AcquireOptions::new()
            .ttl(Duration::from_secs(1))
            .renew(false);
        let g1 = c1.acquire("x", &opts).await.unwrap();
        let lost = tokio::time::timeout(Duration::from_millis(1100), g1.lost()).await;
        assert!(matches!(lost, Ok(LockError::Lost { .. })));
        let g2 = c2.acquire("x", &opts.clone().renew(true)).await.unwrap();
        assert!(g2.fencing_token() > g1.fencing_token());
        assert!(matches!(g1.release().await, Err(LockError::NotHeld { .. })));
        assert!(c1.try_acquire("x", &opts).await.unwrap().is_none());
        assert!(matches!(g2.extend(Duration::from_secs(5)).await, Ok(())));
        assert_eq!(g2.ttl(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn removal_underneath_is_detected_by_renewal() {
        let store = MemoryStore::new();
        let c = store.client();
        let g = c
            .acquire("r", &AcquireOptions::new().ttl(Duration::from_secs(3)))
            .await
            .unwrap();
        store.remove("r");
        let lost = tokio::time::timeout(Duration::from_millis(1100), g.lost()).await;
        assert!(matches!(lost, Ok(LockError::Lost { .. })), "{lost:?}");
        assert!(matches!(
            g.extend(Duration::from_secs(1)).await,
            Err(LockError::NotHeld { .. })
        ));
    }
}
