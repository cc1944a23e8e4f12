//! The operator's statements (`distlock ls`, `distlock break`; run by `crate::operator`): the
//! held names of a prefix, and a forced release that advances the name's fence — or, where a
//! dialect and mode cannot do one safely, why not.
//!
//! Every listing returns the same columns: name, owner, fencing token, milliseconds left on
//! the lease, holder identity, waiters (NULL where unknown), and binds the prefix twice, then
//! the row limit. Names match a prefix by their first characters (bytes on MySQL/MariaDB),
//! never by `LIKE`, whose wildcards and SQLite's case folding would widen it.

use super::sets::BoundedBegin;
use super::{mysql, postgres, sqlite};
use crate::config::{Dialect, Mode};

/// A listing with and without holder identities (the identity table is created only once a
/// holder records one; a listing on a database without it runs `without_identities`).
#[derive(Debug, Clone)]
pub(crate) struct ListStatements {
    pub with_identities: String,
    pub without_identities: String,
}

/// How a row-mode break is made atomic.
#[derive(Debug, Clone)]
pub(crate) enum Atomic {
    /// `take` alone does it all, in one statement.
    Statement,
    /// `take` and then each of `then`, in one transaction begun so (`None`: a plain `BEGIN`).
    Transaction(Option<BoundedBegin>),
}

/// Row mode's forced release. Invariant: the live row is deleted and the name's fence advanced
/// past the broken holder's token at once (one statement, or one transaction holding the row),
/// so no acquisition can fall between them, and the next token is higher than the broken one
/// even where a takeover would otherwise reuse the row's.
#[derive(Debug, Clone)]
pub(crate) struct RowBreak {
    pub atomic: Atomic,
    /// Takes the live row of the name (binds: name): returns its owner and fencing token (no
    /// row: nobody holds it).
    pub take: String,
    /// Run after `take` found a row, in its transaction (each binds: name).
    pub then: Vec<String>,
}

/// What one dialect and mode can do for an operator; `Err` says why it cannot.
#[derive(Debug, Clone)]
pub(crate) struct OperatorStatements {
    pub list: Result<ListStatements, &'static str>,
    pub break_row: Result<RowBreak, &'static str>,
}

const SESSION_HELD: &str = "the lock is held by its holder's database session; only ending that \
     session frees it, which needs elevated privileges and would also end whatever else that \
     pooled connection is doing: let the holder's process go, or use mode=row";

const MYSQL_UNSEEN: &str = "MySQL/MariaDB does not show another session which rows or `GET_LOCK` \
     names it holds (advisory names are digests), and probing each name would lock it";

pub(crate) fn operator(d: Dialect, mode: Mode, t: &str) -> OperatorStatements {
    match (mode, d) {
        (Mode::Row, d) => OperatorStatements {
            list: Ok(row_list(d, t)),
            break_row: Ok(row_break(d, t)),
        },
        (Mode::ForUpdate, Dialect::Postgres) => OperatorStatements {
            list: Ok(session_list(t, for_update_held(t))),
            break_row: Err(SESSION_HELD),
        },
        (Mode::Advisory, Dialect::Postgres) => OperatorStatements {
            list: Ok(session_list(t, advisory_held(t))),
            break_row: Err(SESSION_HELD),
        },
        (_, Dialect::MySql) => OperatorStatements {
            list: Err(MYSQL_UNSEEN),
            break_row: Err(SESSION_HELD),
        },
        (_, Dialect::Sqlite) => OperatorStatements {
            list: Err("SQLite offers only mode=row"),
            break_row: Err("SQLite offers only mode=row"),
        },
    }
}

