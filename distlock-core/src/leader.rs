//! [`Leader`]: who leads a group, and [`leader_by_inspect`], how a backend without a native
//! election recipe reads it from `inspect` (a leaf module: the contract and the toolkit both
//! use it).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::{LockError, LockInfo};

/// Who leads a group right now: from [`crate::DistributedLock::leader`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The identity the leader campaigned with.
    pub identity: String,
    /// The leader's fencing token (its lock's token).
    pub fencing_token: u64,
}

impl Leader {
    /// A leader (for backends answering [`crate::DistributedLock::leader`] natively).
    pub fn new(identity: impl Into<String>, fencing_token: u64) -> Self {
        Leader {
            identity: identity.into(),
            fencing_token,
        }
    }
}

/// How long `leader` waits for a new holder's identity record to show up before it reports
/// that the holder recorded none (backends that record it in a second step).
const IDENTITY_GRACE: Duration = Duration::from_secs(2);

/// Reads the leader from successive `inspect` snapshots: the generic
/// [`crate::DistributedLock::leader`]. Answers [`LockError::Unsupported`] when the backend does
/// not record holder identities, and an error (never another holder's identity) when the
/// lock is held by a holder that recorded none within a short grace period.
///
/// # Errors
/// As above, and `inspect`'s errors.
pub async fn leader_by_inspect<F, Fut>(
    backend: &str,
    holder_identity: bool,
    group: &str,
    mut inspect: F,
) -> Result<Option<Leader>, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<LockInfo, LockError>>,
{
    if !holder_identity {
        return Err(LockError::unsupported(
            backend,
            "leader (this mode does not record holder identities; use a SQL, Redis, Redlock, ZooKeeper or etcd URL to observe leaders)",
        ));
    }
    let until = Instant::now() + IDENTITY_GRACE;
    let mut pause = Duration::from_millis(10);
    loop {
        let info = inspect().await?;
        if !info.held {
            return Ok(None);
        }
        match (info.holder, info.fencing_token) {
            (Some(identity), Some(fencing_token)) => {
                return Ok(Some(Leader {
                    identity,
                    fencing_token,
                }))
            }
            _ if Instant::now() >= until => {
                return Err(LockError::backend(
                    backend,
                    Some(group),
                    "the group's lock is held by a holder that recorded no identity (a plain lock holder, not an election participant?)",
                    None,
                ))
            }
            _ => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(200));
            }
        }
    }
}
