//! Applying faults: [`Net`] (a client's proxies, where partitions, stalls and latency overlap)
//! and [`Store`] (pause, kill and restart, server-side connection kill and follower cut on the
//! chaos service set, through `scripts/services.sh`). Every fault heals itself at the end of its
//! duration, or at once when the run's heal signal comes; guards heal on any early exit.

use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use distlock_core::fault::FaultProxy;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use tokio::sync::watch;
use tokio::time::Instant;

use super::schedule::{Member, Profile};
use crate::backends::Target;
use crate::services::ServiceSet;
use crate::store_faults::{kill_sessions, netns_members, sessions};
use crate::undo::{Restart, Resume, Uncut};

/// Sleeps `d`, or less if the heal signal comes first.
pub(crate) async fn sleep_or_heal(d: Duration, heal: &mut watch::Receiver<bool>) {
    if *heal.borrow() {
        return;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = heal.wait_for(|h| *h) => {}
    }
}

/// A client's connections: its proxies and the faults on them right now. Partitions and stalls
/// black-hole, latency delays, lost replies hold what the store sends; while any cut is active
/// the client is cut, otherwise the largest active latency applies, with replies held while
/// any hold is active.
pub(crate) struct Net {
    proxies: Vec<FaultProxy>,
    state: Mutex<Faults>,
}

/// The faults active on one client's connections.
#[derive(Default)]
struct Faults {
    cuts: u32,
    holds: u32,
    latencies: Vec<u64>,
}

impl Net {
    pub(crate) fn new(proxies: Vec<FaultProxy>) -> Self {
        Net {
            proxies,
            state: Mutex::default(),
        }
    }

    /// The proxies' local ports (what the client connects to).
    pub(crate) fn ports(&self) -> Vec<u16> {
        self.proxies.iter().map(|p| p.addr().port()).collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.proxies.is_empty()
    }

    fn update(&self, f: impl FnOnce(&mut Faults)) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s);
        for p in &self.proxies {
            if s.cuts > 0 {
                p.blackhole();
                continue;
            }
            p.heal();
            if let Some(ms) = s.latencies.iter().max() {
                p.set_latency(Duration::from_millis(*ms));
            }
            if s.holds > 0 {
                p.hold_replies();
            }
        }
    }

    pub(crate) fn cut(&self) {
        self.update(|s| s.cuts += 1);
    }

    pub(crate) fn uncut(&self) {
        self.update(|s| s.cuts = s.cuts.saturating_sub(1));
    }

    pub(crate) fn hold_replies(&self) {
        self.update(|s| s.holds += 1);
    }

    pub(crate) fn release_replies(&self) {
        self.update(|s| s.holds = s.holds.saturating_sub(1));
    }

    pub(crate) fn add_latency(&self, ms: u64) {
        self.update(|s| s.latencies.push(ms));
    }

    pub(crate) fn remove_latency(&self, ms: u64) {
        self.update(|s| {
            if let Some(i) = s.latencies.iter().position(|x| *x == ms) {
                s.latencies.swap_remove(i);
            }
        });
    }

    /// Heals everything (the end of the run).
    pub(crate) fn heal_all(&self) {
        self.update(|s| *s = Faults::default());
    }
}

/// Marks a member busy while a fault holds it.
pub(crate) struct Busy<'a>(&'a Store, String);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0
            .busy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|m| *m != self.1);
    }
}

/// The store side of one target on one service set.
pub(crate) struct Store {
    set: ServiceSet,
    target: Target,
    /// `services.sh` instance names, in host order.
    members: Vec<String>,
    overlap: usize,
    min_down: Duration,
    busy: Mutex<Vec<String>>,
    /// Windows in which a fault ended locks without telling their holders, where the backend
    /// makes no claim across that (a Redis restarted empty; a connection-bound SQL lock whose
    /// session the server ended).
    windows: Mutex<Vec<(Instant, Instant)>>,
}

