//! `distlock exec --max N` (a semaphore permit) and `--read` / `--write` (a read-write lock
//! side) run as processes against the real stores (`scripts/services.sh up`): at most N
//! commands at once, a writer never beside anyone while readers share — on Redis, SQLite row
//! mode, ZooKeeper and etcd —, a mismatched count and a mode without the primitive refused with exit 64, and
//! `inspect` reporting permits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::Duration;

use support::{bin, unique};

fn redis_url() -> String {
    std::env::var("DISTLOCK_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:16379".into())
}

/// `distlock exec` with `extra` flags, whose CMD marks its start and end (with `tag`) in `marks`.
fn start(url: &str, name: &str, extra: &[&str], marks: &Path, tag: &str, hold: &str) -> Child {
    let script = format!(
        "echo enter $(date +%s%N) {tag} >> {m}; sleep {hold}; echo exit $(date +%s%N) {tag} >> {m}",
        m = marks.display()
    );
    bin()
        .args(["exec", "--url", url, "--name", name, "--wait", "60s"])
        .args(extra)
        .args(["--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn distlock")
}

fn finish(children: Vec<Child>) {
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", explain(&out));
    }
}

fn explain(out: &Output) -> String {
    format!(
        "status {:?}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The marks in time order: (ns, entering?, tag).
fn events(marks: &Path) -> Vec<(u128, bool, String)> {
    let text = std::fs::read_to_string(marks).unwrap();
    let mut ev: Vec<(u128, bool, String)> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[1].parse().unwrap(), f[0] == "enter", f[2].to_owned())
        })
        .collect();
    // At one instant an exit goes first: the marks are written before release and after grant.
    ev.sort_by_key(|(t, enter, _)| (*t, *enter));
    ev
}

/// Redis, SQLite row mode in `dir`, ZooKeeper (Curator's layouts), and etcd when built in.
fn urls(dir: &Path) -> Vec<String> {
    let mut urls = vec![
        redis_url(),
        format!("sqlite://{}/locks.db", dir.display()),
        std::env::var("DISTLOCK_TEST_ZK_URL").unwrap_or_else(|_| "zk://127.0.0.1:12181".into()),
    ];
    if cfg!(feature = "etcd") {
        urls.push(
            std::env::var("DISTLOCK_TEST_ETCD_URL")
                .unwrap_or_else(|_| "etcd://127.0.0.1:12379".into()),
        );
    }
    urls
}

#[test]
fn exec_max_runs_at_most_n_commands_at_once_and_uses_all_n() {
    let dir = support::tmp("exec-permits", "max");
    for url in urls(&dir) {
        exec_max_on(&url, &dir);
    }
}

fn exec_max_on(url: &str, dir: &Path) {
    let marks = dir.join(format!("marks-{}", unique()));
    let name = format!("cli-max-{}", unique());
    let children = (0..5)
        .map(|i| start(url, &name, &["--max", "2"], &marks, &i.to_string(), "0.4"))
        .collect();
    finish(children);
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, enter, _) in events(&marks) {
        now += if enter { 1 } else { -1 };
        peak = peak.max(now);
    }
    assert_eq!(peak, 2, "{url}: peak concurrent holders of 2 permits");
}

#[test]
fn exec_write_is_alone_and_exec_read_shares() {
    let dir = support::tmp("exec-permits", "rw");
    for url in urls(&dir) {
        exec_rw_on(&url, &dir);
    }
}

fn exec_rw_on(url: &str, dir: &Path) {
    let marks = dir.join(format!("marks-{}", unique()));
    let name = format!("cli-rw-{}", unique());
    let mut children: Vec<Child> = (0..3)
        .map(|i| start(url, &name, &["--read"], &marks, &format!("r{i}"), "0.5"))
        .collect();
    std::thread::sleep(Duration::from_millis(150));
    children.push(start(url, &name, &["--write"], &marks, "w", "0.3"));
    std::thread::sleep(Duration::from_millis(150));
    children.push(start(url, &name, &["--read"], &marks, "late", "0.2"));
    finish(children);
    let (mut readers, mut writers, mut peak_readers) = (0i32, 0i32, 0i32);
    let ev = events(&marks);
    for (_, enter, tag) in &ev {
        let d = if *enter { 1 } else { -1 };
        if tag == "w" {
            writers += d;
        } else {
            readers += d;
        }
        assert!(
            writers == 0 || (writers == 1 && readers == 0),
            "{url}: a writer beside another holder: {ev:?}"
        );
        peak_readers = peak_readers.max(readers);
    }
    assert!(peak_readers >= 2, "{url}: readers never shared: {ev:?}");
    // The late reader arrived while the writer waited: it runs after the writer.
    let at = |tag: &str, enter: bool| {
        ev.iter()
            .find(|(_, e, t)| t == tag && *e == enter)
            .map(|(t, _, _)| *t)
            .unwrap()
    };
    assert!(
        at("late", true) >= at("w", false),
        "{url}: a reader overtook a waiting writer: {ev:?}"
    );
}

#[test]
fn a_mismatched_count_or_a_store_without_the_primitive_exits_64() {
    let dir = support::tmp("exec-permits", "refused");
    let marks = dir.join("marks");
    let name = format!("cli-count-{}", unique());
    let url = redis_url();
    let holder = start(&url, &name, &["--max", "2"], &marks, "h", "2");
    std::thread::sleep(Duration::from_millis(700));
    let out = bin()
        .args([
            "exec", "--url", &url, "--name", &name, "--max", "3", "--", "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", explain(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("max_count 2") && err.contains("max_count 3"),
        "{err}"
    );
    let out = bin()
        .args([
            "inspect",
            "--url",
            &url,
            "--name",
            &name,
            "--semaphore",
            "--json",
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["max_count"].as_u64(), v["holders"].as_u64()),
        (Some(2), Some(1)),
        "{v}"
    );
    finish(vec![holder]);
    // Redlock offers neither (refused before any node is reached).
    let redlock = "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3";
    for (url, flag, says) in [
        (redlock, "--max=2", "single"),
        (redlock, "--read", "single"),
        (redlock, "--write", "single"),
    ] {
        let out = bin()
            .args(["exec", "--url", url, "--name", "x", flag, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{flag}: {}", explain(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{url} {flag}: {stderr}");
    }
    let out = bin()
        .args([
            "exec", "--url", &url, "--name", "x", "--max", "0", "--", "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "--max 0: {}", explain(&out));
}
