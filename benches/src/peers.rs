//! Peers measured in the same run: the textbook polling lock (`SET NX PX` + fixed sleep), the
//! baseline that event-driven waiting must beat.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    owner_token, AcquireOptions, Capabilities, Deadline, DistributedLock, GuardParts, Lease,
    LockError, LockGuard, LostSignal, Wakeup,
};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

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

    async fn attempt(
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
        LockGuard::new(GuardParts {
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
        })
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
impl DistributedLock for NaivePollingLock {
    async fn acquire(&self, name: &str, opts: &AcquireOptions) -> Result<LockGuard, LockError> {
        let deadline = Deadline::after(opts.wait);
        let token = owner_token();
        loop {
            let at = Instant::now();
            if let Some(f) = self.attempt(name, &token, opts.ttl).await? {
                return Ok(self.guard(name, token, f, opts, at));
            }
            if deadline.expired() {
                return Err(LockError::timeout(name, "naive-poll", deadline.elapsed()));
            }
            deadline.sleep(POLL).await;
        }
    }

    async fn try_acquire(
        &self,
        name: &str,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        let token = owner_token();
        let at = Instant::now();
        Ok(self
            .attempt(name, &token, opts.ttl)
            .await?
            .map(|f| self.guard(name, token, f, opts, at)))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leased(Wakeup::Backoff, false)
    }

    fn backend_name(&self) -> String {
        "naive-poll (redis)".into()
    }
}

/// `rslock` (the Rust Redlock crate) on the same masters: no fencing tokens, no renewal, retries
/// with its own random delays.
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
impl DistributedLock for RslockPeer {
    async fn acquire(&self, name: &str, opts: &AcquireOptions) -> Result<LockGuard, LockError> {
        let at = Instant::now();
        let attempt = self.manager.acquire_no_guard(name.as_bytes(), opts.ttl);
        let lock = match opts.wait {
            Some(w) => tokio::time::timeout(w, attempt)
                .await
                .map_err(|_| LockError::timeout(name, "rslock", w))?,
            None => attempt.await,
        }
        .map_err(|e| LockError::unavailable("rslock", Some(name), format!("{e:?}"), None))?;
        Ok(LockGuard::new(GuardParts {
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
        }))
    }

    async fn try_acquire(
        &self,
        name: &str,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        self.acquire(name, &opts.clone().wait(Duration::from_millis(1)))
            .await
            .map(Some)
            .or_else(|e| match e {
                LockError::Timeout { .. } => Ok(None),
                other => Err(other),
            })
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::leased(Wakeup::Backoff, false);
        c.fencing = false;
        c
    }

    fn backend_name(&self) -> String {
        "rslock (redlock)".into()
    }
}
