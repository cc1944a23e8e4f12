//! `distlock inspect`: who holds a lock (a semaphore's permits, a read-write lock's sides), as
//! text or JSON.

use std::sync::Arc;

use distlock::{DistributedLock, LockConfig, LockError, LockInfo};

use crate::exit;

/// Connects to `url` and runs `op` on the lock: the lock and the answer, or (reported on
/// stderr) the exit code `code` gives the error.
pub async fn connect_and<T, F, Fut>(
    url: &str,
    code: fn(&LockError) -> i32,
    op: F,
) -> Result<(Arc<dyn DistributedLock>, T), i32>
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
        code(&e)
    })
}

/// Which primitive `inspect` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// The mutex.
    Lock,
    /// The semaphore of that name.
    Semaphore,
    /// The read-write lock of that name.
    RwLock,
}

/// Prints a report, or the error; returns the exit code.
fn report(
    name: &str,
    got: Result<(String, serde_json::Value, String), LockError>,
    json: bool,
) -> i32 {
    match got {
        Ok((backend, v, text)) => {
            if json {
                let mut v = v;
                v["name"] = name.into();
                v["backend"] = backend.into();
                println!("{v}");
            } else {
                println!("{name} on {backend}: {text}");
            }
            0
        }
        Err(e) => {
            eprintln!("distlock: {e}");
            exit::for_error(&e)
        }
    }
}

/// Runs `inspect`; returns the process exit code.
pub async fn run(url: &str, name: &str, what: What, json: bool) -> i32 {
    match what {
        What::Lock => lock(url, name, json).await,
        What::Semaphore => {
            let got = async {
                let s = distlock::connect_semaphore(url).await?;
                let i = s.inspect(name).await?;
                let v = serde_json::json!({
                    "max_count": i.max_count, "holders": i.holders, "waiters": i.waiters,
                });
                let text = match i.max_count {
                    Some(m) => format!("{} of {m} permits held, {} waiting", i.holders, i.waiters),
                    None => "free (no holders, no waiters)".to_owned(),
                };
                Ok((s.backend_name().to_owned(), v, text))
            };
            report(name, got.await, json)
        }
        What::RwLock => {
            let got = async {
                let rw = distlock::connect_rwlock(url).await?;
                let i = rw.inspect(name).await?;
                let v = serde_json::json!({
                    "readers": i.readers, "writer": i.writer, "waiters": i.waiters,
                });
                let holds = if i.writer {
                    "held by a writer".to_owned()
                } else {
                    format!("{} readers", i.readers)
                };
                Ok((
                    rw.backend_name().to_owned(),
                    v,
                    format!("{holds}, {} waiting", i.waiters),
                ))
            };
            report(name, got.await, json)
        }
    }
}

/// `inspect` of a mutex.
async fn lock(url: &str, name: &str, json: bool) -> i32 {
    let (lock, info) = match connect_and(url, exit::for_error, |lock| async move {
        lock.inspect(name).await
    })
    .await
    {
        Ok(v) => v,
        Err(code) => return code,
    };
    if json {
        let mut v = info_json(&info);
        v["name"] = name.into();
        v["backend"] = lock.backend_name().into();
        println!("{v}");
    } else if info.held {
        println!("{name}: held on {}", lock.backend_name());
        for line in info_lines(&info) {
            println!("  {line}");
        }
    } else {
        println!("{name}: free on {}", lock.backend_name());
    }
    0
}

/// A lock's state as JSON (`inspect --json`, each lock of `ls --json`).
pub fn info_json(info: &LockInfo) -> serde_json::Value {
    serde_json::json!({
        "held": info.held,
        "fencing_token": info.fencing_token,
        "owner": info.owner,
        "expires_in_ms": info.expires_in.map(|d| d.as_millis() as u64),
        "waiters": info.waiters,
        "holder": info.holder,
    })
}

/// What the store told of a held lock, one `field: value` line each.
pub fn info_lines(info: &LockInfo) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(t) = info.fencing_token {
        lines.push(format!("fencing token: {t}"));
    }
    if let Some(o) = &info.owner {
        lines.push(format!("owner: {o}"));
    }
    if let Some(h) = &info.holder {
        lines.push(format!("holder: {h}"));
    }
    if let Some(d) = info.expires_in {
        lines.push(format!("lease left: {d:?}"));
    }
    if let Some(w) = info.waiters {
        lines.push(format!("waiters: {w}"));
    }
    lines
}
