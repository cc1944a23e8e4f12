//! The conformance harness for the SQL backend: real PostgreSQL and MariaDB from
//! `scripts/services.sh up`, SQLite in a fresh file per harness.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::conformance::{CrashableClient, Harness};
use distlock_core::fault::FaultProxy;
use distlock_core::{DistributedLock, LockError};
use distlock_sql::{Dialect, Mode, SqlConfig, SqlLock};
use sqlx::{AssertSqlSafe, Row};

pub fn postgres_url() -> String {
    std::env::var("DISTLOCK_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:15432/distlock".into())
}

pub fn mysql_url() -> String {
    std::env::var("DISTLOCK_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:13306/distlock".into())
}

/// PostgreSQL that requires TLS and a password (`scripts/services.sh up`: 15433).
pub fn postgres_tls_url() -> String {
    std::env::var("DISTLOCK_TEST_POSTGRES_TLS_URL").unwrap_or_else(|_| {
        let d = tls_dir();
        format!(
            "postgres://distlock_tls@localhost:15433/distlock?sslmode=verify-full&sslrootcert={}/ca.crt&password_file={}/sql-password",
            d.display(),
            d.display()
        )
    })
}

/// MariaDB that requires TLS and a password (`scripts/services.sh up`: 13307).
pub fn mysql_tls_url() -> String {
    std::env::var("DISTLOCK_TEST_MYSQL_TLS_URL").unwrap_or_else(|_| {
        let d = tls_dir();
        format!(
            "mysql://distlock_tls@localhost:13307/distlock?ssl-mode=VERIFY_IDENTITY&ssl-ca={}/ca.crt&password_file={}/sql-password",
            d.display(),
            d.display()
        )
    })
}

pub use distlock_core::conformance::refusals::tls_dir;

pub fn sqlite_url() -> String {
    let dir = std::env::temp_dir().join(format!(
        "distlock-test-{}",
        distlock_core::backend::owner_token()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    format!("sqlite://{}/locks.db", dir.display())
}

fn with_mode(base: &str, mode: Mode) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}mode={}", mode.label())
}

/// Connects or fails naming the command that starts the stores.
pub async fn connect_or_explain(url: &str) -> SqlLock {
    let cfg = SqlConfig::from_url(url).unwrap();
    match SqlLock::connect(cfg).await {
        Ok(l) => l,
        Err(e) => {
            panic!("cannot reach {url}: {e}\nstart the test stores with `scripts/services.sh up`")
        }
    }
}

pub struct SqlHarness {
    url: String,
    dialect: Dialect,
    mode: Mode,
    admin: SqlLock,
}

impl SqlHarness {
    pub async fn new(dialect: Dialect, mode: Mode) -> Self {
        let base = match dialect {
            Dialect::Postgres => postgres_url(),
            Dialect::MySql => mysql_url(),
            Dialect::Sqlite => sqlite_url(),
        };
        Self::on(base, dialect, mode).await
    }

    /// Row mode on the server that requires TLS (PostgreSQL or MariaDB).
    pub async fn tls(dialect: Dialect) -> Self {
        let base = match dialect {
            Dialect::Postgres => postgres_tls_url(),
            Dialect::MySql => mysql_tls_url(),
            Dialect::Sqlite => unreachable!("SQLite is a file: no TLS"),
        };
        Self::on(base, dialect, Mode::Row).await
    }

    async fn on(base: String, dialect: Dialect, mode: Mode) -> Self {
        let mut url = with_mode(&base, mode);
        if mode != Mode::Row {
            // One connection per held lock: the suite holds 1,000 at once.
            url.push_str("&max_connections=1100");
        }
        let admin = connect_or_explain(&url).await;
        SqlHarness {
            url,
            dialect,
            mode,
            admin,
        }
    }

