//! Uncontended: one client, acquire+release cycles, beside the raw primitive in the same run.

use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use tokio::time::Instant;

use super::{fresh_name, ResultRow};
use crate::raw::RawClient;
use crate::stats::Latencies;

async fn measure<F, Fut>(duration: Duration, mut cycle: F) -> Result<(f64, Latencies), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    // Warm-up: connections, prepared statements, scripts.
    for _ in 0..20 {
        cycle().await?;
    }
    let mut lat = Latencies::default();
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < duration {
        let t = Instant::now();
        cycle().await?;
        lat.record(t.elapsed());
        n += 1;
    }
    Ok((n as f64 / start.elapsed().as_secs_f64(), lat))
}

/// Runs the lock and the raw primitive for `duration` each.
pub async fn run(
    label: &str,
    lock: &dyn DistributedLock,
    raw: Option<&RawClient>,
    duration: Duration,
) -> Result<ResultRow, String> {
    let name = fresh_name("uncontended");
    let opts = AcquireOptions::new().wait(Duration::from_secs(10));
    let (rate, lat) = measure(duration, || async {
        let g = lock
            .acquire(&name, &opts)
            .await
            .map_err(|e| e.to_string())?;
        g.release().await.map_err(|e| e.to_string())
    })
    .await?;
    let baseline = match raw {
        Some(r) => {
            let raw_name = fresh_name("raw");
            Some(measure(duration, || r.cycle(&raw_name)).await?.0)
        }
        None => None,
    };
    Ok(ResultRow {
        backend: label.to_owned(),
        scenario: "uncontended".into(),
        ops_per_sec: rate,
        p50_us: lat.quantile_us(0.5),
        p99_us: lat.quantile_us(0.99),
        p999_us: lat.quantile_us(0.999),
        baseline_ops_per_sec: baseline,
        ratio_vs_baseline: baseline.map(|b| rate / b),
        ..Default::default()
    })
}
