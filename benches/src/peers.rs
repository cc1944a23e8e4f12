//! Peers measured in the same run: the textbook polling lock (`SET NX PX` + fixed sleep), the
//! baseline that event-driven waiting must beat.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    owner_token, Attempt, Deadline, GuardParts, Lease, LockBackend, LostSignal,
};
use distlock_core::{AcquireOptions, Capabilities, LockError, LockGuard, Wakeup};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

/// What a user of the naive polling lock gives up (the report's peer note).
pub const NAIVE_GIVES_UP: &str =
    "peer: no FIFO (polls every 10 ms), fencing by a separate INCR after the SET, no renewal, no lost-lock signal";
/// What a user of rslock gives up (the report's peer note).
pub const RSLOCK_GIVES_UP: &str =
    "peer: no fencing token, no FIFO (retries after a random delay), no lost-lock signal";

/// The polling interval of the naive lock (as in most tutorials).
const POLL: Duration = Duration::from_millis(10);

/// `SET key token NX PX ttl`, and on failure sleep 10 ms and try again.
#[derive(Debug)]
pub struct NaivePollingLock {
    conn: MultiplexedConnection,
}

impl NaivePollingLock {
    /// Connects to one Redis server.
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        let client =
            redis::Client::open(url).map_err(|e| LockError::invalid_config(e.to_string()))?;
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| LockError::unavailable("naive-poll", None, e.to_string(), None))?;
        Ok(NaivePollingLock { conn })
    }

    async fn set_nx(
        &self,
        name: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<Option<u64>, LockError> {
        let mut c = self.conn.clone();
        let ok: Option<String> = redis::cmd("SET")
            .arg(name)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async(&mut c)
            .await
            .map_err(|e| LockError::unavailable("naive-poll", Some(name), e.to_string(), None))?;
        if ok.is_none() {
            return Ok(None);
        }
        let fence: u64 = redis::cmd("INCR")
            .arg(format!("{name}:naive-fence"))
            .query_async(&mut c)
            .await
            .map_err(|e| LockError::unavailable("naive-poll", Some(name), e.to_string(), None))?;
        Ok(Some(fence))
    }

    fn guard(
        &self,
        name: &str,
        token: String,
        fence: u64,
        opts: &AcquireOptions,
        at: Instant,
    ) -> LockGuard {
        GuardParts {
            name: name.to_owned(),
            backend: "naive-poll".into(),
            fencing_token: fence,
            ttl: opts.ttl,
            renew: false,
            acquired_at: at,
            validity: Some(opts.ttl),
            lease: Arc::new(NaiveLease {
                conn: self.conn.clone(),
                name: name.to_owned(),
                token,
            }),
            lost: LostSignal::new(),
        }
        .into_guard()
    }
}

struct NaiveLease {
    conn: MultiplexedConnection,
    name: String,
    token: String,
}

#[async_trait]
impl Lease for NaiveLease {
    async fn renew(&self, ttl: Duration) -> Result<Option<Duration>, LockError> {
        Ok(Some(ttl))
    }

    async fn release(&self) -> Result<(), LockError> {
        let script = redis::Script::new("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0");
        let mut c = self.conn.clone();
        let n: i64 = script
            .key(&self.name)
            .arg(&self.token)
            .invoke_async(&mut c)
            .await
            .map_err(|e| {
                LockError::unavailable("naive-poll", Some(&self.name), e.to_string(), None)
            })?;
        if n == 1 {
            Ok(())
        } else {
            Err(LockError::not_held(&self.name, "naive-poll", "expired"))
        }
    }
}

#[async_trait]
impl LockBackend for NaivePollingLock {
    async fn attempt(
        &self,
        name: &str,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let deadline = Deadline::after(opts.wait);
        let token = owner_token();
        loop {
            let at = Instant::now();
            if let Some(f) = self.set_nx(name, &token, opts.ttl).await? {
                return Ok(Some(self.guard(name, token, f, opts, at)));
            }
            if how == Attempt::Try || deadline.expired() {
                return Ok(None);
            }
            deadline.sleep(POLL).await;
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leased(Wakeup::Backoff, false)
    }

    fn backend_name(&self) -> &str {
        "naive-poll (redis)"
    }
}

/// `rslock` (the Rust Redlock crate) on the same masters: no fencing tokens (its guards carry
/// token 0, which no distlock backend hands out), no renewal, retries with its own random
/// delays.
pub struct RslockPeer {
    manager: rslock::LockManager,
}

impl std::fmt::Debug for RslockPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RslockPeer")
    }
}

impl RslockPeer {
    /// One manager over every master of a `redlock://` URL.
    pub fn new(url: &str) -> Self {
        let hosts = url
            .split("://")
            .nth(1)
            .unwrap_or("")
            .split(['/', '?'])
            .next()
            .unwrap_or("");
        let uris: Vec<String> = hosts.split(',').map(|h| format!("redis://{h}")).collect();
        RslockPeer {
            manager: rslock::LockManager::new(uris),
        }
    }
}

struct RslockLease {
    manager: rslock::LockManager,
    lock: rslock::Lock,
}

#[async_trait]
impl Lease for RslockLease {
    async fn renew(&self, ttl: Duration) -> Result<Option<Duration>, LockError> {
        Ok(Some(ttl))
    }

    async fn release(&self) -> Result<(), LockError> {
        self.manager.unlock(&self.lock).await;
        Ok(())
    }
}

#[async_trait]
impl LockBackend for RslockPeer {
    async fn attempt(
        &self,
        name: &str,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let at = Instant::now();
        let attempt = self.manager.acquire_no_guard(name.as_bytes(), opts.ttl);
        let wait = match how {
            Attempt::Try => Some(Duration::from_millis(1)),
            _ => opts.wait,
        };
        let lock = match wait {
            Some(w) => match tokio::time::timeout(w, attempt).await {
                Ok(got) => got,
                Err(_) => return Ok(None),
            },
            None => attempt.await,
        }
        .map_err(|e| LockError::unavailable("rslock", Some(name), format!("{e:?}"), None))?;
        Ok(Some(
            GuardParts {
                name: name.to_owned(),
                backend: "rslock".into(),
                fencing_token: 0,
                ttl: opts.ttl,
                renew: false,
                acquired_at: at,
                validity: Some(opts.ttl),
                lease: Arc::new(RslockLease {
                    manager: self.manager.clone(),
                    lock,
                }),
                lost: LostSignal::new(),
            }
            .into_guard(),
        ))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leased(Wakeup::Backoff, false)
    }

    fn backend_name(&self) -> &str {
        "rslock (redlock)"
    }
}
