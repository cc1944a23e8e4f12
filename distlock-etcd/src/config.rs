//! [`EtcdConfig`]: endpoints, key prefix, timeouts, TLS and credentials from an `etcd://` or
//! `etcds://` (TLS) URL.

use std::time::Duration;

use distlock_core::backend::credentials::{self, TlsFiles};
use distlock_core::backend::url::HostPort;
use distlock_core::backend::DistlockUrl;
use distlock_core::LockError;

/// The port of an endpoint given without one (etcd's client port).
pub const DEFAULT_PORT: u16 = 2379;

/// Parameters read from the URL (`ttl`, `wait` and `renew` are the facade's).
pub const KNOWN_PARAMS: &[&str] = &[
    "connect_timeout",
    "timeout",
    "ca",
    "cert",
    "key",
    "password_file",
    "password_env",
];

/// Everything an etcd lock client needs. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// The cluster members' client endpoints.
    pub endpoints: Vec<HostPort>,
    /// Prepended, with a `/`, to every lock's key range; empty (the default) makes a lock
    /// named `jobs` use the keys `jobs/<lease>`, exactly as `etcdctl lock jobs` does. Never
    /// starts or ends with `/`.
    pub prefix: String,
    /// Bound on the first contact with the cluster.
    pub connect_timeout: Duration,
    /// Bound on each request's reply (not on waiting for another holder).
    pub timeout: Duration,
    /// TLS to every endpoint, with these files (`None`: plain HTTP/2).
    pub tls: Option<TlsFiles>,
    /// etcd user (with [`EtcdConfig::with_password`]), for a cluster with authentication on.
    pub user: Option<String>,
    /// The user's password (never printed).
    password: Option<String>,
}

impl std::fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout", &self.timeout)
            .field("tls", &self.tls)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

impl EtcdConfig {
    /// A configuration for `endpoints` with the defaults: no prefix, 5 s connect timeout,
    /// 5 s request timeout.
    pub fn new(endpoints: Vec<HostPort>) -> Self {
        EtcdConfig {
            endpoints,
            prefix: String::new(),
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(5),
            tls: None,
            user: None,
            password: None,
        }
    }

    /// Sets the user and password for a cluster with authentication on.
    pub fn with_password(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self.password = Some(password.into());
        self
    }

    /// The user and password, when both are set.
    pub(crate) fn credentials(&self) -> Option<(&str, &str)> {
        Some((self.user.as_deref()?, self.password.as_deref()?))
    }

