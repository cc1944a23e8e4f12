//! `distlock exec`: run a command while holding the lock (a distributed `flock(1)`).
//!
//! # Never without the lock
//!
//! CMD must not run unless this process holds the lock. Everything below serves that:
//!
//! * **Process group.** CMD runs in a process group of its own, and every signal `exec` sends
//!   goes to the whole group (`killpg`), so `sh -c 'worker & wait'` cannot leave `worker`
//!   behind. When the lock is lost, the group gets SIGTERM and, whatever is left after
//!   `--kill-after`, SIGKILL; `exec` exits 70. When CMD exits but processes it started still
//!   run in its group, they are stopped the same way *before* the lock is released. (A process
//!   that leaves the group on purpose, with `setsid` or `setpgid`, is out of reach.)
//! * **Signals.** SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1 and SIGUSR2 are caught from the
//!   start, before connecting. Before CMD starts, any of them makes `exec` give up cleanly
//!   (the pending acquire is dropped, which leaves nothing in the store; a lock already
//!   acquired is released) and exit 128+N. While CMD runs they are forwarded to its group and
//!   `exec` keeps waiting for CMD, then releases the lock and exits with CMD's status.
//! * **If `exec` dies** (SIGKILL, the OOM killer, a crash), two layers stop CMD:
//!   1. On Linux, CMD's first process asks the kernel for SIGKILL when its parent dies
//!      (`PR_SET_PDEATHSIG`, set between fork and exec, followed by a check that the parent is
//!      still `exec`, in case it died before the request took effect). The kernel sends it when
//!      the *thread* that forked CMD exits, so CMD is spawned from the main thread (`main`
//!      runs a current-thread runtime). It does not reach CMD's children, and the kernel
//!      clears it when CMD execs a set-user-ID program; the watchdog covers both.
//!   2. On every Unix, a watchdog: `exec` starts itself again as `distlock __watchdog`, in a
//!      process group of its own (terminal signals and the signals `exec` forwards do not
//!      reach it, and it blocks them anyway). The watchdog's stdin is a pipe whose write end
//!      only `exec` holds (close-on-exec, so CMD never inherits it). Between fork and exec,
//!      CMD's first process writes its process group to that pipe, so the watchdog knows the
//!      group before CMD runs a single instruction. When the read returns end-of-file, `exec`
//!      is gone (the kernel closed its descriptors) and the watchdog sends SIGKILL to the
//!      group. When `exec` finishes normally it tells the watchdog to exit instead. The
//!      watchdog itself has no parent-death signal: it would race with the end-of-file and
//!      could be killed before it killed the group.
//!
//! Without Linux (macOS, the BSDs) the watchdog is the only layer: it covers CMD and
//! everything in its group just the same. What can survive `exec` on any platform: a process
//! that left CMD's group, and, when the watchdog is killed together with `exec` (say `kill -9`
//! of both), CMD's group except (on Linux) CMD's first process.
//!
//! On Linux `exec` is also a child subreaper (`PR_SET_CHILD_SUBREAPER`): the orphaned processes
//! of CMD's group become its children, so it can reap them and tell a finished group from a
//! running one even where the init process does not reap orphans (many containers).
//!
//! CMD's group is not the terminal's foreground group: CMD that reads the terminal is stopped
//! (SIGTTIN), and keys like Ctrl-C reach `exec`, which forwards the signal.
//!
//! # Exit status
//! CMD's own status when it ran under the lock to its end; 70 when the lock was lost while it
//! ran or the release at the end found the lock no longer held (also when CMD exited 0: the
//! status never claims a protected run that was not); see [`crate::exit`].

use std::future::poll_fn;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use distlock::{
    Access, AcquireOptions, DistributedLock, DistributedRwLock, DistributedSemaphore, LockConfig,
    LockError, LockGuard,
};
use nix::errno::Errno;
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal as SignalStream, SignalKind};
use tokio::time::{sleep, timeout, timeout_at, Instant};

use crate::exit;

/// Writes a line to stderr, ignoring failures (`eprintln!` panics when stderr is gone, as it
/// is after the terminal hung up, and the panic would end `exec` before it released the lock).
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(io::stderr(), $($arg)*);
    }};
}

/// The hidden first argument that makes `distlock` run as `exec`'s watchdog.
pub const WATCHDOG_ARG: &str = "__watchdog";

