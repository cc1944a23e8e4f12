//! `distlock leader`: who leads an election group, as text or JSON (exit 0), or that nobody
//! does (exit [`exit::NO_LEADER`]); and the default identity of `distlock elect`.

use crate::exit;
use crate::inspect::connect_and;

/// `HOSTNAME:PID`, the identity `distlock elect` campaigns with unless given one (the host
/// name from the kernel, `localhost` when it cannot be read).
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty() && distlock_core::validate_identity(h).is_ok())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

/// Runs `leader`; returns the process exit code.
pub async fn run(url: &str, group: &str, json: bool) -> i32 {
    let (lock, leader) = match connect_and(url, exit::for_error, |lock| async move {
        lock.leader(group).await
    })
    .await
    {
        Ok(v) => v,
        Err(code) => return code,
    };
    if json {
        let v = serde_json::json!({
            "group": group,
            "backend": lock.backend_name(),
            "leader": leader.as_ref().map(|l| serde_json::json!({
                "identity": l.identity,
                "fencing_token": l.fencing_token,
            })),
        });
        println!("{v}");
    } else {
        match &leader {
            Some(l) => println!(
                "{group}: led by {} (fencing token {}) on {}",
                l.identity,
                l.fencing_token,
                lock.backend_name()
            ),
            None => println!("{group}: no leader on {}", lock.backend_name()),
        }
    }
    if leader.is_some() {
        0
    } else {
        exit::NO_LEADER
    }
}
