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
/// `distlock break`: nobody holds the name; nothing was broken.
pub const NOT_HELD: i32 = 4;
/// `distlock ls` / `distlock break`: the backend (or its mode) cannot list or break safely.
pub const CANNOT: i32 = 5;
/// `distlock break`: the operator did not confirm at the prompt; nothing was broken.
pub const DECLINED: i32 = 1;
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

/// The exit code for an error of `ls` or `break`: [`NOT_HELD`], [`CANNOT`], or as
/// [`for_error`].
pub fn for_operator_error(e: &LockError) -> i32 {
    match e {
        LockError::NotHeld { .. } => NOT_HELD,
        LockError::Unsupported { .. } => CANNOT,
        e => for_error(e),
    }
}

/// The text `--help` shows.
pub const HELP: &str =
    "Exit codes (exec; elect the same, with the leadership as the lock; ls, break,
leader and inspect exit 0 on success, or as noted):
  1                  distlock break: not confirmed at the prompt (nothing was broken)
  3                  distlock leader: the group has no leader
  4                  distlock break: nobody holds NAME (nothing was broken)
  5                  distlock ls, break: this backend or mode cannot list or break safely
  CMD's own status   CMD ran under the lock to its end (128+N if it died of signal N), also
                     after distlock forwarded a signal to it
  64                 usage or configuration error (bad URL, parameter, name, identity or
                     duration; an operation the backend does not support; break without
                     --yes when stdin is not a terminal)
  69                 the lock store is unreachable
  70                 the lock was lost while CMD ran (CMD's process group got SIGTERM, SIGKILL
                     after --kill-after), or the release at the end found it no longer held;
                     even when CMD exited 0
  71                 distlock could not set up CMD's protection (signal handlers, watchdog)
  75                 the lock was not acquired within --wait
  127                CMD could not be started
  128+N              distlock got signal N before CMD started and gave up (nothing left held)";