    /// The URL this harness's clients connect to.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn table(&self) -> &str {
        &self.admin.config().table
    }

    fn q(&self, pg: &str, other: &str) -> String {
        let t = self.table();
        match self.dialect {
            Dialect::Postgres => pg.replace("{t}", t),
            _ => other.replace("{t}", t),
        }
    }

    /// advisory: kill the connection holding the advisory lock of `name` (its key as
    /// `statements/<dialect>.rs` computes it).
    async fn kill_advisory_holder(&self, name: &str) {
        let pool = self.admin.pool();
        let sql = self.q(
            "SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l, \
             (SELECT ('x' || left(encode(sha256(convert_to('{t}:' || $1, 'UTF8')), 'hex'), 16))::bit(64)::bigint AS k) k \
             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
             AND l.classid = ((k.k >> 32) & 4294967295)::oid AND l.objid = (k.k & 4294967295)::oid",
            "SELECT CAST(COALESCE(IS_USED_LOCK(SHA2(CONCAT('{t}:', ?), 256)), 0) AS SIGNED)",
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(name)
            .fetch_one(pool)
            .await
            .unwrap();
        let found: i64 = row.try_get(0).unwrap();
        assert!(found > 0, "no connection held {name:?}");
        if self.dialect == Dialect::MySql {
            sqlx::query(AssertSqlSafe(format!("KILL {found}")))
                .execute(pool)
                .await
                .unwrap();
        }
    }

    /// Row mode: delete the row. for_update: kill the connection holding the row lock.
    async fn kill_row_holder(&self, name: &str) {
        let pool = self.admin.pool();
        match self.dialect {
            Dialect::Postgres => {
                let sql = self.q(
                    "SELECT count(pg_terminate_backend(a.pid)) FROM pg_stat_activity a JOIN {t} r ON a.backend_xid = r.xmax WHERE r.name = $1",
                    "",
                );
                let row = sqlx::query(AssertSqlSafe(sql))
                    .bind(name)
                    .fetch_one(pool)
                    .await
                    .unwrap();
                let killed: i64 = row.try_get(0).unwrap();
                assert_eq!(killed, 1, "no connection held {name:?}");
            }
            Dialect::MySql => {
                // A probe waits for the row; INNODB_LOCK_WAITS then names the blocking thread.
                let mut probe = pool.acquire().await.unwrap();
                let probe_id: i64 = sqlx::query("SELECT CAST(CONNECTION_ID() AS SIGNED)")
                    .fetch_one(&mut *probe)
                    .await
                    .unwrap()
                    .try_get(0)
                    .unwrap();
                let wait_sql = format!(
                    "SELECT name FROM {} WHERE name = ? FOR UPDATE",
                    self.table()
                );
                let name2 = name.to_owned();
                let waiter = tokio::spawn(async move {
                    sqlx::query("SET SESSION innodb_lock_wait_timeout = 30")
                        .execute(&mut *probe)
                        .await
                        .unwrap();
                    sqlx::query("BEGIN").execute(&mut *probe).await.unwrap();
                    let _ = sqlx::query(AssertSqlSafe(wait_sql))
                        .bind(name2)
                        .fetch_optional(&mut *probe)
                        .await;
                    sqlx::query("ROLLBACK").execute(&mut *probe).await.unwrap();
                });
                let mut killed = false;
                // MariaDB refreshes the INNODB_TRX / INNODB_LOCK_WAITS snapshot only when it was
                // not read for 100 ms: polled faster (say, by two of these at once) it never
                // shows the probe waiting. So: every 200-300 ms, for about 25 s.
                for _ in 0..100 {
                    let row = sqlx::query(
                        "SELECT CAST(b.trx_mysql_thread_id AS SIGNED) FROM information_schema.INNODB_LOCK_WAITS w \
                         JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id \
                         JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id \
                         WHERE r.trx_mysql_thread_id = ?",
                    )
                    .bind(probe_id)
                    .fetch_optional(pool)
                    .await
                    .unwrap();
                    if let Some(row) = row {
                        let thread: i64 = row.try_get(0).unwrap();
                        sqlx::query(AssertSqlSafe(format!("KILL {thread}")))
                            .execute(pool)
                            .await
                            .unwrap();
                        killed = true;
                        break;
                    }
                    let pause = Duration::from_millis(200)
                        + distlock_core::backend::wait::random_up_to(Duration::from_millis(100));
                    tokio::time::sleep(pause).await;
                }
                waiter.await.unwrap();
                assert!(killed, "no connection held {name:?}");
            }
            Dialect::Sqlite => unreachable!("SQLite has no for_update mode"),
        }
    }
}

