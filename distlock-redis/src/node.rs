//! [`Node`]: one Redis server and the script calls distlock makes on it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use distlock_core::backend::url::HostPort;
use distlock_core::LockError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Client, ErrorKind, RedisError, RedisResult, Value};
use tokio::sync::OnceCell;

use crate::config::{EvictionCheck, RedisConfig};
use crate::conn::Conn;
use crate::error::map;
use crate::eviction::{self, Policy};
use crate::keys::Keys;
use crate::replicas::Acked;
use crate::scripts::{ACQUIRE, ALL, BREAK, EXTEND, FENCE_WRITEBACK, LEAVE, PEEK, RELEASE};

/// The outcome of one acquire script run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// We hold it now, with this node's fencing token (a Redlock waiter's queue entry stays
    /// until its release).
    Acquired { token: u64 },
    /// The script granted it, but fewer replicas than `replicas=` acknowledged the grant in
    /// time: it must be given back, not used.
    Unacknowledged { acks: i64 },
    /// Someone holds it (or waiters are ahead of us); the holder's lease has `pttl_ms` left
    /// (-1: no expiry, e.g. a redis-py lock without timeout); this node's fencing counter is
    /// `counter` (Redlock draws its token above it).
    Held { pttl_ms: i64, counter: u64 },
    /// One of the lock's keys holds data distlock did not write.
    Foreign(Foreign),
}

/// Data distlock did not write, found at one of a lock's keys by a script (which then wrote
/// nothing): reported, never touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Foreign {
    /// Its Redis type (with a note when the type is right but the shape is not).
    pub kind: String,
    /// The key.
    pub key: String,
}

impl Foreign {
    /// What was found, where, and what to do about it (the key is quoted with escapes, so its
    /// NUL shows as `\0`).
    pub(crate) fn describe(&self, keys: &Keys) -> String {
        self.describe_as(keys.role(&self.key))
    }

    /// As [`Foreign::describe`], for a key whose role is `role`.
    pub(crate) fn describe_as(&self, role: &str) -> String {
        format!(
            "{} {:?} holds a Redis {} that distlock did not write (another application's data?); \
             it was left untouched: remove it, or pick another name or prefix",
            role, self.key, self.kind
        )
    }
}

/// `{-1, type, key}`, the scripts' report of foreign data.
fn foreign_in(reply: &Value) -> Option<Foreign> {
    let Value::Array(items) = reply else {
        return None;
    };
    if items.first().map(int) != Some(-1) {
        return None;
    }
    let text = |v| text(v).unwrap_or_else(|| "unknown".to_owned());
    Some(Foreign {
        kind: text(items.get(1)),
        key: text(items.get(2)),
    })
}

/// A script's array answer, or the foreign data it reported instead.
pub(crate) fn reply_items(reply: Value) -> Result<Vec<Value>, Foreign> {
    if let Some(f) = foreign_in(&reply) {
        return Err(f);
    }
    Ok(match reply {
        Value::Array(items) => items,
        _ => Vec::new(),
    })
}

/// A bulk or simple string in a script's answer.
pub(crate) fn text(v: Option<&Value>) -> Option<String> {
    match v {
        Some(Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        Some(Value::SimpleString(s)) => Some(s.clone()),
        _ => None,
    }
}

/// A script's answer as a flag (1 = done), or the foreign data it found.
pub(crate) fn flag(reply: &Value) -> Result<bool, Foreign> {
    foreign_in(reply).map_or_else(|| Ok(int(reply) == 1), Err)
}

/// How a release hands the lock to the head of a node's queue (`lua/release.lua`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Handoff {
    /// The grant's token is at least this (`None`: the server's clock in µs).
    pub floor: Option<u64>,
    /// The release the grant belongs to (`None` on a single instance): one id for every master
    /// of one Redlock release, so the head counts a quorum of grants of one release only.
    pub release: Option<u64>,
}

impl Handoff {
    /// A release's handoff: on a single instance (`lag` `None`) the server's clock and no id; on
    /// Redlock one reading of this client's clock (behind by `lag`, a test hook) and a fresh
    /// random id, both the same for every master.
    pub(crate) fn new(lag: Option<std::time::Duration>) -> Handoff {
        match lag {
            None => Handoff::default(),
            Some(lag) => Handoff {
                floor: Some(crate::clock::now_us(lag)),
                release: Some(rand::random()),
            },
        }
    }
}

