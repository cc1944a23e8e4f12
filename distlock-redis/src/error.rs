//! The one place redis-rs errors become [`LockError`]s.

use distlock_core::{BoxError, LockError};

pub(crate) fn map(err: redis::RedisError, backend: &str, name: Option<&str>) -> LockError {
    if let Some(tls) = distlock_core::backend::tls_failure::rustls_failure(&err) {
        return LockError::invalid_config(format!(
            "{backend}: the TLS handshake failed: {tls}; check ca= (the CA that signed the server's certificate), that the URL's host is a name on that certificate, and cert=/key="
        ));
    }
    // A cluster's first connection wraps the refusal in an I/O error: only its text tells.
    if err.kind() == redis::ErrorKind::AuthenticationFailed
        || err
            .code()
            .is_some_and(|c| c == "WRONGPASS" || c == "NOAUTH")
        || err.to_string().contains("AuthenticationFailed")
    {
        return LockError::invalid_config(format!(
            "{backend}: the server refused the credentials ({}); check the user and password in the URL",
            err.code().unwrap_or("auth")
        ));
    }
    if err.kind() == redis::ErrorKind::Client
        && err.to_string().contains(crate::replicas::UNACKNOWLEDGED)
    {
        return LockError::unavailable(
            backend,
            name,
            format!("the write is not confirmed: {err}"),
            Some(Box::new(err) as BoxError),
        );
    }
    if err.is_io_error()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.is_connection_dropped()
    {
        return LockError::unavailable(
            backend,
            name,
            format!("cannot reach Redis: {err}"),
            Some(Box::new(err) as BoxError),
        );
    }
    if err.code() == Some("READONLY") {
        return LockError::unavailable(
            backend,
            name,
            "the server is a read-only replica; point distlock at the master",
            Some(Box::new(err) as BoxError),
        );
    }
    LockError::backend(
        backend,
        name,
        format!("Redis error: {err}"),
        Some(Box::new(err) as BoxError),
    )
}
