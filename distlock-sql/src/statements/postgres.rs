//! PostgreSQL's statements: row mode with a per-name token table and `NOTIFY` on release;
//! for_update mode with a token sequence drawn in the locking statement; advisory mode with
//! session-level advisory locks on a 64-bit key and the same token sequence.

use super::sets::{
    AdvisoryStatements, BoundedBegin, ClientStatements, Ddl, ForUpdateStatements, LockTexts,
    RowStatements, RwTexts, TokenDraw,
};
use crate::config::Mode;

/// Epoch milliseconds by the database clock (`clock_timestamp`, not the transaction start).
pub(super) const NOW_MS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

/// Serializes concurrent schema creators (transaction-scoped advisory lock).
const SCHEMA_LOCK: &str = "SELECT pg_advisory_xact_lock(7261982733)";

/// Session settings: every commit of a lock or a token waits for its WAL flush, even on a
/// server configured with `synchronous_commit = off`, which can lose the last commits when the
/// server crashes (a lost lock row is a second holder; a lost token draw a repeated token).
const SESSION: &[&str] = &["SET synchronous_commit = on"];

/// How joining the queue refreshes a place the member has already.
const UPSERT_PLACE: &str =
    "ON CONFLICT (name, member) DO UPDATE SET expires_at = EXCLUDED.expires_at";

/// Whether a table or sequence exists on the search path; returns a count.
const OBJECT_EXISTS: &str = "SELECT CAST((to_regclass($1) IS NOT NULL)::int AS BIGINT)";

/// A release's notification, one per row of `d` (the names released): `pg_notify(channel,
/// payload)`, the payload being the live head of the name's queue across processes (its
/// member, or empty when nobody is queued), `/`, the name — so only the head of the queue tries
/// at once, instead of every waiting process (see `crate::notify`). The channel is the head's
/// own listener's when its member starts with one's tag (`notify::Wakeups::member`), so only
/// its process hears it; the table's otherwise (nobody queued). `except` narrows the places
/// looked at (a leaver's own, still visible in its statement); `rest` ends the `FROM`.
pub(super) fn release_notify(t: &str, now: &str, except: &str, rest: &str) -> String {
    format!(
        "SELECT pg_notify(CASE WHEN length(h.head) >= {tagged} THEN '{prefix}' || left(h.head, {tag}) \
         ELSE '{channel}' END, h.head || '/' || d.name) \
         FROM {rest} CROSS JOIN LATERAL (SELECT COALESCE((SELECT w.member FROM {t}_waitq w \
         WHERE w.name = d.name AND w.expires_at > {now} {except} ORDER BY w.seq LIMIT 1), '') AS head) h",
        tagged = crate::notify::TAGGED_MEMBER,
        tag = crate::notify::TAG_LEN,
        prefix = crate::notify::TAGGED_CHANNEL,
        channel = notify_channel(t),
    )
}