/// One server: a reconnecting multiplexed connection plus the client to open pub/sub with.
/// A Sentinel master's server changes on a failover ([`Node::move_to`]); the others' never do.
#[derive(Clone)]
pub(crate) struct Node {
    at: Arc<RwLock<Endpoint>>,
    eviction: EvictionCheck,
    /// `replicas=`: the acknowledgements a grant or renewal needs, and the bound on `WAIT`.
    replicas: u32,
    wait_ms: u64,
    /// `lock_delay=` in ms (0: none): the quiet time of a master not granted on before.
    lock_delay_ms: u64,
    /// A Redis Cluster: `lock_delay=`'s keys are per hash slot (`keys::quiet_keys`).
    cluster: bool,
    label: String,
    /// Set when a call to this node timed out, cleared when it answers: a stalled node is not
    /// waited for again while the others answer (`quorum::gather`).
    stalled: Arc<AtomicBool>,
}

/// Where a node's commands go now.
#[derive(Clone)]
struct Endpoint {
    conn: Conn,
    client: Client,
    addr: String,
    /// Set once the server's `maxmemory-policy` passed the check (see `eviction.rs`): at
    /// connect, or before the first lock on a Redlock master that was down then.
    policy_checked: Arc<OnceCell<()>>,
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

pub(crate) fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::BulkString(b) => String::from_utf8_lossy(b).parse().unwrap_or(0),
        _ => 0,
    }
}

/// The redis-rs client for the server at `addr`: plain, or TLS with the configured CA and
/// client identity.
fn client(cfg: &RedisConfig, addr: &HostPort, label: &str) -> Result<Client, LockError> {
    let bad_address = |e: RedisError| {
        LockError::invalid_config(format!("{label}: bad address {addr}: {:?}", e.kind()))
    };
    let Some(files) = &cfg.tls else {
        return Client::open(cfg.server_url(addr)).map_err(bad_address);
    };
    let pem = files.read()?;
    // rustls needs a process-wide crypto provider; keep one the application installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs = redis::TlsCertificates {
        client_tls: pem
            .identity
            .map(|(client_cert, client_key)| redis::ClientTlsConfig {
                client_cert,
                client_key,
            }),
        root_cert: pem.ca,
    };
    Client::build_with_tls(cfg.server_url(addr), certs).map_err(|e| {
        LockError::invalid_config(format!("{label}: TLS set-up for {addr} failed: {e}"))
    })
}

/// How long a call may go unanswered before a caller that gives up on it marks its node
/// stalled ([`Node::within`]).
const UNANSWERED: Duration = Duration::from_secs(1);

/// Marks `node` stalled when dropped at or after `after` (`None`: the call it watches ended):
/// the call was abandoned unanswered.
struct MarkIfAbandoned<'a> {
    node: &'a Node,
    after: Option<tokio::time::Instant>,
}

impl Drop for MarkIfAbandoned<'_> {
    fn drop(&mut self) {
        if self.after.is_some_and(|a| tokio::time::Instant::now() >= a) {
            self.node.heard(true);
        }
    }
}

/// A connection to the cluster through the first of `cfg`'s seeds to read the slot map: one
/// client per seed, raced, since a client waits for every seed it was given and a seed
/// address that answers nothing (a blackholed route) would hold it up for `cfg.timeout`.
/// (Once it has the slot map, redis-rs connects to every node in it, so a stalled *member*
/// still costs up to `cfg.timeout`.) When no seed answers: the first error that is not
/// `Unavailable` (a refused password says more than a timeout), else the last. Within
/// `cfg.timeout` twice over.
pub(crate) async fn cluster_conn(
    cfg: &RedisConfig,
    label: &str,
) -> Result<ClusterConnection, LockError> {
    let mut tries: futures::stream::FuturesUnordered<_> = cfg
        .nodes
        .iter()
        .map(|seed| seed_conn(cfg, seed, label))
        .collect();
    let mut errors = Vec::new();
    while let Some(tried) = futures::StreamExt::next(&mut tries).await {
        match tried {
            Ok(conn) => return Ok(conn),
            Err(e) => errors.push(e),
        }
    }
    let telling = errors
        .iter()
        .position(|e| !matches!(e, LockError::Unavailable { .. }))
        .unwrap_or(errors.len().saturating_sub(1));
    Err(if errors.is_empty() {
        LockError::invalid_config(format!("{label}: no cluster nodes"))
    } else {
        errors.swap_remove(telling)
    })
}

