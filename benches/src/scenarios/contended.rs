//! Contended: W workers (each its own client) on one name. Reports handoffs/s, wait and
//! handoff latency, fairness, and checks mutual exclusion (overlap detector) and fencing order.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use tokio::time::Instant;

use super::{fresh_name, ResultRow};
use crate::stats::{jain, worst_share, Latencies};

#[derive(Default)]
struct Shared {
    inside: AtomicBool,
    violations: AtomicU64,
    /// (last token, when the last holder started releasing, who it was)
    last: Mutex<(u64, Option<(Instant, usize)>)>,
    same_holder: AtomicU64,
    handoffs: AtomicU64,
}

/// Runs `workers` clients on one name for `duration`.
pub async fn run(
    label: &str,
    clients: Vec<Arc<dyn DistributedLock>>,
    duration: Duration,
) -> Result<ResultRow, String> {
    let name = fresh_name("contended");
    let shared = Arc::new(Shared::default());
    let end = Instant::now() + duration;
    let workers = clients.len();
    let mut tasks = Vec::new();
    for (id, lock) in clients.into_iter().enumerate() {
        let (name, shared) = (name.clone(), Arc::clone(&shared));
        tasks.push(tokio::spawn(async move {
            let (mut waits, mut handoffs, mut count) =
                (Latencies::default(), Latencies::default(), 0u64);
            let opts = AcquireOptions::new().wait(Duration::from_secs(30));
            while Instant::now() < end {
                let t0 = Instant::now();
                let g = lock
                    .acquire(&name, &opts)
                    .await
                    .map_err(|e| e.to_string())?;
                let got = Instant::now();
                waits.record(got - t0);
                count += 1;
                if shared.inside.swap(true, Ordering::SeqCst) {
                    shared.violations.fetch_add(1, Ordering::SeqCst);
                }
                {
                    let mut last = shared.last.lock().unwrap_or_else(|p| p.into_inner());
                    // Peers without fencing tokens (rslock) hand out token 0: overlap only.
                    if g.fencing_token() > 0 && g.fencing_token() <= last.0 {
                        shared.violations.fetch_add(1, Ordering::SeqCst);
                    }
                    last.0 = g.fencing_token();
                    if let Some((released, who)) = last.1.take() {
                        handoffs.record(got.saturating_duration_since(released));
                        shared.handoffs.fetch_add(1, Ordering::SeqCst);
                        if who == id {
                            shared.same_holder.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                tokio::task::yield_now().await;
                shared.inside.store(false, Ordering::SeqCst);
                shared.last.lock().unwrap_or_else(|p| p.into_inner()).1 =
                    Some((Instant::now(), id));
                g.release().await.map_err(|e| e.to_string())?;
            }
            Ok::<_, String>((waits, handoffs, count))
        }));
    }
    let (mut waits, mut handoffs, mut counts) =
        (Latencies::default(), Latencies::default(), Vec::new());
    let started = Instant::now() - duration;
    for t in tasks {
        let (w, h, c) = t.await.map_err(|e| e.to_string())??;
        waits.merge(&w);
        handoffs.merge(&h);
        counts.push(c);
    }
    let elapsed = started.elapsed().max(duration).as_secs_f64();
    let total: u64 = counts.iter().sum();
    let n_handoffs = shared.handoffs.load(Ordering::SeqCst).max(1);
    Ok(ResultRow {
        backend: label.to_owned(),
        scenario: "contended".into(),
        ops_per_sec: total as f64 / elapsed,
        p50_us: waits.quantile_us(0.5),
        p99_us: waits.quantile_us(0.99),
        p999_us: waits.quantile_us(0.999),
        same_holder_fraction: Some(
            shared.same_holder.load(Ordering::SeqCst) as f64 / n_handoffs as f64,
        ),
        jain_index: Some(jain(&counts)),
        worst_share: Some(worst_share(&counts)),
        wait_ladder_us: waits.ladder(),
        violations: shared.violations.load(Ordering::SeqCst),
        handoff_p50_us: Some(handoffs.quantile_us(0.5)),
        handoff_p99_us: Some(handoffs.quantile_us(0.99)),
        param: Some(workers as u64),
        note: "p50/p99 = wait for the lock".into(),
        ..Default::default()
    })
}
