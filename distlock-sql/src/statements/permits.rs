//! The semaphore and read-write lock statements (row mode, every dialect): three tables beside
//! the lock table `t`, created on the first semaphore or read-write lock client:
//!
//! * `<t>_pgates (name, family, fence, max_count, arrivals)`: one row per name and family
//!   (`sem`, `rw`), kept like the mutex's `<t>_fences`: the name's fencing counter, the
//!   semaphore count in use, and the arrival counter that orders the queue. Every admission
//!   locks it first (`FOR UPDATE`; SQLite serializes writers), so decisions on one name never
//!   interleave.
//! * `<t>_permits (name, family, member, kind, expires_at)`: the holders, each with its lease
//!   end by the database clock.
//! * `<t>_pqueue (name, family, member, kind, seq, expires_at)`: the waiters in arrival order,
//!   each lapsing unless refreshed.
//!
//! Binding orders are the same in every dialect (written here with `?`, numbered `$n` for
//! PostgreSQL).

use super::sets::Ddl;
use crate::config::Dialect;

/// Every permit statement for one dialect and lock table.
#[derive(Debug, Clone)]
pub(crate) struct PermitStatements {
    /// The three tables, created when missing.
    pub schema: Vec<Ddl>,
    /// `(name, family)`: the gate row exists afterwards.
    pub gate_ensure: String,
    /// Run `gate_ensure` before every `gate_lock` (SQLite: the write takes the database's
    /// write lock at once, where a read first would have to upgrade and could fail busy);
    /// elsewhere only when the gate row is missing (MySQL's `INSERT IGNORE` on an existing row
    /// takes a shared lock, and two of those wanting the row lock deadlock).
    pub ensure_first: bool,
    /// `(name, family)` → `(fence, max_count or NULL, arrivals)`, the row locked until commit.
    pub gate_lock: String,
    /// `(fence, max_count or NULL, arrivals, name, family)`.
    pub gate_update: String,
    /// `(name, family)`: holders whose lease ended go.
    pub drop_lapsed_holders: String,
    /// `(name, family)`: waiters that stopped refreshing go.
    pub drop_lapsed_waiters: String,
    /// `(name, family)` → `(member, kind)` of every holder.
    pub holders: String,
    /// `(name, family)` → `(member, kind)` of every waiter, in arrival order.
    pub waiters: String,
    /// `(name, family, member, kind, ttl_ms)`.
    pub insert_holder: String,
    /// `(ttl_ms, name, family, member)`: a holder's lease runs `ttl_ms` from now (live ones
    /// only).
    pub renew: String,
    /// `(name, family, member, kind, seq, waiter_ttl_ms)`.
    pub enqueue: String,
    /// `(waiter_ttl_ms, name, family, member)`.
    pub refresh_waiter: String,
    /// `(name, family, member)`: leaves the queue.
    pub leave: String,
    /// `(name, family, member)`: a live holder gives its place back.
    pub release: String,
    /// `(name, family, member)`: whatever is left of the member (after a lapsed release).
    pub forget: String,
    /// `(name, family)` → ms until the earliest holder's lease ends (NULL: no holder).
    pub first_expiry: String,
    /// `(name, family)` → `(kind, live count)` per kind of holder.
    pub live_holders: String,
    /// `(name, family)` → live waiters.
    pub live_waiters: String,
    /// `(name, family)` → `max_count` (NULL when unset or no row).
    pub max_count: String,
    /// `(name, family)` → `kind` of every live holder (a read without locks).
    pub peek_holders: String,
    /// `(name, family)` → `(member, kind)` of every live waiter in arrival order (no locks).
    pub peek_waiters: String,
}

/// `sql` with `?` placeholders numbered `$1`, `$2`, … (PostgreSQL).
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push_str(&format!("${n}"));
        } else {
            out.push(c);
        }
    }
    out
}

/// The permit tables of lock table `t` in dialect `d`, names of type `name_type`.
fn schema(d: Dialect, t: &str, name_type: &str) -> Vec<Ddl> {
    let engine = if d == Dialect::MySql {
        " ENGINE=InnoDB"
    } else {
        ""
    };
    let tables = [
        ("pgates", format!("CREATE TABLE IF NOT EXISTS {t}_pgates (name {name_type} NOT NULL, family VARCHAR(4) NOT NULL, fence BIGINT NOT NULL, max_count BIGINT, arrivals BIGINT NOT NULL, PRIMARY KEY (name, family)){engine}")),
        ("permits", format!("CREATE TABLE IF NOT EXISTS {t}_permits (name {name_type} NOT NULL, family VARCHAR(4) NOT NULL, member VARCHAR(64) NOT NULL, kind VARCHAR(1) NOT NULL, expires_at BIGINT NOT NULL, PRIMARY KEY (name, family, member)){engine}")),
        ("pqueue", format!("CREATE TABLE IF NOT EXISTS {t}_pqueue (name {name_type} NOT NULL, family VARCHAR(4) NOT NULL, member VARCHAR(64) NOT NULL, kind VARCHAR(1) NOT NULL, seq BIGINT NOT NULL, expires_at BIGINT NOT NULL, PRIMARY KEY (name, family, member)){engine}")),
    ];
    tables
        .into_iter()
        .map(|(suffix, sql)| match d {
            // SQLite has no privileges or metadata locks to step around: always run.
            Dialect::Sqlite => Ddl { object: None, sql },
            _ => Ddl::table(format!("{t}_{suffix}"), sql),
        })
        .collect()
}

