//! A Redis Cluster's slot map, followed past a stalled primary.
//!
//! redis-rs's cluster connection follows `MOVED`/`ASK` and reads the slot map again when a
//! connection fails, but a primary that stalls (its connection open, nothing answered: a
//! paused process, a blackholed route) only times out, and the connection keeps sending the
//! slot's commands there after the cluster has promoted the replica. So while the node's last
//! call timed out, a task replaces the connection every [`POLL`] with a new one from the first
//! seed to answer (`node::cluster_conn`), which reads the slot map afresh; until the cluster
//! has failed over, the new one times out too and is replaced again.

use tokio::task::JoinHandle;

use crate::config::RedisConfig;
use crate::node::{cluster_conn, Node};
use crate::sentinel::POLL;

/// Replaces `node`'s connection while its calls time out, every [`POLL`], until aborted.
pub(crate) fn follow(cfg: RedisConfig, label: String, node: Node) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(POLL).await;
            if !node.is_stalled() {
                continue;
            }
            match cluster_conn(&cfg, &label).await {
                Ok(conn) => {
                    tracing::info!(backend = %label, "Redis Cluster: a call timed out; reading the slot map afresh");
                    node.reconnect(conn);
                    node.heard(false);
                }
                Err(e) => {
                    tracing::debug!(backend = %label, error = %e, "Redis Cluster: no new connection yet")
                }
            }
        }
    })
}
