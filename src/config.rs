//! [`LockConfig`]: the lock as a piece of application configuration (TOML, YAML, env).
//!
//! ```toml
//! [lock]
//! url = "postgres://app@db:5432/app?mode=row"
//! ttl = "30s"      # optional: default lease for acquisitions
//! wait = "10s"     # optional: default wait (absent = wait forever)
//! renew = true     # optional
//! ```
//! `ttl`, `wait` and `renew` may also be given as URL parameters (`…?ttl=30s&wait=10s`); the
//! fields win over the URL. They become the [`AcquireOptions`] returned by
//! [`LockConfig::options`]; the rest of the URL goes to the backend.

use std::time::Duration;

use distlock_core::backend::parse_duration;
use distlock_core::{AcquireOptions, LockError, SecretUrl};
use serde::Deserialize;

/// A lock URL plus optional acquisition defaults.
///
/// ```
/// use std::time::Duration;
/// use distlock::LockConfig;
///
/// // From a TOML file (any serde format works).
/// #[derive(serde::Deserialize)]
/// struct AppConfig {
///     lock: LockConfig,
/// }
/// let app: AppConfig = toml::from_str(r#"
///     [lock]
///     url = "postgres://app:s3cret@db:5432/app?mode=row"
///     wait = "10s"
/// "#).unwrap();
/// // The password never shows in Debug output or logs.
/// assert!(!format!("{:?}", app.lock).contains("s3cret"));
/// let opts = app.lock.options().unwrap();
/// assert_eq!(opts.wait, Some(Duration::from_secs(10)));
/// // distlock::connect_config(&app.lock) connects with these defaults.
/// ```
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LockConfig {
    /// The backend URL (see the crate docs for schemes). `Debug` shows it without its password.
    pub url: SecretUrl,
    /// Default lease, e.g. `"30s"`.
    #[serde(default)]
    pub ttl: Option<String>,
    /// Default wait, e.g. `"10s"`; absent = wait forever.
    #[serde(default)]
    pub wait: Option<String>,
    /// Renew the lease in the background (default true).
    #[serde(default)]
    pub renew: Option<bool>,
}

/// The URL parameters the facade itself consumes.
const FACADE_PARAMS: &[&str] = &["ttl", "wait", "renew"];

impl LockConfig {
    /// A config from a URL alone.
    pub fn from_url(url: impl Into<String>) -> Self {
        LockConfig {
            url: SecretUrl::new(url),
            ..Default::default()
        }
    }

    /// Splits the URL into the backend URL and the acquisition defaults.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] quoting a bad duration or boolean.
    pub fn resolve(&self) -> Result<(String, AcquireOptions), LockError> {
        let url = self.url.expose();
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, q),
            None => (url, ""),
        };
        let mut opts = AcquireOptions::new();
        let mut rest = Vec::new();
        let redacted = self.url.redacted();
        let dur = |k: &str, v: &str| {
            parse_duration(v).map_err(|e| {
                LockError::invalid_config(format!("parameter `{k}={v}` in {redacted:?}: {e}"))
            })
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "ttl" => opts = opts.ttl(dur(k, v)?),
                "wait" => opts = opts.wait(dur(k, v)?),
                "renew" => {
                    opts = opts.renew(match v {
                        "true" | "1" | "yes" => true,
                        "false" | "0" | "no" => false,
                        _ => {
                            return Err(LockError::invalid_config(format!(
                                "parameter `renew={v}` in {redacted:?} is not a boolean"
                            )))
                        }
                    })
                }
                _ => rest.push(pair),
            }
        }
        if let Some(t) = &self.ttl {
            opts = opts.ttl(dur("ttl", t)?);
        }
        if let Some(w) = &self.wait {
            opts = opts.wait(dur("wait", w)?);
        }
        if let Some(r) = self.renew {
            opts = opts.renew(r);
        }
        opts.validate()?;
        let url = if rest.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let _ = FACADE_PARAMS;
        Ok((url, opts))
    }

    /// The acquisition defaults this config describes.
    ///
    /// # Errors
    /// As [`LockConfig::resolve`].
    pub fn options(&self) -> Result<AcquireOptions, LockError> {
        Ok(self.resolve()?.1)
    }

    /// The default wait, if any.
    ///
    /// # Errors
    /// As [`LockConfig::resolve`].
    pub fn wait(&self) -> Result<Option<Duration>, LockError> {
        Ok(self.options()?.wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_toml_with_overrides() {
        #[derive(Deserialize)]
        struct App {
            lock: LockConfig,
        }
        let app: App = toml::from_str(
            "[lock]\nurl = \"redis://127.0.0.1:6379?ttl=5s&prefix=x:\"\nwait = \"2s\"\n",
        )
        .unwrap();
        let (url, opts) = app.lock.resolve().unwrap();
        assert_eq!(url, "redis://127.0.0.1:6379?prefix=x:");
        assert_eq!(opts.ttl, Duration::from_secs(5));
        assert_eq!(opts.wait, Some(Duration::from_secs(2)));
        assert!(toml::from_str::<App>("[lock]\nurl = \"x://\"\nbogus = 1\n").is_err());
    }

    #[test]
    fn bad_values_are_quoted_without_password() {
        let e = LockConfig::from_url("redis://u:hunter2@h:1?ttl=abc")
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(e.contains("ttl=abc") && !e.contains("hunter2"), "{e}");
        let e = LockConfig::from_url("redis://h?ttl=0s")
            .resolve()
            .unwrap_err();
        assert!(matches!(e, LockError::InvalidConfig(_)));
    }
}