impl Store {
    pub(crate) fn new(set: ServiceSet, t: &Target, p: &Profile) -> Self {
        let members = match t.label {
            "redis" | "redlock" => t
                .hosts
                .iter()
                .map(|h| format!("redis-{}", h.port()))
                .collect(),
            "zookeeper" | "zookeeper-ensemble" => {
                t.hosts.iter().map(|h| format!("zk-{}", h.port())).collect()
            }
            "zookeeper-netns" => (1..=t.hosts.len()).map(|n| format!("zkns-{n}")).collect(),
            "etcd" | "etcd-cluster" => t
                .hosts
                .iter()
                .map(|h| format!("etcd-{}", h.port()))
                .collect(),
            l if l.starts_with("postgres") => vec!["postgres".to_owned()],
            l if l.starts_with("mysql") => vec!["mysql".to_owned()],
            _ => Vec::new(),
        };
        Store {
            set,
            target: t.clone(),
            members,
            overlap: p.store_overlap,
            min_down: Duration::from_millis(p.min_down_ms),
            busy: Mutex::new(Vec::new()),
            windows: Mutex::new(Vec::new()),
        }
    }

    /// The excusing windows recorded so far.
    pub(crate) fn windows(&self) -> Vec<(Instant, Instant)> {
        self.windows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn excuse(&self, from: Instant) {
        self.windows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((from, Instant::now()));
    }

    /// Whether a restart of this target's store loses locks without telling their holders.
    fn restart_loses_locks(&self) -> bool {
        self.target.label == "redis" || (self.target.is_sql_server() && !self.target.lease)
    }

    /// The instance name of `m`, and how to show it (the leader found).
    async fn resolve(&self, m: Member) -> Result<(String, String), String> {
        let i = match m {
            Member::Only => 0,
            Member::Index(i) => i,
            Member::Leader => {
                let (set, label) = (self.set, self.target.label);
                return tokio::task::spawn_blocking(move || leader(set, label))
                    .await
                    .map_err(|e| e.to_string())?;
            }
        };
        let name = self
            .members
            .get(i)
            .cloned()
            .ok_or_else(|| format!("{} has no member {i}", self.target.label))?;
        Ok((name.clone(), name))
    }

    /// Claims `name` for a fault, if the overlap limit and the member allow.
    fn claim(&self, name: &str) -> Result<Busy<'_>, String> {
        let mut b = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        if b.iter().any(|m| m == name) {
            return Err(format!("skipped: {name} is already under a fault"));
        }
        if b.len() >= self.overlap {
            return Err(format!(
                "skipped: {} store fault(s) already running",
                b.len()
            ));
        }
        b.push(name.to_owned());
        Ok(Busy(self, name.to_owned()))
    }

