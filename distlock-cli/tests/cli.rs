//! The `distlock` binary run as a process against real stores (`scripts/services.sh up`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{bin, unique};

fn tmp(what: &str) -> PathBuf {
    support::tmp("cli", what)
}

fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

/// Every landed backend, with the store URLs `scripts/services.sh up` provides.
fn backends(dir: &Path) -> Vec<String> {
    vec![
        format!("sqlite://{}/locks.db", dir.display()),
        format!("{}?mode=row", env_or("DISTLOCK_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:15432/distlock")),
        format!("{}?mode=for_update", env_or("DISTLOCK_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:15432/distlock")),
        format!("{}?mode=row", env_or("DISTLOCK_TEST_MYSQL_URL", "mysql://root@127.0.0.1:13306/distlock")),
        format!("{}?mode=for_update", env_or("DISTLOCK_TEST_MYSQL_URL", "mysql://root@127.0.0.1:13306/distlock")),
        env_or("DISTLOCK_TEST_REDIS_URL", "redis://127.0.0.1:16379"),
        env_or("DISTLOCK_TEST_REDLOCK_URL", "redlock://127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005"),
        env_or("DISTLOCK_TEST_ZK_URL", "zk://127.0.0.1:12181"),
    ]
}

fn exec(url: &str, name: &str, extra: &[&str], cmd: &[&str]) -> Output {
    let mut c = bin();
    c.args(["exec", "--url", url, "--name", name])
        .args(extra)
        .arg("--")
        .args(cmd);
    c.output().expect("run distlock")
}

