//! Leader election: one leader per group among any number of participants, on every store.
//!
//! A participant campaigns for `group` with an identity ([`elect`]); the leader is the holder
//! of the lock named `group`, so leadership has every property of a held lock: at most one
//! leader at a time within the backend's assumptions, a fencing token strictly greater than
//! every earlier leader's, and a [`Leadership::lost`] signal that fires when the lease,
//! session or connection behind it ends. The leader's identity is recorded with the lock
//! ([`crate::AcquireOptions::holder`]), so observers ask [`crate::DistributedLock::leader`] who
//! leads without campaigning, or follow each change with [`super::observe()`]. A store with a
//! native election recipe answers both calls with it (ZooKeeper: Apache Curator's
//! `LeaderLatch` layout, so Java and Rust participants elect one leader together).
//!
//! # What it does not guarantee
//! Leadership is a lease. A leader that is paused (GC, SIGSTOP, a slow disk) past its lease or
//! session still believes it leads until it runs again and learns otherwise; meanwhile another
//! participant may lead. Fence every write a leader makes with [`Leadership::fencing_token`],
//! exactly as with a [`crate::LockGuard`].
//!
//! Re-campaigning after a loss is the caller's choice: call [`elect`] again, or use
//! [`lead_repeatedly`].

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::options::validate_identity;
use crate::{AcquireOptions, DistributedLock, LockError, LockGuard};

pub use crate::leader::{leader_by_inspect, Leader};

/// Where a participant stands.
#[derive(Clone, Debug)]
enum Phase {
    Campaigning,
    Leading(u64),
    Ended(Arc<LockError>),
}

/// One participant's place in a group's election, from [`elect`].
///
/// It campaigns in the background from the moment it is made; dropping it (or
/// [`resign`](Self::resign)) withdraws: a campaign in progress leaves nothing in the store, and
/// a leadership held is released. Once ended (lost, failed or resigned) it stays ended:
/// campaign again with a new [`elect`].
#[must_use = "dropping a Leadership withdraws from the election"]
pub struct Leadership {
    group: String,
    identity: String,
    backend: String,
    wait: Option<Duration>,
    phase: watch::Receiver<Phase>,
    guard: Arc<Mutex<Option<LockGuard>>>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("group", &self.group)
            .field("identity", &self.identity)
            .field("backend", &self.backend)
            .field("phase", &*self.phase.borrow())
            .finish()
    }
}

/// Joins the election of `group` as `identity` with default options: see [`elect_with`].
///
/// # Errors
/// As [`elect_with`].
pub fn elect(
    lock: Arc<dyn DistributedLock>,
    group: &str,
    identity: &str,
) -> Result<Leadership, LockError> {
    elect_with(lock, group, identity, &AcquireOptions::new())
}

/// Joins the election of `group` as `identity` and campaigns in the background until this
/// participant leads, resigns or is dropped.
///
/// `opts.ttl` and `opts.renew` are the leadership's lease, as for a lock; `opts.wait` bounds
/// [`Leadership::await_leadership`] (the campaign itself goes on until withdrawn).
///
/// ```
/// # async fn demo() -> Result<(), distlock_core::LockError> {
/// use std::time::Duration;
/// use distlock_core::{recipes::election, AcquireOptions, DistributedLock};
///
/// let store = distlock_core::memory::MemoryStore::new();
/// let opts = AcquireOptions::new().wait(Duration::from_secs(5));
/// let a = election::elect_with(store.client(), "scheduler", "node-a", &opts)?;
/// let token = a.await_leadership().await?;              // node-a leads
/// let b = election::elect_with(store.client(), "scheduler", "node-b", &opts)?;
/// // An observer sees who leads, without campaigning:
/// let now = store.client().leader("scheduler").await?.expect("a leader");
/// assert_eq!((now.identity.as_str(), now.fencing_token), ("node-a", token));
/// a.resign().await?;                                    // hand over
/// assert!(b.await_leadership().await? > token);         // node-b leads, with a higher token
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
///
/// # Errors
/// [`LockError::InvalidName`] for a bad group (the lock-name rules),
/// [`LockError::InvalidIdentity`] for a bad identity, [`LockError::InvalidConfig`] for bad
/// options; checked before anything is sent. Store errors end the campaign and come back from
/// [`Leadership::await_leadership`] and [`Leadership::lost`].
pub fn elect_with(
    lock: Arc<dyn DistributedLock>,
    group: &str,
    identity: &str,
    opts: &AcquireOptions,
) -> Result<Leadership, LockError> {
    crate::backend::name::validate(group)?;
    validate_identity(identity)?;
    opts.validate()?;
    let (tx, phase) = watch::channel(Phase::Campaigning);
    let guard = Arc::new(Mutex::new(None));
    let campaign_opts = opts.clone().wait_forever();
    let task = {
        let (lock, slot) = (Arc::clone(&lock), Arc::clone(&guard));
        let (group, identity) = (group.to_owned(), identity.to_owned());
        tokio::spawn(async move {
            let won = lock.campaign(&group, &identity, &campaign_opts).await;
            match won {
                Ok(g) => {
                    let lost = g.lost();
                    let token = g.fencing_token();
                    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(g);
                    tx.send_replace(Phase::Leading(token));
                    let e = lost.await;
                    tx.send_replace(Phase::Ended(Arc::new(e)));
                }
                Err(e) => {
                    tx.send_replace(Phase::Ended(Arc::new(e)));
                }
            }
        })
    };
    Ok(Leadership {
        group: group.to_owned(),
        identity: identity.to_owned(),
        backend: lock.backend_name().to_owned(),
        wait: opts.wait,
        phase,
        guard,
        task: Some(task),
    })
}

