//! Interop with real Apache Curator: Curator's `InterProcessSemaphoreV2` and
//! `InterProcessReadWriteLock` (Debian's `libcurator-recipes-java`,
//! `tests/java/PermitParticipant.java`, compiled here with `javac`) and distlock's ZooKeeper
//! semaphore and read-write lock on the same paths (standalone ZooKeeper, 127.0.0.1:12181,
//! `scripts/services.sh up`).
//!
//! Each test first plays out who may hold beside whom step by step (a Java holder against
//! distlock's `try_*`, and the other way round), then lets Java processes and distlock tasks
//! contend and checks the logged holds: every participant logs `enter` after its acquire
//! returns and `leave` before it releases, so a correct pair of implementations never shows
//! more than N permits, or a writer beside anyone, at one moment.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use distlock::{AcquireOptions, DistributedSemaphore};
use support::java::{compile_java, now_us, zk_hosts};
use support::procs::Reaper;
use support::unique;

/// Session timeout of every Java participant.
const SESSION_MS: u64 = 5000;
/// Holds per participant in the contention runs, and how long each lasts.
const CYCLES: usize = 15;
const HOLD_MS: u64 = 15;

/// One Java participant, driven over its stdin.
struct Java {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Java {
    fn start(dir: &Path, cp: &str, path: &str, reaper: &mut Reaper) -> Java {
        let mut child = Command::new("java")
            .args(["-cp", cp, "PermitParticipant", &zk_hosts(), path])
            .arg(SESSION_MS.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join(format!("stderr-{}", unique()))).unwrap())
            .spawn()
            .expect("spawn java");
        reaper.watch(child.id() as i32);
        let (tx, lines) = channel();
        let out = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take().unwrap();
        Java {
            child,
            stdin,
            lines,
        }
    }

    /// Sends `cmd` without waiting for the answer.
    fn send(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The answer to the last command, waiting at most `within` (blocking, outside the
    /// runtime's workers).
    fn answer(&self, within: Duration) -> String {
        tokio::task::block_in_place(|| self.lines.recv_timeout(within))
            .unwrap_or_else(|e| panic!("no answer from the Java participant in {within:?}: {e}"))
    }

    fn ask(&mut self, cmd: &str) -> String {
        self.send(cmd);
        self.answer(Duration::from_secs(30))
    }
}

impl Drop for Java {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn url() -> String {
    format!("zk://{}?session_timeout=10s", zk_hosts())
}

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions::new().wait(Duration::from_millis(ms))
}

/// The holds logged in `log`: (enter µs, leave µs).
fn holds(log: &Path) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut out = Vec::new();
    let mut enter = None;
    for line in text.lines() {
        let (kind, t) = line.split_once(' ').unwrap();
        let t: u64 = t.trim().parse().unwrap();
        match kind {
            "enter" => enter = Some(t),
            _ => out.push((enter.take().expect("leave without enter"), t)),
        }
    }
    out
}

fn log_hold(log: &Path, enter: u64, leave: u64) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    writeln!(f, "enter {enter}\nleave {leave}").unwrap();
}

/// The most holds of `readers` and `writers` at one moment, and the most holds beside a
/// writer at one moment.
fn peaks(readers: &[(u64, u64)], writers: &[(u64, u64)]) -> (usize, usize) {
    let mut events: Vec<(u64, i32, bool)> = Vec::new();
    for (list, w) in [(readers, false), (writers, true)] {
        for (a, b) in list {
            events.push((*a, 1, w));
            events.push((*b, -1, w));
        }
    }
    // At one instant a leave comes before an enter: touching holds do not overlap.
    events.sort_by_key(|(t, d, _)| (*t, *d));
    let (mut now, mut now_w, mut most, mut beside) = (0i32, 0i32, 0i32, 0i32);
    for (_, d, w) in events {
        now += d;
        if w {
            now_w += d;
        }
        if now_w > 0 {
            beside = beside.max(now - 1);
        }
        most = most.max(now);
    }
    (most as usize, beside as usize)
}

