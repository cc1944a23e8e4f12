//! Holds N locks on one store at once, then releases them: the driver for a heap profile of
//! what one held lock costs the client (docs/bench/speed-breakdown.md, "Memory per held lock").
//!
//! ```text
//! cargo build --release --example held_locks
//! heaptrack target/release/examples/held_locks zk://127.0.0.1:12181 1000
//! heaptrack_print -f heaptrack.held_locks.*.zst --print-peaks 1 --peak-limit 20
//! ```

use std::time::Duration;

use distlock::AcquireOptions;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(url), Some(n)) = (args.next(), args.next()) else {
        return Err("usage: held_locks <store url> <number of locks>".into());
    };
    let n: usize = n
        .parse()
        .map_err(|e| format!("bad number of locks {n:?}: {e}"))?;
    let lock = distlock::connect(&url).await?;
    let opts = AcquireOptions::new();
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        held.push(lock.acquire(&format!("held-locks-{i}"), &opts).await?);
    }
    // Held long enough for renewals to run (their state counts too, while in flight).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let lost = held.iter().filter(|g| g.is_lost()).count();
    println!(
        "held {} locks on {}, {lost} lost",
        held.len(),
        lock.backend_name()
    );
    for g in held {
        g.release().await?;
    }
    Ok(())
}
