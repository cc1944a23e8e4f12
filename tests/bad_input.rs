//! Hostile input on purpose, one table over every backend (`scripts/services.sh up`): each row
//! must give the typed error it names (or work correctly where the input is legal) within a
//! bound, never a panic or a hang, leave no lock state behind, and never print a password.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{AcquireOptions, DistributedLock, LockError};

/// A password that must never show up in an error's `Display` or `Debug`.
const SECRET: &str = "s3cret-Wrong-pw";

fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

/// Every backend and mode, with the URLs `scripts/services.sh up` provides.
fn backends(dir: &std::path::Path) -> Vec<String> {
    let pg = env_or(
        "DISTLOCK_TEST_POSTGRES_URL",
        "postgres://postgres@127.0.0.1:15432/distlock",
    );
    let my = env_or(
        "DISTLOCK_TEST_MYSQL_URL",
        "mysql://root@127.0.0.1:13306/distlock",
    );
    vec![
        format!("sqlite://{}/bad-input.db", dir.display()),
        format!("{pg}?mode=row"),
        format!("{pg}?mode=for_update"),
        format!("{my}?mode=row"),
        format!("{my}?mode=for_update"),
        env_or("DISTLOCK_TEST_REDIS_URL", "redis://127.0.0.1:16379"),
        env_or(
            "DISTLOCK_TEST_REDLOCK_URL",
            "redlock://127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005",
        ),
        env_or("DISTLOCK_TEST_ZK_URL", "zk://127.0.0.1:12181"),
    ]
}

/// What a row must produce.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    InvalidConfig,
    InvalidName,
    Unavailable,
    /// A legal name: exclusive while held, nothing left after release.
    Works,
    /// Legal for the library, but a store may refuse it: `Works` or `InvalidName`.
    WorksOrInvalidName,
}

fn kind(e: &LockError) -> Option<Expect> {
    match e {
        LockError::InvalidConfig { .. } => Some(Expect::InvalidConfig),
        LockError::InvalidName { .. } => Some(Expect::InvalidName),
        LockError::Unavailable { .. } => Some(Expect::Unavailable),
        _ => None,
    }
}

fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(2))
}

/// The error `url` gives at connect or at its first `try_acquire`, bounded by `within`.
async fn first_error(url: &str, within: Duration) -> Result<LockError, String> {
    let run = async {
        let lock = distlock::connect(url).await?;
        lock.try_acquire("bad-input-probe", &opts()).await.map(drop)
    };
    match tokio::time::timeout(within, run).await {
        Err(_) => Err(format!("{url:?} hung past {within:?}")),
        Ok(Ok(())) => Err(format!("{url:?} was accepted")),
        Ok(Err(e)) => Ok(e),
    }
}

fn assert_no_secret(e: &LockError, row: &str) {
    for shown in [e.to_string(), format!("{e:?}")] {
        assert!(
            !shown.contains(SECRET),
            "{row}: the password leaked into {shown:?}"
        );
    }
}

