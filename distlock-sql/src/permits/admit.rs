//! One admission decision: a transaction that locks the name's gate row, drops what lapsed,
//! and grants the member its place or queues it.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use crate::client::SqlClient;
use crate::config::Dialect;
use crate::error::{classify, Failure};
use crate::statements::PermitStatements;

pub(crate) use distlock_core::backend::WAITER_TTL;

/// What one acquisition asks for.
#[derive(Clone, Debug)]
pub(crate) struct Ask {
    pub name: String,
    /// `sem` or `rw`.
    pub family: &'static str,
    /// Kind letter and random token.
    pub member: String,
    /// `P`, `R` or `W`.
    pub kind: &'static str,
    /// A semaphore's count.
    pub max: Option<u32>,
    pub ttl: Duration,
    /// Join (or keep) a place in the queue when not admitted.
    pub queue: bool,
}

/// How one decision went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Held now, with this token.
    Granted(u64),
    /// Not now; the earliest holder's lease ends in this many ms (`None`: no holder).
    Waiting { first_expiry_ms: Option<i64> },
    /// The semaphore is in use with this other count.
    OtherCount(i64),
}

/// The in-process admission lock of one SQLite database file (see [`admit`]).
fn sqlite_writer(url: &str) -> Arc<tokio::sync::Mutex<()>> {
    static WRITERS: LazyLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
        LazyLock::new(Default::default);
    let mut w = WRITERS.lock().unwrap_or_else(|p| p.into_inner());
    Arc::clone(w.entry(url.to_owned()).or_default())
}