/// Row mode's listing: the rows whose lease has not run out, with the holder recorded for the
/// current token (`holders.rs`). The token is the row's own on SQLite, the name's counter
/// elsewhere (the counter moves only when the row is won).
fn row_list(d: Dialect, t: &str) -> ListStatements {
    let (now, name, starts, order, no_text, token_of) = match d {
        Dialect::Postgres => (
            postgres::NOW_MS,
            "l.name",
            "left(l.name, length($1)) = $2",
            "l.name COLLATE \"C\" LIMIT $3",
            "CAST(NULL AS TEXT)",
            "f.fence",
        ),
        Dialect::MySql => (
            mysql::NOW_MS,
            "CAST(l.name AS CHAR CHARACTER SET utf8mb4)",
            "LEFT(l.name, LENGTH(?)) = ?",
            "l.name LIMIT ?",
            "CAST(NULL AS CHAR)",
            "f.fence",
        ),
        Dialect::Sqlite => (
            sqlite::NOW_MS,
            "l.name",
            "substr(l.name, 1, length(?1)) = ?2",
            "l.name LIMIT ?3",
            "CAST(NULL AS TEXT)",
            "l.fence",
        ),
    };
    let fences = match d {
        Dialect::Sqlite => String::new(),
        _ => format!(" LEFT JOIN {t}_fences f ON f.name = l.name"),
    };
    let list = |holder: &str, join: &str| {
        format!(
            "SELECT {name}, l.owner, {token_of}, l.expires_at - {now}, {holder}, CAST(NULL AS {int}) \
             FROM {t} l{fences}{join} WHERE l.expires_at > {now} AND {starts} ORDER BY {order}",
            int = int(d),
        )
    };
    ListStatements {
        with_identities: list(
            "h.holder",
            &format!(" LEFT JOIN {t}_holders h ON h.name = l.name AND h.fence = {token_of}"),
        ),
        without_identities: list(no_text, ""),
    }
}

fn int(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => "SIGNED",
        _ => "BIGINT",
    }
}

/// Row mode's forced release (see [`RowBreak`]).
fn row_break(d: Dialect, t: &str) -> RowBreak {
    match d {
        // Data-modifying CTEs: the delete, the counter's bump (as a win bumps it: the counter
        // then holds the broken token plus one) and the wake-up of the queue's head, as a
        // release's.
        Dialect::Postgres => {
            let now = postgres::NOW_MS;
            let notify = postgres::release_notify(t, now, "", "d");
            RowBreak {
                atomic: Atomic::Statement,
                take: format!(
                    "WITH d AS (DELETE FROM {t} WHERE name = $1 AND expires_at > {now} RETURNING name, owner), \
                     b AS (INSERT INTO {t}_fences (name, fence) SELECT name, 1 FROM d \
                     ON CONFLICT (name) DO UPDATE SET fence = {t}_fences.fence + 1 RETURNING fence) \
                     SELECT d.owner, b.fence - 1, (SELECT count(*) FROM ({notify}) n) FROM d, b"
                ),
                then: Vec::new(),
            }
        }
        // The holder's row and counter row locked, then the delete and the bump.
        Dialect::MySql => {
            let now = mysql::NOW_MS;
            RowBreak {
                atomic: Atomic::Transaction(None),
                take: format!(
                    "SELECT l.owner, COALESCE(f.fence, 0) FROM {t} l LEFT JOIN {t}_fences f ON f.name = l.name \
                     WHERE l.name = ? AND l.expires_at > {now} FOR UPDATE"
                ),
                then: vec![
                    format!("DELETE FROM {t} WHERE name = ?"),
                    format!("UPDATE {t}_fences SET fence = fence + 1 WHERE name = ?"),
                ],
            }
        }
        // The file's write lock from the start (`BEGIN IMMEDIATE`); the table's one counter
        // is already at least the row's token (triggers), and goes one past it, once the row
        // is gone.
        Dialect::Sqlite => {
            let now = sqlite::NOW_MS;
            RowBreak {
                atomic: Atomic::Transaction(Some(BoundedBegin::OneTrip("BEGIN IMMEDIATE".into()))),
                take: format!(
                    "DELETE FROM {t} WHERE name = ?1 AND expires_at > {now} RETURNING owner, fence"
                ),
                then: vec![format!(
                    "UPDATE {t}_fence SET value = value + 1 WHERE id = 1 AND NOT EXISTS (SELECT 1 FROM {t} WHERE name = ?1)"
                )],
            }
        }
    }
}

