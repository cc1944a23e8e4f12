//! Exit codes (sysexits.h), and how lock errors map to them.

use distlock::LockError;

/// Usage or configuration error (bad URL, bad name, bad duration).
pub const USAGE: i32 = 64;
/// The store is unreachable.
pub const UNAVAILABLE: i32 = 69;
/// The lock was lost while the command ran (the command's process group was terminated), or
/// the release at the end found it no longer held: the run was not protected to its end.
pub const LOST: i32 = 70;
/// `distlock` could not set up the command's protection (signal handlers, the watchdog); the
/// command did not run.
pub const OS_ERROR: i32 = 71;
/// `distlock leader`: the group has no leader now.
pub const NO_LEADER: i32 = 3;
/// The lock was not acquired within `--wait`.
pub const TIMEOUT: i32 = 75;
/// The command could not be started (not found / not executable).
pub const NO_COMMAND: i32 = 127;

/// The exit code for a lock error.
pub fn for_error(e: &LockError) -> i32 {
    match e {
        LockError::Timeout { .. } => TIMEOUT,
        LockError::InvalidName { .. }
        | LockError::InvalidIdentity { .. }
        | LockError::InvalidConfig(_)
        | LockError::Unsupported { .. } => USAGE,
        LockError::Unavailable { .. } => UNAVAILABLE,
        LockError::Lost { .. } | LockError::NotHeld { .. } => LOST,
        _ => UNAVAILABLE,
    }
}

/// The text `--help` shows.
pub const HELP: &str = "Exit codes (exec; elect the same, with the leadership as the lock):
  3                  distlock leader: the group has no leader
  CMD's own status   CMD ran under the lock to its end (128+N if it died of signal N), also
                     after distlock forwarded a signal to it
  64                 usage or configuration error (bad URL, parameter, name, identity or
                     duration; an operation the backend does not support)
  69                 the lock store is unreachable
  70                 the lock was lost while CMD ran (CMD's process group got SIGTERM, SIGKILL
                     after --kill-after), or the release at the end found it no longer held;
                     even when CMD exited 0
  71                 distlock could not set up CMD's protection (signal handlers, watchdog)
  75                 the lock was not acquired within --wait
  127                CMD could not be started
  128+N              distlock got signal N before CMD started and gave up (nothing left held)";
