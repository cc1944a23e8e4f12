//! [`FencedResource`]: a register behind `distlock::fence::sql::postgres` (the public adapter
//! users get) that logs every accepted and rejected write to PostgreSQL.

use distlock::fence::{sql::postgres as fence, FenceError};
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool, Row};

/// The fenced resource.
#[derive(Clone)]
pub struct FencedResource {
    pool: PgPool,
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
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect(url)
            .await
            .map_err(|e| format!("{e}; run `scripts/services.sh up`"))?;
        fence::install(&pool).await.map_err(|e| e.to_string())?;
        for stmt in [
            "CREATE TABLE IF NOT EXISTS chaos_writes (seq BIGSERIAL PRIMARY KEY, id TEXT NOT NULL, writer TEXT NOT NULL, token BIGINT NOT NULL, accepted BOOLEAN NOT NULL)",
        ] {
            let _ = sqlx::query(AssertSqlSafe(stmt)).execute(&pool).await;
        }
        sqlx::query("DELETE FROM distlock_fences WHERE resource = $1")
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
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect(url)
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

    /// Writes with `token`; `true` when accepted.
    ///
    /// An accepted write is logged in the transaction that passed the fence, which holds the
    /// fence row until it commits: the log's `seq` (drawn by that insert, after the fence) is
    /// the order the resource accepted writes in. A refused one is logged after its rollback.
    pub async fn write(&self, writer: &str, token: u64) -> Result<bool, String> {
        let mut tx = self.pool.begin().await.map_err(|e| e.to_string())?;
        let accepted = match fence::check(&mut tx, &self.id, token).await {
            Ok(()) => true,
            Err(FenceError::Stale(_)) => false,
            Err(FenceError::Store(e)) => return Err(e.to_string()),
        };
        let log = sqlx::query(
            "INSERT INTO chaos_writes (id, writer, token, accepted) VALUES ($1, $2, $3, $4)",
        )
        .bind(&self.id)
        .bind(writer)
        .bind(token as i64)
        .bind(accepted);
        if !accepted {
            tx.rollback().await.map_err(|e| e.to_string())?;
            log.execute(&self.pool).await.map_err(|e| e.to_string())?;
            return Ok(false);
        }
        log.execute(&mut *tx).await.map_err(|e| e.to_string())?;
        tx.commit().await.map_err(|e| e.to_string())?;
        Ok(true)
    }

    /// Counts accepted, rejected and out-of-order writes from the log (accepted writes in the
    /// order the resource accepted them).
    pub async fn stats(&self) -> Result<WriteStats, String> {
        let rows =
            sqlx::query("SELECT token, accepted FROM chaos_writes WHERE id = $1 ORDER BY seq")
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
