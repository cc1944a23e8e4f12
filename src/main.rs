//! The `distlock` command-line tool. See `distlock --help`.

mod cli;

use clap::Parser;

#[tokio::main]
async fn main() {
    let parsed = match cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { cli::exit::USAGE } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let code = match parsed.cmd {
        cli::Cmd::Exec {
            url,
            name,
            wait,
            ttl,
            kill_after,
            command,
        } => {
            cli::exec::run(cli::exec::ExecArgs {
                url,
                name,
                wait,
                ttl,
                kill_after,
                command,
            })
            .await
        }
        cli::Cmd::Inspect { url, name, json } => cli::inspect::run(&url, &name, json).await,
    };
    std::process::exit(code);
}
