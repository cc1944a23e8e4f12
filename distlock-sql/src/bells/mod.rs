//! Row mode's wake-up channel across processes on MySQL/MariaDB and SQLite: *bells*, named
//! after a waiter's place in the queue.
//!
//! A waiting process takes its own bell (named after its member) before it joins the name's
//! queue, and keeps it until its acquisition ends — if it wins, until its guard releases the
//! lock (the holder's row `owner` then starts with its member, see [`owner_for`]). The process
//! behind it in the queue (the head: behind the holder) waits on that bell instead of polling,
//! and tries the lock the moment it is rung: the place ahead released the lock, left the
//! queue, or its process ended (a crashed process rings its bell too).
//!
//! What a bell is depends on the database: MySQL/MariaDB's user-level locks (`GET_LOCK`,
//! [`user_locks`]), and for SQLite, whose processes share one machine, a listening Unix socket
//! in Linux's abstract namespace ([`sockets`]).
//!
//! A bell is only a hint: the lock row and the queue still decide, and a waiter whose bell
//! answered without news (a place ahead that has no bell: a holder that never queued, a bell
//! that could not be had) falls back to looking every millisecond or so.

#[cfg(target_os = "linux")]
mod sockets;
mod user_locks;
mod wait;

pub(crate) use wait::BellWait;

use std::time::Duration;

use crate::config::Dialect;

/// The row owner of a try by `member` (a queued waiter): its member, `/`, 24 random hex
/// digits — unique per try, and naming the holder's bell to whoever waits behind it.
pub(crate) fn owner_for(member: &str) -> String {
    format!("{member}/{}", &distlock_core::backend::owner_token()[..24])
}

/// The member whose bell a holder's row `owner` names, if it queued (see [`owner_for`]).
pub(crate) fn member_of(owner: &str) -> Option<&str> {
    let (member, _) = owner.split_once('/')?;
    (member.len() == 32 && member.bytes().all(|b| b.is_ascii_hexdigit())).then_some(member)
}

/// The bells of one client.
#[derive(Debug)]
pub(crate) enum Bells {
    /// MySQL/MariaDB: user-level locks on connections of their own.
    UserLocks(user_locks::UserLocks),
    /// SQLite on Linux: abstract Unix sockets.
    #[cfg(target_os = "linux")]
    Sockets,
}

impl Bells {
    /// The bells of a client of `dialect` at `url` (a driver URL); `None` for a dialect
    /// without them (PostgreSQL wakes its waiters by `NOTIFY`).
    pub(crate) fn new(dialect: Dialect, url: &str) -> Option<Self> {
        match dialect {
            Dialect::MySql => user_locks::UserLocks::new(url).map(Bells::UserLocks),
            #[cfg(target_os = "linux")]
            Dialect::Sqlite => Some(Bells::Sockets),
            _ => None,
        }
    }

    /// Takes `member`'s bell; `None` when it could not be had (then followers poll, as
    /// before bells).
    pub(crate) async fn take(&self, member: &str) -> Option<Bell> {
        match self {
            Bells::UserLocks(u) => u.take(member).await.map(Bell::UserLock),
            #[cfg(target_os = "linux")]
            Bells::Sockets => sockets::take(member).map(Bell::Socket),
        }
    }

    /// Waits, at most `within`, for `member`'s bell to be rung (or finds it not taken).
    pub(crate) async fn wait(&self, member: &str, within: Duration) -> BellWait {
        match self {
            Bells::UserLocks(u) => u.wait(member, within).await,
            #[cfg(target_os = "linux")]
            Bells::Sockets => sockets::wait(member, within).await,
        }
    }
}

/// A held bell: rung by [`Bell::ring`], or by dropping it.
#[derive(Debug)]
pub(crate) enum Bell {
    UserLock(user_locks::Held),
    #[cfg(target_os = "linux")]
    Socket(sockets::Held),
}

impl Bell {
    /// Rings the bell: whoever waits on it wakes.
    pub(crate) async fn ring(self) {
        match self {
            Bell::UserLock(h) => h.ring().await,
            #[cfg(target_os = "linux")]
            Bell::Socket(h) => h.ring().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_of_queued_tries_name_their_member() {
        let member = distlock_core::backend::owner_token();
        let owner = owner_for(&member);
        assert!(owner.len() <= 64, "{owner}");
        // SQLite's won-row triggers recognise a queued owner by this shape (statements/sqlite.rs).
        assert_eq!(owner.len(), 57, "{owner}");
        assert_eq!(owner.as_bytes()[32], b'/', "{owner}");
        assert_eq!(member_of(&owner), Some(member.as_str()));
        assert_ne!(owner_for(&member), owner);
        assert_eq!(member_of(&distlock_core::backend::owner_token()), None);
        assert_eq!(member_of("abc/def"), None);
    }
}
