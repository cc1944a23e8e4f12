//! [`ZkConfig`]: ensemble, chroot and timeouts from a `zk://` URL (or the builder).

use std::time::Duration;

use distlock_core::backend::credentials::{self, TlsFiles};
use distlock_core::backend::url::HostPort;
use distlock_core::backend::DistlockUrl;
use distlock_core::LockError;

/// Everything a ZooKeeper lock client needs.
#[derive(Clone)]
pub struct ZkConfig {
    /// The ensemble members.
    pub hosts: Vec<HostPort>,
    /// Chroot (`/app`), or empty; it must exist.
    pub chroot: String,
    /// Session timeout: a crashed holder's lock is freed this long after it went silent. It
    /// also sets how long a held guard stays valid between checks and the store stalls it rides
    /// out ([`ZkConfig::stall_tolerance`]).
    pub session_timeout: Duration,
    /// Bound on establishing a session.
    pub connect_timeout: Duration,
    /// Parent of lock nodes for relative names (default `/distlock`).
    pub base: String,
    /// Digest user (with [`ZkConfig::with_digest`]): the session authenticates as it, and the
    /// nodes distlock creates are writable by that identity only (readable by anyone).
    pub user: Option<String>,
    /// The digest password (never printed).
    password: Option<String>,
    /// TLS (`zks://`): the CA to verify the servers with (required: there is no default) and
    /// the client certificate, if any. The servers are checked against the host names in the
    /// URL.
    pub tls: Option<TlsFiles>,
}

impl std::fmt::Debug for ZkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkConfig")
            .field("hosts", &self.hosts)
            .field("chroot", &self.chroot)
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("base", &self.base)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("tls", &self.tls)
            .finish()
    }
}

/// Parameters read from the URL.
pub const KNOWN_PARAMS: &[&str] = &[
    "session_timeout",
    "connect_timeout",
    "base",
    "password_file",
    "password_env",
    "ca",
    "cert",
    "key",
];

impl ZkConfig {
    /// A configuration for an ensemble given as `host:port` pairs.
    pub fn new(hosts: Vec<HostPort>) -> Self {
        ZkConfig {
            hosts,
            chroot: String::new(),
            session_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            base: "/distlock".into(),
            user: None,
            password: None,
            tls: None,
        }
    }

    /// Authenticates the session as digest `user` with `password` (ZooKeeper's `addauth
    /// digest user:password`); distlock's nodes then carry ACLs that only this identity may
    /// change or delete.
    pub fn with_digest(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self.password = Some(password.into());
        self
    }

    /// `user:password` for ZooKeeper's digest scheme, when set.
    pub(crate) fn digest(&self) -> Option<String> {
        Some(format!(
            "{}:{}",
            self.user.as_deref()?,
            self.password.as_deref()?
        ))
    }

