//! The database's own bounds on a for_update lock transaction, computed from the lease and
//! the caller's wait: how long the database keeps a silent holder (`idle`) and how long one
//! statement waits for the row lock (`lock_wait`), each rounded so that the database never
//! gives up earlier than the guard counts. The statement setting them is `begin` in
//! `statements/<dialect>.rs`.

use std::time::Duration;

use crate::config::Dialect;

/// MySQL: the longest lock wait of one statement; longer and endless waits repeat it.
const MYSQL_LOCK_WAIT_SLICE_SECS: u64 = 3600;
/// PostgreSQL: the largest `lock_timeout` / `idle_in_transaction_session_timeout` (ms).
const PG_MAX_MS: u64 = i32::MAX as u64;
/// The lock wait of a `NOWAIT` attempt's other statements (creating a missing row can wait on
/// a concurrent creator): PostgreSQL ms, MySQL s.
const NOWAIT_BOUND: Duration = Duration::from_secs(1);

/// How long the database keeps a silent holder's transaction: twice the lease. The guard pings
/// every ttl/3, so only a holder cut off from the database (a partition, a frozen process) goes
/// silent that long; the database then ends its session and frees the lock, and the guard,
/// unable to ping, reports itself lost before that moment.
pub(crate) fn idle_bound(ttl: Duration) -> Duration {
    ttl * 2
}

/// `d` in whole units of `unit`, rounded UP: a database bound set from it is never shorter
/// than `d` (a guard counts the exact duration, so a shorter bound would free the lock while the
/// guard still believes it is held).
fn ceil_units(d: Duration, unit: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(unit.as_nanos())).unwrap_or(u64::MAX)
}

/// MySQL `wait_timeout` (whole seconds, at least 1) for the idle bound `idle`.
fn mysql_idle_secs(idle: Duration) -> u64 {
    ceil_units(idle, Duration::from_secs(1)).max(1)
}

/// MySQL `innodb_lock_wait_timeout` (whole seconds) for one waiting statement: the time left
/// rounded up (never early, less than 1 s late), at least 1 s, at most one slice; forever is
/// one slice, repeated.
fn mysql_lock_wait_secs(remaining: Option<Duration>) -> u64 {
    remaining.map_or(MYSQL_LOCK_WAIT_SLICE_SECS, |r| {
        ceil_units(r, Duration::from_secs(1)).clamp(1, MYSQL_LOCK_WAIT_SLICE_SECS)
    })
}

/// PostgreSQL `lock_timeout` (ms; 0 = forever) for one waiting statement.
fn pg_lock_wait_ms(remaining: Option<Duration>) -> u64 {
    remaining.map_or(0, |r| {
        ceil_units(r, Duration::from_millis(1)).clamp(1, PG_MAX_MS)
    })
}

/// The `(idle, lock_wait)` values, in `dialect`'s units (PostgreSQL ms, MySQL s), for a lock
/// transaction with lease `ttl` whose statements may wait `wait` (`None` = forever; a `NOWAIT`
/// attempt's other statements get [`NOWAIT_BOUND`]).
pub(crate) fn tx_bounds(
    dialect: Dialect,
    ttl: Duration,
    wait: Option<Duration>,
    nowait: bool,
) -> (u64, u64) {
    let idle = idle_bound(ttl);
    let wait = if nowait { Some(NOWAIT_BOUND) } else { wait };
    match dialect {
        Dialect::Postgres => (
            ceil_units(idle, Duration::from_millis(1)).clamp(1, PG_MAX_MS),
            pg_lock_wait_ms(wait),
        ),
        _ => (mysql_idle_secs(idle), mysql_lock_wait_secs(wait)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_bounds_round_up_never_down() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        // The guard counts 2 × ttl exactly; the database must keep the holder at least that long.
        for (ttl, secs) in [
            (ms(1200), 3),
            (ms(1500), 3),
            (ms(1000), 2),
            (ms(10), 1),
            (ms(2001), 5),
            (s(24 * 3600), 48 * 3600),
        ] {
            let idle = idle_bound(ttl);
            assert_eq!(mysql_idle_secs(idle), secs, "ttl {ttl:?}");
            assert!(s(mysql_idle_secs(idle)) >= idle);
            assert!(ms(ceil_units(idle, ms(1))) >= idle);
        }
        assert_eq!(ceil_units(Duration::from_micros(20_001), ms(1)), 21);
        // Lock waits: never early, less than a unit late, within each database's range.
        assert_eq!(mysql_lock_wait_secs(Some(ms(1))), 1);
        assert_eq!(mysql_lock_wait_secs(Some(ms(1001))), 2);
        assert_eq!(mysql_lock_wait_secs(Some(s(10 * 3600))), 3600);
        assert_eq!(mysql_lock_wait_secs(None), 3600);
        assert_eq!(pg_lock_wait_ms(None), 0);
        assert_eq!(pg_lock_wait_ms(Some(Duration::from_micros(1))), 1);
        assert_eq!(pg_lock_wait_ms(Some(s(100 * 24 * 3600))), PG_MAX_MS);
    }
}
