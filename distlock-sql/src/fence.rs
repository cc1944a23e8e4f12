//! Fenced writes on the user's own database connection: call `check` first in the transaction
//! that writes, and the transaction goes on only if no newer holder has written.
//!
//! The fence is a side table, `distlock_fences (resource, token)`, created by `install`. `check`
//! raises the resource's row to `token` (an upsert keeping the higher one) and reads it back:
//! a higher token than the caller's means a newer holder wrote, and the caller gets
//! [`Stale`] and must roll back (dropping an sqlx transaction does). The upsert keeps the row
//! locked until the transaction ends, so fenced writers of one resource commit one at a time, in
//! token order from the first refused one on.
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # async fn demo(pool: sqlx::PgPool, guard: &distlock_core::LockGuard) -> Result<(), Box<dyn std::error::Error>> {
//! use distlock_sql::fence;
//!
//! fence::postgres::install(&pool).await?; // once, outside any transaction
//! let mut tx = pool.begin().await?;
//! fence::postgres::check(&mut tx, "invoices", guard.fencing_token()).await?;
//! sqlx::query("UPDATE invoices SET state = 'sent' WHERE id = 42").execute(&mut *tx).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! For shell jobs under `distlock exec`, PostgreSQL also gets a function, so one `psql` call
//! refuses a stale write: `BEGIN; SELECT distlock_fence('invoices', $DISTLOCK_FENCING_TOKEN);
//! UPDATE …; COMMIT;` (the function raises, and the transaction aborts, when the token is stale).

pub use distlock_core::fence::{FenceError, Stale};

/// The outcome of the read-back: `Ok` when `token` is the highest seen.
fn judge(resource: &str, token: u64, seen: i64) -> Result<(), FenceError<sqlx::Error>> {
    let seen = u64::try_from(seen).unwrap_or(0);
    if seen > token {
        return Err(Stale {
            resource: resource.to_owned(),
            token,
            seen,
        }
        .into());
    }
    Ok(())
}

/// A token as SQL's BIGINT: tokens past `i64::MAX` are refused before they reach the store.
fn bigint(resource: &str, token: u64) -> Result<i64, FenceError<sqlx::Error>> {
    i64::try_from(token).map_err(|_| {
        FenceError::Store(sqlx::Error::Protocol(format!(
            "fencing token {token} for `{resource}` does not fit a BIGINT"
        )))
    })
}

/// PostgreSQL: `install` makes the table and the `distlock_fence(resource, token)` function.
#[cfg(feature = "postgres")]
pub mod postgres {
    use super::*;
    use sqlx::PgConnection;

    /// The advisory lock that serializes installs: PostgreSQL fails concurrent
    /// `CREATE OR REPLACE FUNCTION`s of one function ("tuple concurrently updated"), and
    /// concurrent `CREATE TABLE IF NOT EXISTS` can fail too.
    const INSTALL_LOCK: i64 = 0x646c_6665_6e63_6500; // "dlfence\0"

    /// Creates the fence table and the `distlock_fence` function if missing. Installs from
    /// several processes at once are serialized (a transaction-scoped advisory lock).
    pub async fn install(pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(INSTALL_LOCK)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS distlock_fences (resource TEXT PRIMARY KEY, token BIGINT NOT NULL)",
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "CREATE OR REPLACE FUNCTION distlock_fence(p_resource TEXT, p_token BIGINT) RETURNS BIGINT \
             LANGUAGE plpgsql AS $$ DECLARE seen BIGINT; BEGIN \
             INSERT INTO distlock_fences AS f (resource, token) VALUES (p_resource, p_token) \
             ON CONFLICT (resource) DO UPDATE SET token = GREATEST(f.token, EXCLUDED.token) \
             RETURNING f.token INTO seen; \
             IF seen > p_token THEN RAISE EXCEPTION \
             'distlock fence: token % for % is stale, % already seen', p_token, p_resource, seen; \
             END IF; RETURN seen; END $$",
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await
    }

    /// Raises `resource`'s fence to `token` in the caller's transaction, or refuses with
    /// [`Stale`] when a higher token was seen.
    pub async fn check(
        conn: &mut PgConnection,
        resource: &str,
        token: u64,
    ) -> Result<(), FenceError<sqlx::Error>> {
        let seen: i64 = sqlx::query_scalar(
            "INSERT INTO distlock_fences AS f (resource, token) VALUES ($1, $2) \
             ON CONFLICT (resource) DO UPDATE SET token = GREATEST(f.token, EXCLUDED.token) \
             RETURNING f.token",
        )
        .bind(resource)
        .bind(bigint(resource, token)?)
        .fetch_one(conn)
        .await
        .map_err(FenceError::Store)?;
        judge(resource, token, seen)
    }
}

/// MySQL and MariaDB (InnoDB).
#[cfg(feature = "mysql")]
pub mod mysql {
    use super::*;
    use sqlx::MySqlConnection;

    /// Creates the fence table if missing (DDL commits in MySQL: call it outside transactions).
    pub async fn install(pool: &sqlx::MySqlPool) -> Result<(), sqlx::Error> {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS distlock_fences (resource VARCHAR(255) PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB",
        )
        .execute(pool)
        .await?;
        Ok(())
    }

    /// As [`super::postgres::check`]; the caller's transaction must be InnoDB's.
    pub async fn check(
        conn: &mut MySqlConnection,
        resource: &str,
        token: u64,
    ) -> Result<(), FenceError<sqlx::Error>> {
        sqlx::query(
            "INSERT INTO distlock_fences (resource, token) VALUES (?, ?) \
             ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))",
        )
        .bind(resource)
        .bind(bigint(resource, token)?)
        .execute(&mut *conn)
        .await
        .map_err(FenceError::Store)?;
        // The row is this transaction's (locked by the upsert): the read sees its own write.
        let seen: i64 = sqlx::query_scalar("SELECT token FROM distlock_fences WHERE resource = ?")
            .bind(resource)
            .fetch_one(conn)
            .await
            .map_err(FenceError::Store)?;
        judge(resource, token, seen)
    }
}

/// SQLite: the upsert is the transaction's first write, so it takes the database's write lock.
#[cfg(feature = "sqlite")]
pub mod sqlite {
    use super::*;
    use sqlx::SqliteConnection;

    /// Creates the fence table if missing.
    pub async fn install(pool: &sqlx::SqlitePool) -> Result<(), sqlx::Error> {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS distlock_fences (resource TEXT PRIMARY KEY, token INTEGER NOT NULL)",
        )
        .execute(pool)
        .await?;
        Ok(())
    }

    /// As [`super::postgres::check`].
    pub async fn check(
        conn: &mut SqliteConnection,
        resource: &str,
        token: u64,
    ) -> Result<(), FenceError<sqlx::Error>> {
        let seen: i64 = sqlx::query_scalar(
            "INSERT INTO distlock_fences (resource, token) VALUES (?1, ?2) \
             ON CONFLICT (resource) DO UPDATE SET token = max(token, excluded.token) RETURNING token",
        )
        .bind(resource)
        .bind(bigint(resource, token)?)
        .fetch_one(conn)
        .await
        .map_err(FenceError::Store)?;
        judge(resource, token, seen)
    }
}
