//! URL helpers every backend shares: a multi-host URL parser, query parameters that must all
//! be understood, and password redaction.
//!
//! `scheme://[user[:password]@]host[:port][,host[:port]…][/path][?key=value&…]`
//!
//! The `url` crate rejects comma-separated host lists (ZooKeeper ensembles, Redlock masters),
//! so the authority is split here; the query is decoded with `url::form_urlencoded`.
//! [`DistlockUrl`]'s `Debug` and [`DistlockUrl::redacted`] never show the password.

use std::fmt;
use std::time::Duration;

use crate::backend::duration::parse_duration;
use crate::LockError;

/// One `host:port` of a URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// Port; the scheme's default when the URL gave none.
    pub port: u16,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A parsed distlock URL.
#[derive(Clone, PartialEq, Eq)]
pub struct DistlockUrl {
    /// The scheme, lower-cased (`redis`, `zk`, `postgres`…).
    pub scheme: String,
    /// User name, percent-decoded.
    pub user: Option<String>,
    /// Password, percent-decoded. Never printed.
    pub password: Option<String>,
    /// One or more hosts.
    pub hosts: Vec<HostPort>,
    /// The path without its leading `/` (database, chroot or db number), percent-decoded.
    pub path: String,
    /// Query parameters, decoded; see [`Params`] to consume them.
    pub query: Vec<(String, String)>,
    /// The original text with the password replaced by `***`.
    redacted: String,
}

impl fmt::Debug for DistlockUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DistlockUrl").field(&self.redacted).finish()
    }
}

impl fmt::Display for DistlockUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

/// Replaces the password of any `scheme://user:password@…` text with `***`.
pub fn redact(url: &str) -> String {
    let Some(after_scheme) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[after_scheme..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..after_scheme],
                    &userinfo[..colon],
                    &rest[at..]
                ),
                None => url.to_owned(),
            }
        }
        None => url.to_owned(),
    }
}

fn decode(part: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", part.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

impl DistlockUrl {
    /// Parses `text`; hosts without a port get `default_port`.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] quoting the bad part (with the password redacted).
    pub fn parse(text: &str, default_port: u16) -> Result<Self, LockError> {
        let redacted = redact(text);
        let bad = |why: String| LockError::invalid_config(format!("bad URL {redacted:?}: {why}"));
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| bad("expected scheme://host…".into()))?;
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-')
        {
            return Err(bad(format!("bad scheme {scheme:?}")));
        }
        let (before_query, query_text) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.find('/') {
            Some(i) => (&before_query[..i], &before_query[i + 1..]),
            None => (before_query, ""),
        };
        let (userinfo, hostlist) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(ui) => match ui.split_once(':') {
                Some((u, p)) => (Some(decode(u)), Some(decode(p))),
                None => (Some(decode(ui)), None),
            },
        };
        let mut hosts = Vec::new();
        if !hostlist.is_empty() {
            for part in hostlist.split(',') {
                hosts.push(parse_host_port(part, default_port).map_err(bad)?);
            }
        }
        let query = query_text
            .map(|q| {
                url::form_urlencoded::parse(q.as_bytes())
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect()
            })
            .unwrap_or_default();
        Ok(DistlockUrl {
            scheme: scheme.to_ascii_lowercase(),
            user: user.filter(|u| !u.is_empty()),
            password,
            hosts,
            path: decode(path),
            query,
            redacted,
        })
    }

    /// The URL text with the password replaced by `***`.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// `e` naming this URL (redacted) when it is an [`LockError::InvalidConfig`]: a store's
    /// own checks of a URL's parts say which URL they refused.
    pub fn in_context(&self, e: LockError) -> LockError {
        match e {
            LockError::InvalidConfig(m) => {
                LockError::invalid_config(format!("{m} (in {:?})", self.redacted))
            }
            other => other,
        }
    }

    /// The query as [`Params`] to consume one by one.
    pub fn params(&self) -> Params {
        Params {
            url: self.redacted.clone(),
            pairs: self.query.clone(),
            taken: vec![false; self.query.len()],
        }
    }
}

fn parse_host_port(part: &str, default_port: u16) -> Result<HostPort, String> {
    if part.is_empty() {
        return Err("empty host in host list".into());
    }
    let (host, port) = if let Some(rest) = part.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("unclosed '[' in host {part:?}"))?;
        match after.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if after.is_empty() => (h, None),
            None => return Err(format!("bad host {part:?}")),
        }
    } else {
        match part.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (part, None),
        }
    };
    if host.is_empty()
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
    {
        return Err(format!("bad host {host:?}"));
    }
    let port = match port {
        None => default_port,
        Some(p) => match p.parse::<u32>() {
            Ok(n) if (1..=65535).contains(&n) => n as u16,
            _ => return Err(format!("port {p:?} of host {host:?} is not in 1..=65535")),
        },
    };
    Ok(HostPort {
        host: host.to_owned(),
        port,
    })
}

