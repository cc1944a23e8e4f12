//! distlock's comparison benchmark: every selected backend beside its raw store primitive and
//! a peer, in one run, with a Markdown table, JSON and charts under `target/bench-report/`.
//!
//! `cargo run --release -p benches` with no arguments measures the embedded SQLite default and
//! needs no services; `--all` adds every store `scripts/services.sh up` provides.

mod charts;
mod external;
mod heap;
mod html;
mod peers;
mod raw;
mod report;
mod scenarios;
mod shortfalls;
mod stats;
mod targets;
mod verdicts;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use distlock_core::backend::parse_duration;
use distlock_core::DistributedLock;
use indicatif::{ProgressBar, ProgressStyle};

use scenarios::ResultRow;

#[derive(Parser, Debug)]
#[command(
    name = "benches",
    about = "distlock comparison benchmarks (report in target/bench-report/)"
)]
struct Args {
    /// Every store `scripts/services.sh up` provides (plus SQLite).
    #[arg(long)]
    all: bool,
    /// A store to measure (repeatable); default: the embedded SQLite.
    #[arg(long = "url")]
    urls: Vec<String>,
    /// Scenarios to run (repeatable): uncontended, contended, contended-procs, grid, failover,
    /// scaling, semaphore, rwlock (these two run together). Default: all.
    #[arg(long = "scenario")]
    scenarios: Vec<String>,
    /// Workers in the contended scenarios (tasks in one process; processes).
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Length of each timed measurement.
    #[arg(long, default_value = "3s", value_parser = parse_dur)]
    duration: Duration,
    /// Shorter measurements and smaller scaling steps (for CI).
    #[arg(long)]
    quick: bool,
    /// Where the report goes.
    #[arg(long, default_value = "target/bench-report")]
    out: PathBuf,
    /// Measure nothing: write the report (Markdown, HTML, charts) from an earlier run's
    /// `results.json`.
    #[arg(long, value_name = "RESULTS_JSON")]
    render: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// (internal) hold a lock until killed: the failover scenario's victim.
    #[command(hide = true)]
    Hold {
        #[arg(long)]
        url: String,
        #[arg(long)]
        name: String,
        #[arg(long, value_parser = parse_dur)]
        ttl: Duration,
    },
    /// (internal) one process of the contended-procs and grid scenarios.
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        url: String,
        #[arg(long)]
        name: String,
        #[arg(long)]
        millis: u64,
        /// How long each acquisition holds (0: one task yield).
        #[arg(long, default_value_t = 0)]
        hold_ms: u64,
        /// Waits end with the window instead of after 30 s.
        #[arg(long)]
        window: bool,
        /// distlock, naive-poll or rslock.
        #[arg(long, default_value = "distlock")]
        client: String,
    },
}

