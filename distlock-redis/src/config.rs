//! [`RedisConfig`]: nodes, credentials, key prefix, timeouts and the eviction-policy check
//! from a `redis://` or `redlock://` URL (or the builder).
//!
//! # URL parameters
//! * `rediss://` (single) or `redlock://…?tls=on`: TLS. `ca=PATH` verifies the servers against
//!   that CA (PEM) instead of the system's roots; `cert=PATH&key=PATH` presents a client
//!   certificate. The server name checked is the URL's host.
//! * `password_file=PATH` or `password_env=VAR`: the password from a file or the environment
//!   instead of the URL (with the URL's user, for an ACL user).
//! * `redis+sentinel://[user:pass@]s1:p1,s2:p2,…/MASTER[/db]`: the master of the Sentinel set
//!   `MASTER`, found by asking the sentinels (default port 26379) in order; distlock checks the
//!   master with `ROLE`, asks the sentinels again every 500 ms and after an unreachable master,
//!   and follows a failover (wake-ups re-subscribe on the new master). The user and password
//!   are the data nodes' (sentinels are asked without authentication). No TLS to sentinels yet.
//! * `redis+cluster://[user:pass@]n1:p1,n2:p2,…`: a Redis Cluster, reached through any of
//!   the seed nodes; redis-rs follows `MOVED`/`ASK` redirections and topology changes. Every
//!   key of one lock shares the lock key's hash slot (`keys.rs`), so each script runs on the
//!   slot's primary. A primary failover costs what a Sentinel failover costs, and is
//!   mitigated the same ways (below). No TLS to a cluster yet; `ls` is not offered (it would
//!   see one node).
//! * `replicas=N` (single, Sentinel or Cluster): a grant or renewal counts only once `N` replicas have
//!   acknowledged it (`WAIT N timeout` in the same pipeline as the script); one acknowledged
//!   by fewer is given back and reported as [`LockError::Unavailable`]. It keeps a lock from
//!   being lost by a failover that promotes a replica the grant had not reached. `WAIT` holds
//!   up the connection it goes on: while a replica lags, other calls to that master wait too.
//! * `lock_delay=DUR` (single, Sentinel or Cluster): a master distlock has not granted on before (a
//!   promoted replica, or a restarted server that lost its data) grants nothing for `DUR`
//!   (make it at least the longest lease in use), so a holder whose grant the failover lost
//!   has run out of lease before anyone else is granted. Recorded in the server's keys
//!   `distlock\0epoch` (its run id) and `distlock\0quiet`; the first lock on a fresh server
//!   waits `DUR` too. On a cluster the record is per hash slot (`keys.rs`): the first grant in
//!   each slot on a primary not granted on before (a promoted replica, a resharded slot's new
//!   primary) waits `DUR`.
//! * `prefix=…`: prepended to every lock name to form its key (default empty). It must not
//!   contain a NUL byte: distlock's own keys beside a lock are told apart from lock keys by one
//!   (see the crate's key layout).
//! * `timeout=3s`: bound on connecting and on each command's reply.
//! * `eviction=refuse|warn` (default `refuse`): what to do when a server's `maxmemory-policy`
//!   is not `noeviction`. Every other policy can evict keys: `allkeys-*` any key, `volatile-*`
//!   any key with an expiry, and every held lock key has one. An evicted lock key means two
//!   holders at once, silently; an evicted fencing counter is survived only through the clock
//!   floor. `refuse` fails `connect` with [`LockError::InvalidConfig`] naming the server, the
//!   policy and the fix (`CONFIG SET maxmemory-policy noeviction`, and the same in
//!   `redis.conf`); `warn` connects and logs a `tracing::warn!` instead. The policy is read with
//!   `CONFIG GET maxmemory-policy` from every server (each Redlock master, at connect or, for a
//!   master that was down then, before its first lock); a server where `CONFIG` is disabled,
//!   renamed or not permitted to the user (managed services) has an unknown policy: distlock
//!   connects and warns that it could not check. Any other value is `InvalidConfig`.

use std::fmt;
use std::time::Duration;

use distlock_core::backend::credentials::{self, TlsFiles};
use distlock_core::backend::url::HostPort;
use distlock_core::backend::DistlockUrl;
use distlock_core::LockError;

/// Single instance or Redlock quorum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One Redis server.
    Single,
    /// N independent masters (N odd, ≥ 3), quorum N/2+1.
    Redlock,
    /// The master of a Redis Sentinel set (the nodes are the sentinels).
    Sentinel,
    /// A Redis Cluster (the nodes are seeds; every key of one lock lives in one hash slot).
    Cluster,
}

/// What `connect` does about a server whose `maxmemory-policy` may evict lock keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EvictionCheck {
    /// Fail with [`LockError::InvalidConfig`] (the default).
    #[default]
    Refuse,
    /// Connect anyway and log a warning.
    Warn,
}

