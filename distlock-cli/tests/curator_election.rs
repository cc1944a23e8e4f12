//! Interop with real Apache Curator: a Java `LeaderLatch` participant (Debian's
//! `libcurator-recipes-java`, `tests/java/LatchParticipant.java`, compiled here with `javac`)
//! and `distlock elect` processes campaign in one group on ZooKeeper (`scripts/services.sh
//! up`, 127.0.0.1:12181). Every participant records when it believes it leads (the Java one
//! from Curator's `isLeader`/`notLeader` callbacks; a distlock one from its CMD, which starts
//! after the leadership is won and writes `leave` when SIGTERMed at its loss or when it ends);
//! a killed participant's term ends when the test killed it. At no moment may two terms
//! overlap, and a killed leader — Java or distlock — is replaced by the next in line.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::java::{compile_java, now_us, zk_hosts};
use support::procs::{gone, poll, read_pid, wait_exit, Reaper};
use support::unique;

/// Session timeout of every participant: a killed one is replaced after about this long.
const SESSION_MS: u64 = 3000;

/// One participant and the file its terms are recorded in.
struct Participant {
    id: String,
    child: Child,
    log: PathBuf,
}

fn java(dir: &Path, cp: &str, group: &str, id: &str) -> Participant {
    let log = dir.join(format!("{id}.log"));
    let child = Command::new("java")
        .args(["-cp", cp, "LatchParticipant", &zk_hosts()])
        .arg(format!("/distlock/{group}"))
        .arg(id)
        .arg(&log)
        .arg(SESSION_MS.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("stderr-{id}"))).unwrap())
        .spawn()
        .expect("spawn java");
    Participant {
        id: id.to_owned(),
        child,
        log,
    }
}

fn distlock(dir: &Path, group: &str, id: &str) -> Participant {
    let log = dir.join(format!("{id}.log"));
    let d = dir.display();
    // `enter` first thing, `leave` on SIGTERM (the loss) or at the end (stop file).
    let script = format!(
        "echo $$ > {d}/{id}.pid; echo enter $(date +%s%6N) >> {log}; \
         trap 'echo leave $(date +%s%6N) >> {log}; exit 0' TERM; \
         while [ ! -f {d}/stop-{id} ]; do sleep 0.05; done; echo leave $(date +%s%6N) >> {log}",
        log = log.display()
    );
    let url = format!("zk://{}?session_timeout={}ms", zk_hosts(), SESSION_MS);
    let child = support::bin()
        .current_dir(dir)
        .stdin(Stdio::null())
        .args(["elect", "--url", &url, "--group", group, "--identity", id])
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("stderr-{id}"))).unwrap())
        .spawn()
        .expect("spawn distlock elect");
    Participant {
        id: id.to_owned(),
        child,
        log,
    }
}

/// The (kind, µs) records of a participant's log.
fn records(p: &Participant) -> Vec<(String, u64)> {
    std::fs::read_to_string(&p.log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, t) = l.split_once(' ')?;
            Some((k.to_owned(), t.trim().parse().ok()?))
        })
        .collect()
}

fn entered(p: &Participant) -> bool {
    records(p).iter().any(|(k, _)| k == "enter")
}

/// Waits (bounded) until `p` leads.
fn await_enter(p: &Participant, within: Duration) {
    assert!(
        poll(within, || entered(p).then_some(())).is_some(),
        "{} did not become leader within {within:?}",
        p.id
    );
}

/// SIGKILLs a participant (a distlock one with its CMD) and records the end of its term.
fn kill(dir: &Path, p: &mut Participant) {
    p.child.kill().unwrap();
    let _ = p.child.wait();
    let cmd = dir.join(format!("{}.pid", p.id));
    if cmd.exists() {
        let pid = read_pid(&cmd);
        assert!(
            poll(Duration::from_secs(5), || gone(pid).then_some(())).is_some(),
            "{}'s CMD outlived its killed distlock",
            p.id
        );
    }
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&p.log)
        .unwrap();
    writeln!(f, "leave {}", now_us()).unwrap();
}