/// Watchdog protocol, on its stdin: `G` and the process group (4 bytes, little endian)...
const MSG_GROUP: u8 = b'G';
/// ...or `X`: exit without killing. End-of-file: `exec` died; kill the group.
const MSG_DISMISS: u8 = b'X';
/// What the watchdog writes to its stdout once it is ready.
const MSG_READY: u8 = b'R';
/// How long the watchdog may take to start.
const WATCHDOG_START: Duration = Duration::from_secs(10);
/// How long background clean-ups of an abandoned acquire may take before `exec` exits anyway.
const SETTLE_LIMIT: Duration = Duration::from_secs(2);
/// How often the remaining processes of CMD's group are checked while they are stopped.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// The signals `exec` catches from its start and forwards to CMD's process group.
const FORWARDED: [Signal; 6] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// What `exec` needs.
pub struct ExecArgs {
    /// The lock URL.
    pub url: String,
    /// The lock name.
    pub name: String,
    /// Longest wait for the lock (`None`: the URL's default, else forever).
    pub wait: Option<Duration>,
    /// Lease length (`None`: the URL's default).
    pub ttl: Option<Duration>,
    /// After SIGTERM to CMD's group, SIGKILL what is left after this long.
    pub kill_after: Duration,
    /// Where to serve metrics for Prometheus, if anywhere.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// What CMD runs under.
    pub take: Take,
}

/// What `exec` or `elect` holds while CMD runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Take {
    /// The lock `name` (`distlock exec`).
    Lock,
    /// One of `max` permits of the semaphore `name` (`distlock exec --max N`).
    Permit(u32),
    /// A side of the read-write lock `name` (`distlock exec --read` / `--write`).
    Side(Access),
    /// The leadership of the group `name`, campaigning as this identity (`distlock elect`).
    Lead(String),
}

/// The client `exec` holds on to until CMD's end (some backends tie a hold to its connection).
enum Client {
    Lock(Arc<dyn DistributedLock>),
    Semaphore(Arc<dyn DistributedSemaphore>),
    RwLock(Arc<dyn DistributedRwLock>),
}

fn code_of(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// The exit code for giving up on signal `sig` (what the signal would have made of us).
fn signal_code(sig: Signal) -> i32 {
    128 + sig as i32
}

/// The forwarded signals, caught.
struct Signals {
    streams: Vec<(Signal, SignalStream)>,
}

impl Signals {
    fn install() -> io::Result<Self> {
        let streams = FORWARDED
            .iter()
            .map(|&s| Ok((s, signal(SignalKind::from_raw(s as i32))?)))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Signals { streams })
    }

    fn poll_any(&mut self, cx: &mut Context<'_>) -> Poll<Signal> {
        for (sig, stream) in &mut self.streams {
            if let Poll::Ready(Some(())) = stream.poll_recv(cx) {
                return Poll::Ready(*sig);
            }
        }
        Poll::Pending
    }

    /// The next signal received.
    async fn recv(&mut self) -> Signal {
        poll_fn(|cx| self.poll_any(cx)).await
    }

    /// A signal received and not yet taken, if any.
    fn pending(&mut self) -> Option<Signal> {
        match self.poll_any(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(sig) => Some(sig),
            Poll::Pending => None,
        }
    }
}

/// Sends `sig` to CMD's process group (it may be gone already: nothing to do then).
fn signal_group(pgid: Pid, sig: Signal) {
    let _ = killpg(pgid, sig);
}

