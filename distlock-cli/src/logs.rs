//! Log output of the command line: `RUST_LOG`, else `-v`/`-vv`, else warnings only, on stderr.

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::prelude::*;

/// The crates whose events `-v` turns up to debug.
const OWN_CRATES: &[&str] = &[
    "distlock",
    "distlock_core",
    "distlock_redis",
    "distlock_sql",
    "distlock_zk",
];

/// The filter: `RUST_LOG` when set (`level` or `target=level,…`), else from `-v` counts.
///
/// # Errors
/// A message naming the `RUST_LOG` value that does not parse.
pub fn filter(rust_log: Option<&str>, verbose: u8) -> Result<Targets, String> {
    if let Some(spec) = rust_log.filter(|s| !s.trim().is_empty()) {
        return spec.parse::<Targets>().map_err(|e| {
            format!("RUST_LOG={spec:?} is not a log filter ({e}); e.g. warn,distlock_zk=debug")
        });
    }
    Ok(match verbose {
        0 => Targets::new().with_default(LevelFilter::WARN),
        1 => OWN_CRATES
            .iter()
            .fold(Targets::new().with_default(LevelFilter::WARN), |t, c| {
                t.with_target(*c, LevelFilter::DEBUG)
            }),
        _ => Targets::new().with_default(LevelFilter::TRACE),
    })
}

/// Installs the stderr subscriber.
///
/// # Errors
/// As [`filter`].
pub fn init(verbose: u8) -> Result<(), String> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = filter(rust_log.as_deref(), verbose)?;
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_target(true),
        )
        .with(filter)
        .try_init()
        .map_err(|e| format!("cannot install the log subscriber: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn rust_log_wins_then_verbosity_then_warnings() {
        let f = filter(Some("distlock_zk=debug"), 0).unwrap();
        assert!(f.would_enable("distlock_zk::session", &Level::DEBUG));
        assert!(!f.would_enable("sqlx", &Level::ERROR));
        let f = filter(None, 0).unwrap();
        assert!(f.would_enable("distlock_redis", &Level::WARN));
        assert!(!f.would_enable("distlock_redis", &Level::INFO));
        let f = filter(None, 1).unwrap();
        assert!(f.would_enable("distlock_sql::row", &Level::DEBUG));
        assert!(!f.would_enable("sqlx::query", &Level::DEBUG));
        assert!(filter(None, 2)
            .unwrap()
            .would_enable("sqlx::query", &Level::TRACE));
    }

    #[test]
    fn a_bad_rust_log_is_an_error_naming_it() {
        let e = filter(Some("distlock_zk=loud"), 0).unwrap_err();
        assert!(e.contains("distlock_zk=loud"), "{e}");
    }
}