/// The release (binds: name, owner, the member of the releasing process's waiter that stands
/// next, or ''), which hands the lock straight to the queue's head: the row becomes the head's (owner = its member, lease = the rest of its place), the name's
/// token is bumped, and the notification on the head's own channel carries the grant
/// (`<member>=<token>/<name>`, `crate::notify`), so the head holds the lock without another
/// round trip. Otherwise (nobody queued, or a head that takes no grant) the row is deleted and
/// the head named on the table's channel, as [`release_notify`] does. The granted head's place goes with
/// the grant (as a winning take's does), and the releaser's own, if it has one: a refresh
/// of a head's place sent as the grant landed can bring the place back, and the holder's
/// release then removes it, so it never outlives the hold. With no place queued at all, the
/// lock goes the same way to the releasing process's waiter that stands next (bound, when
/// tagged: `notify::Wakeups::stand_next`; lease [`distlock_core::backend::WAITER_TTL`] from now; not
/// notified — the releaser hands it over itself, or gives it back when that waiter has
/// stepped out meanwhile), so a handoff within a process needs the release alone. Returns
/// the rows released (deleted or granted), the notifications sent, the member granted the
/// lock with its token and whether it was granted to a place (NULLs when none: the releaser
/// hands a grant to a waiter of its own process directly, `notify::Wakeups::deliver`).
///
/// The head's place is locked (`FOR UPDATE`) until the grant commits: a head that is leaving
/// at that moment leaves only after it, and its departure then finds the row its own and
/// gives it back (`row/mod.rs`, `departure`) — unlocked, a grant could land after the
/// departure had looked, and the lock sat with no one until the place's lease ran out. The
/// next in line is granted only when no live place is in the statement's snapshot at all (the
/// head's place locked may have gone meanwhile, with another behind it), and never the
/// releaser itself (a departure's give-back). The releaser's own place goes only when the
/// release held the row, and only while live (a lapsed one is swept by a `leave`, which may
/// hold it: deleting it here too could deadlock). The
/// lock row is locked first (`o`), as the winning take locks it before it deletes its own
/// place: the other order could deadlock with a head taking an expired row as it was being
/// released; and a release that owns no row (a departure's give-back) locks no place.
fn granting_release(t: &str, now: &str) -> String {
    // Only a member made by `notify::Wakeups::member` takes a grant (`notify::grantable`):
    // anything else at the head (or a bound '') is woken instead.
    let tagged = crate::notify::GRANTABLE_MEMBER;
    let place_ttl = distlock_core::backend::WAITER_TTL.as_millis();
    format!(
        "WITH o AS (SELECT 1 FROM {t} WHERE name = $1 AND owner = $2 FOR UPDATE), \
         h AS (SELECT w.member, w.expires_at FROM {t}_waitq w WHERE EXISTS (SELECT 1 FROM o) \
         AND w.name = $1 AND w.member <> $2 AND w.expires_at > {now} ORDER BY w.seq LIMIT 1 FOR UPDATE), \
         n AS (SELECT h.member, h.expires_at, true AS placed FROM h UNION ALL \
         SELECT CAST($3 AS TEXT), {now} + {place_ttl}, false \
         WHERE length(CAST($3 AS TEXT)) = {tagged} AND CAST($3 AS TEXT) <> $2 AND NOT EXISTS \
         (SELECT 1 FROM {t}_waitq v WHERE v.name = $1 AND v.member <> $2 AND v.expires_at > {now})), \
         g AS (UPDATE {t} l SET owner = n.member, expires_at = n.expires_at FROM n \
         WHERE l.name = $1 AND l.owner = $2 AND length(n.member) = {tagged} RETURNING l.name, n.member, n.placed), \
         d AS (DELETE FROM {t} WHERE name = $1 AND owner = $2 \
         AND NOT EXISTS (SELECT 1 FROM n WHERE length(n.member) = {tagged}) RETURNING name), \
         b AS (INSERT INTO {t}_fences (name, fence) SELECT name, 1 FROM g \
         ON CONFLICT (name) DO UPDATE SET fence = {t}_fences.fence + 1 RETURNING fence), \
         p AS (DELETE FROM {t}_waitq q \
         USING (SELECT member FROM g UNION ALL SELECT $2 WHERE EXISTS (SELECT 1 FROM o)) x \
         WHERE q.name = $1 AND q.member = x.member AND (q.member <> $2 OR q.expires_at > {now})) \
         SELECT (SELECT count(*) FROM d) + (SELECT count(*) FROM g) AS released, \
         (SELECT count(pg_notify('{channel}', COALESCE((SELECT member FROM h), '') || '/' || d.name)) FROM d) \
         + (SELECT count(pg_notify('{prefix}' || left(g.member, {tag}), \
         g.member || '{grant}' || b.fence || '/' || g.name)) FROM g, b WHERE g.placed) AS notified, \
         (SELECT member FROM g) AS granted, (SELECT fence FROM b) AS token, \
         (SELECT placed FROM g) AS placed",
        channel = notify_channel(t),
        prefix = crate::notify::TAGGED_CHANNEL,
        tag = crate::notify::TAG_LEN,
        grant = crate::notify::GRANT_MARK,
    )
}

/// The channel release notifications go to (it fits: `config::MAX_TABLE_LEN`).
fn notify_channel(t: &str) -> String {
    format!("distlock_{t}")
}

