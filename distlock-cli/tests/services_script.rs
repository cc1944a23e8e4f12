//! `scripts/services.sh up` (and `start-one`) brings an instance back whatever the last run left:
//! a store a fault test paused (SIGSTOP) and never resumed because the run ended first is resumed,
//! and a pid file whose pid now names another process (pid_max is 32768; a day of builds reuses
//! pids) is neither taken for "already up" nor killed by `stop-one`. A CI run once failed
//! "zookeeper on 12281 did not answer within 90s" on a machine a session had left behind.
//!
//! These run on the chaos set's instances (`DISTLOCK_SERVICES_SET=chaos`, ports +1000), which no
//! other test shares while the suite runs. Linux only: the script reads `/proc`.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output};
use std::time::Duration;

use support::procs;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/services.sh")
}

/// Where the chaos set keeps its instances (as the script computes it).
fn chaos_dir() -> PathBuf {
    let base = std::env::var("DISTLOCK_SERVICES_DIR")
        .unwrap_or_else(|_| "/tmp/distlock-services".to_string());
    PathBuf::from(format!("{base}-chaos"))
}

fn services(args: &[&str]) -> Output {
    Command::new("bash")
        .arg(script())
        .args(args)
        .env("DISTLOCK_SERVICES_SET", "chaos")
        // A wedged instance fails in 20 s here rather than the default 90.
        .env("DISTLOCK_SERVICES_WAIT", "20")
        .output()
        .expect("run scripts/services.sh")
}

fn services_ok(args: &[&str]) {
    let out = services(args);
    assert!(
        out.status.success(),
        "services.sh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn pid_of(name: &str) -> i32 {
    let out = services(&["pid", name]);
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no pid for {name}: {out:?}"))
}

fn alive(pid: i32) -> bool {
    !procs::gone(pid)
}

/// Whether `pid` is gone within 5 s (SIGKILL takes effect asynchronously).
fn gone(pid: i32) -> bool {
    procs::poll(Duration::from_secs(5), || procs::gone(pid).then_some(())).is_some()
}

/// ZooKeeper's `ruok`, with a bounded wait.
fn zk_says_imok(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(
        &format!("127.0.0.1:{port}").parse().unwrap(),
        Duration::from_secs(2),
    ) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    if s.write_all(b"ruok").is_err() {
        return false;
    }
    let mut answer = String::new();
    s.read_to_string(&mut answer).is_ok() && answer == "imok"
}

/// A process of no concern to the script, to hand its pid to a pid file.
fn bystander() -> Child {
    Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("spawn sleep")
}

#[test]
fn zookeeper_left_paused_or_behind_a_reused_pid_comes_back_and_the_bystander_lives() {
    const NAME: &str = "zk-13181";
    services_ok(&["start-one", NAME]);
    let pid = pid_of(NAME);

    // Paused by a fault test that never resumed it: alive, answers nothing.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    assert!(!zk_says_imok(13181), "a paused ZooKeeper answered");
    services_ok(&["start-one", NAME]);
    assert!(zk_says_imok(13181), "start-one left ZooKeeper paused");
    assert_eq!(
        pid_of(NAME),
        pid,
        "a paused instance is resumed, not replaced"
    );

    stale_pid_is_neither_trusted_nor_killed(NAME, "zk.pid", || zk_says_imok(13181));
}

#[test]
fn redis_behind_a_reused_pid_is_started_and_the_bystander_lives() {
    services_ok(&["start-one", "redis-17379"]);
    stale_pid_is_neither_trusted_nor_killed("redis-17379", "redis.pid", || {
        Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", "17379", "ping"])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "PONG")
    });
}

/// With instance `name` running: stops it, hands its pid file to a bystander, and checks that
/// `start-one` starts a real instance (`answers`) and `stop-one` never kills the bystander.
fn stale_pid_is_neither_trusted_nor_killed(name: &str, pidfile: &str, answers: impl Fn() -> bool) {
    services_ok(&["stop-one", name]);
    assert!(!answers(), "{name} still answers after stop-one");
    let mut other = bystander();
    let pidfile = chaos_dir().join(name).join(pidfile);
    std::fs::write(&pidfile, format!("{}\n", other.id())).unwrap();
    services_ok(&["start-one", name]);
    assert!(
        answers(),
        "start-one took another process's pid for a running {name}"
    );
    let real = pid_of(name);
    assert_ne!(real, other.id() as i32);

    std::fs::write(&pidfile, format!("{}\n", other.id())).unwrap();
    services_ok(&["stop-one", name]);
    assert!(
        alive(other.id() as i32),
        "stop-one killed a process that only shared a stale pid"
    );
    other.kill().unwrap();
    other.wait().unwrap();
    std::fs::write(&pidfile, format!("{real}\n")).unwrap();
    services_ok(&["stop-one", name]);
    assert!(gone(real), "stop-one left the real {name} running");
}
