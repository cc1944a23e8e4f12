//! [`SqlConfig`]: what a URL (or the builder) selects — dialect, mode, table, pool — and the
//! URL handed on to sqlx without our own parameters.

use std::time::Duration;

use distlock_core::backend::credentials;
use distlock_core::backend::DistlockUrl;
use distlock_core::LockError;

/// The database behind a SQL lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
    /// SQLite (a file shared by processes on one machine).
    Sqlite,
}

impl Dialect {
    /// The label used in backend names (`postgres`, `mysql`, `sqlite`).
    pub fn label(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::MySql => "mysql",
            Dialect::Sqlite => "sqlite",
        }
    }
}

/// How the lock is kept in the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A row per held lock with an owner token and a lease expiry (database clock).
    Row,
    /// A row per name locked by `SELECT … FOR UPDATE` in a transaction held open on a dedicated
    /// connection for the life of the guard.
    ForUpdate,
    /// The database's own advisory lock (PostgreSQL `pg_advisory_lock`, MySQL/MariaDB
    /// `GET_LOCK`) held by a dedicated connection for the life of the guard; no lock table.
    Advisory,
}

impl Mode {
    /// `row`, `for_update` or `advisory`.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Row => "row",
            Mode::ForUpdate => "for_update",
            Mode::Advisory => "advisory",
        }
    }
}

/// The default lock table (row mode).
pub const DEFAULT_ROW_TABLE: &str = "distlock_locks";
/// The default lock table (for_update mode).
pub const DEFAULT_FOR_UPDATE_TABLE: &str = "distlock_rows";
/// The default table name (advisory mode): it names the fencing counter (`<table>_fence` on
/// PostgreSQL, `<table>_fences` on MySQL/MariaDB) and namespaces the advisory keys.
pub const DEFAULT_ADVISORY_TABLE: &str = "distlock_advisory";

/// Everything a SQL lock client needs.
#[derive(Clone, Debug)]
pub struct SqlConfig {
    /// Which database.
    pub dialect: Dialect,
    /// Row, for_update or advisory.
    pub mode: Mode,
    /// Lock table name (validated identifier). In advisory mode it holds no locks: it names
    /// the fencing counter and namespaces the advisory keys.
    pub table: String,
    /// Largest number of pooled connections (default 16 in row mode; 100 in for_update and
    /// advisory modes, where every held lock keeps one connection).
    pub max_connections: u32,
    /// How long to wait for a connection (bounds how fast an unreachable database is reported).
    pub connect_timeout: Duration,
    /// The URL for sqlx, without distlock's parameters. `Debug` shows it without its password.
    driver_url: distlock_core::SecretUrl,
    /// The URL as the user gave it, password redacted.
    redacted: String,
}

/// The query parameters distlock itself reads from a SQL URL.
pub const KNOWN_PARAMS: &[&str] = &[
    "mode",
    "table",
    "max_connections",
    "connect_timeout",
    "password_file",
    "password_env",
];

/// sqlx's own parameters passed through unchanged.
const DRIVER_PARAMS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "ssl-mode",
    "ssl-ca",
    "ssl-cert",
    "ssl-key",
    "application_name",
    "options",
    "statement-cache-capacity",
    "charset",
    "collation",
    "socket",
    "host",
    "port",
    "user",
    "password",
    "dbname",
];

/// The longest table name: every name derived from it must fit the databases' identifiers
/// (PostgreSQL 63 bytes, which it would otherwise truncate silently — two derived names could
/// then be one; MariaDB 64, which refuses longer ones). The longest derived name is the
/// for_update semaphore's gate token table, `<table>_semgate_fences` on MariaDB
/// (`<table>_semgate_fence` on PostgreSQL); row mode's `<table>_waitq_order` and the
/// `distlock_<table>` notification channel are shorter.
pub const MAX_TABLE_LEN: usize = 63 - "_semgate_fences".len();

