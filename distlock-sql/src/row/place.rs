//! An acquisition's standing in the line for a name: its place in the queue across processes
//! ([`Place`]) and, on PostgreSQL, its standing as its process's next in line ([`NextInLine`]).

use std::sync::Arc;

use distlock_core::backend::CleanupOnDrop;
use tokio::time::Instant;

use super::lease::NamedRow;
use crate::notify::Wakeups;

/// Our place in the name's queue across processes, while we have one.
pub(super) struct Place {
    /// Leaves the place (and gives back a grant that landed on it) however the acquisition
    /// ends ([`super::departure`]).
    pub(super) cleanup: CleanupOnDrop,
    /// When the last join or refresh of the place was sent (the next is due [`super::HEARTBEAT`] on).
    pub(super) sent: Instant,
    /// The moment the lease of a grant to this place counts from (PostgreSQL): when the refresh
    /// before the last one was sent (the last may have raced the grant, which then copied the
    /// lease that refresh replaced; a refresh waits for the grant's lock on the place and then
    /// puts the place back), or the first join.
    pub(super) grant_base: Instant,
    /// Refresh at the next look, whenever the last was (the place may be gone: a retry left
    /// it, or a grant too late to use took it).
    pub(super) refresh_now: bool,
}

impl Place {
    /// A place joined by a statement sent at `sent`.
    pub(super) fn joined(cleanup: CleanupOnDrop, sent: Instant) -> Self {
        Place {
            cleanup,
            sent,
            grant_base: sent,
            refresh_now: false,
        }
    }
}

/// An acquisition standing next among its process's waiters for a name
/// ([`Wakeups::stand_next`]: a release by this process may grant it the lock without a place)
/// until dropped; a grant handed to it and not taken is given back then.
pub(super) struct NextInLine {
    wakeups: Arc<Wakeups>,
    row: Arc<NamedRow>,
    member: String,
}

impl NextInLine {
    /// `member` stands next for `row`'s name from now on.
    pub(super) fn stand(wakeups: &Arc<Wakeups>, row: &Arc<NamedRow>, member: &str) -> Self {
        wakeups.stand_next(&row.name, member);
        NextInLine {
            wakeups: Arc::clone(wakeups),
            row: Arc::clone(row),
            member: member.to_owned(),
        }
    }
}

impl Drop for NextInLine {
    fn drop(&mut self) {
        if self
            .wakeups
            .step_out(&self.row.name, &self.member)
            .is_some()
        {
            // A grant handed to us and not taken: given back (and passed on).
            self.row.lease(&self.member).give_back();
        }
    }
}
