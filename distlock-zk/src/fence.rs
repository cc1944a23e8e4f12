//! Fenced writes on the user's own ZooKeeper client: [`set_data`] sets a node's data in one
//! `multi` with the fence's version check, so it lands only if no write with a higher fencing
//! token has.
//!
//! The highest accepted token for a path lives in its own node under [`FENCES`] ([`fence_path`]),
//! as decimal digits. A write reads it, refuses a lower token, and commits the fence (only at
//! the version it read: a concurrent fenced writer makes it read again) with the user's node.
//!
//! ```no_run
//! # async fn demo(client: zookeeper_client::Client, guard: &distlock_core::LockGuard)
//! # -> Result<(), distlock_zk::fence::FenceError<zookeeper_client::Error>> {
//! distlock_zk::fence::set_data(&client, "/app/config", b"v42", guard.fencing_token()).await?;
//! # Ok(()) }
//! ```

use zookeeper_client::{Acls, Client, CreateMode, Error, MultiWriteError};

pub use distlock_core::fence::{FenceError, Stale};

/// The parent of every fence node.
pub const FENCES: &str = "/distlock-fences";

/// Attempts before a write that keeps meeting concurrent fenced writers gives up.
const ATTEMPTS: usize = 16;

/// The fence node of `path`: `/distlock-fences/<path, '%' and '/' escaped>`.
pub fn fence_path(path: &str) -> String {
    format!("{FENCES}/{}", path.replace('%', "%25").replace('/', "%2F"))
}

/// Sets `path`'s data (any version), unless a write with a higher token than `token` was
/// accepted for `path`. The node at `path` must exist.
pub async fn set_data(
    client: &Client,
    path: &str,
    data: &[u8],
    token: u64,
) -> Result<(), FenceError<Error>> {
    let fence = fence_path(path);
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let digits = token.to_string();
    for _ in 0..ATTEMPTS {
        let mut multi = client.new_multi_writer();
        let added = match client.get_data(&fence).await {
            Ok((seen, stat)) => {
                let seen = String::from_utf8_lossy(&seen)
                    .parse::<u64>()
                    .unwrap_or(u64::MAX);
                if token < seen {
                    return Err(Stale {
                        resource: path.to_owned(),
                        token,
                        seen,
                    }
                    .into());
                }
                multi.add_set_data(&fence, digits.as_bytes(), Some(stat.version))
            }
            Err(Error::NoNode) => multi.add_create(&fence, digits.as_bytes(), &persistent),
            Err(e) => return Err(FenceError::Store(e)),
        };
        added
            .and_then(|()| multi.add_set_data(path, data, None))
            .map_err(FenceError::Store)?;
        match multi.commit().await {
            Ok(_) => return Ok(()),
            // Another fenced writer moved the fence first: read it again.
            Err(MultiWriteError::OperationFailed {
                index: 0,
                source: Error::BadVersion | Error::NodeExists,
            }) => continue,
            // No fence parent yet: make it (a racing maker's is as good) and try again.
            Err(MultiWriteError::OperationFailed {
                index: 0,
                source: Error::NoNode,
            }) => match client.create(FENCES, &[], &persistent).await {
                Ok(_) | Err(Error::NodeExists) => continue,
                Err(e) => return Err(FenceError::Store(e)),
            },
            Err(e) => return Err(FenceError::Store(e.into())),
        }
    }
    Err(FenceError::Store(Error::UnexpectedError(format!(
        "fenced write to {path}: the fence kept moving through {ATTEMPTS} attempts"
    ))))
}
