//! The one place sqlx errors become [`LockError`]s.

use std::time::Duration;

use distlock_core::backend::wait::random_up_to;
use distlock_core::LockError;

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

/// Maps a sqlx error: connection-level failures → `Unavailable`, the rest → `Backend`.
pub(crate) fn map(err: sqlx::Error, backend: &str, name: Option<&str>) -> LockError {
    if let Some(tls) = tls_failure(&err) {
        return LockError::invalid_config(format!(
            "{backend}: the TLS handshake failed: {tls}; check sslrootcert= / ssl-ca= (the CA that signed the server's certificate) and that the URL's host is a name on that certificate"
        ));
    }
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => LockError::unavailable(
            backend,
            name,
            format!("cannot reach the database: {err}"),
            Some(Box::new(err) as distlock_core::BoxError),
        ),
        sqlx::Error::Database(ref db) if db.code().is_some_and(|c| is_connection_code(&c)) => {
            LockError::unavailable(
                backend,
                name,
                format!("database connection failed: {err}"),
                Some(Box::new(err) as distlock_core::BoxError),
            )
        }
        // SQLite could not open the file (missing directory, permissions): the store is unreachable.
        sqlx::Error::Database(ref db) if db.code().is_some_and(|c| c == "14") => {
            LockError::unavailable(
                backend,
                name,
                format!("cannot open the SQLite database file: {}", db.message()),
                Some(Box::new(err) as distlock_core::BoxError),
            )
        }
        sqlx::Error::Database(ref db)
            if db
                .code()
                .is_some_and(|c| c.starts_with("28") || c == "1045") =>
        {
            LockError::invalid_config(format!(
                "{backend}: the database refused the credentials: {}",
                db.message()
            ))
        }
        // PostgreSQL 42501 insufficient_privilege; MySQL 1142 / 1044 (command / database
        // access denied): a fixable grant, not a store failure.
        sqlx::Error::Database(ref db)
            if db
                .code()
                .is_some_and(|c| c == "42501" || c == "1142" || c == "1044" || c == "42000")
                && (db.message().contains("permission denied")
                    || db.message().contains("denied to user")
                    || (db.message().contains("Access denied for user")
                        && db.message().contains("to database"))) =>
        {
            LockError::invalid_config(format!(
                "{backend}: the database user lacks a privilege the lock needs: {}; it needs \
                 SELECT, INSERT, UPDATE and DELETE on the lock tables (and on PostgreSQL \
                 USAGE on the for_update sequence), plus CREATE once if the tables do not \
                 exist yet",
                db.message()
            ))
        }
        // PostgreSQL 3D000 / MySQL 1049 ("Unknown database"): the URL names a database the server does not have.
        sqlx::Error::Database(ref db)
            if db.code().is_some_and(|c| c == "3D000")
                || db.message().starts_with("Unknown database") =>
        {
            LockError::invalid_config(format!(
                "{backend}: {}; create it or fix the database name in the URL",
                db.message()
            ))
        }
        other => LockError::backend(
            backend,
            name,
            format!("database error: {other}"),
            Some(Box::new(other) as distlock_core::BoxError),
        ),
    }
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
