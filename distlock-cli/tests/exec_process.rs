//! `distlock exec` never lets CMD (or anything CMD started) run without the lock: the whole
//! process group is signalled, survives neither a lost lock nor the death of `distlock`, and a
//! run whose lock was not held to the end never exits 0. Real processes against real stores
//! (an SQLite file; Redis from `scripts/services.sh up` for the waiter test). Linux only: the
//! tests read `/proc`.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::procs::{delete_row, gone, poll, read_pid, wait_exit, wait_file, Reaper};
use support::unique;

/// The lock table the tests' SQLite URLs name (so the row to delete does not depend on a
/// default).
const TABLE: &str = "exec_locks";

fn bin() -> Command {
    let mut c = support::bin();
    c.stdin(Stdio::null());
    c
}

fn tmp(what: &str) -> PathBuf {
    support::tmp("execproc", what)
}

fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}/locks.db?table={TABLE}", dir.display())
}

/// Starts `distlock exec` in `dir` (core files and stray output stay there), stderr to a file
/// (a pipe would stay open in any process that outlived distlock).
fn start(dir: &Path, url: &str, name: &str, extra: &[&str], script: &str) -> Child {
    bin()
        .current_dir(dir)
        .args(["exec", "--url", url, "--name", name])
        .args(extra)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("stderr-{name}"))).unwrap())
        .spawn()
        .expect("spawn distlock")
}

fn stderr_of(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(format!("stderr-{name}"))).unwrap_or_default()
}

/// `distlock exec --wait 0s -- true` on `name`: the lock is free right now.
fn lock_is_free(dir: &Path, url: &str, name: &str) -> Result<(), String> {
    let out = bin()
        .current_dir(dir)
        .args([
            "exec", "--url", url, "--name", name, "--wait", "0s", "--", "true",
        ])
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "status {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// CMD = `sh -c 'echo $$ > sh.pid; sleep 1000 & echo $! > grandchild.pid; wait'`.
fn sleeper_script(dir: &Path) -> String {
    format!(
        "echo $$ > {d}/sh.pid; sleep 1000 & echo $! > {d}/grandchild.pid; wait",
        d = dir.display()
    )
}

#[test]
fn lost_lock_terminates_cmds_whole_process_group_and_exits_70() {
    let dir = tmp("lost-group");
    let url = sqlite_url(&dir);
    let name = format!("lost-group-{}", unique());
    let mut reaper = Reaper::default();
    let mut child = start(
        &dir,
        &url,
        &name,
        &["--ttl", "900ms"],
        &sleeper_script(&dir),
    );
    let sh = reaper.watch(read_pid(&dir.join("sh.pid")));
    let grandchild = reaper.watch(read_pid(&dir.join("grandchild.pid")));
    delete_row(&dir, &name);
    let status = wait_exit(&mut child, Duration::from_secs(5), "lost lock");
    let err = stderr_of(&dir, &name);
    assert_eq!(status.code(), Some(70), "{err}");
    assert!(err.contains("lost"), "{err}");
    assert!(
        poll(Duration::from_secs(2), || (gone(sh) && gone(grandchild))
            .then_some(()))
        .is_some(),
        "CMD's processes outlived the lost lock: sh gone {}, grandchild gone {}\n{err}",
        gone(sh),
        gone(grandchild)
    );
}

#[test]
fn lost_lock_kills_a_grandchild_that_ignores_sigterm_after_kill_after() {
    // CMD exits 0 on SIGTERM, its background grandchild ignores SIGTERM: the exit status must
    // still be 70, and the grandchild must get SIGKILL at --kill-after.
    let dir = tmp("lost-stubborn");
    let url = sqlite_url(&dir);
    let name = format!("lost-stubborn-{}", unique());
    let script = format!(
        "trap 'exit 0' TERM; sh -c 'trap \"\" TERM; echo $$ > {d}/grandchild.pid; while :; do sleep 0.05; done' & wait",
        d = dir.display()
    );
    let mut reaper = Reaper::default();
    let mut child = start(
        &dir,
        &url,
        &name,
        &["--ttl", "900ms", "--kill-after", "1s"],
        &script,
    );
    let grandchild = reaper.watch(read_pid(&dir.join("grandchild.pid")));
    delete_row(&dir, &name);
    let t = Instant::now();
    let status = wait_exit(&mut child, Duration::from_secs(6), "lost lock");
    let err = stderr_of(&dir, &name);
    assert_eq!(
        status.code(),
        Some(70),
        "CMD exited 0 but the lock was lost: {err}"
    );
    assert!(
        poll(Duration::from_secs(2), || gone(grandchild).then_some(())).is_some(),
        "a grandchild ignoring SIGTERM outlived the lost lock (waited {:?})\n{err}",
        t.elapsed()
    );
}

#[test]
fn release_answered_not_held_exits_70_even_when_cmd_exited_0() {
    let dir = tmp("not-held");
    let url = sqlite_url(&dir);
    let name = format!("not-held-{}", unique());
    // A long lease: the renewal (every 10 s) cannot notice the loss before CMD exits, only the
    // release at the end can.
    let script = format!(
        "echo $$ > {d}/sh.pid; i=0; while [ ! -e {d}/go ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done; exit 0",
        d = dir.display()
    );
    let mut reaper = Reaper::default();
    let mut child = start(&dir, &url, &name, &["--ttl", "30s"], &script);
    reaper.watch(read_pid(&dir.join("sh.pid")));
    delete_row(&dir, &name);
    std::fs::write(dir.join("go"), "go").unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(8), "release NotHeld");
    let err = stderr_of(&dir, &name);
    assert_eq!(status.code(), Some(70), "{err}");
    assert!(err.contains("not protected"), "{err}");
}