pub(crate) fn client(mode: Mode, t: &str) -> ClientStatements {
    let schema = match mode {
        // `<t>_fences` keeps each name's last token after its lock row is deleted.
        Mode::Row => vec![
            Ddl::table(t, format!("CREATE TABLE IF NOT EXISTS {t} (name TEXT PRIMARY KEY, owner TEXT NOT NULL, fence BIGINT NOT NULL, expires_at BIGINT NOT NULL)")),
            Ddl::table(format!("{t}_fences"), format!("CREATE TABLE IF NOT EXISTS {t}_fences (name TEXT PRIMARY KEY, fence BIGINT NOT NULL)")),
            Ddl::table(format!("{t}_waitq"), format!("CREATE TABLE IF NOT EXISTS {t}_waitq (seq BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, member TEXT NOT NULL, expires_at BIGINT NOT NULL, UNIQUE (name, member))")),
            Ddl::table(format!("{t}_waitq_order"), format!("CREATE INDEX IF NOT EXISTS {t}_waitq_order ON {t}_waitq (name, seq)")),
        ],
        Mode::ForUpdate => vec![
            Ddl::table(t, format!("CREATE TABLE IF NOT EXISTS {t} (name TEXT PRIMARY KEY)")),
            token_sequence(t),
        ],
        // The token sequence, and the registry that gives every name a key of its own.
        Mode::Advisory => vec![
            token_sequence(t),
            Ddl::table(format!("{t}_keys"), format!("CREATE TABLE IF NOT EXISTS {t}_keys (name TEXT PRIMARY KEY, key BIGINT NOT NULL UNIQUE)")),
        ],
    };
    ClientStatements {
        session: SESSION,
        schema_lock: Some(SCHEMA_LOCK),
        object_exists: Some(OBJECT_EXISTS),
        schema,
    }
}

/// Draws the next token from for_update's and advisory's sequence.
fn draw_token(t: &str) -> TokenDraw {
    TokenDraw {
        sql: format!("SELECT nextval('{t}_fence')"),
        in_row: true,
    }
}

/// for_update's and advisory's token sequence `<t>_fence`.
fn token_sequence(t: &str) -> Ddl {
    Ddl::table(
        format!("{t}_fence"),
        format!("CREATE SEQUENCE IF NOT EXISTS {t}_fence"),
    )
}

pub(crate) fn row(t: &str) -> RowStatements {
    let now = NOW_MS;
    let acquire = |gate: String, leave: &str, mine: &str| {
        acquire_then(t, &gate, leave, mine, "fence FROM bump")
    };
    // The winner's place goes in the statement that wins (PostgreSQL runs every
    // data-modifying CTE to completion, read or not), so the handoff needs no second round
    // trip; the place is deleted only when `won` has a row. Only our own place: sweeping
    // lapsed ones (several rows) could deadlock with another client's `leave` and cost the
    // win; lapsed places go with the next `leave` of the name.
    let leave_on_win = format!(
        ", gone AS (DELETE FROM {t}_waitq WHERE name = $1 AND member = $4 AND EXISTS (SELECT 1 FROM won))"
    );
    RowStatements {
        acquire_or_join: Some(acquire_or_join(t)),
        // A queued try also takes a row a release granted to its member (`granting_release`)
        // whose message it missed: the grant took its place out of the queue, so the places
        // behind it do not count either.
        acquire: acquire(
            format!(
                "(NOT EXISTS ({ahead}) OR EXISTS (SELECT 1 FROM {t} g WHERE g.name = $1 AND g.owner = $4))",
                ahead = super::queue::ahead(t, now, "$1", "$4")
            ),
            &leave_on_win,
            &format!(" OR {t}.owner = $4"),
        ),
        acquire_first: acquire(first_gate(t), "", ""),
        acquire_leaves: true,
        enqueue: super::queue::enqueue_upsert(t, now, ["$1", "$2", "$3"], UPSERT_PLACE),
        leave: leave(t),
        // With the holder's owner: a head that sees its own member there was granted the lock
        // by a release whose message it missed, and takes it at once.
        state: super::queue::state(t, now, "$1", "$2", super::queue::Seen::Holder),
        positional: false,
        bump: None,
        lookup: format!(
            "SELECT l.owner, COALESCE(f.fence, 0), l.expires_at - {now} AS left_ms FROM {t} l LEFT JOIN {t}_fences f ON f.name = l.name WHERE l.name = $1"
        ),
        renew: format!(
            "UPDATE {t} SET expires_at = {now} + $1 WHERE name = $2 AND owner = $3 AND expires_at > {now}"
        ),
        release: granting_release(t, now),
        notify_channel: Some(notify_channel(t)),
    }
}