/// Test-only knobs: not part of the API, never set them outside distlock's own tests (they
/// break the guarantees on purpose, to reproduce faults deterministically).
#[doc(hidden)]
#[derive(Clone, Debug, Default)]
pub struct TestHooks {
    /// Every acquisition uses this owner token instead of a fresh random one.
    pub owner_token: Option<String>,
    /// This client's clock (Redlock token floor and queue score) runs this far behind.
    pub clock_behind: std::time::Duration,
    /// How long a Redlock waiter some masters granted waits for the rest of the release's
    /// grants (`None`: the built-in 50 ms), so a test can tell a wait that ran out from one
    /// that ended early by far more than a loaded machine's stalls.
    pub grant_gather: Option<std::time::Duration>,
}

/// Everything a Redis lock client needs. `Debug` never shows the password.
#[derive(Clone)]
pub struct RedisConfig {
    /// Single or Redlock.
    pub topology: Topology,
    /// The server(s); for Sentinel, the sentinels.
    pub nodes: Vec<HostPort>,
    /// Sentinel: the name of the master set the sentinels watch.
    pub master_name: Option<String>,
    /// Replicas that must acknowledge a grant or renewal (`WAIT`; 0: none).
    pub replicas: u32,
    /// After a failover or a restart: no grants on the new master for this long.
    pub lock_delay: Option<Duration>,
    /// Database number.
    pub db: i64,
    /// ACL user, if any.
    pub user: Option<String>,
    /// Password, if any (never printed).
    password: Option<String>,
    /// Prepended to every lock name to form the key (default empty, so a redis-py `Lock(name)`
    /// and ours use the same key).
    pub prefix: String,
    /// Bound on connecting and on each command's reply.
    pub timeout: Duration,
    /// What to do about a server whose `maxmemory-policy` may evict lock keys.
    pub eviction: EvictionCheck,
    /// TLS to every server, with these files (`None`: plain TCP).
    pub tls: Option<TlsFiles>,
    /// Test-only knobs (see [`TestHooks`]).
    #[doc(hidden)]
    pub test_hooks: TestHooks,
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("topology", &self.topology)
            .field("nodes", &self.nodes)
            .field("master_name", &self.master_name)
            .field("replicas", &self.replicas)
            .field("lock_delay", &self.lock_delay)
            .field("db", &self.db)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("eviction", &self.eviction)
            .field("tls", &self.tls)
            .finish()
    }
}

/// Parameters read from the URL.
pub const KNOWN_PARAMS: &[&str] = &[
    "prefix",
    "timeout",
    "eviction",
    "tls",
    "ca",
    "cert",
    "key",
    "password_file",
    "password_env",
    "replicas",
    "lock_delay",
];

impl RedisConfig {
    /// A single-instance configuration for `host:port`.
    pub fn single(host: &str, port: u16) -> Self {
        RedisConfig {
            topology: Topology::Single,
            nodes: vec![HostPort {
                host: host.to_owned(),
                port,
            }],
            master_name: None,
            replicas: 0,
            lock_delay: None,
            db: 0,
            user: None,
            password: None,
            prefix: String::new(),
            timeout: Duration::from_secs(3),
            eviction: EvictionCheck::Refuse,
            tls: None,
            test_hooks: TestHooks::default(),
        }
    }

    /// Sets the password (and optional ACL user).
    pub fn with_auth(mut self, user: Option<String>, password: Option<String>) -> Self {
        self.user = user;
        self.password = password;
        self
    }

