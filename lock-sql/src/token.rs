//! Drawing a fencing token once a lock is granted: one autocommitted statement on a counter
//! that never goes back ([`TokenDraw`]), shared by for_update and advisory mode.
//!
//! The draw commits on its own, before the guard is handed out, so the token is durable by the
//! time anyone can write with it: a database that crashes right after the grant (losing the
//! lock transaction) comes back with the counter past that token, and the next holder's token
//! is greater (a token drawn inside the still-open lock transaction could be lost with it and
//! handed out again; the chaos nemesis found exactly that, seed 2026112304).

use lock_core::LockError;
use sqlx::{Any, AssertSqlSafe, Executor, Row};

use crate::error::map;
use crate::statements::TokenDraw;

/// Draws the next token for `name` with `draw` on `exec` (a pool, or a session that holds the
/// lock outside any open transaction, so the statement commits by itself).
///
/// # Errors
/// The database's error, mapped; [`LockError::Backend`] when the counter returned no positive
/// token.
pub(crate) async fn draw<'e, E>(
    draw: &TokenDraw,
    exec: E,
    label: &str,
    name: &str,
) -> Result<u64, LockError>
where
    E: Executor<'e, Database = Any>,
{
    let m = |e| map(e, label, Some(name));
    let q = sqlx::query(AssertSqlSafe(draw.sql.as_str())).bind(name);
    let token: i64 = if draw.in_row {
        q.fetch_one(exec).await.map_err(m)?.try_get(0).map_err(m)?
    } else {
        let done = q.execute(exec).await.map_err(m)?;
        done.last_insert_id().unwrap_or(0)
    };
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
