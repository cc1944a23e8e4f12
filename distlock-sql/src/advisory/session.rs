//! The connection an advisory lock is held on ([`Session`]): closed, never pooled again,
//! unless it is given back clean.

use sqlx::pool::PoolConnection;
use sqlx::{Any, Row};

/// A pooled connection whose session may hold an advisory lock: closed when dropped (the
/// database then frees whatever it held), returned to the pool only by [`Session::recycle`].
pub(super) struct Session(Option<PoolConnection<Any>>);

impl Session {
    /// `conn`, closed when dropped unless recycled.
    pub(super) fn new(conn: PoolConnection<Any>) -> Self {
        Session(Some(conn))
    }

    pub(super) fn conn(&mut self) -> &mut PoolConnection<Any> {
        // Only `recycle` (which consumes the session) and `close` (until the session is
        // replaced) take the connection out.
        self.0.as_mut().unwrap_or_else(|| unreachable!())
    }

    /// Closes the connection now (the database frees whatever it held); the session is empty
    /// until it is replaced.
    pub(super) fn close(&mut self) {
        if let Some(mut conn) = self.0.take() {
            conn.close_on_drop();
        }
    }

    /// Returns the connection to the pool as it is: its settings were put back already.
    pub(super) fn give_back(mut self) {
        drop(self.0.take());
    }

    /// Puts the session settings back (`reset`) and returns the connection to the pool; closes
    /// it if that fails.
    pub(super) async fn recycle(mut self, reset: &'static str) {
        if sqlx::raw_sql(reset)
            .execute(&mut **self.conn())
            .await
            .is_ok()
        {
            self.give_back();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(conn) = self.0.as_mut() {
            conn.close_on_drop();
        }
    }
}

/// The first column of the one row `q` returns, as an integer.
pub(super) async fn fetch_i64<'q>(
    q: sqlx::query::Query<'q, Any, sqlx::any::AnyArguments>,
    conn: &mut sqlx::AnyConnection,
) -> Result<i64, sqlx::Error> {
    q.fetch_one(conn).await?.try_get(0)
}
