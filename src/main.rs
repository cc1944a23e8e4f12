//! The `distlock` command-line tool. See `distlock --help`.

mod cli;

use clap::Parser;

fn main() {
    // `exec`'s watchdog: distlock started again by `exec` (see `cli::exec`); no runtime.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == cli::exec::WATCHDOG_ARG)
    {
        std::process::exit(cli::exec::watchdog());
    }
    let parsed = match cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { cli::exit::USAGE } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    if let Err(e) = cli::logs::init(parsed.verbose) {
        eprintln!("distlock: {e}");
        std::process::exit(cli::exit::USAGE);
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
            std::process::exit(cli::exit::OS_ERROR);
        }
    };
    let code = runtime.block_on(async move {
        match parsed.cmd {
            cli::Cmd::Exec {
                url,
                name,
                max,
                read,
                write,
                run,
            } => {
                let take = match (max, read, write) {
                    (Some(n), _, _) => cli::exec::Take::Permit(n),
                    (None, true, _) => cli::exec::Take::Side(distlock::Access::Read),
                    (None, _, true) => cli::exec::Take::Side(distlock::Access::Write),
                    (None, false, false) => cli::exec::Take::Lock,
                };
                cli::exec::run(cli::exec::ExecArgs::new(url, name, run, take)).await
            }
            cli::Cmd::Elect {
                url,
                group,
                identity,
                run,
            } => {
                let identity = identity.unwrap_or_else(cli::leader::default_identity);
                let take = cli::exec::Take::Lead(identity);
                cli::exec::run(cli::exec::ExecArgs::new(url, group, run, take)).await
            }
            cli::Cmd::Leader { url, group, json } => cli::leader::run(&url, &group, json).await,
            cli::Cmd::Inspect {
                url,
                name,
                semaphore,
                rwlock,
                json,
            } => {
                let what = match (semaphore, rwlock) {
                    (true, _) => cli::inspect::What::Semaphore,
                    (_, true) => cli::inspect::What::RwLock,
                    _ => cli::inspect::What::Lock,
                };
                cli::inspect::run(&url, &name, what, json).await
            }
        }
    });
    std::process::exit(code);
}
