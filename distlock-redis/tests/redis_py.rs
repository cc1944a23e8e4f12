//! Interop with the real redis-py `Lock` (a venv that `scripts/services.sh up` makes): a
//! redis-py process and distlock on the same key exclude each other, step by step and in a
//! contention run whose holds are logged by both sides and checked for overlap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_core::AcquireOptions;
use support::*;

fn python() -> String {
    let p = std::env::var("DISTLOCK_REDIS_PY")
        .unwrap_or_else(|_| "/tmp/distlock-services/redis-py/bin/python".to_owned());
    assert!(
        Path::new(&p).exists(),
        "redis-py not found at {p}: run `scripts/services.sh up` (it makes the venv), or set DISTLOCK_REDIS_PY"
    );
    p
}

/// One redis-py process answering the commands of `tests/python/redis_py_participant.py`.
struct RedisPy {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl RedisPy {
    fn start() -> Self {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/redis_py_participant.py");
        let port = ports(&single_url())[0];
        let mut child = Command::new(python())
            .arg(script)
            .args(["127.0.0.1", &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start redis-py");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        RedisPy {
            child,
            stdin,
            stdout,
        }
    }

    /// Sends one command and returns its one-line answer.
    fn say(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().to_owned()
    }
}

impl Drop for RedisPy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn opts(wait_ms: u64) -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_millis(wait_ms))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_and_distlock_exclude_each_other_on_one_key() {
    let lock = connect_or_explain(&single_url()).await;
    let name = unique("redis-py");
    let mut py = RedisPy::start();
    // redis-py holds: distlock's try fails, and a bounded wait runs out.
    assert_eq!(py.say(&format!("try {name} 10000")), "held");
    assert!(lock.try_acquire(&name, &opts(0)).await.unwrap().is_none());
    assert!(lock.acquire(&name, &opts(300)).await.is_err());
    // redis-py lets go: distlock gets it.
    assert_eq!(py.say("release"), "released");
    let g = lock.acquire(&name, &opts(5000)).await.unwrap();
    // distlock holds: redis-py's try fails, its blocking acquire waits until distlock releases.
    assert_eq!(py.say(&format!("try {name} 10000")), "none");
    assert_eq!(py.say(&format!("acquire {name} 10000 200")), "none");
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        g.release().await
    });
    let py = tokio::task::spawn_blocking(move || {
        let answer = py.say(&format!("acquire {name} 10000 5000"));
        (py, answer, name)
    });
    release.await.unwrap().unwrap();
    let (mut py, answer, name) = py.await.unwrap();
    assert_eq!(
        answer, "held",
        "redis-py did not get the lock distlock released"
    );
    assert!(lock.try_acquire(&name, &opts(0)).await.unwrap().is_none());
    assert_eq!(py.say("release"), "released");
}

/// Parses "enter T" / "leave T" lines into (enter, leave) holds.
fn holds(log: &Path) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut out = Vec::new();
    let mut open = None;
    for line in text.lines() {
        let (what, t) = line.split_once(' ').unwrap();
        let t: u64 = t.parse().unwrap();
        match what {
            "enter" => open = Some(t),
            _ => out.push((open.take().expect("leave without enter"), t)),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contention_between_redis_py_and_distlock_never_overlaps() {
    const HOLDS: usize = 15;
    let name = unique("redis-py-contention");
    let dir = std::env::temp_dir().join(unique("redis-py-logs"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut logs = Vec::new();
    let mut py_runs = Vec::new();
    for i in 0..2 {
        let log = dir.join(format!("py-{i}.log"));
        logs.push(log.clone());
        let name = name.clone();
        py_runs.push(tokio::task::spawn_blocking(move || {
            let mut py = RedisPy::start();
            py.say(&format!("cycle {name} {HOLDS} 3 {}", log.display()))
        }));
    }
    let mut ours = Vec::new();
    for i in 0..2 {
        let lock = connect_or_explain(&single_url()).await;
        let log = dir.join(format!("rs-{i}.log"));
        logs.push(log.clone());
        let name = name.clone();
        ours.push(tokio::spawn(async move {
            let mut lines = String::new();
            for _ in 0..HOLDS {
                let g = lock.acquire(&name, &opts(30_000)).await.unwrap();
                lines.push_str(&format!("enter {}\n", now_us()));
                tokio::time::sleep(Duration::from_millis(3)).await;
                lines.push_str(&format!("leave {}\n", now_us()));
                g.release().await.unwrap();
            }
            std::fs::write(&log, lines).unwrap();
        }));
    }
    for r in py_runs {
        assert_eq!(
            r.await.unwrap(),
            "done",
            "a redis-py participant did not finish"
        );
    }
    for r in ours {
        r.await.unwrap();
    }
    let mut all: Vec<(u64, u64, usize)> = Vec::new();
    for (who, log) in logs.iter().enumerate() {
        let h = holds(log);
        assert_eq!(h.len(), HOLDS, "{} logged {} holds", log.display(), h.len());
        all.extend(h.into_iter().map(|(a, b)| (a, b, who)));
    }
    all.sort();
    for w in all.windows(2) {
        assert!(
            w[1].0 >= w[0].1,
            "participant {} entered at {} before participant {} left at {}",
            w[1].2,
            w[1].0,
            w[0].2,
            w[0].1
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
