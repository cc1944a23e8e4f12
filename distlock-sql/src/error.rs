//! The one place sqlx errors become [`LockError`]s.

use std::time::Duration;

use distlock_core::backend::wait::random_up_to;
use distlock_core::{BoxError, LockError};

/// What a failed statement means for a lock operation.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Deadlock or serialization failure (PostgreSQL `40P01`/`40001`, MySQL 1213): retry.
    Retry,
    /// The row is locked by someone else and the lock wait ran out (PostgreSQL `55P03`,
    /// MySQL 1205/3572): the lock is busy.
    Busy,
    /// Anything else, already mapped.
    Error(LockError),
}

impl Failure {
    /// Whether `outcome` granted: a lock wait that ran out or a conflict is a plain "not now",
    /// an error is returned.
    pub(crate) fn or_not_now(outcome: Result<bool, Failure>) -> Result<bool, LockError> {
        match outcome {
            Ok(granted) => Ok(granted),
            Err(Failure::Busy | Failure::Retry) => Ok(false),
            Err(Failure::Error(e)) => Err(e),
        }
    }
}

/// Classifies a sqlx error for lock `name` on `backend`.
pub(crate) fn classify(err: sqlx::Error, backend: &str, name: Option<&str>) -> Failure {
    if let sqlx::Error::Database(db) = &err {
        let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
        match code.as_str() {
            "40P01" | "40001" | "1213" => return Failure::Retry,
            "55P03" | "1205" | "3572" => return Failure::Busy,
            _ => {}
        }
        // MySQL reports deadlocks / lock waits with SQLSTATE 40001 / HY000 depending on driver.
        let msg = db.message();
        if msg.contains("Deadlock found") {
            return Failure::Retry;
        }
        if is_lock_wait(msg) {
            return Failure::Busy;
        }
        if msg.contains("database is locked") || msg.contains("database table is locked") {
            return Failure::Retry;
        }
    }
    Failure::Error(map(err, backend, name))
}

/// Whether `err` says the connection died under a statement, which may or may not have run: an
/// I/O or protocol failure, or the server ending the session ([`is_connection_code`]); a
/// refused connection or a pool timeout is not one. The pool hands out connections used
/// moments ago without a ping ([`crate::liveness`]), so a statement keyed by its holder's token
/// is worth sending once more on a fresh connection.
pub(crate) fn connection_died(err: &LockError) -> bool {
    let LockError::Unavailable {
        source: Some(source),
        ..
    } = err
    else {
        return false;
    };
    match source.downcast_ref::<sqlx::Error>() {
        Some(sqlx::Error::Io(_) | sqlx::Error::Protocol(_)) => true,
        Some(sqlx::Error::Database(db)) => db.code().is_some_and(|c| is_connection_code(&c)),
        _ => false,
    }
}

/// Error codes of a session the server ended or lost: PostgreSQL 08xxx (connection
/// exceptions) and 57P01–57P03 (terminated by an administrator, a crash shutdown, cannot
/// connect now); MySQL/MariaDB 1053 (server shutdown in progress), 1927 (connection killed)
/// and 4031 (disconnected for inactivity).
fn is_connection_code(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "1053" | "1927" | "4031")
}

fn is_lock_wait(msg: &str) -> bool {
    msg.contains("Lock wait timeout")
        || msg.contains("lock timeout")
        || msg.contains("could not obtain lock")
}

