//! Exit codes (sysexits.h), and how lock errors map to them.

use distlock::LockError;

/// Usage or configuration error (bad URL, bad name, bad duration).
pub const USAGE: i32 = 64;
/// The store is unreachable.
pub const UNAVAILABLE: i32 = 69;
/// The lock was lost while the command ran (the command was terminated).
pub const LOST: i32 = 70;
/// The lock was not acquired within `--wait`.
pub const TIMEOUT: i32 = 75;
/// The command could not be started (not found / not executable).
pub const NO_COMMAND: i32 = 127;

/// The exit code for a lock error.
pub fn for_error(e: &LockError) -> i32 {
    match e {
        LockError::Timeout { .. } => TIMEOUT,
        LockError::InvalidName { .. } | LockError::InvalidConfig(_) => USAGE,
        LockError::Unavailable { .. } => UNAVAILABLE,
        LockError::Lost { .. } | LockError::NotHeld { .. } => LOST,
        _ => UNAVAILABLE,
    }
}

/// The text `--help` shows.
pub const HELP: &str = "Exit codes:
  CMD's own status   the command ran under the lock (128+N if it died of signal N)
  64                 usage or configuration error (bad URL, parameter, name or duration)
  69                 the lock store is unreachable
  70                 the lock was lost while CMD ran; CMD got SIGTERM (SIGKILL after --kill-after)
  75                 the lock was not acquired within --wait
  127                CMD could not be started";
