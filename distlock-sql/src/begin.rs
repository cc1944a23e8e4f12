//! Beginning a transaction so that a cancelled caller never leaves one open on a pooled
//! connection.
//!
//! sqlx's `begin` sends `BEGIN` and records the transaction on the connection only once the
//! server has answered. A caller cancelled in between (an `acquire` dropped by a timeout or an
//! aborted task) hands the connection back to the pool inside a transaction sqlx does not know
//! of: nothing rolls it back, and the next statement on that connection joins it. A fencing
//! token drawn there (meant to commit on its own, `crate::token`) stayed uncommitted, holding
//! the counter's row lock, so every other draw of the name conflicted until it gave up ("the
//! fencing counter kept conflicting") — and a crash would have lost the token. Found by the
//! conformance case `cancelled_acquire_leaves_no_trace` on MariaDB for_update (1 run in 25).
//!
//! [`begin`] takes a pooled connection in the caller's future (cancel safe: a caller gone
//! while waiting takes none), then runs the begin on it in a task of its own, to completion:
//! a transaction nobody waits for any more is dropped there, once sqlx knows of it, and sqlx
//! rolls it back before the connection is used again.

use sqlx::any::Any;
use sqlx::pool::PoolConnection;
use sqlx::{AnyPool, AssertSqlSafe, SqlSafeStr, Transaction};
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::statements::BoundedBegin;

/// A transaction on a connection of `pool`: a plain `BEGIN`, or one bounded as `bounded` says.
/// Dropping the returned future at any point leaves no transaction open.
///
/// # Errors
/// The database's or the pool's; [`sqlx::Error::WorkerCrashed`] when the runtime ended the
/// begin's task before it answered.
pub(crate) async fn begin(
    pool: &AnyPool,
    bounded: Option<BoundedBegin>,
) -> Result<Transaction<'static, Any>, sqlx::Error> {
    let conn = pool.acquire().await?;
    let (reply, answer) = oneshot::channel();
    tokio::spawn(
        async move {
            let begun = begin_on(conn, bounded).await;
            // Nobody waits any more: the transaction is dropped here, and sqlx rolls it back.
            let _ = reply.send(begun);
        }
        .in_current_span(),
    );
    answer.await.unwrap_or(Err(sqlx::Error::WorkerCrashed))
}

/// Begins on `conn`: a plain `BEGIN`; the bounds and `BEGIN` in one text query; or a plain
/// `BEGIN`, then the bounds inside the transaction.
async fn begin_on(
    conn: PoolConnection<Any>,
    bounded: Option<BoundedBegin>,
) -> Result<Transaction<'static, Any>, sqlx::Error> {
    // What `Pool::begin` and `Pool::begin_with` do, on a connection already taken.
    match bounded {
        None => Transaction::begin(conn, None).await,
        Some(BoundedBegin::OneTrip(sql)) => {
            Transaction::begin(conn, Some(AssertSqlSafe(sql).into_sql_str())).await
        }
        Some(BoundedBegin::ThenInside(sql)) => {
            let mut tx = Transaction::begin(conn, None).await?;
            sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut *tx).await?;
            Ok(tx)
        }
    }
}