/// Query parameters consumed one by one; [`Params::finish`] rejects whatever nobody consumed.
#[derive(Debug, Clone)]
pub struct Params {
    url: String,
    pairs: Vec<(String, String)>,
    taken: Vec<bool>,
}

impl Params {
    /// Takes the last value of `key`, if present.
    pub fn take(&mut self, key: &str) -> Option<String> {
        let mut found = None;
        for (i, (k, v)) in self.pairs.iter().enumerate() {
            if k == key {
                self.taken[i] = true;
                found = Some(v.clone());
            }
        }
        found
    }

    /// Takes `key` as a duration (`500ms`, `10s`).
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] quoting the parameter.
    pub fn take_duration(&mut self, key: &str) -> Result<Option<Duration>, LockError> {
        self.take(key)
            .map(|v| {
                parse_duration(&v).map_err(|e| {
                    LockError::invalid_config(format!(
                        "parameter `{key}={v}` in {:?}: {e}",
                        self.url
                    ))
                })
            })
            .transpose()
    }

    /// Takes `key` as an integer.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] quoting the parameter.
    pub fn take_u64(&mut self, key: &str) -> Result<Option<u64>, LockError> {
        self.take(key)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    LockError::invalid_config(format!(
                        "parameter `{key}={v}` in {:?} is not a non-negative integer",
                        self.url
                    ))
                })
            })
            .transpose()
    }

    /// Takes `key` as a boolean (`true/false/1/0/yes/no`).
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] quoting the parameter.
    pub fn take_bool(&mut self, key: &str) -> Result<Option<bool>, LockError> {
        self.take(key)
            .map(|v| match v.as_str() {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(LockError::invalid_config(format!(
                    "parameter `{key}={v}` in {:?} is not a boolean",
                    self.url
                ))),
            })
            .transpose()
    }

    /// The pairs nobody has taken yet (e.g. to pass on to a driver).
    pub fn remaining(&self) -> Vec<(String, String)> {
        self.pairs
            .iter()
            .zip(&self.taken)
            .filter(|(_, t)| !**t)
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Fails if a parameter was not consumed, naming it and listing the `known` ones.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] quoting the unknown parameter.
    pub fn finish(self, known: &[&str]) -> Result<(), LockError> {
        if let Some(((k, _), _)) = self.pairs.iter().zip(&self.taken).find(|(_, t)| !**t) {
            return Err(LockError::invalid_config(format!(
                "unknown parameter `{k}` in {:?}; known parameters: {}",
                self.url,
                known.join(", ")
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_multi_host_with_params() {
        let u = DistlockUrl::parse(
            "zk://127.0.0.1:2181,[::1]:2182,h3/app/x?session_timeout=10s",
            2181,
        )
        .unwrap();
        assert_eq!(u.scheme, "zk");
        assert_eq!(u.hosts.len(), 3);
        assert_eq!(u.hosts[1].host, "::1");
        assert_eq!(u.hosts[2].port, 2181);
        assert_eq!(u.path, "app/x");
        let mut p = u.params();
        assert_eq!(
            p.take_duration("session_timeout").unwrap(),
            Some(Duration::from_secs(10))
        );
        p.finish(&["session_timeout"]).unwrap();
    }

    #[test]
    fn password_never_shown() {
        let u = DistlockUrl::parse("redis://alice:s3cr%40t@h:1/0?bogus=1", 6379).unwrap();
        assert_eq!(u.password.as_deref(), Some("s3cr@t"));
        assert!(!format!("{u:?}").contains("s3cr"));
        assert!(!u.to_string().contains("s3cr"));
        let err = u.params().finish(&["ttl"]).unwrap_err().to_string();
        assert!(err.contains("bogus") && !err.contains("s3cr"), "{err}");
        let err = DistlockUrl::parse("redis://u:hunter2@h:99999", 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("99999") && !err.contains("hunter2"), "{err}");
    }

    #[test]
    fn bad_urls_are_invalid_config() {
        for bad in [
            "nourl",
            "redis://h:0",
            "redis://h:x",
            "redis://,h",
            "://h",
            "redis://ba d",
        ] {
            assert!(
                matches!(DistlockUrl::parse(bad, 1), Err(LockError::InvalidConfig(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn bad_param_values_are_quoted() {
        let u = DistlockUrl::parse("redis://h?ttl=abc&n=x&b=maybe", 1).unwrap();
        let mut p = u.params();
        assert!(p
            .take_duration("ttl")
            .unwrap_err()
            .to_string()
            .contains("ttl=abc"));
        assert!(p.take_u64("n").unwrap_err().to_string().contains("n=x"));
        assert!(p
            .take_bool("b")
            .unwrap_err()
            .to_string()
            .contains("b=maybe"));
    }
}
