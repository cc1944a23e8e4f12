//! `distlock elect` and `distlock leader` as processes: one leader at a time runs CMD, a
//! finished leader hands over, a lost leadership terminates CMD's process group with exit 70,
//! `leader` names the leader (text and JSON) or exits 3, and bad input exits 64. On an SQLite
//! file (row mode) and on PostgreSQL `for_update` (identities by holding session). Linux only:
//! the tests read `/proc`.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use support::procs::{delete_row, gone, poll, read_pid, wait_exit, wait_file, Reaper};
use support::unique;

fn tmp(what: &str) -> PathBuf {
    support::tmp("electproc", what)
}

fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}/locks.db?table=exec_locks", dir.display())
}

/// Starts `distlock elect` as `identity`; CMD records "identity token" in `<identity>.led`, its
/// pid in `<identity>.pid`, and runs until the file `stop-<identity>` appears.
fn campaign(dir: &Path, url: &str, group: &str, identity: &str, extra: &[&str]) -> Child {
    let d = dir.display();
    let script = format!(
        "echo $$ > {d}/{identity}.pid; echo \"$DISTLOCK_IDENTITY $DISTLOCK_FENCING_TOKEN $DISTLOCK_NAME\" > {d}/{identity}.led; \
         while [ ! -f {d}/stop-{identity} ]; do sleep 0.05; done"
    );
    support::bin()
        .current_dir(dir)
        .stdin(Stdio::null())
        .args([
            "elect",
            "--url",
            url,
            "--group",
            group,
            "--identity",
            identity,
        ])
        .args(extra)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("stderr-{identity}"))).unwrap())
        .spawn()
        .expect("spawn distlock elect")
}

fn leader(url: &str, group: &str, json: bool) -> Output {
    let mut c: Command = support::bin();
    c.args(["leader", "--url", url, "--group", group]);
    if json {
        c.arg("--json");
    }
    c.output().unwrap()
}

/// "identity token group" written by a leader's CMD.
fn led(dir: &Path, identity: &str) -> (String, u64) {
    let text = wait_file(
        &dir.join(format!("{identity}.led")),
        Duration::from_secs(20),
    )
    .unwrap_or_else(|| panic!("{identity} never led"));
    let parts: Vec<&str> = text.split(' ').collect();
    assert_eq!(parts.len(), 3, "{text:?}");
    assert_eq!(parts[0], identity, "DISTLOCK_IDENTITY");
    (parts[2].to_owned(), parts[1].parse().unwrap())
}

#[test]
fn one_leader_runs_cmd_hands_over_when_done_and_leader_names_it() {
    let dir = tmp("handover");
    let url = sqlite_url(&dir);
    let group = format!("group-{}", unique());
    let mut reaper = Reaper::default();
    let none = leader(&url, &group, false);
    assert_eq!(none.status.code(), Some(3), "{none:?}");
    assert!(String::from_utf8_lossy(&none.stdout).contains("no leader"));

    let mut a = campaign(&dir, &url, &group, "a", &[]);
    reaper.watch(a.id() as i32);
    let (g, token_a) = led(&dir, "a");
    assert_eq!(g, group, "DISTLOCK_NAME");
    let mut b = campaign(&dir, &url, &group, "b", &[]);
    reaper.watch(b.id() as i32);
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        !dir.join("b.led").exists(),
        "b ran CMD while a led (two leaders)"
    );
    let out = leader(&url, &group, true);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["leader"]["identity"], "a", "{v}");
    assert_eq!(v["leader"]["fencing_token"], token_a, "{v}");
    assert_eq!(v["group"], group.as_str());

    std::fs::write(dir.join("stop-a"), "").unwrap();
    let status = wait_exit(&mut a, Duration::from_secs(10), "a");
    assert_eq!(status.code(), Some(0), "CMD's status after a clean term");
    let (_, token_b) = led(&dir, "b");
    assert!(token_b > token_a, "{token_b} not above {token_a}");
    let out = leader(&url, &group, false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("led by b") && text.contains(&token_b.to_string()),
        "{text}"
    );
    std::fs::write(dir.join("stop-b"), "").unwrap();
    assert_eq!(
        wait_exit(&mut b, Duration::from_secs(10), "b").code(),
        Some(0)
    );
    let out = leader(&url, &group, true);
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["leader"].is_null(), "{v}");
}

