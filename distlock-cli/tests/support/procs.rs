//! Process helpers for the CLI process tests (`exec_process.rs`, `elect_process.rs`): polling,
//! pid files, exits, reaping, and removing an SQLite lock row underneath its holder.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Polls `f` every 10 ms until it returns `Some` or `limit` passes.
pub fn poll<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The trimmed contents of `path` once it is non-empty (within `limit`).
pub fn wait_file(path: &Path, limit: Duration) -> Option<String> {
    poll(limit, || {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    })
}

pub fn read_pid(path: &Path) -> i32 {
    let text = wait_file(path, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("{} never written", path.display()));
    text.parse()
        .unwrap_or_else(|_| panic!("{}: {text:?}", path.display()))
}

/// Waits for `child` to exit within `limit`; kills it and fails otherwise.
pub fn wait_exit(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    match poll(limit, || child.try_wait().unwrap()) {
        Some(s) => s,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: distlock did not exit within {limit:?}");
        }
    }
}

/// Whether `pid` no longer runs: gone, or a zombie (this machine's init may never reap orphans).
pub fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // "pid (comm) S ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// Kills the recorded processes when a test ends, so a failing run leaves nothing behind.
#[derive(Default)]
pub struct Reaper(Vec<i32>);

impl Reaper {
    pub fn watch(&mut self, pid: i32) -> i32 {
        self.0.push(pid);
        pid
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if !gone(pid) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

/// Removes the lock row of `name` in the `exec_locks` table of `dir/locks.db` underneath its
/// holder, as an operator or a bug elsewhere would.
pub fn delete_row(dir: &Path, name: &str) {
    use sqlx::Connection;
    let url = format!("sqlite://{}/locks.db", dir.display());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let deleted = rt.block_on(async {
        let mut conn = sqlx::sqlite::SqliteConnection::connect(&url).await.unwrap();
        let done = sqlx::query("DELETE FROM exec_locks WHERE name = ?1")
            .bind(name)
            .execute(&mut conn)
            .await
            .unwrap();
        let _ = conn.close().await;
        done.rows_affected()
    });
    assert_eq!(deleted, 1, "the lock row of {name} was not there to delete");
}
