//! Interop with the real `etcdctl lock` (Debian's etcd-client, installed by
//! `scripts/services.sh up`): etcdctl processes and distlock holders contend on one name and
//! never overlap, and each side sees the other's holder.
//!
//! Every holder appends `enter <who>` and `leave <who>` lines to one file (O_APPEND: lines land
//! in the order the writes happened); any other line between a holder's enter and leave is an
//! overlap.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use support::{connect_or_explain, contenders, endpoints, single_url, unique};
use tokio::process::{Child, Command};

/// A holder's stay inside the lock.
const HOLD: Duration = Duration::from_millis(150);

fn stamp_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{name}.stamps"))
}

fn append(path: &Path, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// `etcdctl lock NAME -- sh -c '<enter>; sleep; <leave>'` against `url`'s servers.
fn etcdctl_lock(url: &str, name: &str, who: &str, file: &Path, hold: Duration) -> Child {
    let script = format!(
        "echo 'enter {who}' >> '{f}'; sleep {s}; echo 'leave {who}' >> '{f}'",
        f = file.display(),
        s = hold.as_secs_f64()
    );
    Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", endpoints(url).join(",")))
        .args(["lock", "--ttl=5", name, "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run etcdctl ({e}); `scripts/services.sh up` installs it (Debian etcd-client)"))
}

async fn wait_ok(child: Child, within: Duration) {
    let out = tokio::time::timeout(within, child.wait_with_output())
        .await
        .expect("etcdctl lock did not finish in time")
        .unwrap();
    assert!(
        out.status.success(),
        "etcdctl lock failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Checks that the stamps are enter/leave pairs of one holder each, never interleaved;
/// returns how many stays each side had (etcdctl, distlock).
fn check_no_overlap(file: &Path) -> (usize, usize) {
    let text = std::fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len().is_multiple_of(2), "unpaired stamps:\n{text}");
    let (mut etcdctl, mut ours) = (0, 0);
    for pair in lines.chunks(2) {
        let who = pair[0]
            .strip_prefix("enter ")
            .unwrap_or_else(|| panic!("overlap or garbage at {pair:?}:\n{text}"));
        assert_eq!(
            pair[1],
            format!("leave {who}"),
            "two holders at once:\n{text}"
        );
        if who.starts_with("etcdctl") {
            etcdctl += 1;
        } else {
            ours += 1;
        }
    }
    (etcdctl, ours)
}

#[tokio::test]
async fn etcdctl_and_distlock_holders_never_overlap() {
    let url = single_url();
    let name = unique("interop");
    let file = stamp_file(&name);
    let _ = std::fs::remove_file(&file);
    const ETCDCTL: usize = 4;
    const OURS: usize = 3;
    const ROUNDS: usize = 3;
    let mut ctl = Vec::new();
    for i in 0..ETCDCTL {
        ctl.push(etcdctl_lock(
            &url,
            &name,
            &format!("etcdctl-{i}"),
            &file,
            HOLD,
        ));
    }
    let mut ours = Vec::new();
    for i in 0..OURS {
        let (lock, name, file) = (connect_or_explain(&url).await, name.clone(), file.clone());
        ours.push(tokio::spawn(async move {
            for r in 0..ROUNDS {
                let g = lock
                    .acquire(&name, &AcquireOptions::new().wait(Duration::from_secs(60)))
                    .await
                    .unwrap();
                append(&file, &format!("enter distlock-{i}-{r}"));
                tokio::time::sleep(HOLD).await;
                assert!(!g.is_lost());
                append(&file, &format!("leave distlock-{i}-{r}"));
                g.release().await.unwrap();
            }
        }));
    }
    for c in ctl {
        wait_ok(c, Duration::from_secs(60)).await;
    }
    for t in ours {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("distlock holders did not finish")
            .unwrap();
    }
    assert_eq!(check_no_overlap(&file), (ETCDCTL, OURS * ROUNDS));
    assert!(
        contenders(&url, "", &name).await.is_empty(),
        "keys left behind"
    );
    let _ = std::fs::remove_file(&file);
}

/// The two sides see each other's holder: distlock cannot take a name etcdctl holds (and its
/// `inspect` shows etcdctl's key), and etcdctl waits for a name distlock holds until it is
/// released.
#[tokio::test]
async fn each_side_sees_the_others_holder() {
    let url = single_url();
    let name = unique("sees");
    let file = stamp_file(&name);
    let _ = std::fs::remove_file(&file);
    let lock: Arc<dyn DistributedLock> = connect_or_explain(&url).await;

    // etcdctl holds for 2 s.
    let ctl = etcdctl_lock(&url, &name, "etcdctl-holder", &file, Duration::from_secs(2));
    let entered = tokio::time::Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&file).is_ok_and(|t| t.contains("enter")) {
        assert!(
            tokio::time::Instant::now() < entered,
            "etcdctl never got the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let keys = contenders(&url, "", &name).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(
        keys[0].0.starts_with(&format!("{name}/")),
        "etcdctl's key {keys:?} is not NAME/<lease>"
    );
    let info = lock.inspect(&name).await.unwrap();
    assert!(info.held);
    assert_eq!(info.fencing_token, Some(keys[0].1 as u64));
    let tried = lock
        .try_acquire(&name, &AcquireOptions::new())
        .await
        .unwrap();
    assert!(tried.is_none(), "distlock took a name etcdctl holds");
    // A waiting distlock acquire gets it once etcdctl is done, with a later revision.
    let g = lock
        .acquire(&name, &AcquireOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains("leave etcdctl-holder"));
    assert!(g.fencing_token() > keys[0].1 as u64);
    wait_ok(ctl, Duration::from_secs(10)).await;

    // distlock holds: etcdctl waits until the release.
    let ctl = etcdctl_lock(&url, &name, "etcdctl-waiter", &file, Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !std::fs::read_to_string(&file)
            .unwrap()
            .contains("etcdctl-waiter"),
        "etcdctl got a name distlock holds"
    );
    append(&file, "release distlock");
    g.release().await.unwrap();
    wait_ok(ctl, Duration::from_secs(10)).await;
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.find("release distlock") < text.find("enter etcdctl-waiter"),
        "{text}"
    );
    let _ = std::fs::remove_file(&file);
}