impl Leadership {
    /// The group campaigned for.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The identity campaigned with.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Waits until this participant leads and returns its fencing token, at most the `wait`
    /// of the options it was elected with (forever by default).
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future only stops waiting; the campaign goes on.
    ///
    /// # Errors
    /// [`LockError::Timeout`] when the wait ran out (the campaign goes on; call again);
    /// [`LockError::Lost`] when the leadership was already won and lost; the campaign's store
    /// error when it failed.
    pub async fn await_leadership(&self) -> Result<u64, LockError> {
        let mut rx = self.phase.clone();
        let until = async {
            match rx
                .wait_for(|p| !matches!(p, Phase::Campaigning))
                .await
                .map(|p| p.clone())
            {
                Ok(Phase::Leading(t)) => Ok(t),
                Ok(Phase::Ended(e)) => Err(e.duplicate()),
                Ok(Phase::Campaigning) | Err(_) => Err(self.ended("the campaign task stopped")),
            }
        };
        match self.wait {
            Some(w) => tokio::time::timeout(w, until)
                .await
                .unwrap_or_else(|_| Err(LockError::timeout(&self.group, &self.backend, w))),
            None => until.await,
        }
    }

    /// Whether this participant leads now (won, and not known lost).
    pub fn is_leader(&self) -> bool {
        matches!(*self.phase.borrow(), Phase::Leading(_))
            && self
                .guard
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .is_some_and(|g| !g.is_lost())
    }

    /// The leadership's fencing token while this participant leads (`None` before and after):
    /// strictly greater than every earlier leader's. Send it with every write the leader makes.
    pub fn fencing_token(&self) -> Option<u64> {
        match *self.phase.borrow() {
            Phase::Leading(t) if self.is_leader() => Some(t),
            _ => None,
        }
    }

    /// Resolves once this participation has ended after or instead of leading: the leadership
    /// was lost ([`LockError::Lost`]), the campaign failed (its error), or the participant
    /// resigned or was dropped (`Lost`, saying so). Pending while campaigning and while
    /// leading. Independent of `self`'s lifetime, so it can sit in a
    /// `select!` beside the leader's work.
    pub fn lost(&self) -> impl Future<Output = LockError> + Send + 'static {
        let mut rx = self.phase.clone();
        let (group, backend) = (self.group.clone(), self.backend.clone());
        async move {
            match rx.wait_for(|p| matches!(p, Phase::Ended(_))).await {
                Ok(p) => match &*p {
                    Phase::Ended(e) => e.duplicate(),
                    _ => unreachable_phase(&group, &backend),
                },
                Err(_) => unreachable_phase(&group, &backend),
            }
        }
    }

    /// Withdraws: stops campaigning (leaving nothing in the store) or gives up the leadership,
    /// so the next participant can lead.
    ///
    /// # Errors
    /// [`LockError::NotHeld`] when the leadership had already been lost and taken over; store
    /// errors from the release (the lease or session then ends it).
    pub async fn resign(mut self) -> Result<(), LockError> {
        if let Some(task) = self.task.take() {
            task.abort();
            // Once it has stopped, no guard can arrive in the slot behind our back.
            let _ = task.await;
        }
        let guard = self.guard.lock().unwrap_or_else(|p| p.into_inner()).take();
        match guard {
            Some(g) => g.release().await,
            None => Ok(()),
        }
    }

    fn ended(&self, why: &str) -> LockError {
        LockError::Lost {
            name: self.group.clone(),
            backend: self.backend.clone(),
            reason: why.to_owned(),
        }
    }
}

