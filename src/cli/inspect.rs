//! `distlock inspect`: who holds a lock, as text or JSON.

use distlock::LockConfig;

use super::exit;

/// Runs `inspect`; returns the process exit code.
pub async fn run(url: &str, name: &str, json: bool) -> i32 {
    let (lock, _) = match distlock::connect_config(&LockConfig::from_url(url)).await {
        Ok(v) => v,
        Err(e) => {
            eprintln!("distlock: {e}");
            return exit::for_error(&e);
        }
    };
    let info = match lock.inspect(name).await {
        Ok(i) => i,
        Err(e) => {
            eprintln!("distlock: {e}");
            return exit::for_error(&e);
        }
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
