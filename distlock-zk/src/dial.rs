//! How a session is dialled: the session and connection timeouts, digest authentication and,
//! for `zks://`, TLS with the URL's CA and client certificate — one connector for a new
//! session and for closing a retired one.

use distlock_core::LockError;
use zookeeper_client::{Client, Connector, Error, TlsCa, TlsCerts, TlsIdentity, TlsOptions};

use crate::config::ZkConfig;

/// The connector `cfg` describes (reads the TLS files).
///
/// # Errors
/// [`LockError::InvalidConfig`] naming a TLS file that cannot be read or parsed.
pub(crate) fn connector(cfg: &ZkConfig) -> Result<Connector, LockError> {
    let mut connector = Client::connector()
        .with_session_timeout(cfg.session_timeout)
        .with_connection_timeout(cfg.connect_timeout)
        .with_fail_eagerly();
    if let Some(digest) = cfg.digest() {
        connector = connector.with_auth("digest", digest.as_bytes());
    }
    if let Some(files) = &cfg.tls {
        connector = connector.with_tls(tls_options(files)?);
    }
    Ok(connector)
}

/// Connects `connector` to `cfg`'s servers, over TLS for `zks://`.
pub(crate) async fn dial(connector: Connector, cfg: &ZkConfig) -> Result<Client, Error> {
    let target = cfg.connect_string();
    if cfg.tls.is_some() {
        connector.secure_connect(&target).await
    } else {
        connector.connect(&target).await
    }
}

fn tls_options(
    files: &distlock_core::backend::credentials::TlsFiles,
) -> Result<TlsOptions, LockError> {
    // rustls needs a process-wide crypto provider; keep one the application installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pem = files.read()?;
    let bad = |what: &str, e: Error| LockError::invalid_config(format!("{what}: {e}"));
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    let mut certs = TlsCerts::builder();
    // ZooKeeper servers' certificates come from the operator's own CA: zks:// names it (the
    // configuration requires it).
    let ca = pem.ca.ok_or_else(|| {
        LockError::invalid_config("zks:// needs ca= (the CA that signed the servers' certificates)")
    })?;
    certs = certs.with_ca(TlsCa::from_pem(&text(ca)).map_err(|e| bad("ca=", e))?);
    if let Some((cert, key)) = pem.identity {
        let identity =
            TlsIdentity::from_pem(&text(cert), &text(key)).map_err(|e| bad("cert= and key=", e))?;
        certs = certs.with_identity(identity);
    }
    let certs = certs.build().map_err(|e| bad("TLS", e))?;
    Ok(TlsOptions::new().with_certs(certs))
}
