//! Drawing a fencing token once a lock is granted: one autocommitted statement on a counter
//! that never goes back ([`TokenDraw`]), shared by for_update and advisory mode.
//!
//! The draw commits on its own, before the guard is handed out, so the token is durable by the
//! time anyone can write with it: a database that crashes right after the grant (losing the
//! lock transaction) comes back with the counter past that token, and the next holder's token
//! is greater (a token drawn inside the still-open lock transaction could be lost with it and
//! handed out again; the chaos nemesis found exactly that, seed 2026112304).

use std::time::Duration;

use distlock_core::LockError;
use sqlx::{AnyConnection, AssertSqlSafe, Row};

use crate::error::{classify, Failure};
use crate::statements::TokenDraw;

/// Draws per token when they deadlock or time out on the counter (MySQL's `REPLACE` takes
/// next-key locks on the token table's indexes, and concurrent draws for different names can
/// deadlock each other; the loser's draw is rolled back and simply repeated).
const DRAW_ATTEMPTS: u32 = 5;

/// Draws the next token for `name` with `draw` on `conn` (a connection of the side pool, or a
/// session that holds the lock outside any open transaction, so the statement commits by
/// itself).
///
/// # Errors
/// The database's error, mapped; [`LockError::Backend`] when the counter returned no positive
/// token or kept conflicting.
pub(crate) async fn draw(
    draw: &TokenDraw,
    conn: &mut AnyConnection,
    label: &str,
    name: &str,
) -> Result<u64, LockError> {
    for attempt in 1..=DRAW_ATTEMPTS {
        match draw_once(draw, conn, name).await {
            Ok(token) => return positive(token, label, name),
            Err(e) => match classify(e, label, Some(name)) {
                Failure::Retry | Failure::Busy => {
                    tracing::debug!(attempt, "the token draw conflicted; drawing again");
                    tokio::time::sleep(Duration::from_millis(5 * u64::from(attempt))).await;
                }
                Failure::Error(e) => return Err(e),
            },
        }
    }
    Err(LockError::backend(
        label,
        Some(name),
        format!("the fencing counter kept conflicting ({DRAW_ATTEMPTS} draws); retry later"),
        None,
    ))
}

async fn draw_once(
    draw: &TokenDraw,
    conn: &mut AnyConnection,
    name: &str,
) -> Result<i64, sqlx::Error> {
    let q = sqlx::query(AssertSqlSafe(draw.sql.as_str())).bind(name);
    if draw.in_row {
        q.fetch_one(&mut *conn).await?.try_get(0)
    } else {
        Ok(q.execute(&mut *conn).await?.last_insert_id().unwrap_or(0))
    }
}

fn positive(token: i64, label: &str, name: &str) -> Result<u64, LockError> {
    match u64::try_from(token) {
        Ok(t) if t > 0 => Ok(t),
        _ => Err(LockError::backend(
            label,
            Some(name),
            format!("the fencing counter returned no token ({token})"),
            None,
        )),
    }
}