/// for_update and advisory on PostgreSQL: `held` (the names held, as `name` and the holding
/// backend's `pid`, with a `waiters` count, filtered by prefix) joined with the identities the
/// holders recorded by session (`sessions.rs`), which carry their tokens; a holder that
/// recorded none is listed without a token.
fn session_list(t: &str, held: String) -> ListStatements {
    let list = |(token, holder): (&str, &str), join: &str| {
        format!(
            "SELECT x.name, 'pid ' || x.pid, {token}, CAST(NULL AS BIGINT), {holder}, x.waiters \
             FROM ({held}) x{join} ORDER BY x.name COLLATE \"C\" LIMIT $3"
        )
    };
    ListStatements {
        with_identities: list(
            ("s.fence", "s.holder"),
            &format!(" LEFT JOIN {t}_sessions s ON s.name = x.name AND s.conn = x.pid"),
        ),
        without_identities: list(("CAST(NULL AS BIGINT)", "CAST(NULL AS TEXT)"), ""),
    }
}

/// PostgreSQL for_update: a row is held by the transaction that locked it last (its `xmax`)
/// while that transaction runs (its own id lock, granted, in `pg_locks`). Waiters are not
/// counted: they queue on tuple locks too.
fn for_update_held(t: &str) -> String {
    format!(
        "SELECT r.name, l.pid, CAST(NULL AS BIGINT) AS waiters FROM {t} r \
         JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = r.xmax \
         AND l.granted AND l.mode = 'ExclusiveLock' \
         WHERE left(r.name, length($1)) = $2"
    )
}

/// PostgreSQL advisory: the registered names (`<t>_keys`; the internal names of semaphores and
/// read-write locks are longer than any lock name) whose `bigint` key a session holds, and the
/// sessions waiting for it.
fn advisory_held(t: &str) -> String {
    // A `bigint` key shows in pg_locks as classid (high 32 bits), objid (low), objsubid 1.
    let on_key = |a: &str| {
        format!(
            "{a}.locktype = 'advisory' AND {a}.objsubid = 1 \
             AND {a}.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND {a}.classid = ((k.key >> 32) & 4294967295)::oid AND {a}.objid = (k.key & 4294967295)::oid"
        )
    };
    format!(
        "SELECT k.name, l.pid, (SELECT count(*) FROM pg_locks w WHERE NOT w.granted AND {waiting}) AS waiters \
         FROM {t}_keys k JOIN pg_locks l ON l.granted AND {held} \
         WHERE octet_length(k.name) <= {max} AND left(k.name, length($1)) = $2",
        waiting = on_key("w"),
        held = on_key("l"),
        max = distlock_core::backend::name::MAX_NAME_BYTES,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MySQL/MariaDB's operator statements stick to SQL MySQL 8 accepts too, as every other
    /// MySQL statement does (`mysql.rs`).
    #[test]
    fn mysql_operator_statements_are_portable_to_mysql_8() {
        let sql = operator(Dialect::MySql, Mode::Row, "t");
        let (list, brk) = (sql.list.unwrap(), sql.break_row.unwrap());
        let mut all = vec![list.with_identities, list.without_identities, brk.take];
        all.extend(brk.then);
        for sql in &all {
            for mariadb_only in ["SEQUENCE", "NEXTVAL", "SET STATEMENT", "RETURNING"] {
                assert!(
                    !sql.to_uppercase().contains(mariadb_only),
                    "{mariadb_only} in {sql}"
                );
            }
        }
    }

    /// Only row mode breaks; for_update and advisory list where the database shows holders.
    #[test]
    fn what_each_mode_and_dialect_offers() {
        let offers = |d, m| {
            let s = operator(d, m, "t");
            (s.list.is_ok(), s.break_row.is_ok())
        };
        for d in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
            assert_eq!(offers(d, Mode::Row), (true, true));
        }
        for m in [Mode::ForUpdate, Mode::Advisory] {
            assert_eq!(offers(Dialect::Postgres, m), (true, false));
            assert_eq!(offers(Dialect::MySql, m), (false, false));
        }
    }
}