#[async_trait]
impl Harness for SqlHarness {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        Arc::new(connect_or_explain(&self.url).await)
    }

    async fn crashable_client(&self) -> CrashableClient {
        if self.dialect == Dialect::Sqlite {
            // An in-process SQLite client "crashes" by abandoning its guard: no connection to cut.
            return CrashableClient::in_process(self.client().await);
        }
        // The URL with the proxy's port in place of the server's.
        let port = url_port(&self.url).expect("a URL with a port");
        let url = self.url.replace(&format!(":{port}/"), ":{proxy}/");
        CrashableClient::through_proxies(&[port], |hosts| async move {
            let proxy = hosts.rsplit(':').next().unwrap_or_default();
            Arc::new(connect_or_explain(&url.replace("{proxy}", proxy)).await)
                as Arc<dyn DistributedLock>
        })
        .await
    }

    async fn remove_underneath(&self, name: &str) {
        match self.mode {
            Mode::Row => {
                let sql = self.q(
                    "DELETE FROM {t} WHERE name = $1",
                    "DELETE FROM {t} WHERE name = ?",
                );
                let n = sqlx::query(AssertSqlSafe(sql))
                    .bind(name)
                    .execute(self.admin.pool())
                    .await
                    .unwrap();
                assert_eq!(n.rows_affected(), 1);
            }
            Mode::ForUpdate => self.kill_row_holder(name).await,
            Mode::Advisory => self.kill_advisory_holder(name).await,
        }
    }

    async fn traces(&self, name: &str) -> usize {
        match self.mode {
            // The lock row, and every waiter's place in the queue across processes.
            Mode::Row => {
                let sql = self.q(
                    "SELECT (SELECT count(*) FROM {t} WHERE name = $1) + (SELECT count(*) FROM {t}_waitq WHERE name = $1)",
                    "SELECT (SELECT count(*) FROM {t} WHERE name = ?) + (SELECT count(*) FROM {t}_waitq WHERE name = ?)",
                );
                let q = sqlx::query(AssertSqlSafe(sql)).bind(name);
                let q = match self.dialect {
                    Dialect::Postgres => q,
                    _ => q.bind(name),
                };
                let row = q.fetch_one(self.admin.pool()).await.unwrap();
                row.try_get::<i64, _>(0).unwrap() as usize
            }
            Mode::ForUpdate | Mode::Advisory => {
                usize::from(self.admin.inspect(name).await.unwrap().held)
            }
        }
    }

    async fn unreachable(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        let url = match self.dialect {
            Dialect::Postgres => {
                "postgres://postgres@127.0.0.1:1/distlock?connect_timeout=2s".to_owned()
            }
            Dialect::MySql => "mysql://root@127.0.0.1:1/distlock?connect_timeout=2s".to_owned(),
            Dialect::Sqlite => "sqlite:///nonexistent-distlock-dir/sub/locks.db".to_owned(),
        };
        let url = with_mode(&url, self.mode);
        distlock_sql::connect(&url).await
    }
}

/// A client of `url` routed through a fresh [`FaultProxy`] (PostgreSQL and MariaDB only), and
/// the proxy that carries its traffic.
pub async fn through_proxy(url: &str) -> (SqlLock, FaultProxy) {
    let (proxied, proxy) = proxied_url(url).await;
    (connect_or_explain(&proxied).await, proxy)
}

/// A proxy in front of `url`'s server, and `url` pointed at it.
#[allow(dead_code)]
pub async fn proxied_url(url: &str) -> (String, FaultProxy) {
    let upstream = url_port(url).expect("a URL with a port");
    let proxy = FaultProxy::start(([127, 0, 0, 1], upstream).into())
        .await
        .unwrap();
    let proxied = url.replace(
        &format!(":{upstream}/"),
        &format!(":{}/", proxy.addr().port()),
    );
    (proxied, proxy)
}

fn url_port(url: &str) -> Option<u16> {
    let after = url.split('@').nth(1)?;
    let hostport = after.split('/').next()?;
    hostport.rsplit(':').next()?.parse().ok()
}

/// The proxy's count of requests once it has not moved for 100 ms (at most 5 s): what a client
/// through it sent once it went quiet (waiting, or done).
#[allow(dead_code)]
pub async fn quiet(proxy: &FaultProxy) -> u64 {
    let mut seen = proxy.chunks_sent();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = proxy.chunks_sent();
        if now == seen {
            break;
        }
        seen = now;
    }
    seen
}

/// The member of the holder of `name`, from its row's owner (`<member>/<random>` for a holder
/// that queued).
pub async fn holder_member(lock: &SqlLock, name: &str) -> String {
    let t = &lock.config().table;
    let owner: String = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT owner FROM {t} WHERE name = ?"
    )))
    .bind(name)
    .fetch_one(lock.pool())
    .await
    .unwrap();
    owner
        .split_once('/')
        .unwrap_or_else(|| panic!("the holder's owner {owner:?} names no bell"))
        .0
        .to_owned()
}

