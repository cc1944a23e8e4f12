//! [`EtcdConfig`]: endpoints, key prefix and timeouts from an `etcd://` URL.

use std::time::Duration;

use distlock_core::backend::url::HostPort;
use distlock_core::backend::DistlockUrl;
use distlock_core::LockError;

/// The port of an endpoint given without one (etcd's client port).
pub const DEFAULT_PORT: u16 = 2379;

/// Parameters read from the URL (`ttl`, `wait` and `renew` are the facade's).
pub const KNOWN_PARAMS: &[&str] = &["connect_timeout", "timeout"];

/// Everything an etcd lock client needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdConfig {
    /// The cluster members' client endpoints (plain HTTP/2; TLS is not supported yet).
    pub endpoints: Vec<HostPort>,
    /// Prepended, with a `/`, to every lock's key range; empty (the default) makes a lock
    /// named `jobs` use the keys `jobs/<lease>`, exactly as `etcdctl lock jobs` does. Never
    /// starts or ends with `/`.
    pub prefix: String,
    /// Bound on the first contact with the cluster.
    pub connect_timeout: Duration,
    /// Bound on each request's reply (not on waiting for another holder).
    pub timeout: Duration,
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
        }
    }

    /// Parses `etcd://h1:p1[,h2:p2…][/prefix][?connect_timeout=5s&timeout=5s]`.
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
    /// [`LockError::InvalidConfig`] quoting the bad part: another scheme, no host, a user or
    /// password (etcd authentication is not supported yet), an unknown parameter, a bad
    /// duration, a prefix with an empty segment (`a//b`) or a trailing `/`.
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let u = DistlockUrl::parse(url, DEFAULT_PORT)?;
        if u.scheme != "etcd" {
            return Err(LockError::invalid_config(format!(
                "scheme {:?} in {:?} is not etcd://",
                u.scheme,
                u.redacted()
            )));
        }
        if u.hosts.is_empty() {
            return Err(LockError::invalid_config(format!(
                "{:?} names no etcd endpoint (etcd://host:2379[,host:port…])",
                u.redacted()
            )));
        }
        if u.user.is_some() || u.password.is_some() {
            return Err(LockError::invalid_config(format!(
                "{:?}: etcd user authentication is not supported by distlock yet; drop the user and password",
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

    /// The endpoints as etcd-client takes them (`http://host:port`).
    pub(crate) fn endpoint_urls(&self) -> Vec<String> {
        self.endpoints
            .iter()
            .map(|h| format!("http://{h}"))
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
        for (bad, quoted) in [
            ("zk://h", "zk"),
            ("etcd://", "no etcd endpoint"),
            ("etcd://u:secret@h", "not supported"),
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
