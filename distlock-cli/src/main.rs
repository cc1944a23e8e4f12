//! The `distlock` command-line tool. See `distlock --help`.

#[cfg(not(unix))]
compile_error!(
    "distlock-cli is Unix-only: `exec` and `elect` run their command in a process group it signals"
);

mod args;
mod exec;
mod exit;
mod inspect;
mod leader;
mod logs;
mod metrics;
mod operator;

use clap::Parser;

fn main() {
    // `exec`'s watchdog: distlock started again by `exec` (see `exec`); no runtime.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == exec::WATCHDOG_ARG)
    {
        std::process::exit(exec::watchdog());
    }
    let parsed = match args::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    if let Err(e) = logs::init(parsed.verbose) {
        eprintln!("distlock: {e}");
        std::process::exit(exit::USAGE);
    }
    // One thread, this one: `exec` forks CMD from here, and Linux sends CMD its parent-death
    // signal when the *thread* that forked it exits, so that thread must live as long as the
    // process.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("distlock: cannot start the async runtime: {e}");
            std::process::exit(exit::OS_ERROR);
        }
    };
    let code = runtime.block_on(async move {
        match parsed.cmd {
            args::Cmd::Exec {
                url,
                name,
                max,
                read,
                write,
                run,
            } => {
                let take = match (max, read, write) {
                    (Some(n), _, _) => exec::Take::Permit(n),
                    (None, true, _) => exec::Take::Side(distlock::Access::Read),
                    (None, _, true) => exec::Take::Side(distlock::Access::Write),
                    (None, false, false) => exec::Take::Lock,
                };
                exec::run(exec::ExecArgs::new(url, name, run, take)).await
            }
            args::Cmd::Elect {
                url,
                group,
                identity,
                run,
            } => {
                let identity = identity.unwrap_or_else(leader::default_identity);
                let take = exec::Take::Lead(identity);
                exec::run(exec::ExecArgs::new(url, group, run, take)).await
            }
            args::Cmd::Leader { url, group, json } => leader::run(&url, &group, json).await,
            args::Cmd::Inspect {
                url,
                name,
                semaphore,
                rwlock,
                json,
            } => {
                let what = match (semaphore, rwlock) {
                    (true, _) => inspect::What::Semaphore,
                    (_, true) => inspect::What::RwLock,
                    _ => inspect::What::Lock,
                };
                inspect::run(&url, &name, what, json).await
            }
            args::Cmd::Ls {
                url,
                prefix,
                limit,
                json,
            } => operator::ls(&url, &prefix, limit, json).await,
            args::Cmd::Break { url, name, yes } => operator::break_lock(&url, &name, yes).await,
        }
    });
    std::process::exit(code);
}