/// Bad URLs, wrong passwords, unreachable or misconfigured stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_configuration_gives_typed_errors() {
    let pg_pw = format!("postgres://distlock_pw:{SECRET}@127.0.0.1:15432/distlock");
    let rows: Vec<(&str, String, Expect, &str)> = vec![
        ("empty URL", String::new(), Expect::InvalidConfig, ""),
        (
            "unknown scheme",
            "foo://127.0.0.1:1".into(),
            Expect::InvalidConfig,
            "foo",
        ),
        (
            "no scheme",
            "127.0.0.1:16379".into(),
            Expect::InvalidConfig,
            "",
        ),
        (
            "http scheme",
            "http://127.0.0.1:16379".into(),
            Expect::InvalidConfig,
            "http",
        ),
        (
            "redis port out of range",
            "redis://127.0.0.1:70000".into(),
            Expect::InvalidConfig,
            "70000",
        ),
        (
            "postgres port out of range",
            "postgres://postgres@127.0.0.1:99999/distlock".into(),
            Expect::InvalidConfig,
            "99999",
        ),
        (
            "mysql port out of range",
            "mysql://root@127.0.0.1:65536/distlock".into(),
            Expect::InvalidConfig,
            "65536",
        ),
        (
            "zk port out of range",
            "zk://127.0.0.1:123456".into(),
            Expect::InvalidConfig,
            "123456",
        ),
        (
            "redlock port out of range",
            "redlock://127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:700000".into(),
            Expect::InvalidConfig,
            "700000",
        ),
        (
            "bad duration",
            "redis://127.0.0.1:16379?timeout=banana".into(),
            Expect::InvalidConfig,
            "banana",
        ),
        (
            "unknown parameter",
            "redis://127.0.0.1:16379?bogus=1".into(),
            Expect::InvalidConfig,
            "bogus",
        ),
        (
            "unknown SQL mode",
            "postgres://postgres@127.0.0.1:15432/distlock?mode=optimistic".into(),
            Expect::InvalidConfig,
            "optimistic",
        ),
        (
            "redis wrong password",
            format!("redis://distlock_pw:{SECRET}@127.0.0.1:16379"),
            Expect::InvalidConfig,
            "credentials",
        ),
        (
            "redis password for a user without one",
            format!("redis://:{SECRET}@127.0.0.1:16379"),
            Expect::InvalidConfig,
            "credentials",
        ),
        (
            "redlock wrong password",
            format!(
                "redlock://distlock_pw:{SECRET}@127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003"
            ),
            Expect::InvalidConfig,
            "credentials",
        ),
        (
            "postgres wrong password",
            pg_pw.clone(),
            Expect::InvalidConfig,
            "credentials",
        ),
        (
            "postgres wrong password, for_update",
            format!("{pg_pw}?mode=for_update"),
            Expect::InvalidConfig,
            "credentials",
        ),
        (
            "mysql wrong password",
            format!("mysql://root:{SECRET}@127.0.0.1:13306/distlock"),
            Expect::InvalidConfig,
            "credentials",
        ),
        (
            "zk digest password given twice",
            format!("zk://u:{SECRET}@127.0.0.1:12181?password_env=HOME"),
            Expect::InvalidConfig,
            "more than once",
        ),
        (
            "redis TLS files on a plain URL",
            format!("redis://:{SECRET}@127.0.0.1:16379?ca=/nonexistent/ca.pem"),
            Expect::InvalidConfig,
            "rediss://",
        ),
        (
            "redis CA file that does not exist",
            format!("rediss://:{SECRET}@localhost:16390?ca=/nonexistent/ca.pem"),
            Expect::InvalidConfig,
            "ca=/nonexistent/ca.pem",
        ),
        (
            "postgres database that does not exist",
            "postgres://postgres@127.0.0.1:15432/no_such_db".into(),
            Expect::InvalidConfig,
            "no_such_db",
        ),
        (
            "mysql database that does not exist",
            "mysql://root@127.0.0.1:13306/no_such_db".into(),
            Expect::InvalidConfig,
            "no_such_db",
        ),
        (
            "postgres role without privileges on the lock tables",
            "postgres://distlock_noperm@127.0.0.1:15432/distlock?mode=row".into(),
            Expect::InvalidConfig,
            "privilege",
        ),
        (
            "postgres role without privileges, for_update",
            "postgres://distlock_noperm@127.0.0.1:15432/distlock?mode=for_update".into(),
            Expect::InvalidConfig,
            "privilege",
        ),
        (
            "mysql user without access to the database",
            "mysql://distlock_noperm@127.0.0.1:13306/distlock?mode=row".into(),
            Expect::InvalidConfig,
            "privilege",
        ),
        (
            "zk chroot that does not exist",
            "zk://127.0.0.1:12181/no/such/chroot".into(),
            Expect::InvalidConfig,
            "/no/such/chroot",
        ),
        (
            "redis read-only replica",
            "redis://127.0.0.1:16380".into(),
            Expect::Unavailable,
            "read-only replica",
        ),
        (
            "redis unreachable",
            "redis://127.0.0.1:1?timeout=1s".into(),
            Expect::Unavailable,
            "",
        ),
        (
            "redlock quorum unreachable",
            "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:17001?timeout=1s".into(),
            Expect::Unavailable,
            "quorum",
        ),
        (
            "postgres unreachable",
            "postgres://postgres@127.0.0.1:1/distlock?connect_timeout=1s".into(),
            Expect::Unavailable,
            "",
        ),
        (
            "mysql unreachable",
            "mysql://root@127.0.0.1:1/distlock?connect_timeout=1s".into(),
            Expect::Unavailable,
            "",
        ),
        (
            "zk unreachable",
            "zk://127.0.0.1:1?connect_timeout=1s".into(),
            Expect::Unavailable,
            "",
        ),
        (
            "sqlite in a missing directory",
            "sqlite:///nonexistent-distlock-dir/x.db".into(),
            Expect::Unavailable,
            "",
        ),
    ];
    let mut failures = Vec::new();
    for (row, url, expect, hint) in rows {
        let t = Instant::now();
        match first_error(&url, Duration::from_secs(15)).await {
            Err(e) => failures.push(format!("{row}: {e}")),
            Ok(e) => {
                assert_no_secret(&e, row);
                let got = kind(&e);
                if got != Some(expect) || !e.to_string().contains(hint) {
                    failures.push(format!(
                        "{row}: expected {expect:?} naming {hint:?}, got {e}"
                    ));
                }
                if got == Some(Expect::Unavailable) && !e.is_retryable() {
                    failures.push(format!("{row}: Unavailable but not retryable: {e}"));
                }
                assert!(
                    t.elapsed() < Duration::from_secs(15),
                    "{row} took {:?}",
                    t.elapsed()
                );
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Illegal names fail with `InvalidName` everywhere; legal-but-odd names are exclusive locks of
/// their own and leave nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_names_on_every_backend() {
    let dir = std::env::temp_dir().join(format!("distlock-bad-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = format!("{:x}", std::process::id());
    let names: Vec<(String, Expect)> = vec![
        (String::new(), Expect::InvalidName),
        ("x".repeat(257), Expect::InvalidName),
        ("a\0b".into(), Expect::InvalidName),
        ("\0".into(), Expect::InvalidName),
        (format!("{run}/a/b"), Expect::WorksOrInvalidName),
        (format!("{run}/.."), Expect::WorksOrInvalidName),
        ("..".into(), Expect::WorksOrInvalidName),
        ("/".into(), Expect::WorksOrInvalidName),
        (format!("{run}redis.call('DEL', KEYS[1])"), Expect::Works),
        (format!("{run}]]..\"--[["), Expect::Works),
        (format!("{run}%s%d{{tag}}*?"), Expect::Works),
        (
            format!("{run}'; DROP TABLE distlock_locks; --"),
            Expect::Works,
        ),
        (format!("{run}\\'\\\"%_"), Expect::Works),
        (format!("{run}ключ"), Expect::Works),
        (format!("{run}🔒"), Expect::WorksOrInvalidName),
    ];
    let mut failures = Vec::new();
    for url in backends(&dir) {
        let a: Arc<dyn DistributedLock> = distlock::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}; is `scripts/services.sh up` running?"));
        let b = distlock::connect(&url).await.unwrap();
        for (name, expect) in &names {
            let row = format!("{} on {url}", name.escape_debug());
            let got = tokio::time::timeout(Duration::from_secs(10), a.try_acquire(name, &opts()))
                .await
                .unwrap_or_else(|_| panic!("{row}: hung"));
            match (got, expect) {
                (
                    Err(e @ LockError::InvalidName { .. }),
                    Expect::InvalidName | Expect::WorksOrInvalidName,
                ) => {
                    assert!(e.to_string().len() < 400, "{row}: unbounded message");
                }
                (Ok(Some(g)), Expect::Works | Expect::WorksOrInvalidName) => {
                    // Exclusive, visible, and gone after release.
                    match b.try_acquire(name, &opts()).await {
                        Ok(None) => {}
                        other => failures.push(format!("{row}: second client got {other:?}")),
                    }
                    let info = a.inspect(name).await;
                    if !matches!(&info, Ok(i) if i.held && i.fencing_token.is_none_or(|t| t == g.fencing_token()))
                    {
                        failures.push(format!("{row}: inspect while held said {info:?}"));
                    }
                    g.release().await.unwrap();
                    let after = a.inspect(name).await;
                    if !matches!(&after, Ok(i) if !i.held) {
                        failures.push(format!("{row}: left behind after release: {after:?}"));
                    }
                }
                (other, _) => failures.push(format!("{row}: expected {expect:?}, got {other:?}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A Redis that answers `-NOSCRIPT` (its script cache flushed while a lock is held): extend,
/// release and the next acquire still work, on one server and on every Redlock master.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_noscript_is_recovered() {
    let single = env_or("DISTLOCK_TEST_REDIS_URL", "redis://127.0.0.1:16379");
    let redlock = env_or(
        "DISTLOCK_TEST_REDLOCK_URL",
        "redlock://127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005",
    );
    for (url, ports) in [
        (single, vec![16379u16]),
        (redlock, vec![17001, 17002, 17003, 17004, 17005]),
    ] {
        let flush = || async {
            for p in &ports {
                let client = redis::Client::open(format!("redis://127.0.0.1:{p}")).unwrap();
                let mut c = client.get_multiplexed_async_connection().await.unwrap();
                let _: () = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async(&mut c)
                    .await
                    .unwrap();
            }
        };
        let lock = distlock::connect(&url).await.unwrap();
        let name = format!("noscript-{}", std::process::id());
        flush().await;
        let g = lock.acquire(&name, &opts()).await.unwrap();
        flush().await;
        g.extend(Duration::from_secs(6)).await.unwrap();
        flush().await;
        let first = g.fencing_token();
        g.release().await.unwrap();
        assert!(
            !lock.inspect(&name).await.unwrap().held,
            "{url}: still held"
        );
        let g2 = lock
            .try_acquire(&name, &opts())
            .await
            .unwrap()
            .expect("free");
        assert!(g2.fencing_token() > first);
        g2.release().await.unwrap();
    }
}
