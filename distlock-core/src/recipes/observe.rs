//! [`observe`]: a group's leader changes as a stream, as etcd's `Election.Observe` offers them,
//! on every store.
//!
//! No store hands every backend's leadership changes out cheaply, so this is written once over
//! [`DistributedLock::leader`]: one read per interval while the stream is polled, a value
//! yielded only when it differs from the last one. What that guarantees:
//!
//! * The first value is the leader when the stream was first polled (`None`: nobody leads).
//! * Every value yielded was the leader (identity and fencing token) at some moment; never the
//!   same value twice in a row.
//! * A leadership (or an interregnum) shorter than one interval may be missed; one that lasts
//!   is yielded within about one interval and one read of its start, so the last value yielded
//!   is the current leader within one interval.
//! * Fencing tokens of the leaders yielded increase, as the leaders' own do.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::{BoxStream, Stream, StreamExt};
use tokio::time::Instant;

use crate::{DistributedLock, Leader, LockError};

/// The interval [`observe`] reads at.
pub const DEFAULT_OBSERVE_INTERVAL: Duration = Duration::from_millis(500);

/// The shortest interval [`observe_every`] accepts: each read is a round trip to the store.
pub const MIN_OBSERVE_INTERVAL: Duration = Duration::from_millis(10);

/// How long one read may take before the stream yields [`LockError::Unavailable`] for it.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// One item of [`LeaderChanges`]: the new leader, `None` when nobody leads, or why it could
/// not be read.
pub type LeaderChange = Result<Option<Leader>, LockError>;

/// The leader changes of one group, from [`observe`]: a [`futures::Stream`] of
/// [`LeaderChange`]s (or call [`LeaderChanges::next`]).
///
/// It reads only while polled and owns no task: dropping it stops the observation at once (an
/// interrupted read is only a read).
///
/// # Errors
/// An error item does not end the stream when it is retryable ([`LockError::is_retryable`]:
/// the store was unreachable): reading goes on at the next interval, and the next value is
/// yielded even if it is the one before the error. Any other error (for instance
/// [`LockError::Unsupported`] where the backend records no holder identity) is the last item.
#[must_use = "a stream does nothing unless polled"]
pub struct LeaderChanges {
    group: String,
    backend: String,
    inner: BoxStream<'static, LeaderChange>,
}

impl std::fmt::Debug for LeaderChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderChanges")
            .field("group", &self.group)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// Observes the leaders of `group`, reading every [`DEFAULT_OBSERVE_INTERVAL`]: see
/// [`observe_every`].
///
/// # Errors
/// As [`observe_every`].
pub fn observe(lock: Arc<dyn DistributedLock>, group: &str) -> Result<LeaderChanges, LockError> {
    observe_every(lock, group, DEFAULT_OBSERVE_INTERVAL)
}

/// Observes the leaders of `group` without campaigning: the current leader first, then each
/// change, read at most once per `interval` (the guarantees are in the [module docs](self)).
///
/// ```
/// # async fn demo() -> Result<(), distlock_core::LockError> {
/// use std::time::Duration;
/// use distlock_core::recipes::{elect, observe_every};
///
/// let store = distlock_core::memory::MemoryStore::new();
/// let mut changes = observe_every(store.client(), "scheduler", Duration::from_millis(20))?;
/// assert_eq!(changes.next().await.transpose()?, Some(None)); // nobody leads yet
/// let a = elect(store.client(), "scheduler", "node-a")?;
/// let token = a.await_leadership().await?;
/// let now = changes.next().await.transpose()?.flatten().expect("a leader");
/// assert_eq!((now.identity.as_str(), now.fencing_token), ("node-a", token));
/// a.resign().await?;
/// assert_eq!(changes.next().await.transpose()?, Some(None)); // nobody leads again
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
///
/// # Cancel safety
/// Dropping a pending `next` loses no change: the read in progress stays with the stream and
/// the next call goes on with it.
///
/// # Errors
/// [`LockError::InvalidName`] for a bad group; [`LockError::InvalidConfig`] for an interval
/// under [`MIN_OBSERVE_INTERVAL`]. Read errors come as items (see [`LeaderChanges`]).
pub fn observe_every(
    lock: Arc<dyn DistributedLock>,
    group: &str,
    interval: Duration,
) -> Result<LeaderChanges, LockError> {
    crate::backend::name::validate(group)?;
    if interval < MIN_OBSERVE_INTERVAL {
        return Err(LockError::invalid_config(format!(
            "observe interval {interval:?} for group {group:?} is under {MIN_OBSERVE_INTERVAL:?}: \
             each read is a round trip to the store; pass a longer interval"
        )));
    }
    let backend = lock.backend_name().to_owned();
    let reader = Reader {
        lock,
        group: group.to_owned(),
        interval,
        last: None,
        next_read: None,
        ended: false,
    };
    Ok(LeaderChanges {
        group: group.to_owned(),
        backend,
        // Fused: polling after the end answers `None` again instead of panicking.
        inner: futures::stream::unfold(reader, Reader::next_change)
            .fuse()
            .boxed(),
    })
}

impl LeaderChanges {
    /// The group observed.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The next change: `None` once the stream has ended (after an error that is not
    /// retryable), and again on every later call. The same as `StreamExt::next`, without
    /// importing it.
    pub async fn next(&mut self) -> Option<LeaderChange> {
        self.inner.next().await
    }
}