/// The row-mode acquire: the row upsert and the per-name counter bump in one statement
/// (data-modifying CTEs), the counter bumped only for a row won and kept locked until commit.
/// `gate`: when the caller may insert (no live place ahead of it); `then`: more
/// data-modifying CTEs (the winner's `leave`); `mine`: a further condition under which an
/// existing row is taken over; `answer`: what the statement returns.
fn acquire_then(t: &str, gate: &str, then: &str, mine: &str, answer: &str) -> String {
    let now = NOW_MS;
    format!(
        "WITH won AS (INSERT INTO {t} (name, owner, fence, expires_at) SELECT $1, $2, 0, {now} + $3 \
         WHERE {gate} \
         ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at \
         WHERE {t}.expires_at <= {now}{mine} RETURNING name), \
         bump AS (INSERT INTO {t}_fences (name, fence) SELECT name, 1 FROM won \
         ON CONFLICT (name) DO UPDATE SET fence = {t}_fences.fence + 1 RETURNING fence){then} \
         SELECT {answer}",
    )
}

/// A first try goes for the row only when no live place is queued and (as far as its snapshot
/// shows) no live row holds the lock: trying a held row would lock it (ON CONFLICT locks the
/// row it conflicts with, WHERE or not) until the try commits, and the holder's release —
/// commonly on its way at the same moment — would wait for that commit.
fn first_gate(t: &str) -> String {
    let now = NOW_MS;
    format!(
        "NOT EXISTS ({}) AND NOT EXISTS (SELECT 1 FROM {t} x WHERE x.name = $1 AND x.expires_at > {now})",
        super::queue::anyone(t, now, "$1")
    )
}

/// A first try that joins the queue when it does not win (`RowStatements::acquire_or_join`): no
/// release can fall between the failed try and the place, so the release that follows finds
/// the place and grants the lock to it (`granting_release`).
fn acquire_or_join(t: &str) -> String {
    let enqueue = super::queue::enqueue_if(
        t,
        NOW_MS,
        ["$1", "$4", "$5"],
        "NOT EXISTS (SELECT 1 FROM won)",
        UPSERT_PLACE,
    );
    acquire_then(
        t,
        &first_gate(t),
        &format!(", joined AS ({enqueue} RETURNING 1)"),
        "",
        "(SELECT fence FROM bump), (SELECT count(*) FROM joined)",
    )
}

/// Leaving the queue also tells the next head when the lock is free (a head that was told of a
/// release and then cancelled would otherwise leave the lock idle until the next waiter's
/// safety look). A data-modifying CTE's deletion is not visible to the rest of the statement,
/// hence the payload's `member <> $2`.
fn leave(t: &str) -> String {
    let now = NOW_MS;
    format!(
        "WITH gone AS ({leave} RETURNING name) \
         SELECT count(*) FROM ({notify} \
         WHERE NOT EXISTS (SELECT 1 FROM {t} l WHERE l.name = d.name AND l.expires_at > {now})) n",
        leave = super::queue::leave(t, now, "$1", "$2"),
        notify = release_notify(
            t,
            now,
            "AND w.member <> $2",
            "(SELECT DISTINCT name FROM gone) d"
        ),
    )
}

