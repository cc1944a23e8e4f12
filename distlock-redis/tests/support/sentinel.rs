//! A private Redis Sentinel set for one failover test: a master, two replicas and three
//! sentinels (quorum 2, `down-after-milliseconds` 500) on free loopback ports, under a fresh
//! directory; every process is killed when the set is dropped. Each replica replicates
//! through a fault proxy, so a test can keep a write from reaching the replicas for certain
//! (a paused replica would still find it in its socket buffer when resumed). The long
//! `failover-timeout` keeps the sentinels from "fixing" the replicas to the master's own port
//! during a test. The shared set of
//! `scripts/services.sh` (26400–26402) is never failed over: the conformance suite runs there.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use distlock_core::fault::FaultProxy;
use redis::Value;

/// One process of the set.
struct Proc {
    port: u16,
    child: Child,
}

pub struct SentinelSet {
    /// The data servers; the first is the master at start.
    redis: Vec<Proc>,
    sentinels: Vec<Proc>,
    /// Between each replica and the first master.
    proxies: Vec<FaultProxy>,
    dir: PathBuf,
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        for p in self.redis.iter_mut().chain(self.sentinels.iter_mut()) {
            let _ = Command::new("kill")
                .args(["-CONT", &p.child.id().to_string()])
                .stderr(Stdio::null())
                .status();
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

fn spawn(args: &[String]) -> Child {
    Command::new("redis-server")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start redis-server ({e}): install it with `scripts/services.sh up`")
        })
}

/// One command on the server at `port`, answered within 2 s (`None`: no answer).
pub async fn ask(port: u16, cmd: &redis::Cmd) -> Option<Value> {
    let call = async {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
        let mut c = client.get_multiplexed_async_connection().await.ok()?;
        cmd.query_async::<Value>(&mut c).await.ok()
    };
    tokio::time::timeout(Duration::from_secs(2), call)
        .await
        .ok()
        .flatten()
}

fn count(v: Option<Value>) -> usize {
    match v {
        Some(Value::Array(items)) => items.len(),
        _ => 0,
    }
}

/// Polls `check` every 100 ms for at most `limit`.
async fn until<F: std::future::Future<Output = bool>>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> F,
) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl SentinelSet {
    /// Starts the six processes and waits (at most 30 s) until every sentinel knows the
    /// master, both replicas and the other two sentinels (what a failover needs).
    pub async fn start() -> SentinelSet {
        let ports = free_ports(6);
        let dir = std::env::temp_dir().join(format!(
            "distlock-sentinel-{}",
            distlock_core::backend::owner_token()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let master = ports[0];
        let mut proxies = Vec::new();
        for _ in 0..2 {
            proxies.push(
                FaultProxy::start(([127, 0, 0, 1], master).into())
                    .await
                    .unwrap(),
            );
        }
        let redis = ports[..3]
            .iter()
            .enumerate()
            .map(|(i, &port)| {
                let mut args: Vec<String> = [
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    &dir.to_string_lossy(),
                ]
                .map(String::from)
                .to_vec();
                if i > 0 {
                    let via = proxies[i - 1].addr().port();
                    args.extend(["--replicaof".into(), "127.0.0.1".into(), via.to_string()]);
                }
                Proc {
                    port,
                    child: spawn(&args),
                }
            })
            .collect();
        let sentinels = ports[3..]
            .iter()
            .map(|&port| {
                let conf = dir.join(format!("sentinel-{port}.conf"));
                std::fs::write(
                    &conf,
                    format!(
                        "port {port}\nbind 127.0.0.1\ndir {}\n\
                         sentinel monitor distlock 127.0.0.1 {master} 2\n\
                         sentinel down-after-milliseconds distlock 500\n\
                         sentinel failover-timeout distlock 60000\n\
                         sentinel parallel-syncs distlock 2\n",
                        dir.display()
                    ),
                )
                .unwrap();
                Proc {
                    port,
                    child: spawn(&[conf.to_string_lossy().into_owned(), "--sentinel".into()]),
                }
            })
            .collect();
        let set = SentinelSet {
            redis,
            sentinels,
            proxies,
            dir,
        };
        for s in set.sentinels.iter().map(|s| s.port) {
            until(
                "the sentinels to know the set",
                Duration::from_secs(30),
                || async move {
                    let replicas = redis::cmd("SENTINEL")
                        .arg("replicas")
                        .arg("distlock")
                        .clone();
                    let others = redis::cmd("SENTINEL")
                        .arg("sentinels")
                        .arg("distlock")
                        .clone();
                    count(ask(s, &replicas).await) == 2 && count(ask(s, &others).await) == 2
                },
            )
            .await;
        }
        set
    }

    /// The `redis+sentinel://` URL of the set, with `query` (`""` or `?…`).
    pub fn url(&self, query: &str) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/distlock{query}", hosts.join(","))
    }

    /// The master's port as the first sentinel names it.
    pub async fn master(&self) -> u16 {
        let cmd = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("distlock")
            .clone();
        match ask(self.sentinels[0].port, &cmd).await {
            Some(Value::Array(items)) => match items.get(1) {
                Some(Value::BulkString(p)) => String::from_utf8_lossy(p).parse().unwrap(),
                other => panic!("sentinel answered {other:?}"),
            },
            other => panic!("sentinel answered {other:?}"),
        }
    }

    /// The data servers' ports other than `port`.
    pub fn others(&self, port: u16) -> Vec<u16> {
        self.redis
            .iter()
            .map(|p| p.port)
            .filter(|&p| p != port)
            .collect()
    }

    fn child(&mut self, port: u16) -> &mut Child {
        &mut self
            .redis
            .iter_mut()
            .find(|p| p.port == port)
            .unwrap()
            .child
    }

    /// Sends `signal` (`STOP`, `CONT`) to the data server on `port`.
    pub fn signal(&mut self, port: u16, signal: &str) {
        let pid = self.child(port).id().to_string();
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status();
        assert!(ok.unwrap().success(), "kill -{signal} {pid}");
    }

    /// Holds back every byte between the first master and its replicas (`drop_replication`
    /// then throws away what was held).
    pub fn hold_replication(&self) {
        self.proxies.iter().for_each(FaultProxy::blackhole);
    }

    /// Resets the replicas' links to the first master, losing what the proxies held back.
    pub fn drop_replication(&self) {
        self.proxies.iter().for_each(FaultProxy::kill);
    }

    /// SIGKILLs the data server on `port`.
    pub fn kill(&mut self, port: u16) {
        let child = self.child(port);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Asks a sentinel for a failover (`SENTINEL FAILOVER`), again every 200 ms for at most
    /// 10 s while it refuses (`NOGOODSLAVE` until it has seen a replica it may promote).
    pub async fn failover(&self) {
        let cmd = redis::cmd("SENTINEL")
            .arg("failover")
            .arg("distlock")
            .clone();
        let started = Instant::now();
        while !matches!(ask(self.sentinels[0].port, &cmd).await, Some(Value::Okay)) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "SENTINEL FAILOVER refused for 10 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits (at most 20 s) until the sentinels name a master other than `old` that says it
    /// is one: the new master's port.
    pub async fn new_master(&self, old: u16) -> u16 {
        let started = Instant::now();
        loop {
            let m = self.master().await;
            if m != old {
                let role = ask(m, &redis::cmd("ROLE")).await;
                if let Some(Value::Array(items)) = role {
                    if matches!(items.first(), Some(Value::BulkString(r)) if r == b"master") {
                        return m;
                    }
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no failover within 20 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