impl Stream for LeaderChanges {
    type Item = LeaderChange;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<LeaderChange>> {
        self.get_mut().inner.poll_next_unpin(cx)
    }
}

/// The stream's state between items.
struct Reader {
    lock: Arc<dyn DistributedLock>,
    group: String,
    interval: Duration,
    /// The last value yielded; `None` before the first and after an error.
    last: Option<Option<Leader>>,
    /// When the next read may start (`None`: at once).
    next_read: Option<Instant>,
    ended: bool,
}

impl Reader {
    /// Reads until the leader differs from the last value yielded, one read per interval.
    /// Unbounded in count on purpose (it runs while the consumer polls), bounded in rate by the
    /// interval and in time per read by [`READ_TIMEOUT`].
    async fn next_change(mut self) -> Option<(LeaderChange, Reader)> {
        if self.ended {
            return None;
        }
        loop {
            if let Some(at) = self.next_read {
                tokio::time::sleep_until(at).await;
            }
            self.next_read = Some(Instant::now() + self.interval);
            let read = tokio::time::timeout(READ_TIMEOUT, self.lock.leader(&self.group)).await;
            let now = match read {
                Ok(Ok(now)) => now,
                Ok(Err(e)) => return Some((Err(self.failed(e)), self)),
                Err(_) => {
                    let e = LockError::unavailable(
                        self.lock.backend_name(),
                        Some(&self.group),
                        format!("reading the leader took longer than {READ_TIMEOUT:?}"),
                        None,
                    );
                    return Some((Err(self.failed(e)), self));
                }
            };
            if self.last.as_ref() != Some(&now) {
                self.last = Some(now.clone());
                return Some((Ok(now), self));
            }
        }
    }

    /// Records a failed read: the next value is yielded whatever it is, and only a retryable
    /// error lets the stream go on.
    fn failed(&mut self, e: LockError) -> LockError {
        self.last = None;
        self.ended = !e.is_retryable();
        e
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::memory::MemoryStore;
    use crate::recipes::election::elect;
    use crate::AcquireOptions;

    async fn next(c: &mut LeaderChanges) -> Option<Leader> {
        tokio::time::timeout(Duration::from_secs(10), c.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn yields_each_leader_once_and_nobody_between() {
        let store = MemoryStore::new();
        let mut changes = observe_every(store.client(), "g", Duration::from_millis(50)).unwrap();
        assert_eq!(next(&mut changes).await, None);
        let a = elect(store.client(), "g", "a").unwrap();
        let ta = a.await_leadership().await.unwrap();
        assert_eq!(next(&mut changes).await, Some(Leader::new("a", ta)));
        // Reads go on while a leads, but nothing new is yielded.
        let quiet = tokio::time::timeout(Duration::from_secs(1), changes.next()).await;
        assert!(quiet.is_err(), "{quiet:?}");
        a.resign().await.unwrap();
        assert_eq!(next(&mut changes).await, None);
        // The same identity again is another leadership: a new token.
        let again = elect(store.client(), "g", "a").unwrap();
        let t2 = again.await_leadership().await.unwrap();
        assert!(t2 > ta);
        assert_eq!(next(&mut changes).await, Some(Leader::new("a", t2)));
        again.resign().await.unwrap();
    }

    #[tokio::test]
    async fn bad_group_and_short_interval_are_typed_errors() {
        let store = MemoryStore::new();
        let e = observe(store.client(), "").unwrap_err();
        assert!(matches!(e, LockError::InvalidName { .. }), "{e}");
        let e = observe_every(store.client(), "g", Duration::from_millis(1)).unwrap_err();
        assert!(matches!(e, LockError::InvalidConfig(_)), "{e}");
    }

    /// A group held by a plain lock (no identity) cannot name a leader: the error is the last
    /// item, never an invented leader.
    #[tokio::test(start_paused = true)]
    async fn an_error_that_is_not_retryable_ends_the_stream() {
        let store = MemoryStore::new();
        let held = store
            .client()
            .acquire("g", &AcquireOptions::new())
            .await
            .unwrap();
        let mut changes = observe(store.client(), "g").unwrap();
        let e = changes.next().await.unwrap().unwrap_err();
        assert!(!e.is_retryable(), "{e}");
        assert!(changes.next().await.is_none());
        assert!(changes.next().await.is_none());
        held.release().await.unwrap();
    }

    /// A `next` dropped while it waits loses nothing: the following call yields the change.
    #[tokio::test(start_paused = true)]
    async fn a_dropped_next_loses_no_change() {
        let store = MemoryStore::new();
        let mut changes = observe_every(store.client(), "g", Duration::from_millis(50)).unwrap();
        assert_eq!(next(&mut changes).await, None);
        let cut = tokio::time::timeout(Duration::from_millis(120), changes.next()).await;
        assert!(cut.is_err(), "{cut:?}");
        let a = elect(store.client(), "g", "a").unwrap();
        let ta = a.await_leadership().await.unwrap();
        assert_eq!(next(&mut changes).await, Some(Leader::new("a", ta)));
        drop(changes);
        a.resign().await.unwrap();
    }
}