    /// The processes of `member`: its pid, and for PostgreSQL every child of the postmaster
    /// (each session is its own process).
    async fn pids(&self, member: &str) -> Result<Vec<Pid>, String> {
        let pid: i32 = self
            .set
            .run_async(&["pid", member])
            .await?
            .trim()
            .parse()
            .map_err(|_| self.set.up_hint(&format!("no pid for {member}")))?;
        let mut pids = vec![Pid::from_raw(pid)];
        if member == "postgres" {
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .unwrap_or_default();
            pids.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse().ok())
                    .map(Pid::from_raw),
            );
        }
        Ok(pids)
    }

    /// SIGSTOP `m` for `d` (or until the heal), then SIGCONT.
    pub(crate) async fn pause(
        &self,
        m: Member,
        d: Duration,
        heal: &mut watch::Receiver<bool>,
    ) -> Result<String, String> {
        let (name, shown) = self.resolve(m).await?;
        let _busy = self.claim(&name)?;
        let pids = self.pids(&name).await?;
        let mut resume = Resume(Vec::new());
        for p in &pids {
            // A session process that just ended is fine.
            if kill(*p, Signal::SIGSTOP).is_ok() {
                resume.0.push(*p);
            }
        }
        let t0 = Instant::now();
        sleep_or_heal(d, heal).await;
        drop(resume);
        Ok(format!(
            "{shown}: {} process(es) paused {} ms",
            pids.len(),
            t0.elapsed().as_millis()
        ))
    }

    /// Kills `m` (SIGKILL; PostgreSQL: a fast shutdown), keeps it down `down` (at least the
    /// target's minimum even when healing), starts it again and waits until it answers.
    pub(crate) async fn restart(
        &self,
        m: Member,
        down: Duration,
        heal: &mut watch::Receiver<bool>,
    ) -> Result<String, String> {
        let (name, shown) = self.resolve(m).await?;
        let _busy = self.claim(&name)?;
        let from = Instant::now();
        let restart = Restart::new(self.set, &name);
        if name == "mysql" {
            let pid = *self.pids(&name).await?.first().ok_or("no MariaDB pid")?;
            kill(pid, Signal::SIGKILL).map_err(|e| e.to_string())?;
            for _ in 0..200 {
                if kill(pid, None).is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } else {
            self.set.run_async(&["stop-one", &name]).await?;
        }
        let down_at = Instant::now();
        let least = self.min_down;
        sleep_or_heal(down, heal).await;
        tokio::time::sleep(least.saturating_sub(down_at.elapsed())).await;
        let was_down = down_at.elapsed();
        let started = restart.now().await;
        if self.restart_loses_locks() {
            self.excuse(from);
        }
        started.map_err(|e| format!("{shown} did not come back: {e}"))?;
        Ok(format!(
            "{shown}: down {} ms, answering again after {} ms",
            was_down.as_millis(),
            down_at.elapsed().as_millis()
        ))
    }

    /// Kills every session of the lock database server-side (`pg_terminate_backend` / `KILL`).
    pub(crate) async fn server_kill(&self) -> Result<String, String> {
        let mysql = self.target.template.starts_with("mysql");
        sqlx::any::install_default_drivers();
        let url = self.target.url();
        let base = url.split('?').next().unwrap_or(&url);
        let admin = AnyPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(3))
            .connect_with(AnyConnectOptions::from_str(base).map_err(|e| e.to_string())?)
            .await
            .map_err(|e| format!("skipped: the database does not answer ({e})"))?;
        let from = Instant::now();
        let ids = sessions(&admin, mysql).await?;
        kill_sessions(&admin, mysql, &ids).await?;
        if self.restart_loses_locks() {
            self.excuse(from);
        }
        admin.close().await;
        Ok(format!("{} session(s) killed", ids.len()))
    }

    /// Cuts follower `k` (0 or 1) from the leader for `d` (or until the heal).
    pub(crate) async fn follower_cut(
        &self,
        k: usize,
        d: Duration,
        heal: &mut watch::Receiver<bool>,
    ) -> Result<String, String> {
        let set = self.set;
        let members = tokio::task::spawn_blocking(move || netns_members(set))
            .await
            .map_err(|e| e.to_string())?
            .map_err(not_answering)?;
        let leader = members
            .iter()
            .find(|m| m.2 == "leader")
            .ok_or("skipped: no zk-netns leader (electing)")?;
        let followers: Vec<_> = members.iter().filter(|m| m.2 == "follower").collect();
        let f = followers
            .get(k % followers.len().max(1))
            .ok_or("skipped: no follower")?;
        let name = format!("zkns-{}", f.0);
        let _busy = self.claim(&name)?;
        let uncut = Uncut(self.set, f.0.clone(), leader.0.clone());
        self.set.run_async(&["netns-cut", &f.0, &leader.0]).await?;
        let t0 = Instant::now();
        sleep_or_heal(d, heal).await;
        tokio::task::spawn_blocking(move || drop(uncut))
            .await
            .map_err(|e| e.to_string())?;
        Ok(format!(
            "follower zkns-{} ({}) cut from leader zkns-{} for {} ms",
            f.0,
            f.1,
            leader.0,
            t0.elapsed().as_millis()
        ))
    }
}

/// The ensemble's (or etcd cluster's) leader now, as `(instance name, shown)`; `skipped` while
/// it elects.
fn leader(set: ServiceSet, label: &str) -> Result<(String, String), String> {
    if label == "etcd-cluster" {
        let port = set
            .etcd_leader()
            .map_err(|e| format!("skipped: {e} (electing)"))?;
        return Ok((format!("etcd-{port}"), format!("etcd-{port} (leader)")));
    }
    if label == "zookeeper-netns" {
        let (n, _, _) = netns_members(set)
            .map_err(not_answering)?
            .into_iter()
            .find(|m| m.2 == "leader")
            .ok_or("skipped: no zk-netns leader (electing)")?;
        return Ok((format!("zkns-{n}"), format!("zkns-{n} (leader)")));
    }
    let port = set
        .zk_leader()
        .map_err(|e| format!("skipped: {e} (electing)"))?;
    Ok((format!("zk-{port}"), format!("zk-{port} (leader)")))
}

/// `services.sh status zk-netns` fails while a member does not answer (restarting, electing):
/// the fault is skipped then, as with no leader.
fn not_answering(e: String) -> String {
    format!("skipped: a zk-netns member is not answering ({e})")
}