fn parse_dur(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

fn sqlite_default() -> String {
    let dir = std::env::temp_dir().join(format!("distlock-bench-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    format!("sqlite://{}/bench.db", dir.display())
}

async fn clients(url: &str, n: usize) -> Result<Vec<Arc<dyn DistributedLock>>, String> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(targets::connect(url).await.map_err(|e| e.to_string())?);
    }
    Ok(v)
}

/// `n` clients from `connect`, or `None` where the store does not offer the primitive.
async fn offered<T: ?Sized, F, Fut>(n: usize, connect: F) -> Result<Option<Vec<Arc<T>>>, String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Arc<T>, distlock_core::LockError>>,
{
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        match connect().await {
            Ok(c) => v.push(c),
            Err(
                distlock_core::LockError::Unsupported { .. }
                | distlock_core::LockError::InvalidConfig(_),
            ) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(Some(v))
}

/// The row saying a scenario was skipped because the store does not offer its primitive.
fn not_offered(label: &str, scenario: &str) -> ResultRow {
    ResultRow {
        backend: label.to_owned(),
        scenario: format!("skipped {scenario}"),
        note: format!("this store does not offer a {scenario} (see docs/guide.md, Semaphores and read-write locks)"),
        ..Default::default()
    }
}

struct Plan {
    permits: bool,
    uncontended: bool,
    contended: bool,
    contended_procs: bool,
    grid: bool,
    failover: bool,
    scaling: bool,
}

async fn run_target(
    url: &str,
    args: &Args,
    plan: &Plan,
    bar: &ProgressBar,
    rows: &mut Vec<ResultRow>,
    versions: &mut Vec<String>,
) -> Result<(), String> {
    let t = targets::target(url).map_err(|e| e.to_string())?;
    let label = t.label.clone();
    let lock = targets::connect(url)
        .await
        .map_err(|e| format!("{label}: {e} (is `scripts/services.sh up` running?)"))?;
    let raw = raw::RawClient::connect(&t)
        .await
        .map_err(|e| format!("{label} raw: {e}"))?;
    versions.push(format!("{label}: {}", raw.version().await));
    let d = if args.quick {
        args.duration.min(Duration::from_millis(700))
    } else {
        args.duration
    };
    if plan.uncontended {
        bar.set_message(format!("{label}: uncontended"));
        rows.push(scenarios::uncontended::run(&label, &*lock, Some(&raw), d).await?);
        if t.url.starts_with("redlock://") {
            let peer = peers::RslockPeer::new(url);
            rows.push(scenarios::uncontended::run("rslock (redlock)", &peer, Some(&raw), d).await?);
        }
        for peer in external::Peer::for_target(&t) {
            let work = external::work_dir(&args.out);
            rows.push(external::run(peer, &t, "uncontended", 1, d, &work).await);
        }
        bar.inc(1);
    }
    if plan.contended {
        bar.set_message(format!("{label}: contended ({} workers)", args.workers));
        rows.push(scenarios::contended::run(&label, clients(url, args.workers).await?, d).await?);
        if t.url.starts_with("redis://") {
            let mut naive: Vec<Arc<dyn DistributedLock>> = Vec::new();
            for _ in 0..args.workers {
                naive.push(Arc::new(
                    peers::NaivePollingLock::connect(url)
                        .await
                        .map_err(|e| e.to_string())?,
                ));
            }
            let mut row = scenarios::contended::run("naive-poll (redis)", naive, d).await?;
            row.note = peers::NAIVE_GIVES_UP.into();
            rows.push(row);
        }
        if t.url.starts_with("redlock://") {
            let peers: Vec<Arc<dyn DistributedLock>> = (0..args.workers)
                .map(|_| Arc::new(peers::RslockPeer::new(url)) as Arc<dyn DistributedLock>)
                .collect();
            let mut row = scenarios::contended::run("rslock (redlock)", peers, d).await?;
            row.note = peers::RSLOCK_GIVES_UP.into();
            rows.push(row);
        }
        for peer in external::Peer::for_target(&t) {
            let work = external::work_dir(&args.out);
            rows.push(external::run(peer, &t, "contended", args.workers, d, &work).await);
        }
        bar.inc(1);
    }
    if plan.contended_procs {
        // Two processes as well: with more, the queue seldom empties, and a store whose waiter
        // can miss its place between a failed try and its join shows it only with two.
        let mut counts = vec![args.workers];
        if args.workers > 2 {
            counts.push(2);
        }
        for workers in counts {
            bar.set_message(format!("{label}: contended ({workers} processes)"));
            rows.push(scenarios::contended_procs::run(&label, url, workers, d).await?);
        }
        bar.inc(1);
    }
    if plan.grid {
        run_grid(&t, args, bar, rows).await?;
        bar.inc(1);
    }
    if plan.failover {
        bar.set_message(format!("{label}: failover"));
        rows.push(scenarios::failover::run(&label, url, &*lock).await?);
        bar.inc(1);
    }
    if plan.permits {
        bar.set_message(format!("{label}: semaphore and rwlock (16 workers)"));
        rows.push(
            match offered(16, || distlock::connect_semaphore(url)).await? {
                Some(c) => scenarios::permits::semaphore(&label, c, 4, d).await?,
                None => not_offered(&label, "semaphore"),
            },
        );
        rows.push(match offered(16, || distlock::connect_rwlock(url)).await? {
            Some(c) => scenarios::permits::rwlock(&label, c, d).await?,
            None => not_offered(&label, "rwlock"),
        });
        bar.inc(1);
    }
    if plan.scaling {
        bar.set_message(format!("{label}: scaling"));
        let steps: &[usize] = if args.quick {
            &[1, 10, 100]
        } else {
            &[1, 10, 100, 1000]
        };
        let pool = clients(url, 8).await?;
        for &n in steps {
            rows.push(scenarios::scaling::waiters(&label, &pool, n).await?);
        }
        if matches!(
            t.raw,
            targets::Raw::SqlForUpdate | targets::Raw::SqlAdvisory
        ) {
            rows.push(ResultRow {
                backend: label.clone(),
                scenario: "skipped scaling-names".into(),
                note: "for_update and advisory keep one connection per held lock; 10,000 held names would need 10,000 connections".into(),
                ..Default::default()
            });
        } else {
            let n = if args.quick { 1000 } else { 10_000 };
            rows.push(scenarios::scaling::names(&label, Arc::clone(&lock), n).await?);
        }
        bar.inc(1);
    }
    Ok(())
}

/// The grid's cells for distlock and each peer on `t`; a peer that cannot run here gives one
/// skipped row.
async fn run_grid(
    t: &targets::Target,
    args: &Args,
    bar: &ProgressBar,
    rows: &mut Vec<ResultRow>,
) -> Result<(), String> {
    use scenarios::grid;
    let (processes, holds, d): (&[usize], &[u64], _) = if args.quick {
        (
            &grid::QUICK_PROCESSES,
            &grid::QUICK_HOLDS_MS,
            args.duration.min(Duration::from_secs(1)),
        )
    } else {
        (
            &grid::PROCESSES,
            &grid::HOLDS_MS,
            args.duration.min(Duration::from_secs(2)),
        )
    };
    for client in grid::Client::for_target(t) {
        let label = client.label(t);
        bar.set_message(format!("{label}: grid"));
        let work = external::work_dir(&args.out);
        match grid::cells(client, t, processes, holds, d, &work).await {
            Ok(cells) => rows.extend(cells),
            Err(e) if client == grid::Client::Distlock => return Err(format!("{label} grid: {e}")),
            Err(e) => rows.push(ResultRow {
                backend: label,
                scenario: "skipped grid".into(),
                note: e,
                ..Default::default()
            }),
        }
    }
    Ok(())
}

/// `--render`: the report from an earlier run's `results.json`, nothing measured.
fn render(path: &std::path::Path, out: &std::path::Path) {
    let rows: Vec<ResultRow> = match std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("cannot read {}: {e}", path.display());
            std::process::exit(1);
        }
    };
    let header = report::Header {
        settings: format!("re-rendered from {}", path.display()),
        versions: Vec::new(),
    };
    write_outputs(out, &header, &rows);
}