    /// Parses `zk://[user:password@]h1:p1,h2:p2[/chroot][?session_timeout=10s&connect_timeout=5s&base=/distlock]`;
    /// the password may come from `password_file=` or `password_env=` instead. `zks://` is the
    /// same over TLS, with `ca=` (PEM, required) and `cert=` + `key=` for a server that asks
    /// for a client certificate.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] quoting the bad part.
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let u = DistlockUrl::parse(url, 2181)?;
        let tls_scheme = u.scheme == "zks";
        if u.scheme != "zk" && u.scheme != "zookeeper" && !tls_scheme {
            return Err(LockError::invalid_config(format!(
                "scheme {:?} in {:?} is not zk:// or zks://",
                u.scheme,
                u.redacted()
            )));
        }
        if u.hosts.is_empty() {
            return Err(LockError::invalid_config(format!(
                "{:?} names no host",
                u.redacted()
            )));
        }
        let mut cfg = ZkConfig::new(u.hosts.clone());
        if !u.path.is_empty() {
            cfg.chroot = format!("/{}", u.path.trim_end_matches('/'));
        }
        let mut p = u.params();
        let password =
            credentials::take_password(&mut p, u.password.clone()).map_err(|e| u.in_context(e))?;
        if u.user.is_some() != password.is_some() {
            return Err(u.in_context(LockError::invalid_config(
                "ZooKeeper digest authentication needs both a user and a password",
            )));
        }
        cfg.user = u.user.clone();
        cfg.password = password;
        if let Some(d) = p.take_duration("session_timeout")? {
            cfg.session_timeout = d;
        }
        if let Some(d) = p.take_duration("connect_timeout")? {
            cfg.connect_timeout = d;
        }
        if let Some(b) = p.take("base") {
            cfg.base = b;
        }
        let files = TlsFiles::take(&mut p).map_err(|e| u.in_context(e))?;
        cfg.tls = tls(tls_scheme, files).map_err(|e| u.in_context(e))?;
        p.finish(KNOWN_PARAMS)?;
        if cfg.session_timeout < Duration::from_millis(500) {
            return Err(LockError::invalid_config(format!(
                "session_timeout {:?} in {:?} is too short",
                cfg.session_timeout,
                u.redacted()
            )));
        }
        cfg.check_paths().map_err(|e| u.in_context(e))?;
        Ok(cfg)
    }

    /// Checks `base` (absolute, no element shaped like a contender node) and the chroot.
    fn check_paths(&self) -> Result<(), LockError> {
        crate::path::validate_absolute(&self.base)
            .and_then(|()| {
                if self.base.split('/').any(|s| crate::path::sequence_of(s).is_some()) {
                    Err("a path element is shaped like a lock contender node (`lock-` and 10 digits)")
                } else {
                    Ok(())
                }
            })
            .map_err(|why| LockError::invalid_config(format!("base {:?}: {why}", self.base)))?;
        if !self.chroot.is_empty() {
            crate::path::validate_absolute(&self.chroot).map_err(|why| {
                LockError::invalid_config(format!("chroot {:?}: {why}", self.chroot))
            })?;
        }
        Ok(())
    }

    /// How long a held guard stays valid after each check through the leader: a third of the
    /// session timeout (the argument is on `validity::leader_validity`). This, not `ttl`, is the
    /// lease a ZooKeeper guard can vouch for.
    pub fn guard_validity(&self) -> Duration {
        crate::validity::leader_validity(self.session_timeout)
    }

    /// The longest store stall — no reply at all: a disk fsync stall behind the ensemble's
    /// writes, a GC pause, a leader election, a partition — that a held guard with renewal on
    /// rides out: the [guard validity](Self::guard_validity), less the 1/20 of it by which a
    /// renewal that joins the session's latest `sync` may predate it, less one renewal interval
    /// (a third of the shorter of that validity and `ttl`, which is capped at half the session
    /// timeout), less the guard's safety margin (1 % of that `ttl` + 2 ms). A longer stall
    /// reports the guard lost (and its node is then deleted). With `session_timeout=2s` it is
    /// about 0.4 s whatever the `ttl`; 10 s sessions (the default) ride out 2 s with the default
    /// 30 s `ttl`. Choose the session timeout from the stalls the ensemble's disks show (fsync
    /// stalls of 0.84 s were measured on the test machine).
    pub fn stall_tolerance(&self, ttl: Duration) -> Duration {
        let validity = self.guard_validity();
        let joined = validity / crate::validity::JOIN_WITHIN;
        let ttl = crate::validity::renewal_ttl(ttl, self.session_timeout);
        let interval = validity.min(ttl) / 3;
        let margin = ttl / 100 + Duration::from_millis(2);
        validity.saturating_sub(joined + interval + margin)
    }

    /// The connect string for zookeeper-client (`h1:p1,h2:p2/chroot`).
    pub(crate) fn connect_string(&self) -> String {
        let hosts: Vec<String> = self.hosts.iter().map(|h| h.to_string()).collect();
        format!("{}{}", hosts.join(","), self.chroot)
    }
}

/// The TLS files of a `zks://` URL (`ca=` required); none for `zk://`, which refuses them.
fn tls(tls_scheme: bool, files: Option<TlsFiles>) -> Result<Option<TlsFiles>, LockError> {
    match (tls_scheme, files) {
        (true, Some(files)) if files.ca.is_some() => Ok(Some(files)),
        (true, _) => Err(LockError::invalid_config(
            "zks:// needs ca= (the CA that signed the servers' certificates)",
        )),
        (false, Some(_)) => Err(LockError::invalid_config(
            "ca=, cert= and key= are for TLS: use zks://",
        )),
        (false, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stall_tolerance_follows_the_session_not_the_ttl() {
        let cfg = |t: &str| ZkConfig::from_url(&format!("zk://h:1?session_timeout={t}")).unwrap();
        let ms = |d: Duration| d.as_millis();
        // 2 s: 667 ms validity, 33 ms joined, renewals every 222 ms, 12 ms margin.
        assert_eq!(ms(cfg("2s").stall_tolerance(Duration::from_secs(1))), 399);
        assert_eq!(ms(cfg("2s").stall_tolerance(Duration::from_secs(30))), 399);
        // 6 s: 2 s validity, 100 ms joined, renewals every 333 ms with a 1 s ttl.
        assert_eq!(ms(cfg("6s").stall_tolerance(Duration::from_secs(1))), 1554);
        // The defaults: 10 s session, 30 s ttl (capped at 5 s): renewals every 1.11 s.
        let d = ZkConfig::new(Vec::new());
        assert_eq!(ms(d.stall_tolerance(Duration::from_secs(30))), 2003);
        assert_eq!(ms(cfg("6s").guard_validity()), 2000);
    }
}