/// A cluster connection through the one seed `seed`.
async fn seed_conn(
    cfg: &RedisConfig,
    seed: &HostPort,
    label: &str,
) -> Result<ClusterConnection, LockError> {
    let bad = |e: RedisError| {
        LockError::invalid_config(format!("{label}: bad cluster node {seed}: {:?}", e.kind()))
    };
    let cluster = redis::cluster::ClusterClientBuilder::new([cfg.server_url(seed)])
        .connection_timeout(cfg.timeout)
        .response_timeout(cfg.timeout)
        .build()
        .map_err(bad)?;
    match tokio::time::timeout(cfg.timeout * 2, cluster.get_async_connection()).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(map(e, label, None)),
        Err(_) => Err(LockError::unavailable(
            label,
            None,
            format!("no cluster node answered within {:?}", cfg.timeout * 2),
            None,
        )),
    }
}

impl Node {
    /// Connects to node `i` of `cfg`, bounded by `cfg.timeout`, and loads the scripts there (an
    /// unreachable node is returned as an error; [`Node::lazy`] makes one that retries later).
    pub(crate) async fn connect(
        cfg: &RedisConfig,
        i: usize,
        label: &str,
    ) -> Result<Node, LockError> {
        Self::connect_at(cfg, &cfg.nodes[i], label).await
    }

    /// As [`Node::connect`], to the server at `addr`.
    pub(crate) async fn connect_at(
        cfg: &RedisConfig,
        addr: &HostPort,
        label: &str,
    ) -> Result<Node, LockError> {
        let node = Self::lazy_at(cfg, addr, label)?;
        let mut c = node.conn();
        // One round trip checks the node, loads every script (so the first EVALSHA of a lock
        // call does not pay NOSCRIPT + EVAL: two round trips on a slow link)
        // and reads the eviction policy (a refused CONFIG must not fail the rest).
        let mut load = redis::pipe();
        for s in ALL {
            load.cmd("SCRIPT").arg("LOAD").arg(s);
        }
        load.add_command(eviction::command()).ignore_errors();
        let loaded = load.query_async::<Vec<RedisResult<Value>>>(&mut c);
        let mut replies =
            match tokio::time::timeout(cfg.timeout + Duration::from_secs(1), loaded).await {
                Ok(Ok(replies)) => replies,
                Ok(Err(e)) => return Err(map(e, label, None)),
                Err(_) => {
                    return Err(LockError::unavailable(
                        label,
                        None,
                        format!("no answer from {addr} within {:?}", cfg.timeout),
                        None,
                    ))
                }
            };
        let policy = replies.pop().unwrap_or(Ok(Value::Nil));
        if let Some(Err(e)) = replies.into_iter().find(Result::is_err) {
            return Err(map(e, label, None));
        }
        let policy = Policy::from_reply(policy).map_err(|e| map(e, label, None))?;
        eviction::judge(&policy, node.eviction, label, &node.addr())?;
        let _ = node.at().policy_checked.set(());
        Ok(node)
    }

    /// The cluster of `cfg`'s seed nodes, connected within `cfg.timeout`; pub/sub goes to the
    /// first seed (a cluster passes every `PUBLISH` on to all its nodes).
    pub(crate) async fn connect_cluster(cfg: &RedisConfig, label: &str) -> Result<Node, LockError> {
        let hosts: Vec<String> = cfg.nodes.iter().map(ToString::to_string).collect();
        let node = Self::with(
            cfg,
            label,
            Endpoint {
                conn: Conn::Cluster(cluster_conn(cfg, label).await?),
                client: client(cfg, &cfg.nodes[0], label)?,
                addr: format!("cluster {}", hosts.join(",")),
                policy_checked: Arc::new(OnceCell::new()),
            },
        );
        node.check_policy().await.map_err(|e| map(e, label, None))?;
        Ok(node)
    }

    /// From now on, this cluster node's commands go through `conn` (a new connection, which
    /// read the slot map afresh: `cluster.rs`).
    pub(crate) fn reconnect(&self, conn: ClusterConnection) {
        self.at.write().unwrap_or_else(|p| p.into_inner()).conn = Conn::Cluster(conn);
    }

    /// From now on, this node's commands go where `other`'s go (a Sentinel failover: `other`
    /// is the new master, connected and checked).
    pub(crate) fn move_to(&self, other: &Node) {
        let to = other.at();
        *self.at.write().unwrap_or_else(|p| p.into_inner()) = to;
    }

