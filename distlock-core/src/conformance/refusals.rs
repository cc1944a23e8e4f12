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

/// The certificate refusals of a store whose test URL names the private CA (`…/ca.crt`), host
/// `@localhost:` and a client certificate (`…/client.crt`, `…/client.key`), each through
/// [`refused`] with `try_url` (connect and lock): a CA that did not sign the server's
/// certificate, a host the certificate does not name, and an expired client certificate.
pub async fn certificate_refusals<F, Fut>(url: &str, try_url: F, secret: &str)
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<(), LockError>>,
{
    let expired = url
        .replace("/client.crt", "/expired-client.crt")
        .replace("/client.key", "/expired-client.key");
    let cases: [(String, &str, &[&str]); 3] = [
        (
            url.replace("/ca.crt", "/other-ca.crt"),
            "wrong CA",
            &["TLS", "UnknownIssuer"],
        ),
        (
            url.replace("@localhost:", "@127.0.0.1:"),
            "wrong host",
            &["TLS", "127.0.0.1"],
        ),
        (
            expired,
            "expired client certificate",
            &["expired at 2020-01-02T00:00:00Z", "cert="],
        ),
    ];
    for (wrong, what, expect) in cases {
        assert_ne!(wrong, url, "{what}: the URL has nothing to change");
        refused(try_url(wrong), Duration::from_secs(8), what, expect, secret).await;
    }
}
