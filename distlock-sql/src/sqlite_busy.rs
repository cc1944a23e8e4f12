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

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void};
use std::time::{Duration, Instant};

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
    /// The sleep before retry `count` of a writer that has waited `waited` (by the clock),
    /// or `None` once that reaches `timeout`.
    pub(crate) fn next(&self, count: u32, waited: Duration, timeout: Duration) -> Option<Duration> {
        let step = match count < self.short_for {
            true => self.short,
            false => self.long,
        };
        (waited < timeout).then_some(step)
    }
}

thread_local! {
    /// When the current wait of this thread's connection began (sqlx runs each SQLite
    /// connection on a thread of its own, and SQLite calls the handler on the thread that
    /// runs the statement).
    static WAIT_BEGAN: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Registers `distlock_busy_steps` for every SQLite connection this process opens from now
/// on. Called at every connect: registering again is a no-op for SQLite, and registers anew
/// after an application reset the auto-extensions (`sqlite3_reset_auto_extension`).
///
/// # Errors
/// SQLite's result code when it refused the hook.
pub(crate) fn install() -> Result<(), c_int> {
    // SAFETY: `register` has the signature SQLite calls auto-extensions with and stays loaded
    // for the life of the process.
    let rc = unsafe { ffi::sqlite3_auto_extension(Some(register)) };
    match rc {
        ffi::SQLITE_OK => Ok(()),
        rc => Err(rc),
    }
}

/// Called by SQLite for each new connection: adds `distlock_busy_steps` to it, callable only
/// from top-level SQL (`SQLITE_DIRECTONLY`: not from a trigger or view of the database file).
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
            ffi::SQLITE_UTF8 | ffi::SQLITE_DIRECTONLY,
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
/// gives up (zero) once the bound in `arg` (ms) has passed by the clock since the wait's
/// first call (`count` 0).
unsafe extern "C" fn on_busy(arg: *mut c_void, count: c_int) -> c_int {
    let timeout = Duration::from_millis(arg as usize as u64);
    let now = Instant::now();
    let began = WAIT_BEGAN.with(|b| match (count, b.get()) {
        (0, _) | (_, None) => {
            b.set(Some(now));
            now
        }
        (_, Some(began)) => began,
    });
    match STEPS.next(u32::try_from(count).unwrap_or(0), now - began, timeout) {
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
    fn short_steps_first_then_long_ones_up_to_the_bound_by_the_clock() {
        let s = STEPS;
        let bound = Duration::from_secs(10);
        let ms = Duration::from_millis;
        assert_eq!(s.next(0, ms(0), bound), Some(Duration::from_micros(100)));
        assert_eq!(s.next(19, ms(2), bound), Some(Duration::from_micros(100)));
        assert_eq!(s.next(20, ms(2), bound), Some(ms(1)));
        assert_eq!(s.next(5_000, ms(9_999), bound), Some(ms(1)));
        // However few steps were taken, the clock ends the wait.
        assert_eq!(s.next(30, ms(10_000), bound), None);
        assert_eq!(s.next(0, ms(0), Duration::ZERO), None);
    }

    #[test]
    fn the_handler_gives_up_at_its_bound_by_the_clock() {
        // A 5 ms bound: the handler retries, then gives up once 5 ms have passed (by the
        // clock), whatever the number of calls.
        let arg = 5usize as *mut c_void;
        let began = Instant::now();
        let mut count = 0;
        // SAFETY: `on_busy` only reads its integer argument and sleeps.
        while unsafe { on_busy(arg, count) } != 0 {
            count += 1;
            assert!(count < 1_000, "never gave up");
        }
        let took = began.elapsed();
        assert!(took >= Duration::from_millis(5), "gave up after {took:?}");
        assert!(count >= 1, "gave up at once");
    }
}
