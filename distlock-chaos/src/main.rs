//! `distlock-chaos`: runs the fault scenarios and writes `target/chaos-report/report.md`.

use clap::{Parser, Subcommand};
use distlock_chaos::services::ServiceSet;
use distlock_chaos::{backends, failovers, nemesis, report, scenarios, store_faults};
use nix::sys::signal::Signal;

#[derive(Parser)]
#[command(about = "distlock fault scenarios")]
struct Args {
    /// PostgreSQL database for the fenced resource (default: database `distlock` of the
    /// service set's PostgreSQL; with --random, `distlock_chaos`, created if missing).
    #[arg(long)]
    pg: Option<String>,
    /// Only these backends (labels; `all`: every one); default all.
    #[arg(long = "backend")]
    backends: Vec<String>,
    /// The service set the stores run on: `default` (shared with the tests; the nemesis draws
    /// client faults only) or `chaos` (`DISTLOCK_SERVICES_SET=chaos scripts/services.sh up`;
    /// the nemesis also pauses, kills and restarts its stores). Default: $DISTLOCK_SERVICES_SET.
    #[arg(long)]
    services: Option<String>,
    /// Where the report goes.
    #[arg(long, default_value = "target/chaos-report")]
    out: std::path::PathBuf,
    /// How often to repeat the partition and server-kill scenarios (for lost() percentiles).
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// Instead of the scripted scenarios: a random fault schedule (nemesis) per backend.
    #[arg(long)]
    random: bool,
    /// The nemesis seed (default: random, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Minutes of nemesis per backend.
    #[arg(long, default_value_t = 1.0)]
    minutes: f64,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// (internal) a holder process for the pause/kill scenarios.
    #[command(hide = true)]
    Holder {
        #[arg(long)]
        url: String,
        #[arg(long)]
        name: String,
        #[arg(long)]
        pg: String,
        #[arg(long)]
        resource: String,
    },
    /// (internal) a contending client process of the nemesis.
    #[command(hide = true)]
    NemesisClient {
        #[arg(long)]
        url: String,
        #[arg(long)]
        pg: String,
        #[arg(long, value_delimiter = ',')]
        names: Vec<String>,
        #[arg(long, value_delimiter = ',')]
        resources: Vec<String>,
        #[arg(long)]
        who: String,
        #[arg(long)]
        seed: u64,
    },
}

/// The library's warnings on stderr (`RUST_LOG`, e.g. `distlock_zk=debug`, for more), so a
/// chaos run shows what the backends saw.
fn init_logs() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let warn = || Targets::new().with_default(LevelFilter::WARN);
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .map_or_else(warn, |spec| spec.parse().unwrap_or_else(|_| warn()));
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .with(filter)
        .try_init();
}

#[tokio::main]
async fn main() {
    init_logs();
    let mut args = Args::parse();
    match &args.cmd {
        Some(Cmd::Holder {
            url,
            name,
            pg,
            resource,
        }) => {
            if let Err(e) = scenarios::holder(url, name, pg, resource).await {
                println!("ERROR {e}");
                std::process::exit(1);
            }
            return;
        }
        Some(Cmd::NemesisClient {
            url,
            pg,
            names,
            resources,
            who,
            seed,
        }) => {
            let r = nemesis::child_main(
                url,
                pg,
                names.clone(),
                resources.clone(),
                who.clone(),
                *seed,
            )
            .await;
            if let Err(e) = r {
                eprintln!("nemesis client {who}: {e}");
                std::process::exit(1);
            }
            return;
        }
        None => {}
    }
    let set = match args
        .services
        .as_deref()
        .map_or_else(ServiceSet::from_env, ServiceSet::parse)
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(64);
        }
    };
    // The scripted store faults go through services.sh on this set.
    ServiceSet::select(set);
    args.backends.retain(|b| b != "all");
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("distlock-chaos-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let mut targets: Vec<_> = backends::all_in(&dir.display().to_string(), set);
    if args.random {
        targets.insert(0, backends::memory());
        targets.push(backends::zookeeper_netns(set));
    }
    targets.retain(|t| args.backends.is_empty() || args.backends.iter().any(|b| b == t.label));
    if args.random {
        let pg = args
            .pg
            .clone()
            .unwrap_or_else(|| set.postgres_url("distlock_chaos"));
        std::process::exit(random_runs(&args, &targets, set, &pg, &exe).await);
    }
    let pg_url = args
        .pg
        .clone()
        .unwrap_or_else(|| set.postgres_url("distlock"));
    let pg = pg_url.as_str();
    let (mut rows, mut failures) = (Vec::new(), Vec::new());
    for t in &targets {
        eprintln!("chaos: {}", t.label);
        let mut push = |r: Result<scenarios::Outcome, String>, what: &str| match r {
            Ok(o) => rows.push(o),
            Err(e) => failures.push(format!("{what} on {}: {e}", t.label)),
        };
        push(scenarios::paused_holder(t, pg, &exe).await, "paused holder");
        push(scenarios::client_killed(t, pg, &exe).await, "client killed");
        if t.hosts.is_empty() {
            continue;
        }
        push(
            repeat(args.repeat, || scenarios::partition(t, pg)).await,
            "partition",
        );
        push(scenarios::latency(t, pg).await, "latency");
        let sql = t.template.starts_with("postgres") || t.template.starts_with("mysql");
        if sql {
            push(
                repeat(args.repeat, || {
                    store_faults::server_killed_connection(t, pg)
                })
                .await,
                "server-side kill",
            );
        }
        if t.template.starts_with("mysql") {
            push(
                store_faults::database_restarted(t, pg).await,
                "database restarted",
            );
        }
        if [
            "redis",
            "redlock",
            "zookeeper-ensemble",
            "etcd",
            "etcd-cluster",
        ]
        .contains(&t.label)
            || t.template.starts_with("mysql")
        {
            push(store_faults::store_paused(t, pg).await, "store paused");
        }
        if ["zookeeper-ensemble", "etcd-cluster"].contains(&t.label) {
            push(store_faults::leader_killed(t, pg).await, "leader killed");
        }
        if t.label == "redlock" {
            push(
                store_faults::redlock_master_restarted(t, pg).await,
                "master restarted",
            );
        }
    }
    if args.backends.is_empty() || args.backends.iter().any(|b| b == "zookeeper-netns") {
        match repeat(args.repeat, || store_faults::zk_follower_cut(pg)).await {
            Ok(o) => rows.push(o),
            Err(e) if e.starts_with(store_faults::UNSUPPORTED) => {
                eprintln!("NOT RUN: follower cut: {e}");
            }
            Err(e) => failures.push(format!("follower cut: {e}")),
        }
    }
    let chosen = |b: &str| args.backends.is_empty() || args.backends.iter().any(|x| x == b);
    if chosen("redis-sentinel") {
        for killed in [false, true] {
            match failovers::sentinel_failover(pg, killed).await {
                Ok(o) => rows.push(o),
                Err(e) => failures.push(format!("sentinel failover: {e}")),
            }
        }
    }
    if chosen("redis-cluster") {
        for signal in [Signal::SIGKILL, Signal::SIGSTOP] {
            match failovers::cluster_primary_lost(pg, signal).await {
                Ok(o) => rows.push(o),
                Err(e) => failures.push(format!("cluster primary lost: {e}")),
            }
        }
    }
    if args.backends.is_empty() || args.backends.iter().any(|b| b == "redis") {
        match scenarios::redis_restarted(pg).await {
            Ok(o) => rows.push(o),
            Err(e) => failures.push(format!("redis restart: {e}")),
        }
    }
    let md = report::markdown(&rows, &failures);
    let _ = std::fs::create_dir_all(&args.out);
    let _ = std::fs::write(args.out.join("report.md"), &md);
    println!("{md}");
    let v = report::violations(&rows);
    for x in &v {
        eprintln!("VIOLATION: {x}");
    }
    if !v.is_empty() || !failures.is_empty() {
        std::process::exit(1);
    }
}

