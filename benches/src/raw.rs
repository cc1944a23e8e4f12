//! The raw store primitives each lock is measured against, issued the textbook way.

use std::str::FromStr;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, AssertSqlSafe};

use crate::targets::{Raw, Target};

/// The raw table (never used by distlock itself).
const TABLE: &str = "distlock_bench_raw";

/// A raw client for one target.
pub enum RawClient {
    /// SQL: INSERT + DELETE, BEGIN / SELECT … FOR UPDATE / COMMIT, or an advisory lock and
    /// unlock on one connection (`kind`).
    Sql { pool: AnyPool, pg: bool, kind: Raw },
    /// ZooKeeper: create an ephemeral-sequential node, delete it.
    Zk { client: zookeeper_client::Client },
    /// etcd: put a key under a lease granted once at connect, delete it.
    #[cfg(feature = "etcd")]
    Etcd {
        /// Boxed: the client is large beside the other variants.
        client: Box<etcd_client::Client>,
        lease: i64,
    },
    /// Redis: SET NX PX + compare-and-delete, on every node concurrently (on a cluster, through
    /// the cluster connection, which sends both to the key's primary; `nodes` holds the first
    /// seed, for the version).
    Redis {
        nodes: Vec<MultiplexedConnection>,
        cluster: Option<ClusterConnection>,
        del: redis::Script,
    },
}

fn sql_url(url: &str) -> String {
    let base = url.split('?').next().unwrap_or(url);
    if base.starts_with("sqlite:") {
        format!("{base}?mode=rwc")
    } else {
        base.replacen("mariadb://", "mysql://", 1)
    }
}

impl RawClient {
    /// Connects like the lock does (same store, own connections).
    pub async fn connect(t: &Target) -> Result<Self, String> {
        match t.raw {
            Raw::SqlInsertDelete | Raw::SqlForUpdate | Raw::SqlAdvisory => {
                sqlx::any::install_default_drivers();
                let opts =
                    AnyConnectOptions::from_str(&sql_url(&t.url)).map_err(|e| e.to_string())?;
                let sqlite = t.url.starts_with("sqlite");
                // The same SQLite settings and pool liveness check the lock uses, so the
                // comparison is like for like.
                let pool = distlock::configs::sql_liveness::check_when_idle(AnyPoolOptions::new())
                    .max_connections(4)
                    .after_connect(move |conn, _| {
                        Box::pin(async move {
                            if sqlite {
                                use sqlx::Executor;
                                conn.execute("PRAGMA journal_mode = WAL").await?;
                                conn.execute("PRAGMA busy_timeout = 10000").await?;
                                conn.execute("PRAGMA synchronous = FULL").await?;
                            }
                            Ok(())
                        })
                    })
                    .connect_with(opts)
                    .await
                    .map_err(|e| e.to_string())?;
                let pg = t.url.starts_with("postgres");
                let name_type = if t.url.starts_with("mysql") || t.url.starts_with("mariadb") {
                    "VARBINARY(1024)"
                } else {
                    "TEXT"
                };
                let create = format!("CREATE TABLE IF NOT EXISTS {TABLE} (name {name_type} NOT NULL PRIMARY KEY, owner VARCHAR(64) NOT NULL, expires_at BIGINT NOT NULL)");
                sqlx::query(AssertSqlSafe(create))
                    .execute(&pool)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(RawClient::Sql {
                    pool,
                    pg,
                    kind: t.raw,
                })
            }
            Raw::ZkCreateDelete => {
                let hosts = t
                    .url
                    .split("://")
                    .nth(1)
                    .unwrap_or("")
                    .split(['/', '?'])
                    .next()
                    .unwrap_or("");
                let client = zookeeper_client::Client::connect(hosts)
                    .await
                    .map_err(|e| e.to_string())?;
                let opts = zookeeper_client::CreateMode::Persistent
                    .with_acls(zookeeper_client::Acls::anyone_all());
                match client.create("/distlock-bench-raw", &[], &opts).await {
                    Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
                    Err(e) => return Err(e.to_string()),
                }
                Ok(RawClient::Zk { client })
            }
            #[cfg(feature = "etcd")]
            Raw::EtcdPutDelete => {
                let cfg = etcd_endpoints(&t.url)?;
                let mut client = etcd_client::Client::connect(cfg, None)
                    .await
                    .map_err(|e| e.to_string())?;
                // One lease for the whole run, as a client would keep a session's lease.
                let lease = client
                    .lease_grant(3600, None)
                    .await
                    .map_err(|e| e.to_string())?
                    .id();
                Ok(RawClient::Etcd {
                    client: Box::new(client),
                    lease,
                })
            }
            #[cfg(not(feature = "etcd"))]
            Raw::EtcdPutDelete => Err(
                "etcd targets need the benches' cargo feature `etcd` (and protoc to build it)"
                    .into(),
            ),
            Raw::RedisSetDel => {
                let authority = t
                    .url
                    .split("://")
                    .nth(1)
                    .unwrap_or("")
                    .split(['/', '?'])
                    .next()
                    .unwrap_or("");
                let hosts = authority.rsplit('@').next().unwrap_or("");
                let cluster = t.url.starts_with("redis+cluster://");
                let mut nodes = Vec::new();
                // A cluster's commands go through its own connection: the first seed alone
                // gets a plain one (for the version).
                for h in hosts.split(',').take(if cluster { 1 } else { usize::MAX }) {
                    let client = if t.url.starts_with("rediss://") {
                        tls_client(&t.url, h)?
                    } else {
                        redis::Client::open(format!("redis://{h}")).map_err(|e| e.to_string())?
                    };
                    nodes.push(
                        client
                            .get_multiplexed_async_connection()
                            .await
                            .map_err(|e| e.to_string())?,
                    );
                }
                let del = redis::Script::new(
                    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
                );
                let cluster = if cluster {
                    let seeds = hosts.split(',').map(|h| format!("redis://{h}"));
                    let client = redis::cluster::ClusterClient::new(seeds.collect::<Vec<_>>())
                        .map_err(|e| e.to_string())?;
                    Some(
                        client
                            .get_async_connection()
                            .await
                            .map_err(|e| e.to_string())?,
                    )
                } else {
                    None
                };
                Ok(RawClient::Redis {
                    nodes,
                    cluster,
                    del,
                })
            }
        }
    }