    /// Parses `redis://[user:pass@]host:port[/db][?prefix=…&timeout=…&eviction=…]`,
    /// `rediss://…` (TLS), `redlock://h1:p1,h2:p2,h3:p3[?…]` (TLS with `tls=on`) or
    /// `redis+sentinel://s1:p1,s2:p2/MASTER[/db][?…]`.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] quoting the bad part (never the password).
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let sentinel = url.starts_with("redis+sentinel://");
        let u = DistlockUrl::parse(url, if sentinel { 26379 } else { 6379 })?;
        let in_context = |e| u.in_context(e);
        let (topology, tls_scheme) = topology(&u.scheme).map_err(in_context)?;
        if u.hosts.is_empty() {
            return Err(in_context(LockError::invalid_config("no host named")));
        }
        let (master_name, db) = master_and_db(&u.path, sentinel).map_err(in_context)?;
        let mut p = u.params();
        let prefix = p.take("prefix").unwrap_or_default();
        let timeout = p
            .take_duration("timeout")?
            .unwrap_or(Duration::from_secs(3));
        let eviction = match p.take("eviction").as_deref() {
            None | Some("refuse") => EvictionCheck::Refuse,
            Some("warn") => EvictionCheck::Warn,
            Some(other) => {
                return Err(in_context(LockError::invalid_config(format!(
                "parameter `eviction={other}`: use eviction=refuse (the default) or eviction=warn"
            ))))
            }
        };
        let password =
            credentials::take_password(&mut p, u.password.clone()).map_err(in_context)?;
        let replicas = p.take("replicas").map_or(Ok(0), |n| {
            n.parse::<u32>().map_err(|_| {
                in_context(LockError::invalid_config(format!(
                    "parameter `replicas={n}` is not a replica count"
                )))
            })
        })?;
        let lock_delay = p.take_duration("lock_delay")?;
        let tls_param = p.take_bool("tls")?;
        let files = TlsFiles::take(&mut p).map_err(in_context)?;
        let tls = tls(tls_scheme, topology, tls_param, files).map_err(in_context)?;
        p.finish(KNOWN_PARAMS)?;
        let cfg = RedisConfig {
            topology,
            nodes: u.hosts.clone(),
            master_name,
            replicas,
            lock_delay,
            db,
            user: u.user.clone(),
            password,
            prefix,
            timeout,
            eviction,
            tls,
            test_hooks: TestHooks::default(),
        };
        cfg.validate().map_err(in_context)?;
        Ok(cfg)
    }

    /// Checks the node count (one for single, an odd number ≥ 3 for Redlock) and that the
    /// prefix has no NUL byte.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`].
    pub fn validate(&self) -> Result<(), LockError> {
        if self.prefix.contains('\0') {
            return Err(LockError::invalid_config(format!(
                "prefix {:?} contains a NUL byte: distlock keeps its own keys apart from lock keys by a NUL, so a prefix must not contain one",
                self.prefix
            )));
        }
        let n = self.nodes.len();
        match self.topology {
            Topology::Single if n != 1 => Err(LockError::invalid_config(format!(
                "redis:// takes exactly one host, got {n}; use redlock:// for several masters"
            ))),
            Topology::Redlock if n < 3 || n.is_multiple_of(2) => Err(LockError::invalid_config(
                format!("Redlock needs an odd number of at least 3 independent masters, got {n}"),
            )),
            Topology::Redlock if self.replicas > 0 || self.lock_delay.is_some() => {
                Err(LockError::invalid_config(
                    "replicas= and lock_delay= are for a master with replicas (redis://, rediss://, \
                     redis+sentinel://, redis+cluster://): Redlock's masters are independent, without replicas",
                ))
            }
            Topology::Cluster if n == 0 => Err(LockError::invalid_config(
                "redis+cluster:// needs at least one seed node",
            )),
            Topology::Cluster if self.db != 0 => Err(LockError::invalid_config(
                "a Redis Cluster has database 0 only",
            )),
            Topology::Sentinel
                if n == 0 || self.master_name.as_deref().unwrap_or("").is_empty() =>
            {
                Err(LockError::invalid_config(
                    "a Sentinel configuration needs at least one sentinel and a master name",
                ))
            }
            _ => Ok(()),
        }
    }

    /// The masters that must agree: N/2 + 1 for Redlock, else the one master.
    pub fn quorum(&self) -> usize {
        match self.topology {
            Topology::Redlock => self.nodes.len() / 2 + 1,
            Topology::Single | Topology::Sentinel | Topology::Cluster => 1,
        }
    }

    /// The redis-rs connection URL of node `i` (contains the password: never print it).
    pub(crate) fn node_url(&self, i: usize) -> String {
        self.server_url(&self.nodes[i])
    }

    /// The redis-rs connection URL of the data server at `addr` (contains the password).
    pub(crate) fn server_url(&self, addr: &HostPort) -> String {
        let enc = credentials::percent_encode;
        let auth = match (&self.user, &self.password) {
            (Some(u), Some(p)) => format!("{}:{}@", enc(u), enc(p)),
            (None, Some(p)) => format!(":{}@", enc(p)),
            (Some(u), None) => format!("{}@", enc(u)),
            (None, None) => String::new(),
        };
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://{auth}{addr}/{}", self.db)
    }
}

/// The topology a URL scheme names, and whether the scheme itself is TLS (`rediss`).
fn topology(scheme: &str) -> Result<(Topology, bool), LockError> {
    Ok(match scheme {
        "redis" => (Topology::Single, false),
        "rediss" => (Topology::Single, true),
        "redlock" => (Topology::Redlock, false),
        "redis+sentinel" => (Topology::Sentinel, false),
        "redis+cluster" => (Topology::Cluster, false),
        other => {
            return Err(LockError::invalid_config(format!(
                "scheme {other:?} is not a Redis scheme (redis, rediss, redlock, redis+sentinel, redis+cluster)"
            )))
        }
    })
}