fn unreachable_phase(group: &str, backend: &str) -> LockError {
    LockError::Lost {
        name: group.to_owned(),
        backend: backend.to_owned(),
        reason: "the election handle was dropped".to_owned(),
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        // The campaign future is dropped (a campaign in progress leaves nothing behind); the
        // guard, if any, is released in the background when its last owner goes.
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Leads `group` again and again: campaigns, runs `work` with the fencing token while leading
/// (its future is dropped the instant the leadership is lost), and campaigns again, at most
/// `terms` times. Returns the outputs of the terms whose work finished while leading (a
/// finished term resigns).
///
/// # Errors
/// The first error that is not a loss of leadership (a bad group or identity, a store error).
pub async fn lead_repeatedly<F, Fut, T>(
    lock: Arc<dyn DistributedLock>,
    group: &str,
    identity: &str,
    opts: &AcquireOptions,
    terms: usize,
    mut work: F,
) -> Result<Vec<T>, LockError>
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = T>,
{
    let mut done = Vec::new();
    for _ in 0..terms {
        let l = elect_with(Arc::clone(&lock), group, identity, opts)?;
        let token = match l.await_leadership().await {
            Ok(t) => t,
            Err(LockError::Lost { .. }) => continue,
            Err(e) => return Err(e),
        };
        let lost = l.lost();
        tokio::select! {
            biased;
            _ = lost => continue,
            out = work(token) => {
                done.push(out);
                match l.resign().await {
                    Ok(()) | Err(LockError::NotHeld { .. } | LockError::Lost { .. }) => {}
                    Err(e) => tracing::warn!(group, error = %e, "resign after a term failed; the lease or session ends it"),
                }
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::memory::MemoryStore;

    fn quick() -> AcquireOptions {
        AcquireOptions::new().wait(Duration::from_millis(200))
    }

    #[tokio::test]
    async fn await_leadership_times_out_and_the_campaign_goes_on() {
        let store = MemoryStore::new();
        let a = elect_with(store.client(), "g", "a", &quick()).unwrap();
        a.await_leadership().await.unwrap();
        let b = elect_with(store.client(), "g", "b", &quick()).unwrap();
        assert!(matches!(
            b.await_leadership().await,
            Err(LockError::Timeout { .. })
        ));
        assert!(!b.is_leader());
        assert_eq!(b.fencing_token(), None);
        // Cancelled waits do not end the campaign: b leads once a resigns.
        a.resign().await.unwrap();
        let t = b.await_leadership().await.unwrap();
        assert_eq!(b.fencing_token(), Some(t));
        assert!(b.is_leader());
    }

    #[tokio::test]
    async fn dropping_a_participant_withdraws_and_releases() {
        let store = MemoryStore::new();
        let a = elect_with(store.client(), "g", "a", &quick()).unwrap();
        a.await_leadership().await.unwrap();
        let waiting = elect_with(store.client(), "g", "w", &quick()).unwrap();
        drop(waiting);
        drop(a);
        // The leader's drop releases in the background; the withdrawn waiter never leads.
        let c = elect_with(store.client(), "g", "c", &quick()).unwrap();
        c.await_leadership().await.unwrap();
        let now = store.client().leader("g").await.unwrap().unwrap();
        assert_eq!(now.identity, "c");
        // Resigning while campaigning leaves nothing behind either.
        let d = elect_with(store.client(), "g", "d", &quick()).unwrap();
        d.resign().await.unwrap();
        let ended = c.lost();
        c.resign().await.unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(1), ended).await;
        assert!(matches!(ended, Ok(LockError::Lost { .. })), "{ended:?}");
        assert!(!store.has_entry("g"));
        assert_eq!(store.client().leader("g").await.unwrap(), None);
    }

    #[tokio::test]
    async fn bad_group_identity_and_options_are_typed_errors_before_anything_is_sent() {
        let store = MemoryStore::new();
        let l = store.client();
        let e = elect(l.clone(), "", "a").unwrap_err();
        assert!(matches!(e, LockError::InvalidName { .. }), "{e}");
        let e = elect(l.clone(), "g", "").unwrap_err();
        assert!(matches!(e, LockError::InvalidIdentity { .. }), "{e}");
        let e = elect_with(
            l.clone(),
            "g",
            "a",
            &AcquireOptions::new().ttl(Duration::ZERO),
        )
        .unwrap_err();
        assert!(matches!(e, LockError::InvalidConfig(_)), "{e}");
        let e = l.leader("\0").await.unwrap_err();
        assert!(matches!(e, LockError::InvalidName { .. }), "{e}");
        assert!(!store.has_entry("g"));
    }

    #[tokio::test]
    async fn leader_never_names_a_holder_without_identity() {
        let store = MemoryStore::new();
        let l = store.client();
        let g = l.acquire("g", &AcquireOptions::new()).await.unwrap();
        let e = l.leader("g").await.unwrap_err();
        assert!(e.to_string().contains("recorded no identity"), "{e}");
        g.release().await.unwrap();
    }

    #[tokio::test]
    async fn lead_repeatedly_runs_terms_and_skips_lost_ones() {
        let store = MemoryStore::new();
        let lost_once = Arc::new(AtomicUsize::new(0));
        let s = store.clone();
        let n = Arc::clone(&lost_once);
        let opts = AcquireOptions::new().ttl(Duration::from_millis(300));
        let outs = lead_repeatedly(store.client(), "g", "a", &opts, 3, move |token| {
            let (s, n) = (s.clone(), Arc::clone(&n));
            async move {
                if n.fetch_add(1, Ordering::SeqCst) == 1 {
                    // The second term loses its lock underneath: its work never finishes.
                    s.remove("g");
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                token
            }
        })
        .await
        .unwrap();
        assert_eq!(lost_once.load(Ordering::SeqCst), 3);
        assert_eq!(outs.len(), 2, "{outs:?}");
        assert!(outs[1] > outs[0]);
        assert!(!store.has_entry("g"));
    }
}
