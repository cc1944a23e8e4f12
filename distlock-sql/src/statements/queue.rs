//! Row mode's waiter queue `<t>_waitq (seq, name, member, expires_at)`: the statement texts
//! every dialect shares, apart from its placeholders and its upsert clause.
//!
//! A waiter (one per process and name: the head of the in-process queue) holds a *place*: a
//! row keyed by `(name, member)` whose `seq` (the table's auto-increment) orders arrivals and
//! whose `expires_at` (database clock, ms) lapses unless refreshed. A place is *live* until it
//! lapses. The acquire statement takes the lock only when no live place is ahead of the
//! caller's (any live place, when the caller has none), so a client that releases while
//! another process waits goes to the back of the line instead of taking the lock straight
//! back. The lock row stays the only thing mutual exclusion and tokens rest on.

/// The largest `seq` (a caller without a place is behind every live one).
const LAST: &str = "9223372036854775807";

/// `… FROM` the live places of name `n` ahead of member `m`'s (placeholders).
fn places_ahead(t: &str, now: &str, n: &str, m: &str) -> String {
    format!(
        "FROM {t}_waitq w WHERE w.name = {n} AND w.member <> {m} AND w.expires_at > {now} \
         AND w.seq < COALESCE((SELECT p.seq FROM {t}_waitq p WHERE p.name = {n} AND p.member = {m}), {LAST})"
    )
}

/// `SELECT 1 …` of every live place of name `n` ahead of member `m`'s (placeholders).
pub(super) fn ahead(t: &str, now: &str, n: &str, m: &str) -> String {
    format!("SELECT 1 {}", places_ahead(t, now, n, m))
}

/// `SELECT 1 …` of every live place of name `n`: what a caller without a place waits behind
/// (the same rows as [`ahead`] for a member without a place, by a cheaper statement).
pub(super) fn anyone(t: &str, now: &str, n: &str) -> String {
    format!("SELECT 1 FROM {t}_waitq w WHERE w.name = {n} AND w.expires_at > {now}")
}

/// Joins or refreshes a place: binds name, member, waiter ttl (ms); `upsert` keeps `seq`.
pub(super) fn enqueue_upsert(t: &str, now: &str, [n, m, ttl]: [&str; 3], upsert: &str) -> String {
    format!("INSERT INTO {t}_waitq (name, member, expires_at) VALUES ({n}, {m}, {now} + {ttl}) {upsert}")
}

/// [`enqueue_upsert`] only when `condition` holds (an SQL condition).
pub(super) fn enqueue_if(
    t: &str,
    now: &str,
    [n, m, ttl]: [&str; 3],
    condition: &str,
    upsert: &str,
) -> String {
    format!("INSERT INTO {t}_waitq (name, member, expires_at) SELECT {n}, {m}, {now} + {ttl} WHERE {condition} {upsert}")
}

/// Leaves the queue and sweeps the name's lapsed places: binds name, member.
pub(super) fn leave(t: &str, now: &str, n: &str, m: &str) -> String {
    format!("DELETE FROM {t}_waitq WHERE name = {n} AND (member = {m} OR expires_at <= {now})")
}

/// What a look reads beside the holder's time left and the places ahead ([`state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// The holder's owner (PostgreSQL: a head that finds its own member there was granted the
    /// lock by a release whose message it missed).
    Holder,
    /// The holder's owner and the member of the live place just ahead (the bells'
    /// dialects: they name the bell a waiter waits on, `crate::bells`).
    HolderAndBefore,
}

/// The holder's ms left (NULL: no row), the live places ahead of member `m`'s, the holder's
/// owner (NULL: no row) and, with [`Seen::HolderAndBefore`], the member of the live place just
/// ahead (NULL: none; always NULL otherwise).
pub(super) fn state(t: &str, now: &str, n: &str, m: &str, seen: Seen) -> String {
    let before = match seen {
        Seen::HolderAndBefore => format!(
            "(SELECT w.member {places} ORDER BY w.seq DESC LIMIT 1)",
            places = places_ahead(t, now, n, m),
        ),
        Seen::Holder => "NULL".to_owned(),
    };
    format!(
        "SELECT (SELECT l.expires_at - {now} FROM {t} l WHERE l.name = {n}), \
         (SELECT COUNT(*) FROM ({ahead}) a), (SELECT l.owner FROM {t} l WHERE l.name = {n}), {before}",
        ahead = ahead(t, now, n, m),
    )
}
