//! One program, every store: a tiny job runner that takes a lock, prints its fencing token,
//! does fenced work and releases. Only `DISTLOCK_URL` changes between stores:
//!
//! ```sh
//! DISTLOCK_URL=sqlite://./distlock.db               cargo run --example job_runner
//! DISTLOCK_URL=redis://127.0.0.1:16379              cargo run --example job_runner
//! DISTLOCK_URL=postgres://postgres@127.0.0.1:15432/distlock?mode=for_update cargo run --example job_runner
//! ```
//!
//! The "resource" is a file written through `distlock::fence::write_file`: it remembers the
//! highest fencing token it accepted and refuses writes carrying a lower one — what any store
//! behind a lock should do (`distlock::fence` has the same for SQL, Redis, etcd and ZooKeeper).

use std::path::Path;
use std::time::Duration;

use distlock::fence::{write_file, FenceError};
use distlock::AcquireOptions;

/// Appends `line` unless a newer holder (higher token) already wrote; `false` when refused.
fn fenced_append(path: &Path, token: u64, line: &str) -> std::io::Result<bool> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    match write_file(path, token, format!("{text}{token} {line}\n").as_bytes()) {
        Ok(()) => Ok(true),
        Err(FenceError::Stale(_)) => Ok(false),
        Err(FenceError::Store(e)) => Err(e),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DISTLOCK_URL").unwrap_or_else(|_| "sqlite://./distlock.db".into());
    let lock = distlock::connect(&url).await?;
    let opts = AcquireOptions::new()
        .wait(Duration::from_secs(30))
        .ttl(Duration::from_secs(10));
    let guard = lock.acquire("job-runner", &opts).await?;
    let token = guard.fencing_token();
    println!(
        "{}: acquired `job-runner`, fencing token {token}",
        lock.backend_name()
    );
    let work = async {
        for step in 1..=3 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let ok = fenced_append(Path::new("job-runner.log"), token, &format!("step {step}"))?;
            println!(
                "step {step}: {}",
                if ok {
                    "written"
                } else {
                    "rejected (a newer holder wrote)"
                }
            );
        }
        Ok::<_, std::io::Error>(())
    };
    tokio::select! {
        r = work => r?,
        lost = guard.lost() => {
            eprintln!("stopping: {lost}");
            return Ok(());
        }
    }
    guard.release().await?;
    println!("released");
    Ok(())
}