/// Reaps the finished processes of CMD's group that `exec` adopted as a child subreaper, so a
/// zombie does not count as running. Only once CMD itself was reaped: `waitpid(-pgid)` would
/// take CMD's own status otherwise.
fn reap_group(pgid: Pid) {
    for _ in 0..4096 {
        match waitpid(Pid::from_raw(-pgid.as_raw()), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Whether any process still runs in CMD's group (call only after CMD itself was reaped).
fn group_alive(pgid: Pid) -> bool {
    reap_group(pgid);
    !matches!(killpg(pgid, None), Err(Errno::ESRCH))
}

/// Stops CMD's group: SIGTERM, then waits (still forwarding signals) until `child` (if not
/// reaped yet) and every other process of the group are gone, and sends SIGKILL to what is
/// left when `grace` runs out.
async fn stop_group(pgid: Pid, child: Option<&mut Child>, grace: Duration, signals: &mut Signals) {
    let deadline = Instant::now() + grace;
    signal_group(pgid, Signal::SIGTERM);
    if let Some(child) = child {
        loop {
            tokio::select! {
                waited = timeout_at(deadline, child.wait()) => {
                    if waited.is_err() {
                        signal_group(pgid, Signal::SIGKILL);
                        let _ = child.wait().await;
                    }
                    break;
                }
                sig = signals.recv() => signal_group(pgid, sig),
            }
        }
    }
    while group_alive(pgid) {
        if Instant::now() >= deadline {
            signal_group(pgid, Signal::SIGKILL);
            return;
        }
        tokio::select! {
            _ = sleep(GROUP_POLL) => {}
            sig = signals.recv() => signal_group(pgid, sig),
        }
    }
}

/// Releases a guard whose outcome no longer changes the exit status.
async fn release_quietly(guard: LockGuard) {
    let _ = guard.release().await;
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Gives the background clean-ups of a dropped acquire (see `DistributedLock`'s cancel
/// safety) a bounded time to finish before the process exits: until no more tasks are alive
/// than `baseline` (counted before connecting; the client must be dropped first), at most
/// [`SETTLE_LIMIT`]. (A waiter that holds a database connection blocked in the store's own
/// lock queue, as `mode=for_update` does, stays alive to the limit; exiting closes it.)
async fn settle(baseline: usize) {
    let deadline = Instant::now() + SETTLE_LIMIT;
    while alive_tasks() > baseline && Instant::now() < deadline {
        sleep(Duration::from_millis(5)).await;
    }
}

/// `exec`'s watchdog, seen from `exec` (see the module docs).
struct Watchdog {
    child: Child,
    /// The write end of the watchdog's stdin; end-of-file on it kills CMD's group.
    pipe: Arc<OwnedFd>,
}

impl Watchdog {
    async fn start() -> io::Result<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg(WATCHDOG_ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()?;
        let (Some(stdin), Some(mut stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(io::Error::other("no pipes to the watchdog"));
        };
        let mut ready = [0u8; 1];
        let answer = timeout(WATCHDOG_START, stdout.read_exact(&mut ready)).await;
        if !matches!(answer, Ok(Ok(_))) || ready[0] != MSG_READY {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(io::Error::other(format!(
                "it did not report ready within {WATCHDOG_START:?}"
            )));
        }
        Ok(Watchdog {
            child,
            pipe: Arc::new(stdin.into_owned_fd()?),
        })
    }

    /// Tells the watchdog to exit without killing anything, and reaps it.
    async fn dismiss(mut self) {
        let _ = nix::unistd::write(&*self.pipe, &[MSG_DISMISS]);
        drop(self.pipe);
        if timeout(Duration::from_secs(2), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
        }
    }
}

fn os_error(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Makes the forked child, before it execs CMD, (on Linux) ask for SIGKILL when `exec` dies,
/// check that `exec` is still its parent, and report its process group to the watchdog.
#[allow(unsafe_code)]
fn protect_child(cmd: &mut Command, watchdog: Arc<OwnedFd>) {
    let parent = nix::unistd::getpid();
    // SAFETY: `pre_exec` runs the closure in the forked child, where (distlock has other
    // threads) only async-signal-safe functions may be called. The closure calls prctl(2),
    // getppid(2), getpgrp(2) and write(2) through nix's thin wrappers, uses only values
    // captured before the fork, allocates nothing and takes no lock; its errors are built from
    // raw OS error numbers, which does not allocate. An error makes std `_exit` the child.
    unsafe {
        cmd.pre_exec(move || {
            #[cfg(target_os = "linux")]
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(os_error)?;
            if nix::unistd::getppid() != parent {
                // `exec` died before the request above took effect.
                return Err(os_error(Errno::ESRCH));
            }
            let g = nix::unistd::getpgrp().as_raw().to_le_bytes();
            let msg = [MSG_GROUP, g[0], g[1], g[2], g[3]];
            match nix::unistd::write(&*watchdog, &msg) {
                Ok(n) if n == msg.len() => Ok(()),
                Ok(_) => Err(os_error(Errno::EIO)),
                Err(e) => Err(os_error(e)),
            }
        });
    }
}

/// Runs the watchdog (`distlock __watchdog`, started by `exec`, not by people): reads its
/// stdin until `exec` dismisses it or is gone, and in the latter case sends SIGKILL to the
/// process group `exec`'s child reported. Returns the exit code.
pub fn watchdog() -> i32 {
    let mut blocked = SigSet::empty();
    for sig in FORWARDED.into_iter().chain([
        Signal::SIGPIPE,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
    ]) {
        blocked.add(sig);
    }
    if blocked.thread_block().is_err() {
        return 1;
    }
    let mut out = io::stdout();
    if out
        .write_all(&[MSG_READY])
        .and_then(|()| out.flush())
        .is_err()
    {
        return 1;
    }
    let mut input = io::stdin().lock();
    let mut group = None;
    let mut tag = [0u8; 1];
    // Any read error counts as end-of-file: `exec` cannot talk to us any more.
    while input.read_exact(&mut tag).is_ok() {
        match tag[0] {
            MSG_GROUP => {
                let mut g = [0u8; 4];
                if input.read_exact(&mut g).is_err() {
                    break;
                }
                group = Some(i32::from_le_bytes(g)).filter(|&g| g > 1);
            }
            MSG_DISMISS => return 0,
            _ => {}
        }
    }
    if let Some(g) = group {
        let _ = killpg(Pid::from_raw(g), Signal::SIGKILL);
    }
    0
}

/// Connects the client `a.take` needs; its options are the URL's defaults with `--wait` and
/// `--ttl` over them.
async fn connect(a: &ExecArgs) -> Result<(Client, AcquireOptions), LockError> {
    let (client, mut opts) = match a.take {
        Take::Lock | Take::Lead(_) => {
            let cfg = LockConfig::from_url(a.url.clone());
            let (lock, opts) = distlock::connect_config(&cfg).await?;
            (Client::Lock(lock), opts)
        }
        // These apply the URL's defaults themselves to what `opts` leaves unset.
        Take::Permit(_) => (
            Client::Semaphore(distlock::connect_semaphore(&a.url).await?),
            AcquireOptions::new(),
        ),
        Take::Side(_) => (
            Client::RwLock(distlock::connect_rwlock(&a.url).await?),
            AcquireOptions::new(),
        ),
    };
    if let Some(w) = a.wait {
        opts = opts.wait(w);
    }
    if let Some(t) = a.ttl {
        opts = opts.ttl(t);
    }
    Ok((client, opts))
}

impl ExecArgs {
    /// `exec` or `elect`, holding what `take` says while CMD runs.
    pub fn new(url: String, name: String, run: crate::args::RunArgs, take: Take) -> Self {
        ExecArgs {
            url,
            name,
            wait: run.wait,
            ttl: run.ttl,
            kill_after: run.kill_after,
            metrics_addr: run.metrics_addr,
            command: run.command,
            take,
        }
    }
}

/// The lock, a permit, a side, or (`distlock elect`) the group's leadership: a lock guard each.
async fn take(
    client: &Client,
    a: &ExecArgs,
    opts: &AcquireOptions,
) -> Result<LockGuard, LockError> {
    match (client, &a.take) {
        (Client::Lock(lock), Take::Lead(id)) => lock.campaign(&a.name, id, opts).await,
        (Client::Lock(lock), _) => lock.acquire(&a.name, opts).await,
        (Client::Semaphore(s), Take::Permit(max)) => s.acquire(&a.name, *max, opts).await,
        (Client::RwLock(rw), Take::Side(access)) => rw.lock(&a.name, *access, opts).await,
        (Client::Semaphore(_) | Client::RwLock(_), _) => Err(LockError::invalid_config(
            "internal: the client does not match what exec holds",
        )),
    }
}

/// Runs `exec`; returns the process exit code.
pub async fn run(a: ExecArgs) -> i32 {
    // First of all, so that no signal kills us between here and CMD's end.
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            say!("distlock: cannot install signal handlers: {e}");
            return exit::OS_ERROR;
        }
    };
    let Some((program, args)) = a.command.split_first() else {
        say!("distlock: no command given after --");
        return exit::USAGE;
    };
    if let Some(addr) = a.metrics_addr {
        if let Err(e) = crate::metrics::serve(addr) {
            say!("distlock: {e}");
            return exit::USAGE;
        }
    }
    let baseline = alive_tasks();
    let connected = tokio::select! {
        connected = connect(&a) => connected,
        sig = signals.recv() => {
            say!("distlock: {sig} while connecting: giving up");
            settle(baseline).await;
            return signal_code(sig);
        }
    };
    let (lock, opts) = match connected {
        Ok(v) => v,
        Err(e) => {
            say!("distlock: {e}");
            return exit::for_error(&e);
        }
    };
    let acquired = tokio::select! {
        acquired = take(&lock, &a, &opts) => Ok(acquired),
        sig = signals.recv() => Err(sig),
    };
    let guard = match acquired {
        Ok(Ok(g)) => g,
        Ok(Err(e)) => {
            say!("distlock: {e}");
            return exit::for_error(&e);
        }
        Err(sig) => {
            // The acquire future is dropped: the backend removes in the background what it
            // had written (its cancel safety); let that finish, with the client's own tasks.
            say!(
                "distlock: {sig} while waiting for the lock `{}`: giving up",
                a.name
            );
            drop(lock);
            settle(baseline).await;
            return signal_code(sig);
        }
    };
    if let Some(sig) = signals.pending() {
        say!("distlock: {sig} before the command started: releasing the lock and giving up");
        release_quietly(guard).await;
        return signal_code(sig);
    }
    let code = run_locked(&a, program, args, guard, &mut signals).await;
    // The client lived until here: some backends tie the lock to its connection.
    drop(lock);
    code
}

/// How the wait for CMD ended.
enum Ended {
    Exited(io::Result<ExitStatus>),
    Lost(LockError),
}

async fn run_locked(
    a: &ExecArgs,
    program: &str,
    args: &[String],
    guard: LockGuard,
    signals: &mut Signals,
) -> i32 {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        say!("distlock: warning: cannot become a child subreaper ({e}): finished orphans of the command may count as running until --kill-after");
    }
    let watchdog = match Watchdog::start().await {
        Ok(w) => w,
        Err(e) => {
            say!("distlock: cannot start the watchdog that stops the command if distlock dies ({e}); not running the command");
            release_quietly(guard).await;
            return exit::OS_ERROR;
        }
    };
    // PR_SET_PDEATHSIG fires when the forking *thread* exits: fork from the main thread.
    debug_assert_eq!(std::thread::current().name(), Some("main"));
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("DISTLOCK_FENCING_TOKEN", guard.fencing_token().to_string())
        .env("DISTLOCK_NAME", &a.name)
        .process_group(0);
    if let Take::Lead(id) = &a.take {
        cmd.env("DISTLOCK_IDENTITY", id);
    }
    protect_child(&mut cmd, Arc::clone(&watchdog.pipe));
    let spawned = cmd.spawn();
    drop(cmd);
    let (mut child, pgid) = match spawned {
        Ok(c) => match c.id() {
            Some(id) => (c, Pid::from_raw(id as i32)),
            None => {
                say!("distlock: the command vanished as it started");
                watchdog.dismiss().await;
                release_quietly(guard).await;
                return exit::OS_ERROR;
            }
        },
        Err(e) => {
            // The watchdog may know the dead child's group: dismiss it before that id is reused.
            watchdog.dismiss().await;
            say!("distlock: cannot run {program:?}: {e}");
            release_quietly(guard).await;
            return exit::NO_COMMAND;
        }
    };
    let lost = guard.lost();
    tokio::pin!(lost);
    let ended = loop {
        tokio::select! {
            status = child.wait() => break Ended::Exited(status),
            e = &mut lost => break Ended::Lost(e),
            sig = signals.recv() => signal_group(pgid, sig),
        }
    };
    match ended {
        Ended::Lost(e) => {
            say!("distlock: {e}; terminating the command (process group {pgid})");
            stop_group(pgid, Some(&mut child), a.kill_after, signals).await;
            watchdog.dismiss().await;
            // Owner-checked: frees what the lost guard may still occupy, never another's lock.
            release_quietly(guard).await;
            exit::LOST
        }
        Ended::Exited(status) => {
            let code = match status {
                Ok(s) => code_of(s),
                Err(e) => {
                    say!("distlock: cannot wait for the command: {e}");
                    exit::OS_ERROR
                }
            };
            if group_alive(pgid) {
                say!("distlock: the command exited but left processes running in its process group {pgid}; terminating them before releasing the lock");
                stop_group(pgid, None, a.kill_after, signals).await;
            }
            watchdog.dismiss().await;
            if guard.is_lost() {
                let e = lost.await;
                say!("distlock: {e}: the command's run was not protected to its end");
                release_quietly(guard).await;
                return exit::LOST;
            }
            match guard.release().await {
                Ok(()) => code,
                Err(e @ (LockError::NotHeld { .. } | LockError::Lost { .. })) => {
                    say!("distlock: releasing the lock at the end: {e}: the command's run was not protected to its end");
                    exit::LOST
                }
                Err(e) => {
                    say!("distlock: warning: release failed: {e}");
                    code
                }
            }
        }
    }
}
