//! [`Conn`]: a node's command connection. One server's reconnecting connection, or a Redis
//! Cluster connection, which sends each command to the primary of its first key's hash slot
//! and follows `MOVED`/`ASK` redirections and topology changes by itself (redis-rs).

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use crate::scripts::{eval_instead, is_noscript};

/// Where a node's commands go.
#[derive(Clone)]
pub(crate) enum Conn {
    Server(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    async fn send(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Conn::Server(c) => c.req_packed_command(cmd).await,
            Conn::Cluster(c) => c.req_packed_command(cmd).await,
        }
    }
}

impl ConnectionLike for Conn {
    /// A script the server lacks is run from its source (`scripts::eval_instead`), so
    /// redis-rs never falls back to `SCRIPT LOAD`.
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let reply = self.send(cmd).await;
            match is_noscript(&reply).then(|| eval_instead(cmd)).flatten() {
                Some(eval) => self.send(&eval).await,
                None => reply,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Server(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Server(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}
