//! A private 3-member etcd cluster this test process starts, kills and restarts itself (the
//! shared servers of `scripts/services.sh` are never touched). Members are killed with the
//! processes when the cluster is dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct OwnCluster {
    /// Client ports; each member's peer port is its client port + 1.
    pub ports: Vec<u16>,
    dir: PathBuf,
    children: Vec<Option<Child>>,
}

impl OwnCluster {
    /// Starts members on client ports `base`, `base + 10`, `base + 20` (peers +1) and waits
    /// until the cluster answers.
    pub async fn start(base: u16) -> Self {
        let ports: Vec<u16> = (0..3).map(|i| base + 10 * i).collect();
        let dir = std::env::temp_dir().join(format!(
            "distlock-etcd-own-{base}-{}",
            &distlock_core::backend::owner_token()[..8]
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = OwnCluster {
            ports,
            dir,
            children: vec![None, None, None],
        };
        for i in 0..3 {
            c.spawn(i);
        }
        c.wait_healthy(Duration::from_secs(30)).await;
        c
    }

    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("etcd://{}", hosts.join(","))
    }

    fn spawn(&mut self, i: usize) {
        let port = self.ports[i];
        let cluster: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("m{p}=http://127.0.0.1:{}", p + 1))
            .collect();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("m{port}.log")))
            .unwrap();
        let child = Command::new("etcd")
            .args([
                &format!("--name=m{port}"),
                &format!("--data-dir={}", self.dir.join(format!("m{port}")).display()),
                &format!("--listen-client-urls=http://127.0.0.1:{port}"),
                &format!("--advertise-client-urls=http://127.0.0.1:{port}"),
                &format!("--listen-peer-urls=http://127.0.0.1:{}", port + 1),
                &format!("--initial-advertise-peer-urls=http://127.0.0.1:{}", port + 1),
                &format!("--initial-cluster={}", cluster.join(",")),
                &format!("--initial-cluster-token=distlock-own-{}", self.ports[0]),
                "--initial-cluster-state=new",
                "--heartbeat-interval=60",
                "--election-timeout=600",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run etcd ({e}); `scripts/services.sh up` installs it (Debian etcd-server)")
            });
        self.children[i] = Some(child);
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again on its data and waits until the cluster answers through it.
    pub async fn restart(&mut self, i: usize) {
        self.spawn(i);
        let until = tokio::time::Instant::now() + Duration::from_secs(30);
        while self.status(i).await.is_none() {
            assert!(
                tokio::time::Instant::now() < until,
                "member {i} did not come back"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// (member id, leader id) as member `i` sees them.
    async fn status(&self, i: usize) -> Option<(u64, u64)> {
        let ep = format!("http://127.0.0.1:{}", self.ports[i]);
        let opts = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_millis(500))
            .with_timeout(Duration::from_secs(1));
        let mut c = etcd_client::Client::connect([ep], Some(opts)).await.ok()?;
        let s = c.status().await.ok()?;
        let member = s.header().map(|h| h.member_id())?;
        (s.leader() != 0).then_some((member, s.leader()))
    }

    /// The index of the current leader.
    pub async fn leader(&self) -> usize {
        let until = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            for i in 0..3 {
                if self.children[i].is_some() {
                    if let Some((me, leader)) = self.status(i).await {
                        if me == leader {
                            return i;
                        }
                    }
                }
            }
            assert!(tokio::time::Instant::now() < until, "no leader within 30 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_healthy(&self, within: Duration) {
        let until = tokio::time::Instant::now() + within;
        for i in 0..3 {
            while self.status(i).await.is_none() {
                assert!(
                    tokio::time::Instant::now() < until,
                    "own etcd cluster did not come up (logs in {})",
                    self.dir.display()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        for i in 0..3 {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