/// Checks a table name: `[A-Za-z_][A-Za-z0-9_]{0,47}` ([`MAX_TABLE_LEN`]), the one thing we put
/// in SQL text.
///
/// # Errors
/// [`LockError::InvalidConfig`] quoting the name.
pub fn validate_table(table: &str) -> Result<(), LockError> {
    let mut chars = table.chars();
    let ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && table.len() <= MAX_TABLE_LEN;
    if ok {
        Ok(())
    } else {
        Err(LockError::invalid_config(format!(
            "bad table name {table:?}: use 1-{MAX_TABLE_LEN} ASCII letters, digits and '_', not \
             starting with a digit (names derived from it must fit the databases' identifiers)"
        )))
    }
}

impl SqlConfig {
    /// Parses a `postgres://`, `postgresql://`, `mysql://`, `mariadb://` or `sqlite://` URL.
    ///
    /// Parameters: `mode` = `row` (the default; every dialect), `for_update` (PostgreSQL,
    /// MySQL/MariaDB) or `advisory` (PostgreSQL ≥ 14, MySQL/MariaDB: the database's advisory
    /// locks, see the crate docs); `table` (default `distlock_locks`, `distlock_rows`,
    /// `distlock_advisory` by mode); `max_connections` (default 16 in row mode, 100 otherwise);
    /// `connect_timeout` (default 5 s); sqlx's own TLS and connection parameters pass through.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] quoting the bad part (never the password).
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let parsed = DistlockUrl::parse(url, 0)?;
        let dialect = match parsed.scheme.as_str() {
            "postgres" | "postgresql" => Dialect::Postgres,
            "mysql" | "mariadb" => Dialect::MySql,
            "sqlite" => Dialect::Sqlite,
            other => {
                return Err(LockError::invalid_config(format!(
                    "scheme {other:?} in {:?} is not a SQL scheme (postgres, mysql, sqlite)",
                    parsed.redacted()
                )))
            }
        };
        let mut params = parsed.params();
        let mode = match params.take("mode").as_deref() {
            None | Some("row") => Mode::Row,
            Some("for_update") => Mode::ForUpdate,
            Some("advisory") => Mode::Advisory,
            Some(other) => {
                return Err(LockError::invalid_config(format!(
                "parameter `mode={other}` in {:?}: use mode=row, mode=for_update or mode=advisory",
                parsed.redacted()
            )))
            }
        };
        let table = params.take("table").unwrap_or_else(|| {
            match mode {
                Mode::Row => DEFAULT_ROW_TABLE,
                Mode::ForUpdate => DEFAULT_FOR_UPDATE_TABLE,
                Mode::Advisory => DEFAULT_ADVISORY_TABLE,
            }
            .to_owned()
        });
        // for_update and advisory hold one pooled connection per held lock: size the pool for
        // the number of locks held at once.
        let default_pool = match mode {
            Mode::Row => 16,
            Mode::ForUpdate | Mode::Advisory => 100,
        };
        let max_connections = params
            .take_u64("max_connections")?
            .unwrap_or(default_pool)
            .clamp(1, 10_000) as u32;
        let connect_timeout = params
            .take_duration("connect_timeout")?
            .unwrap_or(Duration::from_secs(5));
        // From a file or the environment; the URL's own password stays where it is.
        let outside = credentials::take_password(&mut params, parsed.password.clone())
            .map_err(|e| match e {
                LockError::InvalidConfig(m) => {
                    LockError::invalid_config(format!("{m} (in {:?})", parsed.redacted()))
                }
                other => other,
            })?
            .filter(|_| parsed.password.is_none());
        let passthrough: Vec<(String, String)> = params
            .remaining()
            .into_iter()
            .filter(|(k, _)| DRIVER_PARAMS.contains(&k.as_str()))
            .collect();
        for (k, _) in &passthrough {
            params.take(k);
        }
        let mut known: Vec<&str> = KNOWN_PARAMS.to_vec();
        known.extend_from_slice(DRIVER_PARAMS);
        params.finish(&known)?;
        let driver_url = driver_url(url, dialect, &passthrough, outside.as_deref());
        let cfg = SqlConfig {
            dialect,
            mode,
            table,
            max_connections,
            connect_timeout,
            driver_url: distlock_core::SecretUrl::new(driver_url),
            redacted: parsed.redacted().to_owned(),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks the combination: identifier rules, and no `for_update` or `advisory` on SQLite.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`].
    pub fn validate(&self) -> Result<(), LockError> {
        validate_table(&self.table)?;
        if self.dialect == Dialect::Sqlite && self.mode == Mode::ForUpdate {
            return Err(LockError::invalid_config(format!(
                "mode=for_update is not available on SQLite ({:?}): SQLite has no SELECT … FOR UPDATE; use mode=row",
                self.redacted
            )));
        }
        if self.dialect == Dialect::Sqlite && self.mode == Mode::Advisory {
            return Err(LockError::invalid_config(format!(
                "mode=advisory is not available on SQLite ({:?}): SQLite has no advisory (named) locks; use mode=row",
                self.redacted
            )));
        }
        Ok(())
    }

    /// The backend label, e.g. `postgres-row`: how errors and logs name this database
    /// (never by its URL, which may hold a password).
    pub fn backend_label(&self) -> String {
        format!("{}-{}", self.dialect.label(), self.mode.label())
    }

    /// The URL as given, password redacted.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    pub(crate) fn driver_url(&self) -> &str {
        self.driver_url.expose()
    }
}

/// The URL sqlx sees: our parameters removed, SQLite opened read-write-create.
fn driver_url(
    url: &str,
    dialect: Dialect,
    passthrough: &[(String, String)],
    password: Option<&str>,
) -> String {
    let base = url.split('?').next().unwrap_or(url);
    let with_password;
    let base = match (password, base.split_once("://")) {
        (Some(pw), Some((scheme, rest))) => {
            let (user, host) = match rest.split_once('@') {
                Some((user, host)) => (user, host),
                None => ("", rest),
            };
            with_password = format!(
                "{scheme}://{user}:{}@{host}",
                credentials::percent_encode(pw)
            );
            with_password.as_str()
        }
        _ => base,
    };
    let mut pairs: Vec<String> = passthrough
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let base = match dialect {
        Dialect::Sqlite => {
            pairs.push("mode=rwc".to_owned());
            base.to_owned()
        }
        Dialect::MySql if base.starts_with("mariadb://") => {
            base.replacen("mariadb://", "mysql://", 1)
        }
        Dialect::Postgres if base.starts_with("postgresql://") => base.to_owned(),
        _ => base.to_owned(),
    };
    if pairs.is_empty() {
        base
    } else {
        format!("{base}?{}", pairs.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_modes_tables_and_rejects_bad_input() {
        let c = SqlConfig::from_url("postgres://u:pw@h:5432/db?mode=for_update&table=t1").unwrap();
        assert_eq!(
            (c.dialect, c.mode, c.table.as_str()),
            (Dialect::Postgres, Mode::ForUpdate, "t1")
        );
        assert_eq!(c.driver_url(), "postgres://u:pw@h:5432/db");
        let c = SqlConfig::from_url("mariadb://u@h/db?mode=advisory").unwrap();
        assert_eq!(
            (c.dialect, c.mode, c.table.as_str(), c.max_connections),
            (Dialect::MySql, Mode::Advisory, DEFAULT_ADVISORY_TABLE, 100)
        );
        let c = SqlConfig::from_url("sqlite://./x.db").unwrap();
        assert_eq!(c.driver_url(), "sqlite://./x.db?mode=rwc");
        for (bad, quoted) in [
            ("sqlite://./x.db?mode=for_update", "for_update"),
            ("sqlite://./x.db?mode=advisory", "no advisory"),
            ("postgres://h/db?mode=exclusive", "mode=exclusive"),
            ("postgres://h/db?table=x;drop", "x;drop"),
            ("postgres://h/db?table=1abc", "1abc"),
            (
                "postgres://h/db?table=t234567890123456789012345678901234567890123456789",
                "t234567890123456789012345678901234567890123456789",
            ),
            ("postgres://u:hunter2@h/db?bogus=1", "bogus"),
            ("mysql://h/db?connect_timeout=abc", "connect_timeout=abc"),
        ] {
            let e = SqlConfig::from_url(bad).unwrap_err();
            assert!(matches!(e, LockError::InvalidConfig(_)), "{bad}");
            let msg = e.to_string();
            assert!(msg.contains(quoted), "{msg}");
            assert!(!msg.contains("hunter2"), "{msg}");
        }
    }
}
