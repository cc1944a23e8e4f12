//! [`ZkConfig`]: ensemble, chroot and timeouts from a `zk://` URL (or the builder).

use std::time::Duration;

use lock_core::config::HostPort;
use lock_core::{DistlockUrl, LockError};

/// Everything a ZooKeeper lock client needs.
#[derive(Clone, Debug)]
pub struct ZkConfig {
    /// The ensemble members.
    pub hosts: Vec<HostPort>,
    /// Chroot (`/app`), or empty; it must exist.
    pub chroot: String,
    /// Session timeout: a crashed holder's lock is freed this long after it went silent.
    pub session_timeout: Duration,
    /// Bound on establishing a session.
    pub connect_timeout: Duration,
    /// Parent of lock nodes for relative names (default `/distlock`).
    pub base: String,
}

/// Parameters read from the URL.
pub const KNOWN_PARAMS: &[&str] = &["session_timeout", "connect_timeout", "base"];

impl ZkConfig {
    /// A configuration for an ensemble given as `host:port` pairs.
    pub fn new(hosts: Vec<HostPort>) -> Self {
        ZkConfig {
            hosts,
            chroot: String::new(),
            session_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            base: "/distlock".into(),
        }
    }

    /// Parses `zk://h1:p1,h2:p2[/chroot][?session_timeout=10s&connect_timeout=5s&base=/distlock]`.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] quoting the bad part.
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let u = DistlockUrl::parse(url, 2181)?;
        if u.scheme != "zk" && u.scheme != "zookeeper" {
            return Err(LockError::invalid_config(format!(
                "scheme {:?} in {:?} is not zk://",
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
        if u.password.is_some() {
            return Err(LockError::invalid_config(format!(
                "{:?}: passwords are not supported for ZooKeeper URLs (use a chroot and ACLs)",
                u.redacted()
            )));
        }
        let mut cfg = ZkConfig::new(u.hosts.clone());
        if !u.path.is_empty() {
            cfg.chroot = format!("/{}", u.path.trim_end_matches('/'));
        }
        let mut p = u.params();
        if let Some(d) = p.take_duration("session_timeout")? {
            cfg.session_timeout = d;
        }
        if let Some(d) = p.take_duration("connect_timeout")? {
            cfg.connect_timeout = d;
        }
        if let Some(b) = p.take("base") {
            cfg.base = b;
        }
        p.finish(KNOWN_PARAMS)?;
        if cfg.session_timeout < Duration::from_millis(500) {
            return Err(LockError::invalid_config(format!(
                "session_timeout {:?} in {:?} is too short",
                cfg.session_timeout,
                u.redacted()
            )));
        }
        crate::path::validate_absolute(&cfg.base)
            .and_then(|()| {
                if cfg.base.split('/').any(|s| crate::path::sequence_of(s).is_some()) {
                    Err("a path element is shaped like a lock contender node (`lock-` and 10 digits)")
                } else {
                    Ok(())
                }
            })
            .map_err(|why| {
                LockError::invalid_config(format!(
                    "base {:?} in {:?}: {why}",
                    cfg.base,
                    u.redacted()
                ))
            })?;
        if !cfg.chroot.is_empty() {
            crate::path::validate_absolute(&cfg.chroot).map_err(|why| {
                LockError::invalid_config(format!(
                    "chroot {:?} in {:?}: {why}",
                    cfg.chroot,
                    u.redacted()
                ))
            })?;
        }
        Ok(cfg)
    }

    /// The connect string for zookeeper-client (`h1:p1,h2:p2/chroot`).
    pub(crate) fn connect_string(&self) -> String {
        let hosts: Vec<String> = self.hosts.iter().map(|h| h.to_string()).collect();
        format!("{}{}", hosts.join(","), self.chroot)
    }
}