/// The nemesis on every chosen backend, one after another; writes `random-<seed>.md`; the exit
/// code. The ensemble in namespaces is skipped (and said so) where it cannot run.
async fn random_runs(
    args: &Args,
    targets: &[backends::Target],
    set: ServiceSet,
    pg: &str,
    exe: &std::path::Path,
) -> i32 {
    let seed = args.seed.unwrap_or_else(rand::random);
    let minutes = if args.minutes.is_finite() && args.minutes > 0.0 {
        args.minutes.min(24.0 * 60.0)
    } else {
        eprintln!("--minutes must be a positive number");
        return 64;
    };
    let duration = std::time::Duration::from_secs_f64(minutes * 60.0);
    let opts = nemesis::RunOptions {
        seed,
        duration,
        services: set,
        exe: Some(exe.to_path_buf()),
    };
    let mut md = String::new();
    let mut bad = 0;
    let _ = std::fs::create_dir_all(&args.out);
    for t in targets {
        if t.label == "zookeeper-netns" {
            if let Err(e) = set.run(&["status", "zk-netns"]) {
                eprintln!("NOT RUN: nemesis on zookeeper-netns: {e}");
                md.push_str(&format!("# zookeeper-netns: not run: {e}\n\n"));
                continue;
            }
        }
        eprintln!(
            "nemesis: {} for {duration:?}, seed {seed}, services {}",
            t.label,
            set.name()
        );
        match nemesis::run(t, pg, &opts).await {
            Ok(r) => {
                for v in r.violations() {
                    eprintln!("VIOLATION on {} (seed {seed}): {v}", t.label);
                    bad += 1;
                }
                eprintln!(
                    "nemesis: {} done: {} holds, {} faults applied ({}), {} violations",
                    t.label,
                    r.acquisitions,
                    r.applied
                        .iter()
                        .filter(|a| a.status == nemesis::Status::Done)
                        .count(),
                    r.applied_summary(),
                    r.violations().len()
                );
                md.push_str(&r.markdown());
                md.push('\n');
            }
            Err(e) => {
                eprintln!("nemesis on {} failed: {e}", t.label);
                md.push_str(&format!("# {}: run failed: {e}\n\n", t.label));
                bad += 1;
            }
        }
        // Written after every backend, so a long run can be read while it goes on.
        let _ = std::fs::write(args.out.join(format!("random-{seed}.md")), &md);
    }
    println!("{md}");
    i32::from(bad > 0)
}

/// Runs a scenario `n` times (at least once) and folds the outcomes into one row.
async fn repeat<F, Fut>(n: u32, mut f: F) -> Result<scenarios::Outcome, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<scenarios::Outcome, String>>,
{
    let mut all = f().await?;
    for _ in 1..n {
        all.merge(f().await?);
    }
    Ok(all)
}
