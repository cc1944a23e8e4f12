//! Types that cannot leak a password through `Debug` or `Display`.
//!
//! A configuration struct that holds a [`Secret`] or a [`SecretUrl`] may derive `Debug`: the
//! secret prints as `***` (a URL with only its password replaced), so adding a field or
//! logging a config never prints a credential. The raw value is reached only through
//! `expose`, which is greppable.

use std::fmt;

use crate::backend::url::redact;

/// A value that prints as `***` in `Debug` and `Display`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> Self {
        Secret(value)
    }

    /// The secret itself: only for handing it to a store client, never for printing.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl<T> fmt::Display for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// A connection URL that may carry a password: `Debug` and `Display` show it with the password
/// replaced by `***` (`redis://app:***@host:6379`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// Wraps a URL.
    pub fn new(url: impl Into<String>) -> Self {
        SecretUrl(url.into())
    }

    /// The URL with its password: only for handing it to a store client, never for printing.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with its password replaced by `***`.
    pub fn redacted(&self) -> String {
        redact(&self.0)
    }
}

impl From<String> for SecretUrl {
    fn from(url: String) -> Self {
        SecretUrl(url)
    }
}

impl From<&str> for SecretUrl {
    fn from(url: &str) -> Self {
        SecretUrl(url.to_owned())
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.redacted(), f)
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl<'de> serde::Deserialize<'de> for SecretUrl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(SecretUrl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_the_password() {
        let u = SecretUrl::new("postgres://app:hunter2@db:5432/x?mode=row");
        for shown in [format!("{u:?}"), format!("{u}"), format!("{u:#?}")] {
            assert!(
                !shown.contains("hunter2") && shown.contains("app:***@db"),
                "{shown}"
            );
        }
        assert!(u.expose().contains("hunter2"));
        let s = Secret::new("hunter2".to_owned());
        assert_eq!(format!("{s:?} {s}"), "*** ***");
        assert_eq!(s.expose(), "hunter2");
    }
}
