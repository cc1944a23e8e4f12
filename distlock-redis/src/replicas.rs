//! [`Acked`]: `replicas=N`. A grant or renewal counts only once `N` replicas hold it, so a
//! failover that promotes one of them cannot lose it. `WAIT` counts the replicas that have
//! acknowledged every earlier write *of the same connection*; sending it in one pipeline with
//! the script keeps the two on one connection even when the connection is re-opened between
//! calls (on a fresh connection `WAIT` would count replicas that never saw the script).

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use crate::conn::Conn;
use crate::scripts::{eval_instead, is_noscript};

/// The description of [`Acked::check`]'s error (`error.rs` makes it `Unavailable`).
pub(crate) const UNACKNOWLEDGED: &str = "not acknowledged by enough replicas";

/// A connection that sends each command followed by `WAIT replicas timeout` (when `replicas`
/// is not 0) and keeps the last count.
pub(crate) struct Acked {
    conn: Conn,
    replicas: u32,
    timeout_ms: u64,
    acks: Option<i64>,
}

impl Acked {
    pub(crate) fn new(conn: Conn, replicas: u32, timeout_ms: u64) -> Acked {
        Acked {
            conn,
            replicas,
            timeout_ms,
            acks: None,
        }
    }

    /// The replicas that acknowledged the last command (`None`: no `WAIT` was sent).
    pub(crate) fn acks(&self) -> Option<i64> {
        self.acks
    }

    /// Whether the last command reached as many replicas as required.
    pub(crate) fn confirmed(&self) -> bool {
        self.replicas == 0 || self.acks.is_some_and(|n| n >= i64::from(self.replicas))
    }

    /// [`Acked::confirmed`] as an error naming the count, for a renewal.
    pub(crate) fn check(&self) -> RedisResult<()> {
        if self.confirmed() {
            return Ok(());
        }
        Err(RedisError::from((
            ErrorKind::Client,
            UNACKNOWLEDGED,
            format!(
                "{} of the {} replicas `replicas=` requires acknowledged within {} ms",
                self.acks.unwrap_or(0),
                self.replicas,
                self.timeout_ms
            ),
        )))
    }
}

impl Acked {
    /// `cmd` and `WAIT` (bounded by `wait_ms`, never 0: that waits for ever) in one pipeline:
    /// `cmd`'s reply, the count kept.
    async fn with_wait(&mut self, cmd: &Cmd, wait_ms: u64) -> RedisResult<Value> {
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone())
            .cmd("WAIT")
            .arg(self.replicas)
            .arg(wait_ms);
        let mut replies = self.conn.req_packed_commands(&pipe, 0, 2).await?;
        self.acks = match replies.pop() {
            Some(Value::Int(n)) => Some(n),
            _ => None,
        };
        replies.pop().unwrap_or(Value::Nil).extract_error()
    }
}

/// The error of a write fewer replicas acknowledged than `replicas=` requires.
pub(crate) fn unacknowledged() -> RedisError {
    RedisError::from((ErrorKind::Client, UNACKNOWLEDGED))
}

impl ConnectionLike for Acked {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        if self.replicas == 0 {
            return self.conn.req_packed_command(cmd);
        }
        Box::pin(async move {
            let started = std::time::Instant::now();
            let reply = self.with_wait(cmd, self.timeout_ms).await;
            match is_noscript(&reply).then(|| eval_instead(cmd)).flatten() {
                // The first `WAIT` may have taken its whole bound (a promoted replica has no
                // replicas yet): the second gets what is left, so the call stays within it.
                Some(eval) => {
                    let spent = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                    let left = self.timeout_ms.saturating_sub(spent).max(1);
                    self.with_wait(&eval, left).await
                }
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
        self.conn.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}