#[test]
fn sigkill_of_distlock_kills_cmd_and_its_children() {
    let dir = tmp("sigkill");
    let url = sqlite_url(&dir);
    let name = format!("sigkill-{}", unique());
    let mut reaper = Reaper::default();
    let mut child = start(&dir, &url, &name, &[], &sleeper_script(&dir));
    let sh = reaper.watch(read_pid(&dir.join("sh.pid")));
    let grandchild = reaper.watch(read_pid(&dir.join("grandchild.pid")));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        poll(Duration::from_secs(5), || (gone(sh) && gone(grandchild))
            .then_some(()))
        .is_some(),
        "CMD outlived a SIGKILLed distlock: sh gone {}, grandchild gone {}",
        gone(sh),
        gone(grandchild)
    );
}

/// CMD whose grandchild (a foreground `sh` under CMD's `sh`) writes the name of the signal it
/// got to `got`; CMD itself exits 3 when it gets the signal (after the grandchild ended).
fn trap_script(dir: &Path, sig: &str) -> String {
    format!(
        "trap 'exit 3' {sig}; sh -c 'trap \"echo {sig} > {d}/got; exit 0\" {sig}; echo $$ > {d}/grandchild.pid; i=0; while [ $i -lt 2000 ]; do sleep 0.05; i=$((i+1)); done'; exit 9",
        d = dir.display()
    )
}

/// Sends `sig` to distlock running [`trap_script`]; checks the grandchild got it, distlock
/// exited with CMD's status (3) and released the lock.
fn forwards(sig: Signal) {
    let short = sig.as_str().trim_start_matches("SIG");
    let dir = tmp(&format!("fwd-{short}"));
    let url = sqlite_url(&dir);
    let name = format!("fwd-{short}-{}", unique());
    let mut reaper = Reaper::default();
    let mut child = start(&dir, &url, &name, &[], &trap_script(&dir, short));
    let grandchild = reaper.watch(read_pid(&dir.join("grandchild.pid")));
    kill(Pid::from_raw(child.id() as i32), sig).unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(5), short);
    let err = stderr_of(&dir, &name);
    assert_eq!(
        wait_file(&dir.join("got"), Duration::from_secs(1)).as_deref(),
        Some(short),
        "{short} did not reach CMD's grandchild\n{err}"
    );
    assert_eq!(
        status.code(),
        Some(3),
        "{short}: distlock should exit with CMD's status\n{err}"
    );
    assert!(gone(grandchild), "{short}: the grandchild still runs");
    lock_is_free(&dir, &url, &name).unwrap_or_else(|e| panic!("{short}: lock not released: {e}"));
}

#[test]
fn sighup_is_forwarded_to_the_group_and_the_lock_released() {
    forwards(Signal::SIGHUP);
}

#[test]
fn sigint_sigterm_sigquit_sigusr1_sigusr2_reach_a_grandchild() {
    for sig in [
        Signal::SIGUSR1,
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGQUIT,
        Signal::SIGUSR2,
    ] {
        forwards(sig);
    }
}

#[test]
fn a_signal_while_waiting_for_the_lock_gives_up_with_128_plus_n() {
    let redis = std::env::var("DISTLOCK_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:16379".to_owned());
    let dir = tmp("waiting");
    for url in [sqlite_url(&dir), redis] {
        let name = format!("waiting-{}", unique());
        let mut reaper = Reaper::default();
        let holder_script = format!("echo $$ > {}/holder.pid; sleep 30", dir.display());
        let _ = std::fs::remove_file(dir.join("holder.pid"));
        let mut holder = start(&dir, &url, &name, &[], &holder_script);
        reaper.watch(read_pid(&dir.join("holder.pid")));
        let waiter_name = format!("{name}-waiter");
        let mut waiter = bin()
            .current_dir(&dir)
            .args(["exec", "--url", &url, "--name", &name, "--wait", "30s"])
            .args(["--", "sh", "-c", "echo ran"])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join(format!("stderr-{waiter_name}"))).unwrap())
            .spawn()
            .unwrap();
        // The waiter has connected and queued long before this.
        std::thread::sleep(Duration::from_millis(700));
        kill(Pid::from_raw(waiter.id() as i32), Signal::SIGHUP).unwrap();
        let status = wait_exit(&mut waiter, Duration::from_secs(5), "waiter");
        let err = stderr_of(&dir, &waiter_name);
        assert_eq!(status.code(), Some(128 + 1), "{url}: {err}");
        let mut ran = String::new();
        std::io::Read::read_to_string(&mut waiter.stdout.take().unwrap(), &mut ran).unwrap();
        assert_eq!(ran, "", "{url}: the waiter ran CMD after SIGHUP");
        // The holder still holds; SIGTERM ends its CMD (sleep dies of it: 143) and frees it.
        assert!(holder.try_wait().unwrap().is_none(), "{url}: holder ended");
        kill(Pid::from_raw(holder.id() as i32), Signal::SIGTERM).unwrap();
        let status = wait_exit(&mut holder, Duration::from_secs(5), "holder");
        assert_eq!(
            status.code(),
            Some(128 + 15),
            "{url}: {}",
            stderr_of(&dir, &name)
        );
        // The waiter that gave up left nothing behind that would delay the next one.
        lock_is_free(&dir, &url, &name).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}