/// Maps a sqlx error: connection-level failures → `Unavailable`, refusals a user fixes in the
/// configuration (credentials, grants, the database name, TLS) → `InvalidConfig`, the rest →
/// `Backend`.
pub(crate) fn map(err: sqlx::Error, backend: &str, name: Option<&str>) -> LockError {
    if let Some(tls) = tls_failure(&err) {
        return LockError::invalid_config(format!(
            "{backend}: the TLS handshake failed: {tls}; check sslrootcert= / ssl-ca= (the CA that signed the server's certificate) and that the URL's host is a name on that certificate"
        ));
    }
    if let Some(refused) = refusal(&err, backend) {
        return refused;
    }
    let unreachable = match &err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => Some(format!("cannot reach the database: {err}")),
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some(c) if is_connection_code(c) => Some(format!("database connection failed: {err}")),
            // SQLite could not open the file (missing directory, permissions).
            Some("14") => Some(format!(
                "cannot open the SQLite database file: {}",
                db.message()
            )),
            _ => None,
        },
        _ => None,
    };
    match unreachable {
        Some(why) => LockError::unavailable(backend, name, why, Some(Box::new(err) as BoxError)),
        None => other(err, backend, name),
    }
}

fn other(err: sqlx::Error, backend: &str, name: Option<&str>) -> LockError {
    LockError::backend(
        backend,
        name,
        format!("database error: {err}"),
        Some(Box::new(err) as BoxError),
    )
}

/// A database's refusal that a user fixes in the configuration: credentials (PostgreSQL 28xxx,
/// MySQL 1045), a missing privilege (PostgreSQL 42501, MySQL 1142 / 1044 / 42000 with "denied"),
/// an unknown database (PostgreSQL 3D000, MySQL "Unknown database").
fn refusal(err: &sqlx::Error, backend: &str) -> Option<LockError> {
    let sqlx::Error::Database(db) = err else {
        return None;
    };
    let (code, msg) = (db.code().unwrap_or_default(), db.message());
    let why = if code.starts_with("28") || code == "1045" {
        format!("the database refused the credentials: {msg}")
    } else if matches!(&*code, "42501" | "1142" | "1044" | "42000")
        && (msg.contains("permission denied")
            || msg.contains("denied to user")
            || (msg.contains("Access denied for user") && msg.contains("to database")))
    {
        format!(
            "the database user lacks a privilege the lock needs: {msg}; it needs SELECT, \
             INSERT, UPDATE and DELETE on the lock tables (and on PostgreSQL USAGE on the \
             for_update sequence), plus CREATE once if the tables do not exist yet"
        )
    } else if code == "3D000" || msg.starts_with("Unknown database") {
        format!("{msg}; create it or fix the database name in the URL")
    } else {
        return None;
    };
    Some(LockError::invalid_config(format!("{backend}: {why}")))
}

/// Whether an error means the connection itself is gone (the database then releases
/// everything it held for that connection).
pub(crate) fn is_connection_gone(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            code.starts_with("08")
                || code == "57P01"
                || db.message().contains("server has gone away")
        }
        _ => false,
    }
}

/// The TLS failure behind `err`, if it is one: retrying will not help, so it is a configuration
/// error, not an unavailable database.
fn tls_failure(err: &sqlx::Error) -> Option<String> {
    match err {
        sqlx::Error::Tls(e) => Some(e.to_string()),
        sqlx::Error::Io(io) => distlock_core::backend::tls_failure::rustls_failure(io),
        _ => None,
    }
}

/// Deadlock retries per attempt before the error is surfaced (each is a fresh statement).
pub(crate) const MAX_RETRIES: u32 = 50;

/// Runs `f` again after a deadlock or a busy database (fresh statements, 0–5 ms apart, at most
/// [`MAX_RETRIES`] times); other errors are returned at once.
pub(crate) async fn retrying<T, F, Fut>(label: &str, name: &str, f: F) -> Result<T, LockError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, Failure>>,
{
    for _ in 0..MAX_RETRIES {
        match f().await {
            Ok(v) => return Ok(v),
            Err(Failure::Retry) | Err(Failure::Busy) => {
                tokio::time::sleep(random_up_to(Duration::from_millis(5))).await
            }
            Err(Failure::Error(e)) => return Err(e),
        }
    }
    Err(LockError::backend(
        label,
        Some(name),
        "kept deadlocking with other clients",
        None,
    ))
}
