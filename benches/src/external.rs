//! Peers that live in another runtime, run as a child process in the same sitting as distlock:
//! redis-py's `Lock` (a venv that `scripts/services.sh up` makes) on the Redis target and
//! Apache Curator's `InterProcessMutex` (Debian's jars and a JDK) on the ZooKeeper target.
//! Their drivers (`benches/peers/`) measure what `scenarios::uncontended` and
//! `scenarios::contended` measure and print one JSON row. A missing runtime gives a skipped row
//! with a note, never a failed run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::scenarios::contended_procs::WorkerCmd;
use crate::scenarios::{fresh_name, ResultRow};
use crate::targets::Target;

/// A peer in another runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// redis-py's `Lock`, on a single Redis.
    RedisPy,
    /// Curator's `InterProcessMutex`, on ZooKeeper.
    Curator,
}

/// Curator and what it needs, from Debian's `/usr/share/java`.
const CURATOR_JARS: [&str; 7] = [
    "curator-recipes",
    "curator-framework",
    "curator-client",
    "zookeeper",
    "zookeeper-jute",
    "guava",
    "slf4j-api",
];

impl Peer {
    /// The peers measured beside `t`.
    pub fn for_target(t: &Target) -> Vec<Peer> {
        if t.url.starts_with("redis://") {
            vec![Peer::RedisPy]
        } else if t.url.starts_with("zk://") || t.url.starts_with("zookeeper://") {
            vec![Peer::Curator]
        } else {
            Vec::new()
        }
    }

    /// The row label.
    pub fn label(self) -> &'static str {
        match self {
            Peer::RedisPy => "redis-py Lock (redis)",
            Peer::Curator => "Curator InterProcessMutex (zookeeper)",
        }
    }

    /// What a user gives up by picking this peer instead of distlock.
    pub fn gives_up(self) -> &'static str {
        match self {
            Peer::RedisPy => "peer: no fencing token, no FIFO (a blocked acquire polls every 100 ms, redis-py's default), no lost-lock signal",
            Peer::Curator => "peer: no fencing token handed to the caller, no lost-lock signal on the lock (a connection listener is the user's job); FIFO",
        }
    }

    /// The command that runs this peer's driver with `args`, or why it cannot run here.
    fn command(self, work: &Path) -> Result<(String, Vec<String>), String> {
        let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers");
        match self {
            Peer::RedisPy => {
                let python = std::env::var("DISTLOCK_REDIS_PY")
                    .unwrap_or_else(|_| "/tmp/distlock-services/redis-py/bin/python".to_owned());
                if !Path::new(&python).exists() {
                    return Err(format!(
                        "redis-py not found at {python} (`scripts/services.sh up redis` makes the venv; DISTLOCK_REDIS_PY names another)"
                    ));
                }
                Ok((
                    python,
                    vec![here.join("redis_py_lock.py").display().to_string()],
                ))
            }
            Peer::Curator => {
                let mut cp = Vec::new();
                for jar in CURATOR_JARS {
                    let p = format!("/usr/share/java/{jar}.jar");
                    if !Path::new(&p).exists() {
                        return Err(format!("{p} is missing (Debian libcurator-recipes-java; `scripts/services.sh up zk` installs it)"));
                    }
                    cp.push(p);
                }
                // A logging binding that prints nothing, when installed: without one SLF4J warns
                // on stderr once per JVM, and the grid starts one per process.
                let nop = "/usr/share/java/slf4j-nop.jar";
                if Path::new(nop).exists() {
                    cp.push(nop.to_owned());
                }
                let classes = work.join("curator-classes");
                compile_once(&here.join("CuratorMutex.java"), &classes, &cp.join(":"))?;
                cp.push(classes.display().to_string());
                Ok((
                    "java".to_owned(),
                    vec!["-cp".into(), cp.join(":"), "CuratorMutex".into()],
                ))
            }
        }
    }
}

