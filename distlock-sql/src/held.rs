//! What for_update and advisory guards share: a lock held by one database connection (an open
//! transaction, a session), lost exactly when that connection is, and checked by a ping.

use std::time::Duration;

use distlock_core::LockError;

use crate::error::{is_connection_gone, map};

/// The identity of a lock a connection holds, and how its guard reports the connection's loss.
pub(crate) struct Held {
    pub(crate) name: String,
    pub(crate) label: String,
    /// What the connection holds, for messages: `row lock`, `advisory lock`.
    what: &'static str,
    /// How long the database keeps the connection's session once it goes silent.
    idle: Duration,
}

impl Held {
    pub(crate) fn new(name: &str, label: &str, what: &'static str, idle: Duration) -> Self {
        Held {
            name: name.to_owned(),
            label: label.to_owned(),
            what,
            idle,
        }
    }

    /// The lock is gone with its connection.
    pub(crate) fn gone(&self) -> LockError {
        LockError::not_held(
            &self.name,
            &self.label,
            format!(
                "the connection holding the {} died, so the database released the lock",
                self.what
            ),
        )
    }

    /// [`Self::gone`], logged: the moment the connection is found gone, the lock is lost.
    pub(crate) fn lost(&self, e: &sqlx::Error) -> LockError {
        tracing::warn!(
            backend = %self.label,
            name = %self.name,
            error = %e,
            "the connection holding the {} is gone, so the database released the lock",
            self.what
        );
        self.gone()
    }

    /// The guard's renewal from the outcome of its liveness ping on the connection in `slot`:
    /// the database keeps a silent holder for `idle` after a ping that went through; a dead
    /// connection is taken out of `slot` and the lock is lost; other errors are transient.
    pub(crate) fn pinged<T, R>(
        &self,
        outcome: Result<R, sqlx::Error>,
        slot: &mut Option<T>,
    ) -> Result<Option<Duration>, LockError> {
        match outcome {
            Ok(_) => Ok(Some(self.idle)),
            Err(e) if is_connection_gone(&e) => {
                slot.take();
                Err(self.lost(&e))
            }
            Err(e) => {
                tracing::debug!(backend = %self.label, name = %self.name, error = %e, "liveness check on the {} failed", self.what);
                Err(map(e, &self.label, Some(&self.name)))
            }
        }
    }
}
