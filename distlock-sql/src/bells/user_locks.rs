//! MySQL/MariaDB's bells: user-level locks (`GET_LOCK`) named after a waiter's place, held
//! on a connection of its own (the server frees a session's user locks when it ends, so a
//! crashed process rings its bell too). Bell connections come from a pool of their own, at
//! most [`BELL_CONNECTIONS`] per client; when all are in use a waiter does without at once.

use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool, Row};

use super::wait::BellWait;

/// At most this many bell connections per client: a waiting acquisition uses up to two (its
/// own bell, and the wait on the bell ahead), a holder that queued one until it releases.
pub(crate) const BELL_CONNECTIONS: u32 = 16;

/// How long taking a bell connection may take before the waiter does without.
const TAKE_WITHIN: Duration = Duration::from_millis(100);

/// The user-level lock name of `member`'s bell (46 characters; MySQL allows 64).
fn bell_name(member: &str) -> String {
    format!("distlock-bell/{member}")
}

/// The bell connections of one client (lazily opened, none until first used).
#[derive(Debug)]
pub(crate) struct UserLocks {
    pool: AnyPool,
}

impl UserLocks {
    /// Bells over the database at `url` (a driver URL); `None` if it does not parse (the
    /// client's own pool parsed it already, so this does not happen).
    pub(crate) fn new(url: &str) -> Option<Self> {
        let opts = AnyConnectOptions::from_str(url).ok()?;
        let pool = crate::liveness::check_when_idle(AnyPoolOptions::new())
            .max_connections(BELL_CONNECTIONS)
            .min_connections(0)
            .acquire_timeout(TAKE_WITHIN)
            .connect_lazy_with(opts);
        Some(UserLocks { pool })
    }

    async fn connection(&self) -> Option<Connection> {
        Some(Connection {
            conn: Some(take_connection(&self.pool).await?),
        })
    }

    /// Takes `member`'s bell; `None` when no bell connection could be had or the bell is
    /// taken (then followers poll, as before bells).
    pub(crate) async fn take(&self, member: &str) -> Option<Held> {
        let mut c = self.connection().await?;
        let got = sqlx::query("SELECT GET_LOCK(?, 0)")
            .bind(bell_name(member))
            .fetch_one(c.conn.as_mut()?.as_mut())
            .await
            .ok()?
            .try_get::<Option<i64>, _>(0)
            .ok()
            .flatten();
        (got == Some(1)).then(|| Held {
            conn: c,
            name: bell_name(member),
        })
    }

    /// Waits, at most `within` (bounded here, whatever the server does with its timeout), for
    /// `member`'s bell to be rung: taken and at once let go, in one statement.
    ///
    /// The statement runs in a task of its own: a waiter woken otherwise (by this process's
    /// release) drops this wait, and the connection goes back to the pool once the statement
    /// ends — at the ring, or at the server's timeout (whole seconds, at least 1: MySQL 8
    /// truncates a fraction, MariaDB keeps it) — instead of being closed and opened again at
    /// every handoff.
    pub(crate) async fn wait(&self, member: &str, within: Duration) -> BellWait {
        let (pool, name) = (self.pool.clone(), bell_name(member));
        let seconds = within.as_secs().max(1) + u64::from(within.subsec_nanos() > 0);
        let waiting = tokio::spawn(async move {
            let mut conn = take_connection(&pool).await?;
            let got = sqlx::query("SELECT GET_LOCK(?, ?), RELEASE_LOCK(?)")
                .bind(&name)
                .bind(i64::try_from(seconds).unwrap_or(i64::MAX))
                .bind(&name)
                .fetch_one(conn.as_mut())
                .await
                .ok()?
                .try_get::<Option<i64>, _>(0)
                .ok()?;
            // 1: rung (or never taken); 0: the server's timeout; NULL: an error.
            got.map(|g| g == 1)
        });
        match tokio::time::timeout(within, waiting).await {
            Ok(Ok(Some(true))) => BellWait::Rung,
            Ok(Ok(Some(false))) | Err(_) => BellWait::TimedOut,
            Ok(_) => BellWait::Failed,
        }
    }
}

/// A bell connection, at once: `None` when every one is in use (a waiter does without rather
/// than wait for one) or none opens within [`TAKE_WITHIN`].
async fn take_connection(pool: &AnyPool) -> Option<PoolConnection<Any>> {
    if pool.num_idle() == 0 && pool.size() >= BELL_CONNECTIONS {
        return None;
    }
    tokio::time::timeout(TAKE_WITHIN, pool.acquire())
        .await
        .ok()?
        .ok()
}

/// A bell connection: back to the pool once done with, closed if dropped in the middle of a
/// statement (a cancelled wait) or while it holds a bell.
#[derive(Debug)]
struct Connection {
    conn: Option<PoolConnection<Any>>,
}

impl Connection {
    /// Returns the connection to the pool (it holds nothing).
    fn done(&mut self) {
        drop(self.conn.take());
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // Closed, not pooled: the server ends the session and frees what it holds.
            drop(conn.detach());
        }
    }
}

/// A held bell: rung by [`Held::ring`], or by dropping it (its connection closes).
#[derive(Debug)]
pub(crate) struct Held {
    conn: Connection,
    name: String,
}

impl Held {
    /// Rings the bell: lets it go and returns its connection to the pool (closed instead if
    /// that fails, which rings it as well).
    pub(crate) async fn ring(mut self) {
        let Some(conn) = self.conn.conn.as_mut() else {
            return;
        };
        let freed = sqlx::query("SELECT RELEASE_LOCK(?)")
            .bind(&self.name)
            .fetch_one(conn.as_mut())
            .await
            .ok()
            .and_then(|r| r.try_get::<Option<i64>, _>(0).ok().flatten());
        if freed == Some(1) {
            self.conn.done();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bell_names_fit_mysql() {
        assert!(bell_name(&distlock_core::backend::owner_token()).len() <= 64);
    }
}
