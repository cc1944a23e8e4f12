//! Passwords never reach the logs: every backend that takes one is connected with the right
//! password (and locks, renews and releases) and with a wrong one, with every log record of
//! distlock and of the drivers (`tracing`, and `log` through `tracing-log`) captured at TRACE
//! level; neither password may appear. Needs `scripts/services.sh up` (its Redis ACL user and
//! PostgreSQL role `distlock_pw`, password `distlock-pw`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{AcquireOptions, LockError};

/// The password of the services' `distlock_pw` user (must authenticate).
const GOOD: &str = "distlock-pw";
/// A wrong password (must be refused).
const WRONG: &str = "s3cret-Wrong-pw";

/// Everything the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

/// `scheme://host…` with `user:password@` put in front of the host part.
fn with_credentials(url: &str, user: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    format!("{scheme}://{user}:{password}@{rest}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_is_ever_logged() {
    let logs = Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let redis = env_or("DISTLOCK_TEST_REDIS_URL", "redis://127.0.0.1:16379");
    let redlock = env_or(
        "DISTLOCK_TEST_REDLOCK_URL",
        "redlock://127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005",
    );
    let pg = env_or(
        "DISTLOCK_TEST_POSTGRES_URL",
        "postgres://postgres@127.0.0.1:15432/distlock",
    );
    let mysql = env_or(
        "DISTLOCK_TEST_MYSQL_URL",
        "mysql://root@127.0.0.1:13306/distlock",
    );
    let opts = AcquireOptions::new()
        .ttl(Duration::from_millis(600))
        .wait(Duration::from_secs(10));

    // The right password: connect, lock, let the guard renew, release.
    for url in [
        with_credentials(&redis, "distlock_pw", GOOD),
        with_credentials(&redlock, "distlock_pw", GOOD),
        format!("{}?mode=row", with_credentials(&pg, "distlock_pw", GOOD)),
        format!(
            "{}?mode=for_update",
            with_credentials(&pg, "distlock_pw", GOOD)
        ),
    ] {
        let lock = match distlock::connect(&url).await {
            Ok(l) => l,
            Err(e) => {
                panic!("the services' password user was refused ({e}); run scripts/services.sh up")
            }
        };
        let name = format!("pw-{}", &distlock_core::backend::owner_token()[..10]);
        let g = lock.acquire(&name, &opts).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!g.is_lost(), "{g:?}");
        g.release().await.unwrap();
    }

    // A wrong password: refused with a typed error.
    for url in [
        with_credentials(&redis, "distlock_pw", WRONG),
        with_credentials(&redlock, "distlock_pw", WRONG),
        with_credentials(&pg, "distlock_pw", WRONG),
        with_credentials(&mysql, "root", WRONG),
    ] {
        let Err(e) = distlock::connect(&url).await else {
            panic!("a wrong password was accepted");
        };
        assert!(matches!(e, LockError::InvalidConfig { .. }), "{e:?}");
        tracing::info!(error = %e, debug = ?e, "refused as expected");
    }

    let text = logs.text();
    assert!(
        text.contains("lock acquired")
            && text.contains("sqlx::query")
            && text.contains("refused as expected"),
        "the capture saw no records; the test would prove nothing:\n{text}"
    );
    for secret in [GOOD, WRONG] {
        if let Some(at) = text.find(secret) {
            let from = text[..at].rfind('\n').map_or(0, |i| i + 1);
            let to = text[at..].find('\n').map_or(text.len(), |i| at + i);
            panic!("password {secret:?} logged: {}", &text[from..to]);
        }
    }
}
