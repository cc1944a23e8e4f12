//! `distlock ls` and `distlock break` run as processes: on SQLite (no services needed) and on
//! Redis (`scripts/services.sh up`), a holder that `elect` runs is listed with its identity,
//! token and lease, broken (its command terminated, `elect` exiting 70 at its next renewal),
//! and then nobody holds the name (exit 4); `break` without `--yes` off a terminal is refused
//! (64); a backend or mode that cannot list or break says so (5).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Child, Output, Stdio};
use std::time::Duration;

use support::procs::{poll, wait_exit};
use support::{bin, unique};

fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

fn run(args: &[&str]) -> Output {
    bin()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run distlock")
}

fn explain(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `ls --json` of `prefix` on `url`, parsed.
fn ls(url: &str, prefix: &str) -> serde_json::Value {
    let out = run(&["ls", "--url", url, "--prefix", prefix, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    serde_json::from_slice(&out.stdout).expect("ls --json prints JSON")
}

/// `distlock elect` holding `name` on `url` as `ops-test`, with a 3 s lease (renewed every
/// second), running `sleep 60`.
fn holder(url: &str, name: &str) -> Child {
    bin()
        .args([
            "elect",
            "--url",
            url,
            "--group",
            name,
            "--identity",
            "ops-test",
        ])
        .args(["--ttl", "3s", "--", "sleep", "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn distlock elect")
}

/// The whole operator story on `url` (see the module docs).
fn list_and_break(url: &str) {
    let name = format!("cli-ops-{}", unique());
    let mut elect = holder(url, &name);
    // The identity is recorded just after the acquisition (distlock-sql's holders.rs): a
    // listing in between shows the lock held by nobody named yet.
    let listed = poll(Duration::from_secs(15), || {
        let v = ls(url, &name);
        let named = v["locks"][0]["holder"] == "ops-test";
        named.then_some(v)
    })
    .unwrap_or_else(|| panic!("{url}: the holder never showed in ls with its identity"));
    assert_eq!(listed["truncated"], false, "{listed}");
    assert_eq!(listed["limit"], 1000, "{listed}");
    let lock = &listed["locks"][0];
    assert_eq!(lock["name"], name.as_str(), "{listed}");
    assert_eq!(lock["held"], true, "{listed}");
    assert_eq!(lock["holder"], "ops-test", "{listed}");
    let token = lock["fencing_token"].as_u64().expect("a token");
    let left = lock["expires_in_ms"].as_u64().expect("a lease left");
    assert!(left <= 3000, "{listed}");

    // Off a terminal, only with --yes; nothing was broken.
    let refused = run(&["break", "--url", url, "--name", &name]);
    assert_eq!(refused.status.code(), Some(64), "{}", explain(&refused));
    assert!(elect.try_wait().unwrap().is_none(), "a refused break broke");

    let broke = run(&["break", "--url", url, "--name", &name, "--yes"]);
    assert_eq!(broke.status.code(), Some(0), "{}", explain(&broke));
    let said = String::from_utf8_lossy(&broke.stdout);
    assert!(said.contains(&format!("fencing token {token}")), "{said}");
    assert!(said.contains("holder ops-test"), "{said}");

    let status = wait_exit(&mut elect, Duration::from_secs(10), "elect after a break");
    assert_eq!(
        status.code(),
        Some(70),
        "the broken holder reports its loss"
    );

    let again = run(&["break", "--url", url, "--name", &name, "--yes"]);
    assert_eq!(again.status.code(), Some(4), "{}", explain(&again));
    let after = ls(url, &name);
    assert_eq!(after["locks"], serde_json::json!([]), "{after}");
}

#[test]
fn sqlite_lists_and_breaks_a_holder() {
    let dir = support::tmp("ops", "sqlite");
    list_and_break(&format!("sqlite://{}/locks.db", dir.display()));
}

#[test]
fn redis_lists_and_breaks_a_holder() {
    list_and_break(&env_or(
        "DISTLOCK_TEST_REDIS_URL",
        "redis://127.0.0.1:16379",
    ));
}

/// Bad input is a usage error before any store is asked; a mode that cannot break or list
/// exits 5 and says why.
#[test]
fn bad_limits_and_backends_that_cannot_have_their_own_codes() {
    let dir = support::tmp("ops", "codes");
    let sqlite = format!("sqlite://{}/locks.db", dir.display());
    let zero = run(&["ls", "--url", &sqlite, "--limit", "0"]);
    assert_eq!(zero.status.code(), Some(64), "{}", explain(&zero));
    let empty = run(&["break", "--url", &sqlite, "--name", "", "--yes"]);
    assert_eq!(empty.status.code(), Some(64), "{}", explain(&empty));

    let pg = env_or(
        "DISTLOCK_TEST_POSTGRES_URL",
        "postgres://postgres@127.0.0.1:15432/distlock",
    );
    let for_update = format!("{pg}?mode=for_update");
    let name = format!("cli-ops-{}", unique());
    let cannot = run(&["break", "--url", &for_update, "--name", &name, "--yes"]);
    assert_eq!(cannot.status.code(), Some(5), "{}", explain(&cannot));
    assert!(
        String::from_utf8_lossy(&cannot.stderr).contains("session"),
        "{}",
        explain(&cannot)
    );
    let mysql = env_or(
        "DISTLOCK_TEST_MYSQL_URL",
        "mysql://root@127.0.0.1:13306/distlock",
    );
    let advisory = format!("{mysql}?mode=advisory");
    let unlisted = run(&["ls", "--url", &advisory]);
    assert_eq!(unlisted.status.code(), Some(5), "{}", explain(&unlisted));
}
