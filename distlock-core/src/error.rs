//! The one backend-neutral error type, [`LockError`].
//!
//! Every message names the lock (where there is one), the backend, and what to do next.
//! Backends keep their store errors private and map them in one place each.

use std::time::Duration;

/// A boxed store error kept as the `source` of a [`LockError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong when taking, holding or releasing a distributed lock.
///
/// `#[non_exhaustive]`: match the variants you handle and keep a wildcard arm.
/// [`LockError::is_retryable`] tells whether trying again later can succeed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock was not acquired within the caller's `wait`.
    #[error("timed out after {waited:?} waiting for lock `{name}` on {backend}: another holder kept it; retry later or raise `wait`")]
    Timeout {
        /// The lock name.
        name: String,
        /// The backend label, e.g. `postgres-row`.
        backend: String,
        /// How long the caller waited.
        waited: Duration,
    },
    /// The lock name breaks the name rules (see [`crate::backend::name`]) or cannot be mapped to the store.
    #[error("invalid lock name {name}: {reason}")]
    InvalidName {
        /// A short, escaped preview of the offending name (never more than 64 characters).
        name: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// A holder (participant) identity breaks the identity rules
    /// ([`crate::options::validate_identity`]).
    #[error("invalid identity {identity}: {reason}")]
    InvalidIdentity {
        /// A short, escaped preview of the offending identity.
        identity: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// A URL, option or setting is wrong; the message quotes the offending part
    /// (passwords are never included).
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The store could not be reached or answered too few (e.g. fewer than a Redlock quorum).
    /// Retriable.
    #[error("{backend} is unavailable{}: {message}; check that the store is running and reachable, then retry", lock_suffix(.name))]
    Unavailable {
        /// The backend label.
        backend: String,
        /// The lock concerned, if any.
        name: Option<String>,
        /// What failed.
        message: String,
        /// The store error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// Release or extend of a lock this guard no longer holds (it expired or was taken over).
    /// Nothing was changed in the store.
    #[error("lock `{name}` on {backend} is not held by this guard any more: {reason}")]
    NotHeld {
        /// The lock name.
        name: String,
        /// The backend label.
        backend: String,
        /// Why the store says so.
        reason: String,
    },
    /// The lock was lost while held (lease expired unrenewed, session expired, connection gone,
    /// or the lock was removed by someone else). Stop writing under its fencing token.
    #[error("lock `{name}` on {backend} was lost: {reason}; stop the work it protects")]
    Lost {
        /// The lock name.
        name: String,
        /// The backend label.
        backend: String,
        /// Why it was lost.
        reason: String,
    },
    /// The backend cannot do this operation at all (e.g. `inspect` on a store that cannot tell
    /// who holds a lock). Not retryable: choose another backend or operation.
    #[error("{backend} does not support {operation}")]
    Unsupported {
        /// The backend label.
        backend: String,
        /// The operation asked for.
        operation: String,
    },
    /// Any other store error.
    #[error("{backend} failed{}: {message}", lock_suffix(.name))]
    Backend {
        /// The backend label.
        backend: String,
        /// The lock concerned, if any.
        name: Option<String>,
        /// What failed.
        message: String,
        /// The store error.
        #[source]
        source: Option<BoxError>,
    },
}

fn lock_suffix(name: &Option<String>) -> String {
    match name {
        Some(n) => format!(" for lock `{n}`"),
        None => String::new(),
    }
}

impl LockError {
    /// Whether retrying the same call later can succeed (timeouts and unreachable stores).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LockError::Timeout { .. } | LockError::Unavailable { .. }
        )
    }

    /// An [`LockError::Unavailable`] with a store error as its source.
    pub fn unavailable(
        backend: impl Into<String>,
        name: Option<&str>,
        message: impl Into<String>,
        source: impl Into<Option<BoxError>>,
    ) -> Self {
        LockError::Unavailable {
            backend: backend.into(),
            name: name.map(str::to_owned),
            message: message.into(),
            source: source.into(),
        }
    }

    /// A [`LockError::Backend`] with a store error as its source.
    pub fn backend(
        backend: impl Into<String>,
        name: Option<&str>,
        message: impl Into<String>,
        source: impl Into<Option<BoxError>>,
    ) -> Self {
        LockError::Backend {
            backend: backend.into(),
            name: name.map(str::to_owned),
            message: message.into(),
            source: source.into(),
        }
    }

    /// A [`LockError::NotHeld`].
    pub fn not_held(name: &str, backend: impl Into<String>, reason: impl Into<String>) -> Self {
        LockError::NotHeld {
            name: name.to_owned(),
            backend: backend.into(),
            reason: reason.into(),
        }
    }

    /// A [`LockError::Timeout`].
    pub fn timeout(name: &str, backend: impl Into<String>, waited: Duration) -> Self {
        LockError::Timeout {
            name: name.to_owned(),
            backend: backend.into(),
            waited,
        }
    }

    /// A [`LockError::InvalidName`]; the name is shown as a short escaped preview.
    pub fn invalid_name(name: &str, reason: impl Into<String>) -> Self {
        LockError::InvalidName {
            name: preview(name),
            reason: reason.into(),
        }
    }

    /// A [`LockError::InvalidIdentity`]; the identity is shown as a short escaped preview.
    pub fn invalid_identity(identity: &str, reason: impl Into<String>) -> Self {
        LockError::InvalidIdentity {
            identity: preview(identity),
            reason: reason.into(),
        }
    }

    /// A copy of this error for a second reader (store errors lose their `source`, keeping
    /// its message).
    pub fn duplicate(&self) -> LockError {
        match self {
            LockError::Timeout {
                name,
                backend,
                waited,
            } => LockError::timeout(name, backend, *waited),
            LockError::InvalidName { name, reason } => LockError::InvalidName {
                name: name.clone(),
                reason: reason.clone(),
            },
            LockError::InvalidIdentity { identity, reason } => LockError::InvalidIdentity {
                identity: identity.clone(),
                reason: reason.clone(),
            },
            LockError::InvalidConfig(m) => LockError::InvalidConfig(m.clone()),
            LockError::Unavailable {
                backend,
                name,
                message,
                source,
            } => {
                LockError::unavailable(backend, name.as_deref(), with_source(message, source), None)
            }
            LockError::NotHeld {
                name,
                backend,
                reason,
            } => LockError::not_held(name, backend, reason),
            LockError::Lost {
                name,
                backend,
                reason,
            } => LockError::Lost {
                name: name.clone(),
                backend: backend.clone(),
                reason: reason.clone(),
            },
            LockError::Unsupported { backend, operation } => {
                LockError::unsupported(backend, operation)
            }
            LockError::Backend {
                backend,
                name,
                message,
                source,
            } => LockError::backend(backend, name.as_deref(), with_source(message, source), None),
        }
    }

    /// A [`LockError::Unsupported`].
    pub fn unsupported(backend: impl Into<String>, operation: impl Into<String>) -> Self {
        LockError::Unsupported {
            backend: backend.into(),
            operation: operation.into(),
        }
    }

    /// A [`LockError::InvalidConfig`].
    pub fn invalid_config(message: impl Into<String>) -> Self {
        LockError::InvalidConfig(message.into())
    }
}

fn with_source(message: &str, source: &Option<BoxError>) -> String {
    match source {
        Some(s) => format!("{message} ({s})"),
        None => message.to_owned(),
    }
}

/// A short, escaped rendering of a (possibly hostile) name for messages: at most 64 characters,
/// control characters escaped, quoted.
pub(crate) fn preview(name: &str) -> String {
    const MAX_CHARS: usize = 64;
    let mut shown: String = name.chars().take(MAX_CHARS).collect();
    let truncated = shown.len() < name.len();
    shown = format!("{shown:?}");
    if truncated {
        shown.push_str(&format!("… ({} bytes)", name.len()));
    }
    shown
}