fn explain(out: &Output) -> String {
    format!(
        "status {:?}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn two_exec_processes_never_overlap_on_any_backend() {
    let dir = tmp("overlap");
    for url in backends(&dir) {
        let marks = dir.join(format!("marks-{}", unique()));
        let name = format!("cli-overlap-{}", unique());
        let script = format!(
            "echo enter $(date +%s%N) $DISTLOCK_FENCING_TOKEN >> {m}; sleep 0.3; echo exit $(date +%s%N) >> {m}",
            m = marks.display()
        );
        let children: Vec<_> = (0..3)
            .map(|_| {
                bin()
                    .args([
                        "exec", "--url", &url, "--name", &name, "--wait", "30s", "--", "sh", "-c",
                        &script,
                    ])
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn distlock")
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "{url}: {}", explain(&out));
        }
        let text = std::fs::read_to_string(&marks).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{url}: {text}");
        let mut last_exit = 0u128;
        let mut last_token = 0u64;
        for pair in lines.chunks(2) {
            let enter: Vec<&str> = pair[0].split_whitespace().collect();
            let exit: Vec<&str> = pair[1].split_whitespace().collect();
            assert_eq!(
                (enter[0], exit[0]),
                ("enter", "exit"),
                "{url}: interleaved marks\n{text}"
            );
            let (t_in, t_out): (u128, u128) = (enter[1].parse().unwrap(), exit[1].parse().unwrap());
            assert!(
                t_in >= last_exit && t_out >= t_in,
                "{url}: overlapping holds\n{text}"
            );
            let token: u64 = enter[2].parse().unwrap();
            assert!(
                token > last_token,
                "{url}: fencing token did not grow\n{text}"
            );
            last_exit = t_out;
            last_token = token;
        }
    }
}

#[test]
fn exit_codes() {
    let dir = tmp("codes");
    let url = format!("sqlite://{}/locks.db", dir.display());
    // The command's status is passed through.
    let out = exec(&url, "codes", &[], &["sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", explain(&out));
    // Not acquired within --wait: 75.
    let mut holder = bin()
        .args(["exec", "--url", &url, "--name", "held", "--", "sleep", "5"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let t = Instant::now();
    let out = exec(&url, "held", &["--wait", "500ms"], &["true"]);
    assert_eq!(out.status.code(), Some(75), "{}", explain(&out));
    assert!(t.elapsed() >= Duration::from_millis(500));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("timed out"),
        "{}",
        explain(&out)
    );
    let _ = holder.kill();
    let _ = holder.wait();
    // Bad URL: 64. Store down: 69. Missing command: 127.
    assert_eq!(
        exec("nope://x", "n", &[], &["true"]).status.code(),
        Some(64)
    );
    let down = exec(
        "postgres://postgres@127.0.0.1:1/distlock?connect_timeout=1s",
        "n",
        &[],
        &["true"],
    );
    assert_eq!(down.status.code(), Some(69), "{}", explain(&down));
    let missing = exec(&url, "n2", &[], &["/nonexistent/command"]);
    assert_eq!(missing.status.code(), Some(127), "{}", explain(&missing));
}

#[test]
fn lost_lock_terminates_the_command_with_70() {
    let redis = env_or("DISTLOCK_TEST_REDIS_URL", "redis://127.0.0.1:16379");
    let name = format!("cli-lost-{}", unique());
    let dir = tmp("lost");
    let marker = dir.join("terminated");
    let errfile = dir.join("stderr");
    let script = format!(
        "trap 'echo TERM > {}; exit 143' TERM; sleep 30 & wait",
        marker.display()
    );
    // stderr to a file: a pipe would stay open in CMD's orphaned `sleep`.
    let mut child = bin()
        .args([
            "exec",
            "--url",
            &redis,
            "--name",
            &name,
            "--ttl",
            "1s",
            "--kill-after",
            "2s",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(std::fs::File::create(&errfile).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    // Remove the lock underneath the holder, as an operator or another bug would.
    let del = Command::new("redis-cli")
        .args(["-p", redis.rsplit(':').next().unwrap(), "DEL", &name])
        .output();
    assert!(
        del.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "1"),
        "key was not there to delete"
    );
    let t = Instant::now();
    let status = child.wait().unwrap();
    let err = std::fs::read_to_string(&errfile).unwrap_or_default();
    assert_eq!(status.code(), Some(70), "{err}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    assert!(err.contains("lost"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap_or_default().trim(),
        "TERM",
        "CMD did not get SIGTERM"
    );
}

#[test]
fn bad_configuration_is_quoted_and_passwords_never_printed() {
    for (url, quoted) in [
        ("consul://127.0.0.1:8500", "consul"),
        ("redis://127.0.0.1:16379?bogus=1", "bogus"),
        ("redis://127.0.0.1:16379?ttl=abc", "ttl=abc"),
        ("redlock://127.0.0.1:17001,127.0.0.1:17002", "got 2"),
        ("redis://user:hunter2@127.0.0.1:16379?bogus=1", "bogus"),
        (
            "postgres://user:hunter2@127.0.0.1:15432/distlock?mode=nope",
            "mode=nope",
        ),
    ] {
        let out = exec(url, "n", &[], &["true"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{url}: {err}");
        assert!(err.contains(quoted), "{url}: {err}");
        assert!(!err.contains("hunter2"), "{url}: password printed: {err}");
    }
}

#[test]
fn inspect_reports_the_holder_as_json() {
    let dir = tmp("inspect");
    let url = format!("sqlite://{}/locks.db", dir.display());
    let mut holder = bin()
        .args(["exec", "--url", &url, "--name", "job", "--", "sleep", "3"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let out = bin()
        .args(["inspect", "--url", &url, "--name", "job", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["held"], true, "{v}");
    assert!(v["fencing_token"].as_u64().unwrap_or(0) > 0, "{v}");
    let _ = holder.kill();
    let _ = holder.wait();
    let out = bin()
        .args(["inspect", "--url", &url, "--name", "never-taken"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("free"));
}

#[test]
fn help_documents_every_exit_code() {
    let out = bin().args(["exec", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for code in ["64", "69", "70", "71", "75", "127", "128+N"] {
        assert!(help.contains(code), "--help lacks exit code {code}");
    }
}
