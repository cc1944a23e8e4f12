//! The `distlock` command line: `exec` (a distributed flock) and `inspect`.

pub mod exec;
pub mod exit;
pub mod inspect;
pub mod logs;

use std::time::Duration;

use clap::{Parser, Subcommand};

fn dur(s: &str) -> Result<Duration, String> {
    lock_core::backend::parse_duration(s).map_err(|e| e.to_string())
}

/// distlock: distributed locks over ZooKeeper, Redis and SQL.
#[derive(Parser, Debug)]
#[command(name = "distlock", version, after_help = exit::HELP)]
pub struct Cli {
    /// More log output on stderr: -v shows distlock's debug events, -vv everything at trace.
    /// `RUST_LOG` (e.g. `warn,lock_zk=debug`) takes precedence; the default shows warnings.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// The sub-command to run.
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// Sub-commands.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Run CMD while holding the lock NAME (like flock(1), across machines). CMD sees
    /// DISTLOCK_FENCING_TOKEN and DISTLOCK_NAME and runs in its own process group:
    /// SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1 and SIGUSR2 are forwarded to the whole group,
    /// and the group is terminated when the lock is lost or distlock dies.
    #[command(after_help = exit::HELP)]
    Exec {
        /// Lock URL (e.g. sqlite://./distlock.db, redis://host:6379, postgres://…).
        #[arg(long, env = "DISTLOCK_URL")]
        url: String,
        /// Lock name.
        #[arg(long)]
        name: String,
        /// Longest wait for the lock (e.g. 500ms, 10s, 2m); default: forever.
        #[arg(long, value_parser = dur)]
        wait: Option<Duration>,
        /// Lease length, renewed while CMD runs (default 30s).
        #[arg(long, value_parser = dur)]
        ttl: Option<Duration>,
        /// After SIGTERM to CMD's process group (lock lost, or processes CMD left behind),
        /// SIGKILL what is left after this long.
        #[arg(long, value_parser = dur, default_value = "10s")]
        kill_after: Duration,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Show who holds the lock NAME.
    Inspect {
        /// Lock URL.
        #[arg(long, env = "DISTLOCK_URL")]
        url: String,
        /// Lock name.
        #[arg(long)]
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}
