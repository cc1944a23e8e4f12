//! The `distlock` command line's arguments: `exec` (a distributed flock), `elect` (run while leading),
//! `leader` (who leads), `inspect`, and the operator's `ls` and `break`.

use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::exit;

fn dur(s: &str) -> Result<Duration, String> {
    distlock_core::backend::parse_duration(s).map_err(|e| e.to_string())
}

/// distlock: distributed locks over ZooKeeper, Redis and SQL.
#[derive(Parser, Debug)]
#[command(name = "distlock", version, after_help = exit::HELP)]
pub struct Cli {
    /// More log output on stderr: -v shows distlock's debug events, -vv everything at trace.
    /// `RUST_LOG` (e.g. `warn,distlock_zk=debug`) takes precedence; the default shows warnings.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// The sub-command to run.
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// Sub-commands.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Run CMD while holding the lock NAME (like flock(1), across machines) — or one of N
    /// permits of the semaphore NAME (--max N), or the read-write lock NAME for reading
    /// (--read) or writing (--write). CMD sees DISTLOCK_FENCING_TOKEN and DISTLOCK_NAME and
    /// runs in its own process group: SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1 and SIGUSR2
    /// are forwarded to the whole group, and the group is terminated when the lock (permit,
    /// side) is lost or distlock dies. Pass DISTLOCK_FENCING_TOKEN to the resource so it refuses
    /// a stalled holder's late write (distlock-cli's README: with PostgreSQL's distlock_fence).
    #[command(after_help = exit::HELP)]
    Exec {
        /// Lock URL (e.g. sqlite://./distlock.db, redis://host:6379, postgres://…).
        #[arg(long, env = "DISTLOCK_URL")]
        url: String,
        /// Lock name.
        #[arg(long)]
        name: String,
        /// Hold one of MAX permits of the semaphore NAME instead of the lock (every caller of
        /// NAME must pass the same MAX; exit 64 if NAME is in use with another).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(distlock::MAX_PERMITS)), conflicts_with_all = ["read", "write"])]
        max: Option<u32>,
        /// Hold the read-write lock NAME for reading (shared with other readers).
        #[arg(long, conflicts_with = "write")]
        read: bool,
        /// Hold the read-write lock NAME for writing (alone).
        #[arg(long)]
        write: bool,
        /// When to give up, the lease, and CMD.
        #[command(flatten)]
        run: RunArgs,
    },
    /// Run CMD while this process leads the group G (leader election). CMD is run, signalled
    /// and stopped exactly as `exec` does (its own process group, terminated when the
    /// leadership is lost or distlock dies), and sees DISTLOCK_FENCING_TOKEN, DISTLOCK_NAME
    /// (the group) and DISTLOCK_IDENTITY. When CMD ends, the leadership is handed over. On
    /// ZooKeeper this is Curator's LeaderLatch, so Java participants take part.
    #[command(after_help = exit::HELP)]
    Elect {
        /// Lock URL (e.g. zk://host:2181, redis://host:6379, postgres://…?mode=row).
        #[arg(long, env = "DISTLOCK_URL")]
        url: String,
        /// The election group.
        #[arg(long)]
        group: String,
        /// This participant's identity, shown by `distlock leader` (default: HOSTNAME:PID).
        #[arg(long)]
        identity: Option<String>,
        /// When to give up, the lease, and CMD.
        #[command(flatten)]
        run: RunArgs,
    },
    /// Show who leads the group G (identity and fencing token) without campaigning. Exit 0
    /// with a leader, 3 when there is none.
    Leader {
        /// Lock URL.
        #[arg(long, env = "DISTLOCK_URL")]
        url: String,
        /// The election group.
        #[arg(long)]
        group: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show who holds the lock NAME (or the semaphore or read-write lock NAME).
    Inspect {
        /// Lock URL.
        #[arg(long, env = "DISTLOCK_URL")]
        url: String,
        /// Lock name.
        #[arg(long)]
        name: String,
        /// Show the semaphore NAME: its count, permits held and waiters.
        #[arg(long, conflicts_with = "rwlock")]
        semaphore: bool,
        /// Show the read-write lock NAME: readers, writer and waiters.
        #[arg(long)]
        rwlock: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the locks held now whose name starts with PREFIX: holder identity, fencing token,
    /// lease left and waiters where the backend reports them (distlock-cli's README says what
    /// each backend can list). At most LIMIT; a note on stderr when more may be held. Exit 5
    /// on a backend or mode that cannot list.
    #[command(after_help = exit::HELP)]
    Ls {
        /// Lock URL.
        #[arg(long, env = "DISTLOCK_URL")]
        url: String,
        /// Only names starting with this (default: every name).
        #[arg(long, default_value = "")]
        prefix: String,
        /// The most locks listed.
        #[arg(long, default_value_t = distlock::DEFAULT_LIST_LIMIT, value_parser = limit)]
        limit: usize,
        /// Print one JSON object: backend, prefix, limit, truncated, locks.
        #[arg(long)]
        json: bool,
    },
    /// Force the lock NAME free, whoever holds it, and advance its fence: the next holder's
    /// fencing token is higher, so a fenced resource refuses the broken holder's late writes,
    /// and the broken holder's guard reports the lock lost at its next renewal. For a holder
    /// that is gone or stuck. Asks on the terminal first unless --yes. Exit 4 when nobody
    /// holds NAME, 5 on a backend or mode that cannot break safely.
    #[command(after_help = exit::HELP)]
    Break {
        /// Lock URL.
        #[arg(long, env = "DISTLOCK_URL")]
        url: String,
        /// Lock name.
        #[arg(long)]
        name: String,
        /// Break without asking (needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
}

/// `--limit`: 1 to [`distlock::MAX_LIST_LIMIT`].
fn limit(s: &str) -> Result<usize, String> {
    let n: usize = s
        .parse()
        .map_err(|e| format!("{s:?} is not a count: {e}"))?;
    if n == 0 || n > distlock::MAX_LIST_LIMIT {
        return Err(format!("give 1 to {}", distlock::MAX_LIST_LIMIT));
    }
    Ok(n)
}

/// What `exec` and `elect` share: how long to wait, the lease, how CMD is stopped, and CMD.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Longest wait for the lock, or (elect) to become the leader (e.g. 500ms, 10s, 2m);
    /// default: forever. Exit 75 after it.
    #[arg(long, value_parser = dur)]
    pub wait: Option<Duration>,
    /// Lease length, renewed while CMD runs (default 30s).
    #[arg(long, value_parser = dur)]
    pub ttl: Option<Duration>,
    /// After SIGTERM to CMD's process group (lock or leadership lost, or processes CMD left
    /// behind), SIGKILL what is left after this long.
    #[arg(long, value_parser = dur, default_value = "10s")]
    pub kill_after: Duration,
    /// Serve distlock's metrics for Prometheus at http://ADDR/metrics while CMD runs (e.g.
    /// 127.0.0.1:9464): acquisitions, wait and hold times, losses, renewal failures.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}
