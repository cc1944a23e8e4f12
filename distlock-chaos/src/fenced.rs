//! [`FencedResource`]: a PostgreSQL table that accepts a write only with a fencing token ≥ the
//! highest it has accepted, and logs every accepted and rejected write.

use std::str::FromStr;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, AssertSqlSafe, Row};

/// The fenced resource.
#[derive(Clone)]
pub struct FencedResource {
    pool: AnyPool,
    id: String,
}

/// Counts from the write log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WriteStats {
    /// Writes accepted.
    pub accepted: u64,
    /// Writes rejected (a higher token had been seen).
    pub rejected: u64,
    /// Accepted writes whose token was lower than an earlier accepted write's (must be 0).
    pub out_of_order: u64,
}

impl FencedResource {
    /// A fresh resource `id` in the PostgreSQL database at `url`.
    pub async fn create(url: &str, id: &str) -> Result<Self, String> {
        sqlx::any::install_default_drivers();
        let opts = AnyConnectOptions::from_str(url).map_err(|e| e.to_string())?;
        let pool = AnyPoolOptions::new()
            .max_connections(8)
            .connect_with(opts)
            .await
            .map_err(|e| format!("{e}; run `scripts/services.sh up`"))?;
        for stmt in [
            "CREATE TABLE IF NOT EXISTS chaos_resource (id TEXT PRIMARY KEY, max_token BIGINT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS chaos_writes (seq BIGSERIAL PRIMARY KEY, id TEXT NOT NULL, writer TEXT NOT NULL, token BIGINT NOT NULL, accepted BOOLEAN NOT NULL)",
            "ALTER TABLE chaos_resource ADD COLUMN IF NOT EXISTS applied BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE chaos_writes ADD COLUMN IF NOT EXISTS applied BIGINT",
        ] {
            let _ = sqlx::query(AssertSqlSafe(stmt)).execute(&pool).await;
        }
        sqlx::query("INSERT INTO chaos_resource (id, max_token) VALUES ($1, 0) ON CONFLICT (id) DO UPDATE SET max_token = 0")
            .bind(id)
            .execute(&pool)
            .await
            .map_err(|e| e.to_string())?;
        Ok(FencedResource {
            pool,
            id: id.to_owned(),
        })
    }

    /// Opens an existing resource (from another process).
    pub async fn open(url: &str, id: &str) -> Result<Self, String> {
        sqlx::any::install_default_drivers();
        let opts = AnyConnectOptions::from_str(url).map_err(|e| e.to_string())?;
        let pool = AnyPoolOptions::new()
            .max_connections(2)
            .connect_with(opts)
            .await
            .map_err(|e| e.to_string())?;
        Ok(FencedResource {
            pool,
            id: id.to_owned(),
        })
    }

    /// The resource id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Writes with `token`; `true` when accepted. The check and the write are one statement.
    ///
    /// An accepted write is numbered (`applied`) under the resource row's lock, which is the
    /// order the resource accepted writes in. The log's `seq` is not: its default `nextval` is
    /// evaluated before the `UPDATE` that waits for that lock (the nemesis run with seed
    /// 2026112320 on postgres-advisory saw seq 68735 carry token 4874 and seq 68736 an earlier
    /// accepted write of token 4872, and called it out of order).
    pub async fn write(&self, writer: &str, token: u64) -> Result<bool, String> {
        let row = sqlx::query(
            "WITH u AS (UPDATE chaos_resource SET max_token = $2, applied = applied + 1 WHERE id = $1 AND max_token <= $2 RETURNING applied) \
             INSERT INTO chaos_writes (id, writer, token, accepted, applied) SELECT $1, $3, $2, EXISTS (SELECT 1 FROM u), (SELECT applied FROM u) RETURNING accepted",
        )
        .bind(&self.id)
        .bind(token as i64)
        .bind(writer)
        .fetch_one(&self.pool)
        .await
        .map_err(|e| e.to_string())?;
        row.try_get::<bool, _>(0).map_err(|e| e.to_string())
    }

    /// Counts accepted, rejected and out-of-order writes from the log (accepted writes in the
    /// order the resource accepted them).
    pub async fn stats(&self) -> Result<WriteStats, String> {
        let rows =
            sqlx::query("SELECT token, accepted FROM chaos_writes WHERE id = $1 ORDER BY applied NULLS LAST, seq")
                .bind(&self.id)
                .fetch_all(&self.pool)
                .await
                .map_err(|e| e.to_string())?;
        let mut s = WriteStats::default();
        let mut highest = 0i64;
        for r in rows {
            let (token, accepted): (i64, bool) = (
                r.try_get(0).map_err(|e| e.to_string())?,
                r.try_get(1).map_err(|e| e.to_string())?,
            );
            if accepted {
                s.accepted += 1;
                if token < highest {
                    s.out_of_order += 1;
                }
                highest = highest.max(token);
            } else {
                s.rejected += 1;
            }
        }
        Ok(s)
    }
}