    /// One acquire+release-shaped cycle on `name`.
    pub async fn cycle(&self, name: &str) -> Result<(), String> {
        match self {
            RawClient::Sql {
                pool,
                pg,
                kind: Raw::SqlInsertDelete,
            } => {
                let (ins, del) = if *pg {
                    (
                        format!(
                            "INSERT INTO {TABLE} (name, owner, expires_at) VALUES ($1, $2, $3)"
                        ),
                        format!("DELETE FROM {TABLE} WHERE name = $1 AND owner = $2"),
                    )
                } else {
                    (
                        format!("INSERT INTO {TABLE} (name, owner, expires_at) VALUES (?, ?, ?)"),
                        format!("DELETE FROM {TABLE} WHERE name = ? AND owner = ?"),
                    )
                };
                sqlx::query(AssertSqlSafe(ins))
                    .bind(name)
                    .bind("raw")
                    .bind(0i64)
                    .execute(pool)
                    .await
                    .map_err(|e| e.to_string())?;
                sqlx::query(AssertSqlSafe(del))
                    .bind(name)
                    .bind("raw")
                    .execute(pool)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(())
            }
            RawClient::Sql {
                pool,
                pg,
                kind: Raw::SqlAdvisory,
            } => {
                // The textbook pair on one connection: PostgreSQL's session-level advisory lock on
                // `hashtext(name)`, MySQL/MariaDB's `GET_LOCK` on the name.
                let (lock, unlock) = if *pg {
                    (
                        "SELECT CAST(length(pg_advisory_lock(hashtext($1))::text) AS BIGINT)",
                        "SELECT CAST(CAST(pg_advisory_unlock(hashtext($1)) AS INT) AS BIGINT)",
                    )
                } else {
                    (
                        "SELECT CAST(GET_LOCK(?, 10) AS SIGNED)",
                        "SELECT CAST(RELEASE_LOCK(?) AS SIGNED)",
                    )
                };
                let mut conn = pool.acquire().await.map_err(|e| e.to_string())?;
                for q in [lock, unlock] {
                    sqlx::query(q)
                        .bind(name)
                        .fetch_one(&mut *conn)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            }
            RawClient::Sql { pool, pg, .. } => {
                let sel = if *pg {
                    format!("SELECT name FROM {TABLE} WHERE name = $1 FOR UPDATE")
                } else {
                    format!("SELECT name FROM {TABLE} WHERE name = ? FOR UPDATE")
                };
                let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
                sqlx::query(AssertSqlSafe(sel))
                    .bind(name)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(|e| e.to_string())?;
                tx.commit().await.map_err(|e| e.to_string())
            }
            RawClient::Zk { client } => {
                let opts = zookeeper_client::CreateMode::EphemeralSequential
                    .with_acls(zookeeper_client::Acls::anyone_all());
                let _ = name;
                let (_, seq) = client
                    .create("/distlock-bench-raw/n-", &[], &opts)
                    .await
                    .map_err(|e| e.to_string())?;
                client
                    .delete(&format!("/distlock-bench-raw/n-{seq}"), None)
                    .await
                    .map_err(|e| e.to_string())
            }
            #[cfg(feature = "etcd")]
            RawClient::Etcd { client, lease } => {
                let key = format!("distlock-bench-raw/{name}");
                let put = etcd_client::PutOptions::new().with_lease(*lease);
                let mut kv = client.kv_client();
                kv.put(key.as_str(), "", Some(put))
                    .await
                    .map_err(|e| e.to_string())?;
                kv.delete(key, None)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
            RawClient::Redis {
                cluster: Some(c),
                del,
                ..
            } => set_del(c.clone(), name, del)
                .await
                .map_err(|e| e.to_string()),
            RawClient::Redis { nodes, del, .. } => {
                let results =
                    futures::future::join_all(nodes.iter().map(|c| set_del(c.clone(), name, del)))
                        .await;
                results
                    .into_iter()
                    .collect::<Result<Vec<()>, _>>()
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
        }
    }
}

impl RawClient {
    /// The store's version string, for the report header.
    pub async fn version(&self) -> String {
        match self {
            RawClient::Sql { pool, .. } => {
                let q = match pool.any_kind_name() {
                    "SQLite" => "SELECT sqlite_version()",
                    _ => "SELECT version()",
                };
                match sqlx::query_scalar::<_, String>(q).fetch_one(pool).await {
                    Ok(v) => v.split(" on ").next().unwrap_or(&v).to_owned(),
                    Err(e) => format!("unknown ({e})"),
                }
            }
            RawClient::Zk { .. } => "ZooKeeper 3.8 (Debian package)".to_owned(),
            #[cfg(feature = "etcd")]
            RawClient::Etcd { client, .. } => match client.maintenance_client().status().await {
                Ok(s) => format!("etcd {}", s.version()),
                Err(e) => format!("etcd (unknown: {e})"),
            },
            RawClient::Redis { nodes, .. } => {
                let mut c = nodes[0].clone();
                let info: String = redis::cmd("INFO")
                    .arg("server")
                    .query_async(&mut c)
                    .await
                    .unwrap_or_default();
                info.lines()
                    .find_map(|l| l.strip_prefix("redis_version:"))
                    .map(|v| format!("Redis {}", v.trim()))
                    .unwrap_or_else(|| "Redis (unknown)".into())
            }
        }
    }
}

/// Redis's lock primitive: `SET NX PX`, then the compare-and-delete script.
async fn set_del(
    mut c: impl redis::aio::ConnectionLike,
    name: &str,
    del: &redis::Script,
) -> redis::RedisResult<()> {
    let _: Option<String> = redis::cmd("SET")
        .arg(name)
        .arg("raw")
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(&mut c)
        .await?;
    let _: i64 = del.key(name).arg("raw").invoke_async(&mut c).await?;
    Ok(())
}

/// `http://host:port` endpoints of an `etcd://` URL.
#[cfg(feature = "etcd")]
fn etcd_endpoints(url: &str) -> Result<Vec<String>, String> {
    let u = distlock_core::backend::DistlockUrl::parse(url, 2379).map_err(|e| e.to_string())?;
    Ok(u.hosts.iter().map(|h| format!("http://{h}")).collect())
}

trait KindName {
    fn any_kind_name(&self) -> &'static str;
}

impl KindName for AnyPool {
    fn any_kind_name(&self) -> &'static str {
        match self.connect_options().database_url.scheme() {
            "sqlite" => "SQLite",
            "postgres" | "postgresql" => "PostgreSQL",
            _ => "MySQL",
        }
    }
}

/// A redis-rs client of `host` over TLS as a `rediss://` target URL says (its user, `ca=` and
/// `password_file=`), so the raw primitive pays the same TLS as distlock.
fn tls_client(url: &str, host: &str) -> Result<redis::Client, String> {
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or("");
    let param = |k: &str| {
        url::form_urlencoded::parse(query.as_bytes())
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.into_owned())
    };
    let read = |k: &str| -> Result<Option<Vec<u8>>, String> {
        param(k)
            .map(|p| std::fs::read(&p).map_err(|e| format!("{k}={p}: {e}")))
            .transpose()
    };
    let user = url
        .split("://")
        .nth(1)
        .and_then(|r| r.split_once('@'))
        .map(|(u, _)| u.to_owned());
    let password = read("password_file")?.map(|p| String::from_utf8_lossy(&p).trim().to_owned());
    let auth = match (user, password) {
        (Some(u), Some(p)) => format!("{u}:{p}@"),
        (None, Some(p)) => format!(":{p}@"),
        (Some(u), None) => format!("{u}@"),
        (None, None) => String::new(),
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs = redis::TlsCertificates {
        client_tls: None,
        root_cert: read("ca")?,
    };
    redis::Client::build_with_tls(format!("rediss://{auth}{host}"), certs)
        .map_err(|e| e.to_string())
}