/// `BEGIN`, then transaction-local: how long the database keeps a silent holder's transaction
/// and how long a statement waits for a row lock, both in milliseconds (`lock_wait` 0 =
/// forever). Two round trips: sent as one query after a `BEGIN`, a failing `SET LOCAL` would
/// leave the connection in an aborted transaction that sqlx does not know of and returns to
/// the pool; at session level, before the `BEGIN`, the settings would outlive the transaction
/// on the pooled connection.
fn begin(idle: u64, lock_wait: u64) -> BoundedBegin {
    BoundedBegin::ThenInside(format!(
        "SET LOCAL idle_in_transaction_session_timeout = {idle}; SET LOCAL lock_timeout = {lock_wait}"
    ))
}

pub(crate) fn for_update(t: &str) -> ForUpdateStatements {
    // Tokens come from a sequence, drawn after the row lock is granted by an autocommitted
    // `nextval`: not in the lock transaction, whose sequence WAL record is flushed only when
    // something commits, so a server crash could hand the same value out again.
    ForUpdateStatements {
        begin,
        ensure_row: format!("INSERT INTO {t} (name) VALUES ($1) ON CONFLICT (name) DO NOTHING"),
        lock_row: format!("SELECT name FROM {t} WHERE name = $1 FOR UPDATE"),
        try_lock_row: format!("SELECT name FROM {t} WHERE name = $1 FOR UPDATE NOWAIT"),
        peek_row: format!("SELECT name FROM {t} WHERE name = $1 FOR UPDATE NOWAIT"),
        draw_token: draw_token(t),
        ping: "SELECT 1",
    }
}

/// The advisory key of the name bound as `$1` for table `t`: the first 8 bytes of
/// SHA-256(`<t>:<name>`) as a signed 64-bit integer (stable across versions and platforms).
/// A name's first-choice key: the first 8 bytes of the SHA-256 digest of `<t>:<name>`.
fn advisory_hash(t: &str) -> String {
    format!("('x' || left(encode(sha256(convert_to('{t}:' || $1, 'UTF8')), 'hex'), 16))::bit(64)::bigint")
}

/// A name's key, from the registry `<t>_keys` (see `register`).
fn advisory_key(t: &str) -> String {
    format!("(SELECT key FROM {t}_keys WHERE name = $1)")
}

/// Registers name `$1` under its first-choice key XOR `$2` (the probe), unless it is
/// registered already or another name has that key (a 64-bit collision): a count > 0 when the
/// name has a key now. A name's key never changes once registered, and no two names share one
/// (`key` is UNIQUE).
fn advisory_register(t: &str) -> String {
    let hash = advisory_hash(t);
    format!(
        "WITH ins AS (INSERT INTO {t}_keys (name, key) VALUES ($1, {hash} # CAST($2 AS BIGINT)) \
         ON CONFLICT DO NOTHING RETURNING 1) \
         SELECT CAST((SELECT count(*) FROM ins) + (SELECT count(*) FROM {t}_keys WHERE name = $1) AS BIGINT)"
    )
}

/// [`super::LockTexts::try_draw`] for the boolean try-lock call `try_lock`: the token comes
/// from the mode's sequence, as [`draw_token`]'s does.
fn advisory_try_draw(t: &str, try_lock: &str) -> String {
    format!(
        "SELECT CASE WHEN {try_lock} THEN nextval('{t}_fence') ELSE 0 END, \
         set_config('idle_session_timeout', $2, false)"
    )
}

/// `unlock` (a one-BIGINT `SELECT`) and the session's reset in one statement: the settings
/// `advisory_lock_wait` and `advisory_idle` change, each `set_config(name, NULL, false)`,
/// which is `RESET name` (PostgreSQL's `set_config` with a null value resets the setting to
/// the value it would have without a `SET`, and its source back to that value's own, so a
/// configuration reload reaches the pooled connection as it would after `RESET`).
fn advisory_unlock_reset(unlock: &str) -> String {
    format!(
        "{unlock}, set_config('lock_timeout', NULL, false), \
         set_config('client_connection_check_interval', NULL, false), \
         set_config('idle_session_timeout', NULL, false)"
    )
}

/// Session-level: how long `pg_advisory_lock` waits (ms, 0 = forever). The connection check
/// makes a waiter whose client went away (a cancelled acquire closes its connection) leave the
/// lock queue within 250 ms instead of taking the lock on behalf of nobody.
fn advisory_lock_wait(lock_wait: u64) -> String {
    format!("SET lock_timeout = {lock_wait}; SET client_connection_check_interval = 250")
}

