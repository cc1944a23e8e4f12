//! The one place etcd-client errors become [`LockError`]s.

use distlock_core::{BoxError, LockError};
use etcd_client::Error;

/// Whether `err` says the lease is gone (expired or revoked): keep-alive answers TTL 0 and
/// etcd-client reports "lease not found"; other calls answer gRPC `NotFound`.
pub(crate) fn lease_gone(err: &Error) -> bool {
    match err {
        Error::LeaseKeepAliveError(m) => m.contains("not found"),
        Error::GRpcStatus(s) => s.message().contains("requested lease not found"),
        _ => false,
    }
}

pub(crate) fn map(err: Error, backend: &str, name: Option<&str>) -> LockError {
    if let Some(why) = misconfigured(&err) {
        return LockError::invalid_config(format!("{backend}: {why}"));
    }
    if is_unreachable(&err) {
        return LockError::unavailable(
            backend,
            name,
            format!("etcd unreachable (or without a leader): {err}; check the cluster and retry"),
            Some(Box::new(err) as BoxError),
        );
    }
    LockError::backend(
        backend,
        name,
        format!("etcd error: {err}"),
        Some(Box::new(err) as BoxError),
    )
}

/// Transport failures, timeouts, a member without a leader and the like: retriable.
pub(crate) fn is_unreachable(err: &Error) -> bool {
    match err {
        Error::TransportError(_) | Error::IoError(_) | Error::WatchError(_) => true,
        Error::LeaseKeepAliveError(m) => !m.contains("not found"),
        Error::GRpcStatus(s) => {
            let msg = s.message();
            // gRPC codes: Cancelled 1, Unknown 2 (a reset stream), DeadlineExceeded 4,
            // Aborted 10, Unavailable 14.
            matches!(s.code() as i32, 1 | 2 | 4 | 10 | 14)
                || msg.contains("no leader")
                || msg.contains("leader changed")
                || msg.contains("timed out")
        }
        _ => false,
    }
}

/// Failures retrying cannot cure: a TLS handshake that failed, credentials refused, a user
/// without permission on the lock's keys.
fn misconfigured(err: &Error) -> Option<String> {
    // etcd-client's `Error` does not give its gRPC status or transport error as a source.
    let inner: &(dyn std::error::Error + 'static) = match err {
        Error::GRpcStatus(s) => s,
        Error::TransportError(t) => t,
        other => other,
    };
    if let Some(tls) = distlock_core::backend::tls_failure::explain(inner) {
        return Some(tls);
    }
    let Error::GRpcStatus(s) = err else {
        return None;
    };
    let msg = s.message();
    if msg.contains("authentication failed") || msg.contains("user name is empty") {
        return Some(format!(
            "etcd refused the credentials ({msg}); check the user and password in the URL"
        ));
    }
    if msg.contains("permission denied") {
        return Some(format!(
            "etcd refused the request ({msg}): the user's role must grant read and write on the lock's key prefix (the URL's path)"
        ));
    }
    None
}