    /// Parses `etcd://[user[:password]@]h1:p1[,h2:p2…][/prefix][?connect_timeout=5s&timeout=5s]`,
    /// or `etcds://…` for TLS (`ca=`, `cert=`, `key=`); the password may come from
    /// `password_file=` or `password_env=` instead.
    ///
    /// ```
    /// let cfg = distlock_etcd::EtcdConfig::from_url("etcd://10.0.0.1,10.0.0.2:2479/app/locks").unwrap();
    /// assert_eq!(cfg.endpoints.len(), 2);
    /// assert_eq!(cfg.endpoints[0].port, 2379);
    /// assert_eq!(cfg.prefix, "app/locks");
    /// assert!(distlock_etcd::EtcdConfig::from_url("etcd://h?lease=3s").is_err());
    /// ```
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] quoting the bad part: another scheme, no host, a password
    /// without a user (or a user without one), TLS files on `etcd://`, an unknown parameter, a
    /// bad duration, a prefix with an empty segment (`a//b`) or a trailing `/`.
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let u = DistlockUrl::parse(url, DEFAULT_PORT)?;
        let tls_scheme = match u.scheme.as_str() {
            "etcd" => false,
            "etcds" => true,
            _ => {
                return Err(LockError::invalid_config(format!(
                    "scheme {:?} in {:?} is not etcd:// (or etcds:// for TLS)",
                    u.scheme,
                    u.redacted()
                )))
            }
        };
        if u.hosts.is_empty() {
            return Err(LockError::invalid_config(format!(
                "{:?} names no etcd endpoint (etcd://host:2379[,host:port…])",
                u.redacted()
            )));
        }
        let mut cfg = EtcdConfig::new(u.hosts.clone());
        if !u.path.is_empty() {
            if u.path.ends_with('/') || u.path.split('/').any(str::is_empty) {
                return Err(LockError::invalid_config(format!(
                    "key prefix {:?} in {:?} has an empty segment or a trailing '/'",
                    u.path,
                    u.redacted()
                )));
            }
            cfg.prefix = u.path.clone();
        }
        let mut p = u.params();
        let in_context = |m: String| u.in_context(LockError::invalid_config(m));
        let password =
            credentials::take_password(&mut p, u.password.clone()).map_err(|e| u.in_context(e))?;
        cfg.user = u.user.clone();
        cfg.password = password;
        if cfg.user.is_some() != cfg.password.is_some() {
            return Err(in_context(
                "etcd authentication needs both a user and a password".into(),
            ));
        }
        let files = TlsFiles::take(&mut p).map_err(|e| u.in_context(e))?;
        cfg.tls = match (tls_scheme, files) {
            (true, files) => Some(files.unwrap_or_default()),
            (false, Some(_)) => {
                return Err(in_context(
                    "ca=, cert= and key= are for TLS: use etcds://".into(),
                ))
            }
            (false, None) => None,
        };
        if let Some(d) = p.take_duration("connect_timeout")? {
            cfg.connect_timeout = d;
        }
        if let Some(d) = p.take_duration("timeout")? {
            cfg.timeout = d;
        }
        p.finish(KNOWN_PARAMS)?;
        for (what, d) in [
            ("connect_timeout", cfg.connect_timeout),
            ("timeout", cfg.timeout),
        ] {
            if d < Duration::from_millis(100) {
                return Err(LockError::invalid_config(format!(
                    "{what} {d:?} in {:?} is too short (at least 100ms)",
                    u.redacted()
                )));
            }
        }
        Ok(cfg)
    }

    /// The endpoints as etcd-client takes them (`http://host:port`, `https://` with TLS).
    pub(crate) fn endpoint_urls(&self) -> Vec<String> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        self.endpoints
            .iter()
            .map(|h| format!("{scheme}://{h}"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let c = EtcdConfig::from_url("etcd://127.0.0.1:12479,127.0.0.1:12489?timeout=2s").unwrap();
        assert_eq!(
            c.endpoint_urls(),
            ["http://127.0.0.1:12479", "http://127.0.0.1:12489"]
        );
        assert_eq!(c.timeout, Duration::from_secs(2));
        assert_eq!(c.prefix, "");
        let s = EtcdConfig::from_url("etcds://app:secret@localhost:2379?ca=/ca.pem").unwrap();
        assert_eq!(s.endpoint_urls(), ["https://localhost:2379"]);
        assert_eq!(s.credentials(), Some(("app", "secret")));
        assert!(!format!("{s:?}").contains("secret"));
        for (bad, quoted) in [
            ("zk://h", "zk"),
            ("etcd://", "no etcd endpoint"),
            ("etcd://u@h", "both a user and a password"),
            ("etcd://h?ca=/x.pem", "etcds://"),
            ("etcd://u:secret@h?password_env=X", "more than once"),
            ("etcd://h?session_timeout=1s", "session_timeout"),
            ("etcd://h?timeout=soon", "soon"),
            ("etcd://h/a//b", "empty segment"),
            ("etcd://h/a/", "trailing"),
            ("etcd://h?connect_timeout=1ms", "too short"),
        ] {
            let e = EtcdConfig::from_url(bad).unwrap_err();
            assert!(matches!(e, LockError::InvalidConfig(_)), "{bad}: {e}");
            assert!(e.to_string().contains(quoted), "{bad}: {e}");
            assert!(!e.to_string().contains("secret"), "{e}");
        }
    }
}