/// Whether a `kind` member may hold now, given the live holders' kinds, the queued waiters'
/// kinds in arrival order, the member's place in that queue (`None`: not queued, so every
/// waiter is ahead of it) and the semaphore's count. The rule every store applies:
/// * `P`: nobody queued ahead, fewer than `max` holders;
/// * `R`: no writer holds, no writer queued ahead;
/// * `W`: nobody holds, nobody queued ahead.
pub(crate) fn admissible(
    kind: &str,
    holders: &[String],
    waiters: &[String],
    rank: Option<usize>,
    max: Option<i64>,
) -> bool {
    let ahead = &waiters[..rank.unwrap_or(waiters.len())];
    match kind {
        "P" => ahead.is_empty() && (holders.len() as i64) < max.unwrap_or(0),
        "W" => ahead.is_empty() && holders.is_empty(),
        _ => !holders.iter().chain(ahead).any(|k| k == "W"),
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// `(member, kind)` pairs of a listing.
fn pairs(rows: Vec<AnyRow>) -> Result<Vec<(String, String)>, sqlx::Error> {
    rows.into_iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// Runs one admission for `ask` (see the module doc).
///
/// # Errors
/// [`Failure::Retry`] on a deadlock or serialization failure (the caller repeats it), other
/// store errors as [`Failure::Error`].
pub(crate) async fn admit(
    client: &SqlClient,
    sql: &PermitStatements,
    ask: &Ask,
) -> Result<Admission, Failure> {
    let c = |e| classify(e, &client.label, Some(&ask.name));
    let q = |s: &str| {
        sqlx::query(AssertSqlSafe(s.to_owned()))
            .bind(ask.name.clone())
            .bind(ask.family)
    };
    // SQLite: one admission at a time per database file in this process. Its writers exclude
    // each other anyway, but a blocked one waits in the busy handler, which sleeps in steps
    // (`crate::sqlite_busy`: 100 µs, then 1 ms) instead of being woken: queueing here hands
    // the write lock on at once.
    let _one_writer = match client.cfg.dialect {
        Dialect::Sqlite => Some(sqlite_writer(client.cfg.driver_url()).lock_owned().await),
        _ => None,
    };
    let mut tx = crate::begin::begin(&client.pool, None).await.map_err(c)?;
    // Lock the gate row, creating it when missing (see `ensure_first`).
    if sql.ensure_first {
        q(&sql.gate_ensure).execute(&mut *tx).await.map_err(c)?;
    }
    let gate = match q(&sql.gate_lock)
        .fetch_optional(&mut *tx)
        .await
        .map_err(c)?
    {
        Some(gate) => gate,
        None => {
            q(&sql.gate_ensure).execute(&mut *tx).await.map_err(c)?;
            q(&sql.gate_lock).fetch_one(&mut *tx).await.map_err(c)?
        }
    };
    let (mut fence, mut max, mut arrivals): (i64, Option<i64>, i64) = (
        gate.try_get(0).map_err(c)?,
        gate.try_get(1).map_err(c)?,
        gate.try_get(2).map_err(c)?,
    );
    q(&sql.drop_lapsed_holders)
        .execute(&mut *tx)
        .await
        .map_err(c)?;
    q(&sql.drop_lapsed_waiters)
        .execute(&mut *tx)
        .await
        .map_err(c)?;
    let holders = pairs(q(&sql.holders).fetch_all(&mut *tx).await.map_err(c)?).map_err(c)?;
    let waiters = pairs(q(&sql.waiters).fetch_all(&mut *tx).await.map_err(c)?).map_err(c)?;
    if let Some(want) = ask.max.map(i64::from) {
        if holders.is_empty() && waiters.is_empty() {
            max = None;
        }
        match max {
            Some(m) if m != want => {
                tx.rollback().await.map_err(c)?;
                return Ok(Admission::OtherCount(m));
            }
            _ => max = Some(want),
        }
    }
    let rank = waiters.iter().position(|(m, _)| *m == ask.member);
    let already = holders.iter().any(|(m, _)| *m == ask.member);
    let kinds = |v: &[(String, String)]| v.iter().map(|(_, k)| k.clone()).collect::<Vec<_>>();
    let mine = |s: &str| q(s).bind(ask.member.clone());
    if already || admissible(ask.kind, &kinds(&holders), &kinds(&waiters), rank, max) {
        fence += 1;
        if already {
            sqlx::query(AssertSqlSafe(sql.renew.clone()))
                .bind(ms(ask.ttl))
                .bind(ask.name.clone())
                .bind(ask.family)
                .bind(ask.member.clone())
                .execute(&mut *tx)
                .await
                .map_err(c)?;
        } else {
            mine(&sql.insert_holder)
                .bind(ask.kind)
                .bind(ms(ask.ttl))
                .execute(&mut *tx)
                .await
                .map_err(c)?;
        }
        mine(&sql.leave).execute(&mut *tx).await.map_err(c)?;
        update_gate(&mut tx, sql, ask, (fence, max, arrivals))
            .await
            .map_err(c)?;
        tx.commit().await.map_err(c)?;
        return Ok(Admission::Granted(fence.max(1) as u64));
    }
    if ask.queue {
        if rank.is_none() {
            arrivals += 1;
            mine(&sql.enqueue)
                .bind(ask.kind)
                .bind(arrivals)
                .bind(ms(WAITER_TTL))
                .execute(&mut *tx)
                .await
                .map_err(c)?;
        } else {
            sqlx::query(AssertSqlSafe(sql.refresh_waiter.clone()))
                .bind(ms(WAITER_TTL))
                .bind(ask.name.clone())
                .bind(ask.family)
                .bind(ask.member.clone())
                .execute(&mut *tx)
                .await
                .map_err(c)?;
        }
    }
    update_gate(&mut tx, sql, ask, (fence, max, arrivals))
        .await
        .map_err(c)?;
    let first: Option<i64> = q(&sql.first_expiry)
        .fetch_one(&mut *tx)
        .await
        .map_err(c)?
        .try_get(0)
        .map_err(c)?;
    tx.commit().await.map_err(c)?;
    Ok(Admission::Waiting {
        first_expiry_ms: first,
    })
}

/// Whether `ask` looks admissible now, by a read of the live holders and waiters without locks
/// or writes: a waiter polls with this and runs the admission (a write transaction, which
/// every other admission on the name waits for) only when it looks worth it. A hint only: the
/// admission decides.
///
/// # Errors
/// As [`admit`].
pub(crate) async fn looks_admissible(
    client: &SqlClient,
    sql: &PermitStatements,
    ask: &Ask,
) -> Result<bool, Failure> {
    let c = |e| classify(e, &client.label, Some(&ask.name));
    let q = |s: &str| {
        sqlx::query(AssertSqlSafe(s.to_owned()))
            .bind(ask.name.clone())
            .bind(ask.family)
    };
    let holders: Vec<String> = q(&sql.peek_holders)
        .fetch_all(&client.pool)
        .await
        .map_err(c)?
        .into_iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()
        .map_err(c)?;
    let waiters = pairs(
        q(&sql.peek_waiters)
            .fetch_all(&client.pool)
            .await
            .map_err(c)?,
    )
    .map_err(c)?;
    let max: Option<i64> = match q(&sql.max_count)
        .fetch_optional(&client.pool)
        .await
        .map_err(c)?
    {
        Some(r) => r.try_get(0).map_err(c)?,
        None => None,
    };
    let rank = waiters.iter().position(|(m, _)| *m == ask.member);
    let kinds: Vec<String> = waiters.into_iter().map(|(_, k)| k).collect();
    Ok(admissible(
        ask.kind,
        &holders,
        &kinds,
        rank,
        max.or(ask.max.map(i64::from)),
    ))
}

async fn update_gate(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    sql: &PermitStatements,
    ask: &Ask,
    (fence, max, arrivals): (i64, Option<i64>, i64),
) -> Result<(), sqlx::Error> {
    sqlx::query(AssertSqlSafe(sql.gate_update.clone()))
        .bind(fence)
        .bind(max)
        .bind(arrivals)
        .bind(ask.name.clone())
        .bind(ask.family)
        .execute(&mut **tx)
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::admissible;

    fn v(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_admission_rule() {
        // Permits: the head only, while fewer than max hold.
        assert!(admissible("P", &v(&["P"]), &v(&["P"]), Some(0), Some(2)));
        assert!(!admissible(
            "P",
            &v(&["P"]),
            &v(&["P", "P"]),
            Some(1),
            Some(3)
        ));
        assert!(!admissible("P", &v(&["P", "P"]), &[], None, Some(2)));
        assert!(
            !admissible("P", &[], &v(&["P"]), None, Some(2)),
            "a try jumped the queue"
        );
        // Readers share, but not with a writer holding or queued ahead.
        assert!(admissible("R", &v(&["R", "R"]), &[], None, None));
        assert!(!admissible("R", &v(&["W"]), &[], None, None));
        assert!(!admissible("R", &v(&["R"]), &v(&["W", "R"]), Some(1), None));
        assert!(admissible("R", &v(&["R"]), &v(&["R", "W"]), Some(0), None));
        // A writer: nobody holds, nobody ahead.
        assert!(!admissible("W", &v(&["R"]), &v(&["W"]), Some(0), None));
        assert!(admissible("W", &[], &v(&["W", "R"]), Some(0), None));
        assert!(!admissible("W", &[], &v(&["R", "W"]), Some(1), None));
    }
}
