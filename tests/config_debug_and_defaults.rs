//! Configuration promises: `Debug` of every public config type never shows a password, and the
//! `ttl`, `wait` and `renew` URL parameters are honoured by every entry point (never dropped).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use distlock::configs::{RedisConfig, SqlConfig, ZkConfig};
use distlock::{AcquireOptions, LockConfig, LockError};
use distlock_core::backend::DistlockUrl;

const PW: &str = "hunter2-Secret";

#[test]
fn debug_of_every_public_config_type_hides_the_password() {
    let shown = [
        format!(
            "{:?}",
            LockConfig::from_url(format!("postgres://app:{PW}@127.0.0.1:5432/db?mode=row"))
        ),
        format!(
            "{:#?}",
            LockConfig::from_url(format!("redis://app:{PW}@127.0.0.1:6379?ttl=5s"))
        ),
        format!(
            "{:?}",
            SqlConfig::from_url(&format!("postgres://app:{PW}@127.0.0.1:5432/db?mode=row"))
                .unwrap()
        ),
        format!(
            "{:#?}",
            SqlConfig::from_url(&format!(
                "mysql://root:{PW}@127.0.0.1:3306/db?mode=for_update"
            ))
            .unwrap()
        ),
        format!(
            "{:?}",
            RedisConfig::from_url(&format!("redis://app:{PW}@127.0.0.1:6379/0")).unwrap()
        ),
        format!(
            "{:?}",
            RedisConfig::from_url(&format!(
                "redlock://:{PW}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
            ))
            .unwrap()
        ),
        format!(
            "{:?}",
            DistlockUrl::parse(&format!("zk://u:{PW}@127.0.0.1:2181/x"), 2181).unwrap()
        ),
        format!(
            "{:?}",
            ZkConfig::from_url("zk://127.0.0.1:2181/x?session_timeout=10s").unwrap()
        ),
    ];
    for s in &shown {
        assert!(!s.contains(PW), "password in Debug output: {s}");
    }
    // The URLs are still recognisable (user and host shown).
    assert!(shown[0].contains("app:***@127.0.0.1"), "{}", shown[0]);
    assert!(shown[2].contains("127.0.0.1"), "{}", shown[2]);
}

fn sqlite_url(tag: &str, params: &str) -> String {
    let dir = std::env::temp_dir().join(format!("distlock-cfg-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    format!("sqlite://{}/locks.db?{params}", dir.display())
}

/// `connect(url)` (and `connect_config`) apply the URL's `ttl`/`wait`/`renew` to options the
/// caller leaves unset, and the caller's own settings still win.
#[tokio::test]
async fn connect_honours_ttl_wait_and_renew_in_the_url() {
    let url = sqlite_url("connect", "ttl=2s&wait=300ms&renew=false");
    let a = distlock::connect(&url).await.unwrap();
    let b = distlock::connect(&url).await.unwrap();
    let g = a
        .acquire("cfg-defaults", &AcquireOptions::new())
        .await
        .unwrap();
    assert_eq!(g.ttl(), Duration::from_secs(2), "URL ttl ignored");
    let left = g.remaining_validity().expect("a lease-bound guard");
    assert!(left <= Duration::from_secs(2), "{left:?}");
    // wait=300ms: an acquire that sets no wait of its own gives up after about 300 ms.
    let t = Instant::now();
    let e = b
        .acquire("cfg-defaults", &AcquireOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(e, LockError::Timeout { .. }), "{e}");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "URL wait ignored: {:?}",
        t.elapsed()
    );
    // renew=false: the 2 s lease runs out unrenewed and the guard says so.
    let lost = tokio::time::timeout(Duration::from_secs(5), g.lost()).await;
    assert!(
        lost.is_ok(),
        "URL renew=false ignored: the lease was renewed"
    );
    // The caller's own options win over the URL's.
    let g2 = b
        .acquire(
            "cfg-defaults",
            &AcquireOptions::new()
                .ttl(Duration::from_secs(9))
                .wait(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    assert_eq!(g2.ttl(), Duration::from_secs(9));
    g2.release().await.unwrap();
}

/// `connect_from_env()` honours them too.
#[tokio::test]
async fn connect_from_env_honours_ttl_in_the_url() {
    let url = sqlite_url("env", "ttl=3s");
    // The only test in this binary that reads the variable.
    std::env::set_var(distlock::URL_ENV, &url);
    let lock = distlock::connect_from_env().await.unwrap();
    let g = lock
        .try_acquire("cfg-env", &AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        g.ttl(),
        Duration::from_secs(3),
        "URL ttl ignored by connect_from_env"
    );
    g.release().await.unwrap();
}

/// A lock wrapped with its URL's defaults still lists and breaks (the wrapper forwards both,
/// not the trait's `Unsupported` defaults).
#[tokio::test]
async fn a_lock_with_url_defaults_lists_and_breaks() {
    let url = sqlite_url("operator", "ttl=5s&wait=1s");
    let lock = distlock::connect(&url).await.unwrap();
    assert!(lock.capabilities().list && lock.capabilities().break_lock);
    let g = lock
        .acquire("cfg-operator", &AcquireOptions::new())
        .await
        .unwrap();
    let listing = lock.list("cfg-op", 10).await.unwrap();
    assert_eq!(listing.locks.len(), 1, "{listing:?}");
    let broken = lock.break_lock("cfg-operator").await.unwrap();
    assert_eq!(broken.fencing_token, Some(g.fencing_token()));
    assert!(matches!(
        lock.break_lock("cfg-operator").await,
        Err(LockError::NotHeld { .. })
    ));
}
