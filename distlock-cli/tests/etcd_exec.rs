//! `distlock exec` processes and real `etcdctl lock` processes (Debian's etcd-client, from
//! `scripts/services.sh up`) contend on one etcd lock name: each stay in the lock appends
//! `enter WHO` / `leave WHO` to one file, and no stay may interleave with another.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn etcd_url() -> String {
    std::env::var("DISTLOCK_TEST_ETCD_URL").unwrap_or_else(|_| "etcd://127.0.0.1:12379".into())
}

/// The shell body each holder runs inside the lock.
fn stay(who: &str, file: &std::path::Path) -> String {
    format!(
        "echo 'enter {who}' >> '{f}'; sleep 0.15; echo 'leave {who}' >> '{f}'",
        f = file.display()
    )
}

fn wait_all(children: Vec<(String, Child)>, within: Duration) {
    let until = Instant::now() + within;
    for (who, mut c) in children {
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                assert!(status.success(), "{who} exited with {status}");
                break;
            }
            if Instant::now() > until {
                let _ = c.kill();
                panic!("{who} did not finish within {within:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn distlock_exec_and_etcdctl_lock_never_overlap() {
    let url = etcd_url();
    let endpoint = url.replacen("etcd://", "http://", 1);
    let dir = support::tmp("etcd-exec", "overlap");
    let file = dir.join("stamps");
    let name = format!("exec-interop-{}", support::unique());
    let mut children = Vec::new();
    for i in 0..3 {
        let who = format!("etcdctl-{i}");
        let c = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args([&format!("--endpoints={endpoint}"), "lock", "--ttl=5", &name])
            .args(["--", "sh", "-c", &stay(&who, &file)])
            .stdout(Stdio::null())
            .spawn()
            .expect("etcdctl (Debian etcd-client) is missing: run `scripts/services.sh up`");
        children.push((who, c));
        let who = format!("distlock-{i}");
        let c = support::bin()
            .args(["exec", "--url", &url, "--name", &name, "--wait", "60s"])
            .args(["--", "sh", "-c", &stay(&who, &file)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        children.push((who, c));
    }
    wait_all(children, Duration::from_secs(60));
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 12, "six stays expected:\n{text}");
    for pair in lines.chunks(2) {
        let who = pair[0]
            .strip_prefix("enter ")
            .unwrap_or_else(|| panic!("overlap at {pair:?}:\n{text}"));
        assert_eq!(
            pair[1],
            format!("leave {who}"),
            "two holders at once:\n{text}"
        );
    }
    for side in ["etcdctl", "distlock"] {
        assert_eq!(text.matches(&format!("enter {side}-")).count(), 3, "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
