//! A Redis Cluster's slot map, followed past a stalled primary.
//!
//! redis-rs's cluster connection follows `MOVED`/`ASK` and reads the slot map again when a
//! connection fails, but a primary that stalls (its connection open, nothing answered: a
//! paused process, a blackholed route) only times out, and the connection keeps sending the
//! slot's commands there after the cluster has promoted the replica. So while the node's last
//! call timed out, a task replaces the connection every [`POLL`] with a new one from the first
//! seed to answer, which reads the slot map afresh; until the cluster has failed over, the new
//! one times out too and is replaced again.

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
            // One connection per seed, raced: a connection waits for every seed it was given,
            // and the stalled node may be one of them.
            let fresh = cfg
                .nodes
                .iter()
                .map(|seed| Box::pin(cluster_conn(&cfg, std::slice::from_ref(seed), &label)));
            match futures::future::select_ok(fresh)
                .await
                .map(|(conn, _)| conn)
            {
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