fn leader_identity(group: &str) -> String {
    let url = format!("zk://{}", zk_hosts());
    let out = support::bin()
        .args(["leader", "--url", &url, "--group", group, "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["leader"]["identity"].as_str().unwrap().to_owned()
}

#[test]
fn curator_leader_latch_and_distlock_elect_one_leader_at_a_time() {
    let dir = support::tmp("curator", "elect");
    let cp = compile_java(&dir, "LatchParticipant");
    let group = format!("curator-elect-{}", unique());
    let mut reaper = Reaper::default();
    let limit = Duration::from_millis(SESSION_MS * 4 + 10_000);

    // A Java participant leads first; two distlock participants line up behind it.
    let mut j1 = java(&dir, &cp, &group, "java-1");
    reaper.watch(j1.child.id() as i32);
    await_enter(&j1, Duration::from_secs(30));
    let mut d1 = distlock(&dir, &group, "distlock-1");
    reaper.watch(d1.child.id() as i32);
    std::thread::sleep(Duration::from_millis(500));
    let mut d2 = distlock(&dir, &group, "distlock-2");
    reaper.watch(d2.child.id() as i32);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        leader_identity(&group),
        "java-1",
        "distlock leader reads Curator's id"
    );

    // The Java leader resigns: the first distlock participant leads.
    writeln!(j1.child.stdin.as_mut().unwrap(), "resign").unwrap();
    await_enter(&d1, limit);
    assert_eq!(leader_identity(&group), "distlock-1");

    // A second Java participant lines up; the distlock leader is SIGKILLed: distlock-2 leads
    // once the dead session expires.
    let mut j2 = java(&dir, &cp, &group, "java-2");
    reaper.watch(j2.child.id() as i32);
    poll(Duration::from_secs(30), || {
        records(&j2)
            .iter()
            .any(|(k, _)| k == "started")
            .then_some(())
    })
    .expect("java-2 did not start");
    kill(&dir, &mut d1);
    await_enter(&d2, limit);

    // distlock-2 ends its term (CMD done): the Java participant behind it leads.
    std::fs::write(dir.join("stop-distlock-2"), "").unwrap();
    assert_eq!(
        wait_exit(&mut d2.child, Duration::from_secs(10), "distlock-2").code(),
        Some(0)
    );
    await_enter(&j2, limit);
    assert_eq!(leader_identity(&group), "java-2");

    // A distlock participant lines up; the Java leader is SIGKILLed: distlock-3 leads.
    let mut d3 = distlock(&dir, &group, "distlock-3");
    reaper.watch(d3.child.id() as i32);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!entered(&d3), "distlock-3 led while java-2 did");
    kill(&dir, &mut j2);
    await_enter(&d3, limit);
    std::fs::write(dir.join("stop-distlock-3"), "").unwrap();
    assert_eq!(
        wait_exit(&mut d3.child, Duration::from_secs(10), "distlock-3").code(),
        Some(0)
    );
    drop(j1.child.stdin.take());
    let _ = wait_exit(&mut j1.child, Duration::from_secs(20), "java-1");

    // Terms, in order of their start: never overlapping, in the expected succession.
    let mut terms = Vec::new();
    for p in [&j1, &d1, &d2, &j2, &d3] {
        let r = records(p);
        let enters: Vec<u64> = r
            .iter()
            .filter(|(k, _)| k == "enter")
            .map(|x| x.1)
            .collect();
        let leaves: Vec<u64> = r
            .iter()
            .filter(|(k, _)| k == "leave")
            .map(|x| x.1)
            .collect();
        assert_eq!(enters.len(), 1, "{}: {r:?}", p.id);
        assert_eq!(leaves.len(), 1, "{}: {r:?}", p.id);
        terms.push((enters[0], leaves[0], p.id.clone()));
    }
    terms.sort();
    let order: Vec<&str> = terms.iter().map(|t| t.2.as_str()).collect();
    assert_eq!(
        order,
        ["java-1", "distlock-1", "distlock-2", "java-2", "distlock-3"]
    );
    for w in terms.windows(2) {
        assert!(
            w[1].0 >= w[0].1,
            "{} began leading at {} before {} stopped at {}: two leaders for {} µs",
            w[1].2,
            w[1].0,
            w[0].2,
            w[0].1,
            w[0].1 - w[1].0
        );
    }
}
