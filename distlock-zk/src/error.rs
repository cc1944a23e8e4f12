//! The one place zookeeper-client errors become [`LockError`]s.

use distlock_core::{BoxError, LockError};
use zookeeper_client::Error;

pub(crate) fn map(err: Error, backend: &str, name: Option<&str>) -> LockError {
    if let Some(tls) = distlock_core::backend::tls_failure::explain(&err) {
        return LockError::invalid_config(format!("{backend}: {tls}"));
    }
    match err {
        Error::ConnectionLoss
        | Error::SessionExpired
        | Error::Timeout
        | Error::ClientClosed
        | Error::NoHosts
        | Error::SessionMoved
        // The client's own transport errors: a reset connection, no reply within its
        // connection timeout.
        | Error::Custom(_) => LockError::unavailable(
            backend,
            name,
            format!("ZooKeeper unreachable: {err}"),
            Some(Box::new(err) as BoxError),
        ),
        Error::NoAuth | Error::AuthFailed => {
            LockError::invalid_config(format!(
                "{backend}: ZooKeeper refused access ({err}): the node's ACL does not admit this session's identity; check the user and password in the URL (digest) and the ACLs of the chroot and base path"
            ))
        }
        Error::BadArguments(_) => LockError::invalid_config(format!("{backend}: {err}")),
        other => LockError::backend(
            backend,
            name,
            format!("ZooKeeper error: {other}"),
            Some(Box::new(other) as BoxError),
        ),
    }
}