    fn at(&self) -> Endpoint {
        self.at.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// One field of where the commands go now, read under the lock (no whole-endpoint copy).
    fn read<T>(&self, field: impl FnOnce(&Endpoint) -> T) -> T {
        field(&self.at.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The connection to the server (reconnecting by itself).
    pub(crate) fn conn(&self) -> Conn {
        self.read(|at| at.conn.clone())
    }

    /// The client to open this server's pub/sub connection with.
    pub(crate) fn client(&self) -> Client {
        self.read(|at| at.client.clone())
    }

    /// The connection for a grant or renewal: with `replicas=`, each command goes with a
    /// `WAIT` whose count [`Acked::acks`] reports.
    fn acked(&self) -> Acked {
        Acked::new(self.conn(), self.replicas, self.wait_ms)
    }

    /// A Redlock master that was down at connect: its eviction policy is checked before its
    /// first lock, and until it passes the master is not counted (its refusal is an error
    /// here, logged, so the round counts it as a master that did not answer).
    async fn check_policy(&self) -> RedisResult<()> {
        // Every acquisition passes here: once checked, nothing is copied.
        if self.read(|at| at.policy_checked.initialized()) {
            return Ok(());
        }
        let at = self.at();
        at.policy_checked
            .get_or_try_init(|| async {
                let mut c = at.conn.clone();
                let policy = Policy::from_reply(eviction::command().query_async(&mut c).await)?;
                eviction::judge(&policy, self.eviction, &self.label, &at.addr).map_err(|e| {
                    tracing::error!(backend = %self.label, server = %at.addr, error = %e, "Redlock master not used");
                    RedisError::from((
                        ErrorKind::InvalidClientConfig,
                        "maxmemory-policy can evict lock keys",
                        e.to_string(),
                    ))
                })
            })
            .await
            .map(|_| ())
    }

    /// The server's `host:port` (for logs and messages: never the URL, which may hold the
    /// password).
    pub(crate) fn addr(&self) -> String {
        self.read(|at| at.addr.clone())
    }

    /// A node whose connection is opened on first use (and re-opened after failures).
    pub(crate) fn lazy(cfg: &RedisConfig, i: usize, label: &str) -> Result<Node, LockError> {
        Self::lazy_at(cfg, &cfg.nodes[i], label)
    }

    fn lazy_at(cfg: &RedisConfig, addr: &HostPort, label: &str) -> Result<Node, LockError> {
        let client = client(cfg, addr, label)?;
        let mgr_cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(cfg.timeout))
            .set_response_timeout(Some(cfg.timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(200));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), mgr_cfg)
            .map_err(|e| map(e, label, None))?;
        Ok(Self::with(
            cfg,
            label,
            Endpoint {
                conn: Conn::Server(conn),
                client,
                addr: addr.to_string(),
                policy_checked: Arc::new(OnceCell::new()),
            },
        ))
    }

    fn with(cfg: &RedisConfig, label: &str, at: Endpoint) -> Node {
        Node {
            at: Arc::new(RwLock::new(at)),
            eviction: cfg.eviction,
            replicas: cfg.replicas,
            wait_ms: ms(cfg.timeout / 2),
            lock_delay_ms: cfg.lock_delay.map_or(0, ms),
            cluster: cfg.topology == crate::config::Topology::Cluster,
            label: label.to_owned(),
            stalled: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether this node's last call timed out, with no answer since.
    pub(crate) fn is_stalled(&self) -> bool {
        self.stalled.load(Ordering::Relaxed)
    }

    /// Records whether a call to this node timed out (`false`: it answered, an error counts).
    pub(crate) fn heard(&self, timed_out: bool) {
        if self.stalled.swap(timed_out, Ordering::Relaxed) != timed_out {
            tracing::debug!(backend = %self.label, server = %self.addr(), stalled = timed_out, "Redis node");
        }
    }

    /// `call` on this node bounded by `t`, recording whether the node failed to answer: it
    /// timed out (here, or as the connection's own response timeout), the connection failed,
    /// or the caller gave up on it after [`UNANSWERED`] or `t` (a try or a renewal cut off at
    /// its own bound, shorter than `t`). Only a reply from the server (an error reply included)
    /// clears the mark.
    pub(crate) async fn within<T>(
        &self,
        t: Duration,
        call: impl std::future::Future<Output = RedisResult<T>>,
    ) -> Result<RedisResult<T>, tokio::time::error::Elapsed> {
        let mut abandoned = MarkIfAbandoned {
            node: self,
            after: Some(tokio::time::Instant::now() + t.min(UNANSWERED)),
        };
        let reply = tokio::time::timeout(t, call).await;
        abandoned.after = None;
        self.heard(match &reply {
            Err(_) => true,
            Ok(Err(e)) => e.is_timeout() || e.is_io_error() || e.is_connection_dropped(),
            Ok(Ok(_)) => false,
        });
        reply
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn acquire(
        &self,
        keys: &Keys,
        token: &str,
        ttl: Duration,
        wait: bool,
        waiter_ttl: Duration,
        score: Option<u64>,
        floor: Option<u64>,
    ) -> RedisResult<Attempt> {
        self.check_policy().await?;
        let mut c = self.acked();
        let mut call = ACQUIRE.prepare_invoke();
        call.key(&keys.lock)
            .key(&keys.fence)
            .key(&keys.queue)
            .key(&keys.qexp)
            .arg(token)
            .arg(ms(ttl))
            .arg(if wait { "wait" } else { "try" })
            .arg(ms(waiter_ttl))
            .arg(score.map(|s| s.to_string()).unwrap_or_default())
            .arg(floor.map(|f| f.to_string()).unwrap_or_default());
        if self.lock_delay_ms > 0 {
            let (epoch, quiet) = crate::keys::quiet_keys(&keys.lock, self.cluster);
            call.key(epoch).key(quiet).arg(self.lock_delay_ms);
        }
        let reply: Value = call.invoke_async(&mut c).await?;
        let items = match reply_items(reply) {
            Ok(items) => items,
            Err(f) => return Ok(Attempt::Foreign(f)),
        };
        Ok(match items.first().map(int) {
            Some(1) if !c.confirmed() => Attempt::Unacknowledged {
                acks: c.acks().unwrap_or(0),
            },
            Some(1) => Attempt::Acquired {
                token: items.get(1).map(int).unwrap_or(0).max(0) as u64,
            },
            _ => Attempt::Held {
                pttl_ms: items.get(1).map(int).unwrap_or(-2),
                counter: items.get(3).map(int).unwrap_or(0).max(0) as u64,
            },
        })
    }

    /// Releases our lock: `Ok(true)` released, `Ok(false)` not ours. The lock goes straight to
    /// the head of the queue, if any, as `handoff` says (see `lua/release.lua`): a single
    /// instance's head holds on it, a Redlock head once a quorum of masters granted it in one
    /// release.
    pub(crate) async fn release(
        &self,
        keys: &Keys,
        token: &str,
        handoff: Handoff,
    ) -> RedisResult<Result<bool, Foreign>> {
        self.release_as(keys, token, Some(handoff)).await
    }

    /// Gives back what a Redlock round that missed its quorum took here: released like
    /// [`Node::release`], but the head is only woken, never granted — a master handed to a
    /// waiter the other masters did not grant would split the next round too.
    pub(crate) async fn undo(
        &self,
        keys: &Keys,
        token: &str,
    ) -> RedisResult<Result<bool, Foreign>> {
        self.release_as(keys, token, None).await
    }

    /// Releases, granting the head as `grant` says (`None`: only waking it).
    async fn release_as(
        &self,
        keys: &Keys,
        token: &str,
        grant: Option<Handoff>,
    ) -> RedisResult<Result<bool, Foreign>> {
        let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let handoff = grant.unwrap_or_default();
        let mut c = self.conn();
        let reply: Value = RELEASE
            .key(&keys.lock)
            .key(&keys.queue)
            .key(&keys.qexp)
            .key(&keys.fence)
            .arg(token)
            .arg(&keys.channel)
            .arg(if grant.is_some() { "1" } else { "" })
            .arg(opt(handoff.floor))
            .arg(opt(handoff.release))
            .invoke_async(&mut c)
            .await?;
        Ok(flag(&reply))
    }

    /// Extends our lease: `Ok(true)` extended, `Ok(false)` not ours; an extension fewer
    /// replicas than `replicas=` acknowledged is an error (its outcome is not confirmed).
    pub(crate) async fn extend(
        &self,
        keys: &Keys,
        token: &str,
        ttl: Duration,
    ) -> RedisResult<Result<bool, Foreign>> {
        let mut c = self.acked();
        let reply: Value = EXTEND
            .key(&keys.lock)
            .arg(token)
            .arg(ms(ttl))
            .invoke_async(&mut c)
            .await?;
        c.check()?;
        Ok(flag(&reply))
    }

    /// Runs a permit script on the connection for grants and renewals (see [`Node::acked`]):
    /// the reply, and whether enough replicas acknowledged it.
    pub(crate) async fn invoke_acked(
        &self,
        call: &redis::ScriptInvocation<'_>,
    ) -> RedisResult<(Value, bool)> {
        let mut c = self.acked();
        let reply: Value = call.invoke_async(&mut c).await?;
        Ok((reply, c.confirmed()))
    }

    /// Leaves the waiter queue (foreign data there is left alone: nothing to report to a
    /// waiter that is going away).
    pub(crate) async fn leave(&self, keys: &Keys, token: &str) -> RedisResult<()> {
        let mut c = self.conn();
        let _: Value = LEAVE
            .key(&keys.lock)
            .key(&keys.queue)
            .key(&keys.qexp)
            .arg(token)
            .arg(&keys.channel)
            .invoke_async(&mut c)
            .await?;
        Ok(())
    }

    /// Raises the counter to `fence` and leaves the queue: the counter after the write.
    pub(crate) async fn writeback(
        &self,
        keys: &Keys,
        fence: u64,
        owner: &str,
    ) -> RedisResult<Result<u64, Foreign>> {
        let mut c = self.conn();
        let reply: Value = FENCE_WRITEBACK
            .key(&keys.fence)
            .key(&keys.queue)
            .key(&keys.qexp)
            .arg(fence)
            .arg(owner)
            .invoke_async(&mut c)
            .await?;
        if let Some(f) = foreign_in(&reply) {
            return Ok(Err(f));
        }
        Ok(Ok(match &reply {
            Value::Array(items) => items.get(1).map(int).unwrap_or(0).max(0) as u64,
            _ => 0,
        }))
    }

    /// Holder's (token, pttl), the fencing counter and the queue length, for `inspect`.
    pub(crate) async fn peek(&self, keys: &Keys) -> RedisResult<Result<Peek, Foreign>> {
        let mut c = self.conn();
        let reply: Value = PEEK
            .key(&keys.lock)
            .key(&keys.fence)
            .key(&keys.queue)
            .key(&keys.qexp)
            .invoke_async(&mut c)
            .await?;
        let items = match reply_items(reply) {
            Ok(items) => items,
            Err(f) => return Ok(Err(f)),
        };
        Ok(Ok(Peek {
            owner: text(items.first()),
            pttl_ms: items.get(1).map(int).unwrap_or(-2),
            counter: text(items.get(2)).and_then(|c| c.parse().ok()),
            queued: items.get(3).map(int).unwrap_or(0),
        }))
    }
}

/// What [`Node::force_release`] took: the holder's value and token.
#[derive(Debug, Clone)]
pub(crate) struct Taken {
    /// The lock key's value (owner token, and identity after a newline).
    pub value: String,
    /// The holder's fencing token (this node's counter).
    pub token: u64,
}

impl Node {
    /// An operator's forced release (`lua/break.lua`): what it took, `None` when nobody held
    /// the lock here.
    pub(crate) async fn force_release(
        &self,
        keys: &Keys,
    ) -> RedisResult<Result<Option<Taken>, Foreign>> {
        let mut c = self.conn();
        let reply: Value = BREAK
            .key(&keys.lock)
            .key(&keys.fence)
            .key(&keys.queue)
            .key(&keys.qexp)
            .arg(&keys.channel)
            .invoke_async(&mut c)
            .await?;
        let items = match reply_items(reply) {
            Ok(items) => items,
            Err(f) => return Ok(Err(f)),
        };
        Ok(Ok((items.first().map(int) == Some(1)).then(|| Taken {
            value: text(items.get(1)).unwrap_or_default(),
            token: text(items.get(2)).and_then(|t| t.parse().ok()).unwrap_or(0),
        })))
    }

    /// One `SCAN` step over the string keys matching `pattern`: the next cursor (0: done) and
    /// the keys.
    pub(crate) async fn scan(
        &self,
        cursor: u64,
        pattern: &str,
        count: usize,
    ) -> RedisResult<(u64, Vec<Vec<u8>>)> {
        let mut c = self.conn();
        redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(count)
            .arg("TYPE")
            .arg("string")
            .query_async(&mut c)
            .await
    }
}

/// One node's view of a lock, for `inspect`.
#[derive(Debug, Clone)]
pub(crate) struct Peek {
    /// The holder's token, if the key exists.
    pub owner: Option<String>,
    /// The key's remaining lease (negative: no key, or no expiry).
    pub pttl_ms: i64,
    /// The fencing counter, if there is one.
    pub counter: Option<u64>,
    /// Queued waiters.
    pub queued: i64,
}