/// The members queued for `name`, in order.
pub async fn queued(lock: &SqlLock, name: &str) -> Vec<String> {
    let t = &lock.config().table;
    let sql = match lock.config().dialect {
        Dialect::Postgres => format!("SELECT member FROM {t}_waitq WHERE name = $1 ORDER BY seq"),
        // MySQL's member column is VARBINARY.
        Dialect::MySql => {
            format!("SELECT CAST(member AS CHAR) FROM {t}_waitq WHERE name = ? ORDER BY seq")
        }
        _ => format!("SELECT member FROM {t}_waitq WHERE name = ? ORDER BY seq"),
    };
    sqlx::query_scalar(AssertSqlSafe(sql))
        .bind(name)
        .fetch_all(lock.pool())
        .await
        .unwrap()
}

/// Polls `f` every 20 ms until it is true; whether it became true within `within`.
pub async fn within<F, Fut>(within: Duration, f: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < end {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A fenced register on `$dialect` (`postgres`, `mysql`, `sqlite`): a one-row table of its own
/// whose writes go through `distlock_sql::fence::$dialect::check` in the writing transaction,
/// as the fenced-register check (`distlock_core::conformance::fence`) takes it:
/// `(Write, Read)`.
#[allow(unused_macros)]
macro_rules! fenced_register {
    (postgres) => {
        fenced_register!(@ postgres,
            sqlx::PgPool::connect(&postgres_url()).await.unwrap(),
            "CREATE TABLE {} (id INT PRIMARY KEY, body TEXT NOT NULL)",
            "INSERT INTO {} (id, body) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body")
    };
    (mysql) => {
        fenced_register!(@ mysql,
            sqlx::MySqlPool::connect(&mysql_url()).await.unwrap(),
            "CREATE TABLE {} (id INT PRIMARY KEY, body TEXT NOT NULL) ENGINE=InnoDB",
            "INSERT INTO {} (id, body) VALUES (1, ?) ON DUPLICATE KEY UPDATE body = VALUES(body)")
    };
    (sqlite) => {
        fenced_register!(@ sqlite,
            {
                let opts: sqlx::sqlite::SqliteConnectOptions = sqlite_url().parse().unwrap();
                sqlx::SqlitePool::connect_with(opts.create_if_missing(true)).await.unwrap()
            },
            "CREATE TABLE {} (id INT PRIMARY KEY, body TEXT NOT NULL)",
            "INSERT INTO {} (id, body) VALUES (1, ?1) ON CONFLICT (id) DO UPDATE SET body = excluded.body")
    };
    (@ $dialect:ident, $pool:expr, $create:expr, $upsert:expr) => {{
        use distlock_core::conformance::fence::{Read, Write};
        use distlock_core::fence::FenceError;
        use futures::FutureExt;
        let pool = $pool;
        distlock_sql::fence::$dialect::install(&pool).await.unwrap();
        let unique = distlock_core::backend::owner_token();
        let table = format!("fence_reg_{}", &unique[..12]);
        let resource = format!("register-{unique}");
        sqlx::query(sqlx::AssertSqlSafe(format!($create, table)))
            .execute(&pool)
            .await
            .unwrap();
        let write: Write = Box::new({
            let (pool, table) = (pool.clone(), table.clone());
            move |token, body| {
                let (pool, table, resource) = (pool.clone(), table.clone(), resource.clone());
                async move {
                    let mut tx = pool
                        .begin()
                        .await
                        .map_err(|e| FenceError::Store(e.to_string()))?;
                    distlock_sql::fence::$dialect::check(&mut tx, &resource, token)
                        .await
                        .map_err(|e| e.map_store(|e| e.to_string()))?;
                    sqlx::query(sqlx::AssertSqlSafe(format!($upsert, table)))
                        .bind(body)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| FenceError::Store(e.to_string()))?;
                    tx.commit()
                        .await
                        .map_err(|e| FenceError::Store(e.to_string()))
                }
                .boxed()
            }
        });
        let read: Read = Box::new(move || {
            let (pool, table) = (pool.clone(), table.clone());
            async move {
                let sql = format!("SELECT body FROM {table} WHERE id = 1");
                sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql))
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            }
            .boxed()
        });
        (write, read)
    }};
}
#[allow(unused_imports)]
pub(crate) use fenced_register;
