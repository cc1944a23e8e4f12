//! Recognising a failed TLS handshake inside a driver's error, so a backend reports it as a
//! configuration error (a wrong CA, a host not on the certificate) instead of an unavailable
//! store that retrying would cure.

use std::error::Error;
use std::sync::Arc;

/// The rustls error somewhere in `err`'s chain of sources, as text. Looks inside what the
/// chain skips: an error kept in an `Arc` (redis-rs) and the error an `io::Error` wraps
/// (`io::Error::source` returns that error's own source, not the error).
pub fn rustls_failure(err: &(dyn Error + 'static)) -> Option<String> {
    let mut cur = Some(err);
    for _ in 0..16 {
        let e = cur?;
        let e: &(dyn Error + 'static) = match e.downcast_ref::<Arc<dyn Error + Send + Sync>>() {
            Some(arc) => &**arc,
            None => e,
        };
        let wrapped = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|w| w as &(dyn Error + 'static));
        if let Some(t) = [Some(e), wrapped]
            .into_iter()
            .flatten()
            .find_map(|x| x.downcast_ref::<rustls::Error>())
        {
            return Some(t.to_string());
        }
        cur = e.source();
    }
    None
}

/// What a failed TLS handshake in `err`'s chain means for the user, or `None`: the message a
/// backend's [`crate::LockError::InvalidConfig`] carries (the same words for every store).
pub fn explain(err: &(dyn Error + 'static)) -> Option<String> {
    rustls_failure(err).map(|tls| {
        format!(
            "the TLS handshake failed: {tls}; check ca= (the CA that signed the server's \
             certificate), that the URL's host is a name on that certificate, and cert=/key="
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_rustls_behind_io_and_arc() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        assert!(rustls_failure(&io).is_some_and(|t| t.contains("UnknownIssuer")));
        let arc: Arc<dyn Error + Send + Sync> = Arc::new(io);
        assert!(rustls_failure(&arc).is_some());
        let plain = std::io::Error::other("connection refused");
        assert_eq!(rustls_failure(&plain), None);
    }
}
