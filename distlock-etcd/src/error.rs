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
