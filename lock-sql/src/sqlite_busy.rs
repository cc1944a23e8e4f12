//! SQLite: how a writer waits for the database file while another connection writes.
//!
//! SQLite lets one connection write at a time. A writer that finds the file taken waits in its
//! busy handler, and the default one (`PRAGMA busy_timeout`) sleeps 1, 2, 5, 10, 15, 20, 25,
//! 25, 25, 50, 50, then 100 ms at a time. Nothing wakes it when the file frees, so a waiter of
//! one process whose first write (its try, then its place in the queue) met the holder's
//! release slept there while the holder of another process released and took the lock again,
//! tens of times: with two processes on one name, 80% of acquisitions were re-takes (measured;
//! `docs/bench/speed-breakdown.md`).
//!
//! Every distlock SQLite connection instead waits in [`STEPS`]: 100 µs sleeps for the first
//! 2 ms, then 1 ms sleeps, up to the same 10 s bound before the write fails busy. The handler
//! is installed by a SQL function, `distlock_busy_steps(timeout_ms)`, that every connection of
//! this process gets through SQLite's auto-extension hook ([`install`]) and that the session
//! settings call (`statements/sqlite.rs`): sqlx's own connection setup sets a busy timeout
//! (which replaces any handler installed before it), and the pool hands out connections
//! without their raw handle. Other SQLite connections of the process only gain the function.

#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;
use std::time::Duration;

use libsqlite3_sys as ffi;

/// The sleeps of a waiting writer: `short` for the first `short_for`, then `long`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Steps {
    pub(crate) short: Duration,
    pub(crate) short_for: u32,
    pub(crate) long: Duration,
}

/// What every distlock SQLite connection waits in.
pub(crate) const STEPS: Steps = Steps {
    short: Duration::from_micros(100),
    short_for: 20,
    long: Duration::from_millis(1),
};

impl Steps {
    /// How long a writer has waited before its `count`-th retry (the handler's only record).
    pub(crate) fn waited(&self, count: u32) -> Duration {
        let shorts = count.min(self.short_for);
        self.short * shorts + self.long * (count - shorts)
    }

    /// The sleep before retry `count`, or `None` once `timeout` has been waited.
    pub(crate) fn next(&self, count: u32, timeout: Duration) -> Option<Duration> {
        let step = match count < self.short_for {
            true => self.short,
            false => self.long,
        };
        (self.waited(count) < timeout).then_some(step)
    }
}

/// Registers `distlock_busy_steps` for every SQLite connection this process opens from now on (once per
/// process; later calls return the first call's outcome).
///
/// # Errors
/// SQLite's result code when it refused the hook.
pub(crate) fn install() -> Result<(), c_int> {
    static INSTALLED: OnceLock<c_int> = OnceLock::new();
    // SAFETY: `register` has the signature SQLite calls auto-extensions with and stays loaded
    // for the life of the process.
    let rc = *INSTALLED.get_or_init(|| unsafe { ffi::sqlite3_auto_extension(Some(register)) });
    match rc {
        ffi::SQLITE_OK => Ok(()),
        rc => Err(rc),
    }
}

/// Called by SQLite for each new connection: adds `distlock_busy_steps` to it.
unsafe extern "C" fn register(
    db: *mut ffi::sqlite3,
    _err: *mut *mut c_char,
    _api: *const ffi::sqlite3_api_routines,
) -> c_int {
    // SAFETY: `db` is the connection SQLite is opening; the name is a NUL-terminated static
    // string; the function takes one argument and keeps no state of its own.
    unsafe {
        ffi::sqlite3_create_function_v2(
            db,
            c"distlock_busy_steps".as_ptr(),
            1,
            ffi::SQLITE_UTF8,
            std::ptr::null_mut(),
            Some(set_handler),
            None,
            None,
            None,
        )
    }
}

/// `distlock_busy_steps(timeout_ms)`: installs [`on_busy`] on the calling connection with that
/// bound (as `PRAGMA busy_timeout` installs the default handler); returns the bound.
unsafe extern "C" fn set_handler(
    ctx: *mut ffi::sqlite3_context,
    argc: c_int,
    argv: *mut *mut ffi::sqlite3_value,
) {
    // SAFETY: SQLite passes `argc` valid values in `argv` and a live context whose connection
    // is the one running the statement; the handler's argument is a plain integer (the bound
    // in ms), never dereferenced.
    unsafe {
        let ms = match argc {
            1 => ffi::sqlite3_value_int(*argv).max(0),
            _ => 0,
        };
        let db = ffi::sqlite3_context_db_handle(ctx);
        ffi::sqlite3_busy_handler(db, Some(on_busy), ms as usize as *mut c_void);
        ffi::sqlite3_result_int(ctx, ms);
    }
}

/// SQLite's busy callback: sleeps the next of [`STEPS`] and asks for a retry (non-zero), or
/// gives up (zero) once the bound in `arg` (ms) has been waited.
unsafe extern "C" fn on_busy(arg: *mut c_void, count: c_int) -> c_int {
    let timeout = Duration::from_millis(arg as usize as u64);
    match STEPS.next(u32::try_from(count).unwrap_or(0), timeout) {
        Some(sleep) => {
            // The connection's own thread (sqlx runs each SQLite connection on one), as
            // SQLite's default handler sleeps there too.
            std::thread::sleep(sleep);
            1
        }
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_steps_first_then_long_ones_up_to_the_bound() {
        let s = STEPS;
        assert_eq!(s.waited(0), Duration::ZERO);
        assert_eq!(s.waited(20), Duration::from_millis(2));
        assert_eq!(s.waited(21), Duration::from_millis(3));
        let bound = Duration::from_secs(10);
        assert_eq!(s.next(0, bound), Some(Duration::from_micros(100)));
        assert_eq!(s.next(19, bound), Some(Duration::from_micros(100)));
        assert_eq!(s.next(20, bound), Some(Duration::from_millis(1)));
        // 2 ms of short steps, then 9,998 one-millisecond steps make 10 s.
        assert_eq!(s.next(20 + 9_997, bound), Some(Duration::from_millis(1)));
        assert_eq!(s.next(20 + 9_998, bound), None);
        assert_eq!(s.next(0, Duration::ZERO), None);
    }
}
