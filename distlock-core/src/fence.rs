//! Fencing enforced where the write lands: a resource accepts a write only with a fencing
//! token at least as high as any it has seen, checked atomically with the write.
//!
//! A lock alone cannot stop a holder that stalled past its lease (a GC or VM pause) from writing
//! after the next holder did; the resource can, by remembering the highest token
//! ([`crate::LockGuard::fencing_token`]) it accepted. The adapters share this error type:
//! the local-file one is [`write_file`]; the stores' are each backend crate's `fence` module
//! (SQL, Redis, etcd, ZooKeeper), re-exported together as `distlock::fence`.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// A write refused: the resource had already accepted a higher token (a newer holder wrote).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fenced write to `{resource}` refused: token {token} is older than {seen}, already seen")]
pub struct Stale {
    /// The resource written to (a key, a row's resource name, a path).
    pub resource: String,
    /// The token the write carried.
    pub token: u64,
    /// The highest token the resource had accepted.
    pub seen: u64,
}

/// A fenced write's failure: refused as [`Stale`], or the store's own error (the write may or
/// may not have landed then, as with any failed write).
#[derive(Debug, thiserror::Error)]
pub enum FenceError<E> {
    /// Refused: a newer holder had written.
    #[error(transparent)]
    Stale(#[from] Stale),
    /// The store failed.
    #[error("fenced write failed: {0}")]
    Store(E),
}

impl<E> FenceError<E> {
    /// The same failure with the store's error converted (a refusal stays one).
    pub fn map_store<F>(self, f: impl FnOnce(E) -> F) -> FenceError<F> {
        match self {
            FenceError::Stale(s) => FenceError::Stale(s),
            FenceError::Store(e) => FenceError::Store(f(e)),
        }
    }

    /// The refusal, when this is one.
    pub fn stale(&self) -> Option<&Stale> {
        match self {
            FenceError::Stale(s) => Some(s),
            FenceError::Store(_) => None,
        }
    }
}

/// Where [`write_file`] keeps the highest token for `path`: `<path>.fence`, beside it.
pub fn fence_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".fence");
    PathBuf::from(p)
}

/// Replaces the file at `path` with `contents`, unless a write with a higher token than
/// `token` was accepted before.
///
/// The check and the write happen under an exclusive lock on the fence file (`<path>.fence`,
/// [`fence_path`]), so fenced writers of one file are serialized; the contents are written to a
/// temporary file and renamed over `path`, so a reader sees the old or the new file whole. The
/// lock is the operating system's file lock: it holds between processes of one machine (and on
/// network filesystems only as far as they honour such locks). Writers that bypass this function
/// are not fenced.
pub fn write_file(
    path: &Path,
    token: u64,
    contents: &[u8],
) -> Result<(), FenceError<std::io::Error>> {
    let resource = path.display().to_string();
    let mut fence = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(fence_path(path))
        .map_err(FenceError::Store)?;
    fence.lock().map_err(FenceError::Store)?;
    // Unlocked when `fence` is closed, on every path out.
    let seen = read_token(&mut fence).map_err(FenceError::Store)?;
    if token < seen {
        return Err(Stale {
            resource,
            token,
            seen,
        }
        .into());
    }
    let tmp = {
        let mut p = path.as_os_str().to_owned();
        p.push(format!(".{}.tmp", std::process::id()));
        PathBuf::from(p)
    };
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        fence.set_len(0)?;
        (&fence).seek(SeekFrom::Start(0))?;
        (&fence).write_all(token.to_string().as_bytes())?;
        fence.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        FenceError::Store(e)
    })
}

/// The token a fence file holds (0 for a new, empty one).
fn read_token(fence: &mut File) -> std::io::Result<u64> {
    let mut text = String::new();
    fence.read_to_string(&mut text)?;
    let text = text.trim();
    if text.is_empty() {
        return Ok(0);
    }
    text.parse().map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("fence file holds {text:?}, not a token: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(what: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "distlock-fence-{what}-{}",
            crate::backend::owner_token()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn an_older_token_is_refused_after_a_newer_one_wrote() {
        let path = dir("order").join("resource");
        write_file(&path, 7, b"first holder").unwrap();
        write_file(&path, 9, b"next holder").unwrap();
        let err = write_file(&path, 7, b"paused first holder").unwrap_err();
        assert_eq!(
            err.stale(),
            Some(&Stale {
                resource: path.display().to_string(),
                token: 7,
                seen: 9
            })
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"next holder");
        // The holder of the highest token may write again.
        write_file(&path, 9, b"next holder, again").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"next holder, again");
    }

    #[test]
    fn a_corrupt_fence_file_is_an_error_not_a_zero() {
        let path = dir("corrupt").join("resource");
        std::fs::write(fence_path(&path), "not a number").unwrap();
        let err = write_file(&path, 1, b"x").unwrap_err();
        assert!(
            matches!(err, FenceError::Store(ref e) if e.kind() == std::io::ErrorKind::InvalidData),
            "{err}"
        );
        assert!(!path.exists());
    }

    #[test]
    fn concurrent_writers_are_serialized_by_the_fence() {
        let path = dir("threads").join("resource");
        let handles: Vec<_> = (1..=16u64)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    (t, write_file(&path, t, t.to_string().as_bytes()).is_ok())
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(
            results.contains(&(16, true)),
            "the highest token is never refused"
        );
        // Whatever the interleaving, the file ends with the highest token's contents.
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "16");
        assert_eq!(std::fs::read_to_string(fence_path(&path)).unwrap(), "16");
    }
}