/// Writes `report.md`, `results.json`, the charts and `report.html` into `out`, and prints
/// the Markdown; exits 1 when the report cannot be written.
fn write_outputs(out: &std::path::Path, header: &report::Header, rows: &[ResultRow]) {
    if let Err(e) = report::write(out, header, rows) {
        eprintln!("cannot write the report to {}: {e}", out.display());
        std::process::exit(1);
    }
    let markdown = report::markdown(header, rows);
    let png = charts::init_font();
    let drawn = match charts::write(out, rows, png) {
        Ok((drawn, files)) => {
            eprintln!("charts: {}", files.join(", "));
            drawn
        }
        Err(e) => {
            eprintln!("charts failed: {e}");
            Vec::new()
        }
    };
    if let Err(e) = std::fs::write(out.join("report.html"), html::page(&markdown, &drawn)) {
        eprintln!("cannot write {}/report.html: {e}", out.display());
        std::process::exit(1);
    }
    println!("{markdown}");
    println!("report: {0}/report.md, {0}/report.html", out.display());
}

/// The library's warnings (and more with `RUST_LOG`, e.g. `distlock_redis=debug`) on stderr.
fn init_logs() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => spec.parse::<Targets>().unwrap_or_else(|e| {
            eprintln!("benches: ignoring RUST_LOG={spec:?} ({e}); showing warnings");
            Targets::new().with_default(LevelFilter::WARN)
        }),
        _ => Targets::new().with_default(LevelFilter::WARN),
    };
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
    let args = Args::parse();
    if let Some(Cmd::Worker {
        url,
        name,
        millis,
        hold_ms,
        window,
        client,
    }) = &args.cmd
    {
        let plan = scenarios::contended_procs::WorkerPlan {
            duration: Duration::from_millis(*millis),
            hold: Duration::from_millis(*hold_ms),
            window: *window,
        };
        let run = async {
            let lock = scenarios::grid::connect(client, url).await?;
            scenarios::contended_procs::worker(&*lock, name, plan).await
        };
        if let Err(e) = run.await {
            println!("ERROR {e}");
            std::process::exit(1);
        }
        std::process::exit(0);
    }
    if let Some(Cmd::Hold { url, name, ttl }) = &args.cmd {
        let code = match targets::connect(url).await {
            Ok(lock) => match scenarios::failover::hold(&*lock, name, *ttl).await {
                Ok(()) => 0,
                Err(e) => {
                    println!("ERROR {e}");
                    1
                }
            },
            Err(e) => {
                println!("ERROR {e}");
                1
            }
        };
        std::process::exit(code);
    }
    if let Some(path) = &args.render {
        render(path, &args.out);
        return;
    }
    let mut urls = args.urls.clone();
    if args.all {
        urls.push(sqlite_default());
        urls.extend(targets::all_service_urls());
    }
    if urls.is_empty() {
        urls.push(sqlite_default());
    }
    let want = |s: &str| args.scenarios.is_empty() || args.scenarios.iter().any(|x| x == s);
    let plan = Plan {
        permits: want("semaphore") || want("rwlock"),
        uncontended: want("uncontended"),
        contended: want("contended"),
        contended_procs: want("contended-procs"),
        grid: want("grid"),
        failover: want("failover"),
        scaling: want("scaling"),
    };
    let steps = [
        plan.permits,
        plan.uncontended,
        plan.contended,
        plan.contended_procs,
        plan.grid,
        plan.failover,
        plan.scaling,
    ]
    .iter()
    .filter(|b| **b)
    .count();
    let bar = ProgressBar::new((urls.len() * steps) as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let (mut rows, mut versions, mut failures) = (Vec::new(), Vec::new(), Vec::new());
    for url in &urls {
        if let Err(e) = run_target(url, &args, &plan, &bar, &mut rows, &mut versions).await {
            failures.push(e);
        }
    }
    bar.finish_and_clear();
    let header = report::Header {
        settings: format!(
            "workers={} duration={:?}{} scenarios={}",
            args.workers,
            args.duration,
            if args.quick { " (quick)" } else { "" },
            if args.scenarios.is_empty() {
                "all".into()
            } else {
                args.scenarios.join(",")
            }
        ),
        versions,
    };
    write_outputs(&args.out, &header, &rows);
    let violations: u64 = rows.iter().map(|r| r.violations).sum();
    for f in &failures {
        eprintln!("FAILED: {f}");
    }
    if violations > 0 {
        eprintln!("MUTUAL EXCLUSION OR FENCING VIOLATIONS: {violations}");
        std::process::exit(2);
    }
    if !failures.is_empty() {
        std::process::exit(1);
    }
}
