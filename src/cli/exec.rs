//! `distlock exec`: run a command while holding the lock (a distributed `flock(1)`).

use std::process::ExitStatus;
use std::time::Duration;

use distlock::{AcquireOptions, LockConfig, LockGuard};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use super::exit;

/// What `exec` needs.
pub struct ExecArgs {
    pub url: String,
    pub name: String,
    pub wait: Option<Duration>,
    pub ttl: Option<Duration>,
    pub kill_after: Duration,
    pub command: Vec<String>,
}

fn code_of(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

fn send(child: &Child, sig: Signal) {
    if let Some(pid) = child.id() {
        let _ = kill(Pid::from_raw(pid as i32), sig);
    }
}

/// Terminates the child: SIGTERM, then SIGKILL after `grace`.
async fn terminate(child: &mut Child, grace: Duration) {
    send(child, Signal::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}

async fn finish(guard: LockGuard, code: i32) -> i32 {
    if let Err(e) = guard.release().await {
        eprintln!("distlock: warning: release failed: {e}");
    }
    code
}

/// Runs `exec`; returns the process exit code.
pub async fn run(a: ExecArgs) -> i32 {
    let cfg = LockConfig::from_url(a.url.clone());
    let (lock, mut opts) = match distlock::connect_config(&cfg).await {
        Ok(v) => v,
        Err(e) => {
            eprintln!("distlock: {e}");
            return exit::for_error(&e);
        }
    };
    if let Some(w) = a.wait {
        opts = opts.wait(w);
    }
    if let Some(t) = a.ttl {
        opts = opts.ttl(t);
    }
    let opts: AcquireOptions = opts;
    let guard = match lock.acquire(&a.name, &opts).await {
        Ok(g) => g,
        Err(e) => {
            eprintln!("distlock: {e}");
            return exit::for_error(&e);
        }
    };
    let Some((program, args)) = a.command.split_first() else {
        eprintln!("distlock: no command given after --");
        return finish(guard, exit::USAGE).await;
    };
    let mut child = match Command::new(program)
        .args(args)
        .env("DISTLOCK_FENCING_TOKEN", guard.fencing_token().to_string())
        .env("DISTLOCK_NAME", &a.name)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("distlock: cannot run {program:?}: {e}");
            return finish(guard, exit::NO_COMMAND).await;
        }
    };
    let (Ok(mut sigint), Ok(mut sigterm)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        eprintln!("distlock: cannot install signal handlers");
        terminate(&mut child, a.kill_after).await;
        return finish(guard, exit::UNAVAILABLE).await;
    };
    let lost = guard.lost();
    tokio::pin!(lost);
    loop {
        tokio::select! {
            status = child.wait() => {
                let code = status.map(code_of).unwrap_or(exit::UNAVAILABLE);
                return finish(guard, code).await;
            }
            e = &mut lost => {
                eprintln!("distlock: {e}; terminating the command");
                terminate(&mut child, a.kill_after).await;
                let _ = guard.release().await;
                return exit::LOST;
            }
            _ = sigint.recv() => send(&child, Signal::SIGINT),
            _ = sigterm.recv() => send(&child, Signal::SIGTERM),
        }
    }
}
