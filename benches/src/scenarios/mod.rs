//! The benchmark scenarios; each returns [`ResultRow`]s for the report.

pub mod contended;
pub mod contended_procs;
pub mod failover;
pub mod grid;
pub mod permits;
pub mod scaling;
pub mod uncontended;

use serde::{Deserialize, Serialize};

/// One backend × scenario result (the objects of `results.json`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ResultRow {
    /// Backend label (`sqlite-row`, `redis`, `naive-poll (redis)`…).
    pub backend: String,
    /// Scenario name.
    pub scenario: String,
    /// Cycles (uncontended), handoffs (contended, scaling) or acquisitions (names) per second.
    pub ops_per_sec: f64,
    /// Median latency in µs (cycle latency, or wait for the lock under contention).
    pub p50_us: f64,
    /// 99th percentile in µs.
    pub p99_us: f64,
    /// 99.9th percentile in µs.
    pub p999_us: f64,
    /// The raw store primitive's rate measured in the same run (uncontended).
    pub baseline_ops_per_sec: Option<f64>,
    /// ops_per_sec ÷ baseline_ops_per_sec.
    pub ratio_vs_baseline: Option<f64>,
    /// Share of handoffs where the releasing worker re-took the lock (contended).
    pub same_holder_fraction: Option<f64>,
    /// Jain's fairness index over workers (contended).
    pub jain_index: Option<f64>,
    /// The worst-served worker's acquisitions ÷ the mean per worker (contended, grid): 1.0 is
    /// its fair share, 0 starved.
    pub worst_share: Option<f64>,
    /// The wait for the lock at [`crate::stats::LADDER`]'s quantiles, as `[quantile, µs]`
    /// (contended): the tail drawn as a ladder, not one p99.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub wait_ladder_us: Vec<[f64; 2]>,
    /// Mutual-exclusion or fencing-order violations seen (must be 0).
    pub violations: u64,
    /// Handoff latency p50 in µs: release() called → next acquire() returned.
    pub handoff_p50_us: Option<f64>,
    /// Handoff latency p99 in µs.
    pub handoff_p99_us: Option<f64>,
    /// Failover: ms from SIGKILL of the holder to the next holder.
    pub failover_ms: Option<f64>,
    /// The lease / bound the failover is compared with, in ms.
    pub ttl_ms: Option<f64>,
    /// Scenario parameter (waiters, names, workers).
    pub param: Option<u64>,
    /// Resident memory growth in KiB (names scenario).
    pub rss_kb: Option<u64>,
    /// Live heap growth in bytes (names scenario), counted by the allocator.
    pub heap_bytes: Option<u64>,
    /// Client memory per held lock as names were added, as `[held, bytes per lock]` (names).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub memory_per_lock: Vec<[u64; 2]>,
    /// Client processes of a grid cell.
    pub processes: Option<u64>,
    /// How long each grid acquisition held the lock, in ms.
    pub hold_ms: Option<u64>,
    /// Acquisitions in a grid cell, every process together.
    pub acquisitions: Option<u64>,
    /// The fewest acquisitions one process of a grid cell got.
    pub min_per_client: Option<u64>,
    /// The most acquisitions one process of a grid cell got.
    pub max_per_client: Option<u64>,
    /// Anything the reader must know about this row.
    pub note: String,
}

/// A fresh lock name for one run.
pub fn fresh_name(what: &str) -> String {
    format!(
        "bench-{what}-{}",
        &distlock_core::backend::owner_token()[..10]
    )
}
