//! Passwords never reach the logs: every backend that takes one is connected with the right
//! password (and locks, renews and releases) and with a wrong one, with every log record of
//! distlock and of the drivers (`tracing`, and `log` through `tracing-log`) captured at TRACE
//! level; neither password may appear. Needs `scripts/services.sh up` (its Redis ACL user and
//! PostgreSQL role `distlock_pw`, password `distlock-pw`; its TLS Redis, PostgreSQL and MariaDB,
//! its TLS + auth etcd, and digest users on ZooKeeper).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{AcquireOptions, LockError};

/// The password of the services' `distlock_pw` user (must authenticate).
const GOOD: &str = "distlock-pw";
/// A wrong password (must be refused).
const WRONG: &str = "s3cret-Wrong-pw";
/// The passwords of the TLS and authenticated deployments `scripts/services.sh up` starts.
const TLS_PW: &str = "distlock-tls-pw";
const ZK_PW: &str = "distlock-zk-pw";
#[cfg(feature = "etcd")]
const ETCD_PW: &str = "distlock-etcd-pw";

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
    let sentinel = env_or(
        "DISTLOCK_TEST_REDIS_SENTINEL_URL",
        "redis+sentinel://127.0.0.1:26400,127.0.0.1:26401,127.0.0.1:26402/distlock",
    );
    let cluster = env_or(
        "DISTLOCK_TEST_REDIS_CLUSTER_URL",
        "redis+cluster://127.0.0.1:16410,127.0.0.1:16411,127.0.0.1:16412",
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
    let tls = env_or("DISTLOCK_TEST_TLS_DIR", "/tmp/distlock-services/tls");
    let rediss = |pw: &str| format!("rediss://distlock:{pw}@localhost:16390?ca={tls}/ca.crt");
    let pg_tls = |pw: &str| {
        format!("postgres://distlock_tls:{pw}@localhost:15433/distlock?sslmode=verify-full&sslrootcert={tls}/ca.crt")
    };
    let mysql_tls = |pw: &str| {
        format!("mysql://distlock_tls:{pw}@localhost:13307/distlock?ssl-mode=VERIFY_IDENTITY&ssl-ca={tls}/ca.crt")
    };
    #[cfg(feature = "etcd")]
    let etcds = |pw: &str| {
        format!("etcds://distlock:{pw}@localhost:12579/locks?ca={tls}/ca.crt&cert={tls}/client.crt&key={tls}/client.key")
    };

    // The right password: connect, lock, let the guard renew, release.
    #[cfg_attr(not(feature = "etcd"), allow(unused_mut))]
    let mut right = vec![
        with_credentials(&redis, "distlock_pw", GOOD),
        with_credentials(&redlock, "distlock_pw", GOOD),
        with_credentials(&sentinel, "distlock_pw", GOOD),
        with_credentials(&cluster, "distlock_pw", GOOD),
        format!("{}?mode=row", with_credentials(&pg, "distlock_pw", GOOD)),
        format!(
            "{}?mode=for_update",
            with_credentials(&pg, "distlock_pw", GOOD)
        ),
        rediss(TLS_PW),
        pg_tls(TLS_PW),
        mysql_tls(TLS_PW),
        format!("zk://distlock:{ZK_PW}@127.0.0.1:12181"),
        format!(
            "zks://distlock:{ZK_PW}@localhost:12191?ca={tls}/ca.crt&cert={tls}/client.crt&key={tls}/client.key"
        ),
    ];
    #[cfg(feature = "etcd")]
    right.push(etcds(ETCD_PW));
    for url in right {
        let lock = match distlock::connect(&url).await {
            Ok(l) => l,
            Err(e) => {
                panic!("the services' password user was refused at {} ({e}); run scripts/services.sh up", distlock_core::backend::redact(&url))
            }
        };
        let name = format!("pw-{}", &distlock_core::backend::owner_token()[..10]);
        let g = lock.acquire(&name, &opts).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!g.is_lost(), "{g:?}");
        g.release().await.unwrap();
    }

    // A wrong password: refused with a typed error (ZooKeeper's digest accepts any password:
    // tests distlock-zk/tests/auth.rs show where one is refused).
    #[cfg_attr(not(feature = "etcd"), allow(unused_mut))]
    let mut wrong = vec![
        with_credentials(&redis, "distlock_pw", WRONG),
        with_credentials(&redlock, "distlock_pw", WRONG),
        with_credentials(&sentinel, "distlock_pw", WRONG),
        with_credentials(&cluster, "distlock_pw", WRONG),
        with_credentials(&pg, "distlock_pw", WRONG),
        with_credentials(&mysql, "root", WRONG),
        rediss(WRONG),
        pg_tls(WRONG),
        mysql_tls(WRONG),
    ];
    #[cfg(feature = "etcd")]
    wrong.push(etcds(WRONG));
    for url in wrong {
        let Err(e) = distlock::connect(&url).await else {
            panic!(
                "a wrong password was accepted: {}",
                distlock_core::backend::redact(&url)
            );
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
    for secret in [
        GOOD,
        WRONG,
        TLS_PW,
        ZK_PW,
        #[cfg(feature = "etcd")]
        ETCD_PW,
    ] {
        if let Some(at) = text.find(secret) {
            let from = text[..at].rfind('\n').map_or(0, |i| i + 1);
            let to = text[at..].find('\n').map_or(text.len(), |i| at + i);
            panic!("password {secret:?} logged: {}", &text[from..to]);
        }
    }
}