fn setup(what: &str) -> (PathBuf, String, String) {
    let dir = support::tmp("curator", what);
    let cp = compile_java(&dir, "PermitParticipant");
    let name = format!("curator-{what}-{}", unique());
    (dir, cp, name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_and_distlock_share_one_semaphore() {
    let (dir, cp, name) = setup("semaphore");
    let path = format!("/distlock/{name}");
    let mut reaper = Reaper::default();
    let sem = distlock::connect_semaphore(&url()).await.unwrap();
    let mut java = Java::start(&dir, &cp, &path, &mut reaper);

    // distlock holds both permits of 2: Curator gets none; it gets the one distlock frees.
    let d1 = sem.acquire(&name, 2, &wait(10_000)).await.unwrap();
    let d2 = sem.acquire(&name, 2, &wait(10_000)).await.unwrap();
    assert_eq!(
        java.ask("try sem 2 500"),
        "none",
        "Curator took a third permit of 2"
    );
    d1.release().await.unwrap();
    assert_eq!(
        java.ask("try sem 2 5000"),
        "held",
        "Curator did not get a freed permit"
    );
    // Curator's and distlock's permits count together; distlock sees Curator's lease.
    assert!(
        sem.try_acquire(&name, 2, &wait(0)).await.unwrap().is_none(),
        "distlock took a third permit beside Curator's"
    );
    assert_eq!(
        DistributedSemaphore::inspect(&*sem, &name)
            .await
            .unwrap()
            .holders,
        2
    );
    // A distlock waiter is granted when Curator releases.
    let waiter = tokio::spawn({
        let (sem, name) = (Arc::clone(&sem), name.clone());
        async move { sem.acquire(&name, 2, &wait(10_000)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "a distlock waiter got a permit while 2 were out"
    );
    assert_eq!(java.ask("release"), "released");
    let d3 = waiter
        .await
        .unwrap()
        .expect("Curator's release did not free a permit for distlock");
    assert!(d3.fencing_token() > d2.fencing_token());
    drop((d2, d3));

    // Contention: two Java processes and two distlock clients cycle through 2 permits.
    let java_logs: Vec<PathBuf> = (0..2).map(|i| dir.join(format!("java-{i}.log"))).collect();
    let mut javas = vec![java, Java::start(&dir, &cp, &path, &mut reaper)];
    for (j, log) in javas.iter_mut().zip(&java_logs) {
        j.send(&format!("cycle sem 2 {CYCLES} {HOLD_MS} {}", log.display()));
    }
    let mut tasks = Vec::new();
    for i in 0..2 {
        let log = dir.join(format!("distlock-{i}.log"));
        let sem = distlock::connect_semaphore(&url()).await.unwrap();
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..CYCLES {
                let g = sem.acquire(&name, 2, &wait(60_000)).await.unwrap();
                let enter = now_us();
                tokio::time::sleep(Duration::from_millis(HOLD_MS)).await;
                log_hold(&log, enter, now_us());
                g.release().await.unwrap();
            }
            log
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(holds(&t.await.unwrap()));
    }
    for j in &javas {
        assert_eq!(j.answer(Duration::from_secs(60)), "done");
    }
    for log in &java_logs {
        let h = holds(log);
        assert_eq!(h.len(), CYCLES, "a Java participant did not finish");
        all.extend(h);
    }
    assert_eq!(all.len(), 4 * CYCLES);
    let (most, _) = peaks(&all, &[]);
    assert!(most <= 2, "{most} permits of 2 were held at once");
    assert!(
        most == 2,
        "the 2 permits were never both used ({most}): the contention proves little"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_and_distlock_share_one_read_write_lock() {
    let (dir, cp, name) = setup("rwlock");
    let path = format!("/distlock/{name}");
    let mut reaper = Reaper::default();
    let rw = distlock::connect_rwlock(&url()).await.unwrap();
    let mut java = Java::start(&dir, &cp, &path, &mut reaper);

    // A Curator writer excludes distlock readers and writers.
    assert_eq!(java.ask("acquire write"), "held");
    assert!(
        rw.try_read(&name, &wait(0)).await.unwrap().is_none(),
        "a distlock reader beside Curator's writer"
    );
    assert!(
        rw.try_write(&name, &wait(0)).await.unwrap().is_none(),
        "a distlock writer beside Curator's writer"
    );
    assert_eq!(java.ask("release"), "released");
    // Readers of both share; a Curator writer waits for a distlock reader.
    let r = rw.read(&name, &wait(5000)).await.unwrap();
    assert_eq!(
        java.ask("try read 5000"),
        "held",
        "Curator's reader was kept out by distlock's"
    );
    assert_eq!(java.ask("release"), "released");
    assert_eq!(
        java.ask("try write 500"),
        "none",
        "Curator's writer got in beside distlock's reader"
    );
    // A waiting distlock writer holds back a Curator reader that comes after it.
    let writer = tokio::spawn({
        let (rw, name) = (Arc::clone(&rw), name.clone());
        async move { rw.write(&name, &wait(10_000)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        java.ask("try read 500"),
        "none",
        "Curator's reader overtook a waiting distlock writer"
    );
    r.release().await.unwrap();
    let w = writer
        .await
        .unwrap()
        .expect("the distlock writer was not granted");
    assert_eq!(
        java.ask("try read 300"),
        "none",
        "Curator's reader beside distlock's writer"
    );
    w.release().await.unwrap();
    assert_eq!(java.ask("try read 5000"), "held");
    assert_eq!(java.ask("release"), "released");

    // Contention: a Java reader, a Java writer, a distlock reader and a distlock writer.
    let mut javas = vec![java, Java::start(&dir, &cp, &path, &mut reaper)];
    let java_logs = [dir.join("java-read.log"), dir.join("java-write.log")];
    javas[0].send(&format!(
        "cycle read {CYCLES} {HOLD_MS} {}",
        java_logs[0].display()
    ));
    javas[1].send(&format!(
        "cycle write {CYCLES} {HOLD_MS} {}",
        java_logs[1].display()
    ));
    let mut tasks = Vec::new();
    for write in [false, true] {
        let log = dir.join(format!("distlock-{write}.log"));
        let rw = distlock::connect_rwlock(&url()).await.unwrap();
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..CYCLES {
                let g = if write {
                    rw.write(&name, &wait(60_000)).await.unwrap()
                } else {
                    rw.read(&name, &wait(60_000)).await.unwrap()
                };
                let enter = now_us();
                tokio::time::sleep(Duration::from_millis(HOLD_MS)).await;
                log_hold(&log, enter, now_us());
                g.release().await.unwrap();
            }
            (write, log)
        }));
    }
    let (mut readers, mut writers) = (Vec::new(), Vec::new());
    for t in tasks {
        let (write, log) = t.await.unwrap();
        if write {
            writers.extend(holds(&log))
        } else {
            readers.extend(holds(&log))
        }
    }
    for j in &javas {
        assert_eq!(j.answer(Duration::from_secs(60)), "done");
    }
    readers.extend(holds(&java_logs[0]));
    writers.extend(holds(&java_logs[1]));
    assert_eq!(
        (readers.len(), writers.len()),
        (2 * CYCLES, 2 * CYCLES),
        "a participant did not finish"
    );
    let (_, beside_writer) = peaks(&readers, &writers);
    assert!(
        beside_writer == 0,
        "a writer held beside {beside_writer} holders at once"
    );
}
