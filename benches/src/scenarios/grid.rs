//! Grid (after python-redis-lock's bench): N client processes × hold times on one name, for
//! every backend and each of its peers. A cell counts the acquisitions every process got within
//! the window (a wait ends with it), and the fewest and most one process got: a fair lock
//! gives each process about its share, a polling one lets some starve.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::DistributedLock;

use super::contended_procs::{run_workers, tally, WorkerCmd};
use super::{fresh_name, ResultRow};
use crate::external::Peer;
use crate::peers::{NaivePollingLock, RslockPeer};
use crate::targets::Target;

/// Processes per cell in a full run.
pub const PROCESSES: [usize; 4] = [1, 2, 8, 32];
/// Hold times per cell in a full run, ms.
pub const HOLDS_MS: [u64; 4] = [0, 1, 10, 50];
/// Processes per cell with `--quick`.
pub const QUICK_PROCESSES: [usize; 3] = [1, 2, 8];
/// Hold times per cell with `--quick`, ms.
pub const QUICK_HOLDS_MS: [u64; 2] = [0, 10];

/// Who takes the lock in a cell's processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    /// distlock on the target's URL.
    Distlock,
    /// The textbook polling lock (Redis).
    NaivePoll,
    /// rslock (Redlock).
    Rslock,
    /// A peer in another runtime.
    External(Peer),
}

impl Client {
    /// distlock and every peer measured on `t`'s store.
    pub fn for_target(t: &Target) -> Vec<Client> {
        let mut v = vec![Client::Distlock];
        if t.url.starts_with("redis://") {
            v.push(Client::NaivePoll);
        }
        if t.url.starts_with("redlock://") {
            v.push(Client::Rslock);
        }
        v.extend(Peer::for_target(t).into_iter().map(Client::External));
        v
    }

    /// The `--client` value of the hidden `worker` subcommand.
    pub fn flag(self) -> &'static str {
        match self {
            Client::NaivePoll => "naive-poll",
            Client::Rslock => "rslock",
            Client::Distlock | Client::External(_) => "distlock",
        }
    }

    /// The row label.
    pub fn label(self, t: &Target) -> String {
        match self {
            Client::Distlock => t.label.clone(),
            Client::NaivePoll => "naive-poll (redis)".into(),
            Client::Rslock => "rslock (redlock)".into(),
            Client::External(p) => p.label().into(),
        }
    }

    /// One process of a cell (a fresh lock name per call).
    fn command(
        self,
        t: &Target,
        d: Duration,
        hold_ms: u64,
        work: &std::path::Path,
    ) -> Result<WorkerCmd, String> {
        match self {
            Client::External(p) => p.worker_cmd(t, d, hold_ms, work),
            _ => {
                let extra = [
                    "--hold-ms",
                    &hold_ms.to_string(),
                    "--window",
                    "--client",
                    self.flag(),
                ];
                WorkerCmd::own(&t.url, &fresh_name("grid"), d, &extra.map(str::to_owned))
            }
        }
    }
}

/// Connects the client a `worker --client` flag names.
pub async fn connect(flag: &str, url: &str) -> Result<Arc<dyn DistributedLock>, String> {
    match flag {
        "naive-poll" => Ok(Arc::new(
            NaivePollingLock::connect(url)
                .await
                .map_err(|e| e.to_string())?,
        )),
        "rslock" => Ok(Arc::new(RslockPeer::new(url))),
        "distlock" => crate::targets::connect(url)
            .await
            .map_err(|e| e.to_string()),
        other => Err(format!(
            "unknown worker client {other:?} (distlock, naive-poll, rslock)"
        )),
    }
}

/// One cell: `processes` processes of `client` for `d`, each holding `hold_ms`.
pub async fn cell(
    client: Client,
    t: &Target,
    processes: usize,
    hold_ms: u64,
    d: Duration,
    work: &std::path::Path,
) -> Result<ResultRow, String> {
    let cmd = client.command(t, d, hold_ms, work)?;
    let all = run_workers(&vec![cmd; processes], d).await?;
    let tally = tally(processes, all);
    let total: u64 = tally.counts.iter().sum();
    Ok(ResultRow {
        processes: Some(processes as u64),
        hold_ms: Some(hold_ms),
        acquisitions: Some(total),
        min_per_client: tally.counts.iter().min().copied(),
        max_per_client: tally.counts.iter().max().copied(),
        note: format!("{processes} processes, each hold {hold_ms} ms; counts within the window"),
        ..tally.row(&client.label(t), "grid", d)
    })
}

/// Every cell of `client` on `t`: the processes × hold times given.
pub async fn cells(
    client: Client,
    t: &Target,
    processes: &[usize],
    holds_ms: &[u64],
    d: Duration,
    work: &std::path::Path,
) -> Result<Vec<ResultRow>, String> {
    let mut rows = Vec::new();
    for &n in processes {
        for &hold in holds_ms {
            rows.push(cell(client, t, n, hold, d, work).await?);
        }
    }
    Ok(rows)
}
