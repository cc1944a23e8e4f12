//! Failover: the holder is a child process killed with SIGKILL; how long until another process
//! holds the lock, next to the lease / session / connection bound that frees it.

use std::process::Stdio;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;

use super::{fresh_name, ResultRow};

/// The lease the child holds with.
pub const CHILD_TTL: Duration = Duration::from_secs(2);

/// Runs one failover against `url`.
pub async fn run(label: &str, url: &str, lock: &dyn DistributedLock) -> Result<ResultRow, String> {
    let name = fresh_name("failover");
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = tokio::process::Command::new(exe)
        .args(["hold", "--url", url, "--name", &name, "--ttl", "2s"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().ok_or("no child stdout")?;
    let mut line = String::new();
    let mut reader = BufReader::new(stdout);
    let read = reader.read_line(&mut line);
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .map_err(|_| "holder child did not report within 30s".to_string())?
        .map_err(|e| e.to_string())?;
    if !line.starts_with("HELD") {
        return Err(format!("holder child failed: {line}"));
    }
    child.start_kill().map_err(|e| e.to_string())?; // SIGKILL
    let killed = Instant::now();
    let _ = child.wait().await;
    let g = lock
        .acquire(&name, &AcquireOptions::new().wait(Duration::from_secs(60)))
        .await
        .map_err(|e| e.to_string())?;
    let took = killed.elapsed();
    g.release().await.map_err(|e| e.to_string())?;
    let caps = lock.capabilities();
    let session = caps.crash_release == distlock_core::CrashRelease::Session;
    let note = match caps.crash_release {
        distlock_core::CrashRelease::Lease => "freed when the 2 s lease ran out",
        distlock_core::CrashRelease::Session => {
            "freed when the session expired (the URL's session_timeout, default 10 s; not the lease)"
        }
        distlock_core::CrashRelease::Connection => "freed when the database saw the connection close",
        _ => "freed as the backend's capabilities describe",
    };
    Ok(ResultRow {
        backend: label.to_owned(),
        scenario: "failover".into(),
        failover_ms: Some(took.as_secs_f64() * 1000.0),
        // A session-bound lock is not freed by the lease: no lease figure to compare with.
        ttl_ms: (!session).then(|| CHILD_TTL.as_secs_f64() * 1000.0),
        note: note.into(),
        ..Default::default()
    })
}

/// The child side: hold `name` and report, then wait to be killed.
pub async fn hold(lock: &dyn DistributedLock, name: &str, ttl: Duration) -> Result<(), String> {
    let g = lock
        .acquire(
            name,
            &AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(30)),
        )
        .await
        .map_err(|e| e.to_string())?;
    println!("HELD {}", g.fencing_token());
    tokio::time::sleep(Duration::from_secs(300)).await;
    drop(g);
    Ok(())
}
