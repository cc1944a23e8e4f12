//! `distlock inspect`: who holds a lock, as text or JSON.

use std::sync::Arc;

use distlock::{DistributedLock, LockConfig, LockError};

use super::exit;

/// Connects to `url` and runs `op` on the lock: the lock and the answer, or (reported on
/// stderr) the exit code of the error.
pub async fn connect_and<T, F, Fut>(url: &str, op: F) -> Result<(Arc<dyn DistributedLock>, T), i32>
where
    F: FnOnce(Arc<dyn DistributedLock>) -> Fut,
    Fut: std::future::Future<Output = Result<T, LockError>>,
{
    let res = match distlock::connect_config(&LockConfig::from_url(url)).await {
        Ok((lock, _)) => op(Arc::clone(&lock)).await.map(|v| (lock, v)),
        Err(e) => Err(e),
    };
    res.map_err(|e| {
        eprintln!("distlock: {e}");
        exit::for_error(&e)
    })
}

/// Runs `inspect`; returns the process exit code.
pub async fn run(url: &str, name: &str, json: bool) -> i32 {
    let (lock, info) = match connect_and(url, |lock| async move { lock.inspect(name).await }).await
    {
        Ok(v) => v,
        Err(code) => return code,
    };
    if json {
        let v = serde_json::json!({
            "name": name,
            "backend": lock.backend_name(),
            "held": info.held,
            "fencing_token": info.fencing_token,
            "owner": info.owner,
            "expires_in_ms": info.expires_in.map(|d| d.as_millis() as u64),
            "waiters": info.waiters,
            "holder": info.holder,
        });
        println!("{v}");
    } else if info.held {
        println!("{name}: held on {}", lock.backend_name());
        if let Some(t) = info.fencing_token {
            println!("  fencing token: {t}");
        }
        if let Some(o) = &info.owner {
            println!("  owner: {o}");
        }
        if let Some(h) = &info.holder {
            println!("  holder: {h}");
        }
        if let Some(d) = info.expires_in {
            println!("  lease left: {d:?}");
        }
        if let Some(w) = info.waiters {
            println!("  waiters: {w}");
        }
    } else {
        println!("{name}: free on {}", lock.backend_name());
    }
    0
}