/// Creates a name's gate row if it is missing.
fn gate_ensure(d: Dialect, t: &str) -> String {
    let columns = "(name, family, fence, arrivals) VALUES (?, ?, 0, 0)";
    match d {
        Dialect::Postgres => {
            format!("INSERT INTO {t}_pgates {columns} ON CONFLICT (name, family) DO NOTHING")
        }
        Dialect::MySql => format!("INSERT IGNORE INTO {t}_pgates {columns}"),
        Dialect::Sqlite => format!("INSERT OR IGNORE INTO {t}_pgates {columns}"),
    }
}

/// The statements for lock table `t` in dialect `d`.
pub(crate) fn permits(d: Dialect, t: &str) -> PermitStatements {
    let (now, name_type, for_update) = match d {
        Dialect::Postgres => (super::postgres::NOW_MS, "TEXT", " FOR UPDATE"),
        Dialect::MySql => (super::mysql::NOW_MS, "VARBINARY(1024)", " FOR UPDATE"),
        Dialect::Sqlite => (super::sqlite::NOW_MS, "TEXT", ""),
    };
    let key = "name = ? AND family = ?";
    let s = |sql: String| match d {
        Dialect::Postgres => numbered(&sql),
        _ => sql,
    };
    PermitStatements {
        schema: schema(d, t, name_type),
        gate_ensure: s(gate_ensure(d, t)),
        ensure_first: d == Dialect::Sqlite,
        gate_lock: s(format!(
            "SELECT fence, max_count, arrivals FROM {t}_pgates WHERE {key}{for_update}"
        )),
        gate_update: s(format!(
            "UPDATE {t}_pgates SET fence = ?, max_count = ?, arrivals = ? WHERE {key}"
        )),
        drop_lapsed_holders: s(format!(
            "DELETE FROM {t}_permits WHERE {key} AND expires_at <= {now}"
        )),
        drop_lapsed_waiters: s(format!(
            "DELETE FROM {t}_pqueue WHERE {key} AND expires_at <= {now}"
        )),
        holders: s(format!("SELECT member, kind FROM {t}_permits WHERE {key}")),
        waiters: s(format!(
            "SELECT member, kind FROM {t}_pqueue WHERE {key} ORDER BY seq"
        )),
        insert_holder: s(format!(
            "INSERT INTO {t}_permits (name, family, member, kind, expires_at) VALUES (?, ?, ?, ?, {now} + ?)"
        )),
        renew: s(format!(
            "UPDATE {t}_permits SET expires_at = {now} + ? WHERE {key} AND member = ? AND expires_at > {now}"
        )),
        enqueue: s(format!(
            "INSERT INTO {t}_pqueue (name, family, member, kind, seq, expires_at) VALUES (?, ?, ?, ?, ?, {now} + ?)"
        )),
        refresh_waiter: s(format!(
            "UPDATE {t}_pqueue SET expires_at = {now} + ? WHERE {key} AND member = ?"
        )),
        leave: s(format!("DELETE FROM {t}_pqueue WHERE {key} AND member = ?")),
        release: s(format!(
            "DELETE FROM {t}_permits WHERE {key} AND member = ? AND expires_at > {now}"
        )),
        forget: s(format!("DELETE FROM {t}_permits WHERE {key} AND member = ?")),
        first_expiry: s(format!(
            "SELECT MIN(expires_at) - {now} FROM {t}_permits WHERE {key}"
        )),
        live_holders: s(format!(
            "SELECT kind, COUNT(*) FROM {t}_permits WHERE {key} AND expires_at > {now} GROUP BY kind"
        )),
        live_waiters: s(format!(
            "SELECT COUNT(*) FROM {t}_pqueue WHERE {key} AND expires_at > {now}"
        )),
        max_count: s(format!("SELECT max_count FROM {t}_pgates WHERE {key}")),
        peek_holders: s(format!(
            "SELECT kind FROM {t}_permits WHERE {key} AND expires_at > {now}"
        )),
        peek_waiters: s(format!(
            "SELECT member, kind FROM {t}_pqueue WHERE {key} AND expires_at > {now} ORDER BY seq"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_placeholders_are_numbered_in_order() {
        let p = permits(Dialect::Postgres, "locks");
        assert!(
            p.renew.contains("$1") && p.renew.contains("$4"),
            "{}",
            p.renew
        );
        assert!(!p.renew.contains('?'));
        let m = permits(Dialect::MySql, "locks");
        assert_eq!(m.renew.matches('?').count(), 4, "{}", m.renew);
    }
}
