//! Checks every backend's TLS and credential tests share: a wrong connection is refused with a
//! typed error that names what failed, in bounded time, never showing the password.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{AcquireOptions, DistributedLock, LockError};

/// Where `scripts/services.sh up` keeps the private CA and certificates
/// (`DISTLOCK_TEST_TLS_DIR`, as `scripts/services.sh urls` prints it).
pub fn tls_dir() -> PathBuf {
    std::env::var("DISTLOCK_TEST_TLS_DIR")
        .unwrap_or_else(|_| "/tmp/distlock-services/tls".into())
        .into()
}

/// Connects with `connect`, takes a fresh name (waiting at most `wait`) and releases it: what a
/// refused connection must fail at, whether the store refuses at connect or at first use.
pub async fn connect_and_lock<F>(connect: F, wait: Duration) -> Result<(), LockError>
where
    F: Future<Output = Result<Arc<dyn DistributedLock>, LockError>>,
{
    let lock = connect.await?;
    let name = super::unique_name("refusal");
    let g = lock
        .acquire(&name, &AcquireOptions::new().wait(wait))
        .await?;
    g.release().await
}

/// Runs `attempt` (connect and lock) and asserts it fails within `limit` with
/// [`LockError::InvalidConfig`] whose text names each of `expect` and shows `secret` nowhere.
pub async fn refused<F>(attempt: F, limit: Duration, what: &str, expect: &[&str], secret: &str)
where
    F: Future<Output = Result<(), LockError>>,
{
    let t = Instant::now();
    let err = match attempt.await {
        Ok(()) => panic!("{what}: connected and locked"),
        Err(e) => e,
    };
    let text = err.to_string();
    assert!(t.elapsed() < limit, "{what}: took {:?}", t.elapsed());
    assert!(
        matches!(err, LockError::InvalidConfig(_)),
        "{what}: not InvalidConfig: {err:?}"
    );
    for e in expect {
        assert!(text.contains(e), "{what}: {text:?} does not name {e:?}");
    }
    assert!(
        !text.contains(secret) && !format!("{err:?}").contains(secret),
        "{what}: {text}"
    );
}