/// Compiles `source` into `classes` unless its class there is newer (the grid starts a driver
/// per process and cell).
fn compile_once(source: &Path, classes: &Path, cp: &str) -> Result<(), String> {
    let class = classes.join("CuratorMutex.class");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if let (Some(c), Some(s)) = (modified(&class), modified(source)) {
        if c >= s {
            return Ok(());
        }
    }
    let out = std::process::Command::new("javac")
        .args(["-cp", cp, "-d"])
        .arg(classes)
        .arg(source)
        .output()
        .map_err(|e| format!("javac: {e} (a JDK: Debian default-jdk-headless)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "javac failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The driver's program and its arguments up to the scenario's own: the scenario, the store
/// and a fresh lock name.
fn driver(
    peer: Peer,
    t: &Target,
    scenario: &str,
    work: &Path,
) -> Result<(String, Vec<String>), String> {
    let _ = std::fs::create_dir_all(work);
    let (program, mut args) = peer.command(work)?;
    let (host, port) = host_port(&t.url);
    args.push(scenario.to_owned());
    match peer {
        Peer::RedisPy => args.extend([host, port, fresh_name(&format!("redis-py-{scenario}"))]),
        Peer::Curator => args.extend([
            format!("{host}:{port}"),
            format!("/{}", fresh_name(&format!("curator-{scenario}"))),
        ]),
    }
    Ok((program, args))
}

impl Peer {
    /// One grid process of this peer: its driver's `worker` mode, which speaks the protocol of
    /// `contended_procs::run_workers` and holds each acquisition `hold_ms`. One lock name per
    /// call: call once per cell and clone for its processes.
    pub fn worker_cmd(
        self,
        t: &Target,
        d: Duration,
        hold_ms: u64,
        work: &Path,
    ) -> Result<WorkerCmd, String> {
        let (program, mut args) = driver(self, t, "worker", work)?;
        args.extend([format!("{}", d.as_secs_f64()), hold_ms.to_string()]);
        Ok(WorkerCmd { program, args })
    }
}

fn host_port(url: &str) -> (String, String) {
    let hosts = url
        .split("://")
        .nth(1)
        .unwrap_or("")
        .split(['/', '?'])
        .next()
        .unwrap_or("")
        .to_owned();
    let first = hosts.split(',').next().unwrap_or("").to_owned();
    let (h, p) = first.rsplit_once(':').unwrap_or((first.as_str(), ""));
    (h.to_owned(), p.to_owned())
}

fn skipped(peer: Peer, scenario: &str, why: String) -> ResultRow {
    ResultRow {
        backend: peer.label().to_owned(),
        scenario: format!("skipped {scenario}"),
        note: why,
        ..Default::default()
    }
}

/// Runs `peer` on `t`'s store for `scenario` (`uncontended` or `contended`, the latter with
/// `workers`) for `d`: its row, or a skipped row saying why it could not run.
pub async fn run(
    peer: Peer,
    t: &Target,
    scenario: &str,
    workers: usize,
    d: Duration,
    work: &Path,
) -> ResultRow {
    match run_inner(peer, t, scenario, workers, d, work).await {
        Ok(row) => row,
        Err(why) => skipped(peer, scenario, why),
    }
}

async fn run_inner(
    peer: Peer,
    t: &Target,
    scenario: &str,
    workers: usize,
    d: Duration,
    work: &Path,
) -> Result<ResultRow, String> {
    let (program, mut args) = driver(peer, t, scenario, work)?;
    args.push(format!("{}", d.as_secs_f64()));
    if scenario == "contended" {
        args.push(workers.to_string());
    }
    let child = tokio::process::Command::new(&program)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(d + Duration::from_secs(90), child)
        .await
        .map_err(|_| {
            format!(
                "{} did not finish within {:?}",
                peer.label(),
                d + Duration::from_secs(90)
            )
        })?
        .map_err(|e| format!("{program}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{} failed ({}): {}",
            peer.label(),
            out.status,
            err.lines().rev().take(3).collect::<Vec<_>>().join(" / ")
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    let v: serde_json::Value = serde_json::from_str(line)
        .map_err(|e| format!("{}: unreadable row {line:?}: {e}", peer.label()))?;
    let num = |k: &str| v.get(k).and_then(serde_json::Value::as_f64);
    Ok(ResultRow {
        backend: peer.label().to_owned(),
        scenario: scenario.to_owned(),
        ops_per_sec: num("ops_per_sec").unwrap_or(0.0),
        p50_us: num("p50_us").unwrap_or(0.0),
        p99_us: num("p99_us").unwrap_or(0.0),
        p999_us: num("p999_us").unwrap_or(0.0),
        same_holder_fraction: num("same_holder_fraction"),
        jain_index: num("jain_index"),
        worst_share: num("worst_share"),
        wait_ladder_us: ladder(&v),
        violations: num("violations").unwrap_or(0.0) as u64,
        handoff_p50_us: num("handoff_p50_us"),
        handoff_p99_us: num("handoff_p99_us"),
        param: num("param").map(|p| p as u64),
        note: peer.gives_up().to_owned(),
        ..Default::default()
    })
}

/// The driver's `wait_ladder_us` (`[[quantile, µs], …]`), empty when it sent none.
fn ladder(v: &serde_json::Value) -> Vec<[f64; 2]> {
    v.get("wait_ladder_us")
        .and_then(|l| serde_json::from_value(l.clone()).ok())
        .unwrap_or_default()
}

/// Where compiled peer drivers go.
pub fn work_dir(out: &Path) -> PathBuf {
    out.join("peers")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_port_from_urls() {
        assert_eq!(
            host_port("redis://127.0.0.1:16379"),
            ("127.0.0.1".into(), "16379".into())
        );
        assert_eq!(
            host_port("zk://127.0.0.1:12181,127.0.0.1:12182/app?x=1"),
            ("127.0.0.1".into(), "12181".into())
        );
    }
}
