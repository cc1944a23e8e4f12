//! [`Sentinels`]: the master of a Redis Sentinel set, found by asking the sentinels, and
//! followed through failovers.
//!
//! The sentinels are asked at once; the first that names a master wins, and
//! the master must confirm with `ROLE` (a sentinel may still name a demoted master for a
//! moment). A task asks again every [`POLL`] and moves the node to a new master once it is
//! connected and checked; until then calls go to the old one and fail or time out as they
//! would on a single server (Sentinel's rounds retry them within the wait).

use std::time::Duration;

use distlock_core::backend::url::HostPort;
use distlock_core::LockError;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Value};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::RedisConfig;
use crate::error::map;
use crate::node::{text, Node};

/// How often the sentinels are asked whether the master moved.
pub(crate) const POLL: Duration = Duration::from_millis(500);

/// How long the other sentinels' answers are awaited once one named a master.
const LATE: Duration = Duration::from_millis(50);

/// The sentinels of one master set.
pub(crate) struct Sentinels {
    cfg: RedisConfig,
    name: String,
    label: String,
    /// One connection per sentinel, opened on first use and again after a failure, and when
    /// it last answered (or was opened).
    conns: Mutex<Vec<(Option<MultiplexedConnection>, Instant)>>,
}

impl Sentinels {
    pub(crate) fn new(cfg: &RedisConfig, label: &str) -> Sentinels {
        Sentinels {
            name: cfg.master_name.clone().unwrap_or_default(),
            conns: Mutex::new(vec![(None, Instant::now()); cfg.nodes.len()]),
            cfg: cfg.clone(),
            label: label.to_owned(),
        }
    }

    /// The master the first sentinel to answer names. Every sentinel is asked at once, so a
    /// stalled one (its connection open, nothing answered) costs nothing while another answers;
    /// a connection that has not answered for `timeout` is replaced, so requests do not pile up
    /// on one that may never answer.
    async fn ask(&self) -> Result<HostPort, LockError> {
        let mut conns = self.conns.lock().await;
        let first = {
            let asks = conns
                .iter_mut()
                .zip(&self.cfg.nodes)
                .map(|((slot, heard), sentinel)| {
                    Box::pin(async move {
                        if heard.elapsed() >= self.cfg.timeout {
                            *slot = None;
                        }
                        if slot.is_none() {
                            *heard = Instant::now();
                        }
                        let reply = self.ask_one(sentinel, slot).await;
                        *heard = Instant::now();
                        match reply {
                            Ok(Some(master)) => Ok(master),
                            Ok(None) => Err(format!(
                                "sentinel {sentinel} knows no master set {:?}",
                                self.name
                            )),
                            Err(e) => {
                                *slot = None;
                                Err(format!("sentinel {sentinel}: {e}"))
                            }
                        }
                    })
                });
            match futures::future::select_ok(asks).await {
                Ok((master, others)) => {
                    // The others' answers, a moment later, keep their connections (a stalled
                    // sentinel's never comes).
                    let _ = tokio::time::timeout(LATE, futures::future::join_all(others)).await;
                    Ok(master)
                }
                Err(last) => Err(last),
            }
        };
        first.map_err(|last| {
            LockError::unavailable(
                &self.label,
                None,
                format!("no sentinel named a master for {:?} ({last})", self.name),
                None,
            )
        })
    }

    /// One sentinel's answer: the master's address, or `None` if it does not know the set.
    async fn ask_one(
        &self,
        sentinel: &HostPort,
        slot: &mut Option<MultiplexedConnection>,
    ) -> redis::RedisResult<Option<HostPort>> {
        let t = self.cfg.timeout;
        if slot.is_none() {
            let client = Client::open(format!("redis://{sentinel}"))?;
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(t))
                .set_response_timeout(Some(t));
            *slot = Some(
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?,
            );
        }
        let Some(conn) = slot.as_mut() else {
            return Ok(None);
        };
        let reply: Value = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.name)
            .query_async(conn)
            .await?;
        let Value::Array(items) = reply else {
            return Ok(None);
        };
        let host = text(items.first());
        let port = text(items.get(1)).and_then(|p| p.parse().ok());
        Ok(host.zip(port).map(|(host, port)| HostPort { host, port }))
    }

    /// Connects to the master the sentinels name, once it confirms with `ROLE` that it is
    /// one.
    pub(crate) async fn connect(&self) -> Result<Node, LockError> {
        let addr = self.ask().await?;
        let node = Node::connect_at(&self.cfg, &addr, &self.label).await?;
        let role = tokio::time::timeout(self.cfg.timeout, async {
            let mut c = node.conn();
            redis::cmd("ROLE").query_async::<Value>(&mut c).await
        })
        .await;
        match role {
            Ok(Ok(Value::Array(items))) if text(items.first()).as_deref() == Some("master") => {
                Ok(node)
            }
            Ok(Err(e)) => Err(map(e, &self.label, None)),
            _ => Err(LockError::unavailable(
                &self.label,
                None,
                format!("the sentinels name {addr} as the master of {:?}, but it does not say it is one (a failover under way?)", self.name),
                None,
            )),
        }
    }

    /// Moves `node` to each new master the sentinels name, every [`POLL`], until aborted.
    pub(crate) fn follow(self, node: Node) -> JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(POLL).await;
                let Ok(addr) = self.ask().await else {
                    continue;
                };
                if addr.to_string() == node.addr() {
                    continue;
                }
                match self.connect().await {
                    Ok(master) => {
                        tracing::info!(backend = %self.label, from = %node.addr(), to = %master.addr(), "Redis Sentinel failover: following the new master");
                        node.move_to(&master);
                    }
                    Err(e) => {
                        tracing::debug!(backend = %self.label, error = %e, "the new master is not ready yet")
                    }
                }
            }
        })
    }
}