/// Session-level: how long the server keeps a silent holder's session (ms).
fn advisory_idle(idle: u64) -> String {
    format!("SET idle_session_timeout = {idle}")
}

pub(crate) fn advisory(t: &str) -> AdvisoryStatements {
    let key = advisory_key(t);
    let unlock = format!("SELECT CAST(CAST(pg_advisory_unlock({key}) AS INT) AS BIGINT)");
    AdvisoryStatements {
        register: Some(advisory_register(t)),
        lock_wait: Some(advisory_lock_wait),
        // `pg_advisory_lock` returns `void` (printed as ''): made a 1.
        lock: format!("SELECT CAST(length(pg_advisory_lock({key})::text) + 1 AS BIGINT)"),
        try_lock: format!("SELECT CAST(CAST(pg_try_advisory_lock({key}) AS INT) AS BIGINT)"),
        try_draw: Some(advisory_try_draw(
            t,
            &format!("pg_try_advisory_lock({key})"),
        )),
        unlock_reset: Some(advisory_unlock_reset(&unlock)),
        unlock,
        held: advisory_locks(t, "AND granted"),
        queued: advisory_locks(t, ""),
        draw_token: draw_token(t),
        idle: advisory_idle,
        reset:
            "RESET lock_timeout; RESET client_connection_check_interval; RESET idle_session_timeout",
        ping: "SELECT 1",
        rw: Some(advisory_rw(t)),
    }
}

/// How many sessions hold the name's key in the `bigint` key space (or, with `filter` empty,
/// hold or wait for it). A bigint key shows in pg_locks as classid (high 32 bits), objid
/// (low), objsubid 1.
fn advisory_locks(t: &str, filter: &str) -> String {
    let key = advisory_key(t);
    format!(
        "WITH k AS (SELECT {key} AS k) SELECT count(*) FROM pg_locks, k \
         WHERE locktype = 'advisory' {filter} AND objsubid = 1 \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND classid = ((k.k >> 32) & 4294967295)::oid AND objid = (k.k & 4294967295)::oid"
    )
}

/// The read-write lock on the name's registered key split into two `int`s: the high half, and
/// the low half shifted into `int`'s range (both one-to-one).
fn advisory_rw(t: &str) -> RwTexts {
    let key = advisory_key(t);
    let pair =
        format!("CAST(({key} >> 32) AS INT), CAST((({key} & 4294967295) - 2147483648) AS INT)");
    let texts = |shared: &str| {
        let unlock =
            format!("SELECT CAST(CAST(pg_advisory_unlock{shared}({pair}) AS INT) AS BIGINT)");
        LockTexts {
            lock: format!(
                "SELECT CAST(length(pg_advisory_lock{shared}({pair})::text) + 1 AS BIGINT)"
            ),
            try_lock: format!(
                "SELECT CAST(CAST(pg_try_advisory_lock{shared}({pair}) AS INT) AS BIGINT)"
            ),
            unlock_reset: Some(advisory_unlock_reset(&unlock)),
            unlock,
            try_draw: Some(advisory_try_draw(
                t,
                &format!("pg_try_advisory_lock{shared}({pair})"),
            )),
        }
    };
    RwTexts {
        read: texts("_shared"),
        write: texts(""),
        // Two ints show in pg_locks as classid and objid (as unsigned oids), objsubid 2.
        state: format!(
            "WITH k AS (SELECT {key} AS k) SELECT \
             CAST(count(*) FILTER (WHERE granted AND mode = 'ShareLock') AS BIGINT), \
             CAST(count(*) FILTER (WHERE granted AND mode = 'ExclusiveLock') AS BIGINT), \
             CAST(count(*) FILTER (WHERE NOT granted) AS BIGINT) FROM pg_locks, k \
             WHERE locktype = 'advisory' AND objsubid = 2 \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND classid = ((k.k >> 32) & 4294967295)::oid \
             AND objid = (((k.k & 4294967295) - 2147483648) & 4294967295)::oid"
        ),
    }
}