/// A URL path's master set name (Sentinel: `/MASTER[/db]`) and database number.
fn master_and_db(path: &str, sentinel: bool) -> Result<(Option<String>, i64), LockError> {
    let (master, db) = match (sentinel, path.split_once('/')) {
        (false, _) => (None, path),
        (true, Some((m, db))) => (Some(m), db),
        (true, None) => (Some(path), ""),
    };
    if master == Some("") {
        return Err(LockError::invalid_config(
            "no master set named: redis+sentinel://HOSTS/MASTER_NAME",
        ));
    }
    let db = match db {
        "" => 0,
        db => db
            .parse::<i64>()
            .map_err(|_| LockError::invalid_config(format!("database {db:?} is not a number")))?,
    };
    Ok((master.map(str::to_owned), db))
}

/// Whether the connection is TLS, from the scheme, the topology and `tls=`, with the CA and
/// client certificate files (`ca=`, `cert=`, `key=`) only where it is.
fn tls(
    tls_scheme: bool,
    topology: Topology,
    tls_param: Option<bool>,
    files: Option<TlsFiles>,
) -> Result<Option<TlsFiles>, LockError> {
    let refuse = |m: &str| Err(LockError::invalid_config(m));
    match (tls_scheme, topology, tls_param) {
        (true, _, Some(false)) => refuse("rediss:// is TLS: drop tls=off or use redis://"),
        (false, Topology::Single, Some(true)) => {
            refuse("a single server over TLS is rediss://, not redis://…?tls=on")
        }
        (_, Topology::Cluster, Some(true)) => refuse("TLS to a Redis Cluster is not supported yet"),
        (_, Topology::Sentinel, Some(true)) => {
            refuse("TLS to a Sentinel set is not supported yet: use rediss:// to the master")
        }
        (true, _, _) | (_, Topology::Redlock, Some(true)) => Ok(Some(files.unwrap_or_default())),
        _ if files.is_some() => {
            refuse("ca=, cert= and key= are for TLS: use rediss:// (or redlock://…&tls=on)")
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates() {
        let c = RedisConfig::from_url("redis://:s3cret@127.0.0.1:16379/2?prefix=locks:").unwrap();
        assert_eq!(
            (c.db, c.prefix.as_str(), c.nodes[0].port),
            (2, "locks:", 16379)
        );
        assert!(!format!("{c:?}").contains("s3cret"));
        let r = RedisConfig::from_url("redlock://a:1,b:2,c:3").unwrap();
        assert_eq!(r.quorum(), 2);
        assert_eq!(c.eviction, EvictionCheck::Refuse);
        let w = RedisConfig::from_url("redis://h?eviction=warn").unwrap();
        assert_eq!(w.eviction, EvictionCheck::Warn);
        let s = RedisConfig::from_url(
            "redis+sentinel://:pw@a,b:2/mymaster/3?replicas=1&lock_delay=20s",
        )
        .unwrap();
        assert_eq!(s.topology, Topology::Sentinel);
        assert_eq!(s.master_name.as_deref(), Some("mymaster"));
        assert_eq!((s.nodes[0].port, s.nodes[1].port, s.db), (26379, 2, 3));
        assert_eq!(
            (s.replicas, s.lock_delay),
            (1, Some(Duration::from_secs(20)))
        );
        assert_eq!(s.quorum(), 1);
        for (bad, quoted) in [
            ("redlock://a:1,b:2", "got 2"),
            ("redlock://a:1,b:2,c:3,d:4", "got 4"),
            ("redis://u:hunter2@h:1/x", "\"x\""),
            ("redis://h?ttl=abc", "ttl"),
            ("redis://h?timeout=abc", "timeout=abc"),
            ("redis://a:1,b:2", "exactly one"),
            ("redis://h?prefix=a%00b", "NUL"),
            ("redis://h?eviction=maybe", "eviction=maybe"),
            ("redis+sentinel://a:1,b:2", "no master set"),
            ("redis+cluster://a:1,b:2/3", "database 0"),
            ("redis+cluster://a:1?tls=on", "not supported"),
            ("redis+sentinel://a:1/m/x", "\"x\""),
            ("redis+sentinel://a:1/m?tls=on", "not supported"),
            ("redis://h?replicas=two", "replicas=two"),
            ("redlock://a:1,b:2,c:3?replicas=1", "master with replicas"),
            (
                "redlock://a:1,b:2,c:3?lock_delay=5s",
                "master with replicas",
            ),
        ] {
            let e = RedisConfig::from_url(bad).unwrap_err();
            assert!(matches!(e, LockError::InvalidConfig(_)), "{bad}");
            assert!(e.to_string().contains(quoted), "{bad}: {e}");
            assert!(!e.to_string().contains("hunter2"));
        }
    }
}