#[test]
fn lost_leadership_terminates_cmds_group_and_exits_70() {
    let dir = tmp("lost");
    let url = sqlite_url(&dir);
    let group = format!("lost-{}", unique());
    let mut reaper = Reaper::default();
    let mut a = campaign(&dir, &url, &group, "a", &["--ttl", "900ms"]);
    reaper.watch(a.id() as i32);
    let sh = reaper.watch(read_pid(&dir.join("a.pid")));
    led(&dir, "a");
    delete_row(&dir, &group);
    let status = wait_exit(&mut a, Duration::from_secs(5), "lost leadership");
    let err = std::fs::read_to_string(dir.join("stderr-a")).unwrap_or_default();
    assert_eq!(status.code(), Some(70), "{err}");
    assert!(err.contains("lost"), "{err}");
    assert!(
        poll(Duration::from_secs(2), || gone(sh).then_some(())).is_some(),
        "CMD outlived the lost leadership\n{err}"
    );
}

#[test]
fn bad_input_exits_64_wait_exits_75_and_for_update_names_its_leader() {
    let dir = tmp("bad");
    let url = sqlite_url(&dir);
    let group = format!("bad-{}", unique());
    for identity in ["", "two\nlines", &"x".repeat(129)] {
        let out = support::bin()
            .args([
                "elect",
                "--url",
                &url,
                "--group",
                &group,
                "--identity",
                identity,
            ])
            .args(["--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{identity:?}: {err}");
        assert!(err.contains("identity"), "{err}");
    }
    let out = leader(&url, "", false);
    assert_eq!(out.status.code(), Some(64));

    // Someone leads; a second participant with --wait gives up with 75 and never runs CMD.
    let mut reaper = Reaper::default();
    let mut a = campaign(&dir, &url, &group, "a", &[]);
    reaper.watch(a.id() as i32);
    led(&dir, "a");
    let mut b = campaign(&dir, &url, &group, "b", &["--wait", "300ms"]);
    assert_eq!(
        wait_exit(&mut b, Duration::from_secs(10), "b").code(),
        Some(75)
    );
    assert!(!dir.join("b.led").exists());
    std::fs::write(dir.join("stop-a"), "").unwrap();
    assert_eq!(
        wait_exit(&mut a, Duration::from_secs(10), "a").code(),
        Some(0)
    );

    // PostgreSQL for_update records identities by holding session: `leader` says nobody
    // leads (3), then names the participant that does.
    let pg = std::env::var("DISTLOCK_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:15432/distlock".to_owned());
    let fu = format!("{pg}?mode=for_update");
    let out = leader(&fu, &group, false);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{} (is PostgreSQL up? scripts/services.sh up)",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut c = campaign(&dir, &fu, &group, "c", &[]);
    reaper.watch(c.id() as i32);
    let (_, token) = led(&dir, "c");
    let out = leader(&fu, &group, true);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            v["leader"]["identity"].as_str(),
            v["leader"]["fencing_token"].as_u64()
        ),
        (Some("c"), Some(token)),
        "{v}"
    );
    std::fs::write(dir.join("stop-c"), "").unwrap();
    assert_eq!(
        wait_exit(&mut c, Duration::from_secs(10), "c").code(),
        Some(0)
    );
}

#[test]
fn default_identity_is_host_and_pid() {
    let dir = tmp("default-id");
    let url = sqlite_url(&dir);
    let group = format!("default-{}", unique());
    let out_file = dir.join("id");
    let mut child = support::bin()
        .stdin(Stdio::null())
        .args(["elect", "--url", &url, "--group", &group, "--"])
        .args([
            "sh",
            "-c",
            &format!("echo \"$DISTLOCK_IDENTITY\" > {}", out_file.display()),
        ])
        .spawn()
        .unwrap();
    let pid = child.id();
    assert_eq!(
        wait_exit(&mut child, Duration::from_secs(10), "elect").code(),
        Some(0)
    );
    let id = wait_file(&out_file, Duration::from_secs(1)).unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(id, format!("{}:{pid}", host.trim()));
}
