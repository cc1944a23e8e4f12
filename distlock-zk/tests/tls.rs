//! ZooKeeper over TLS (`zks://`; `scripts/services.sh up`: the standalone server's port 12191,
//! the private CA's certificate for `localhost`, client certificates required, digest user
//! `distlock`): each way a connection can be wrong is a typed error naming what failed, within
//! the connect timeout, and no password shows. The conformance suite runs on the same port
//! (tests/conformance.rs, `tls`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::conformance::refusals::{certificate_refusals, connect_and_lock};
use distlock_core::LockError;
use support::*;

async fn try_url(url: &str) -> Result<(), LockError> {
    connect_and_lock(distlock_zk::connect(url), Duration::from_secs(2)).await
}

fn url() -> String {
    tls_url() + "&connect_timeout=3s"
}

#[tokio::test]
async fn the_right_ca_and_client_certificate_connect() {
    try_url(&url()).await.unwrap();
}

/// A wrong CA, a certificate for another host and an expired client certificate are each
/// `InvalidConfig` naming what failed.
#[tokio::test]
async fn wrong_certificates_are_named() {
    let try_owned = |u: String| async move { try_url(&u).await };
    certificate_refusals(&url(), try_owned, &zk_password()).await;
}

#[tokio::test]
async fn tls_files_need_zks_and_zks_needs_a_ca() {
    let plain = url().replace("zks://", "zk://");
    let e = distlock_zk::ZkConfig::from_url(&plain).unwrap_err();
    assert!(
        matches!(&e, LockError::InvalidConfig(m) if m.contains("zks://")),
        "{e:?}"
    );
    let no_ca = url().replace(&format!("ca={}/ca.crt&", tls_dir().display()), "");
    assert!(!no_ca.contains("ca="), "{no_ca}");
    let e = distlock_zk::connect(&no_ca).await.unwrap_err();
    assert!(
        matches!(&e, LockError::InvalidConfig(m) if m.contains("ca=")),
        "{e:?}"
    );
}

#[test]
fn config_debug_never_shows_the_password() {
    let password = zk_password();
    let inline = url()
        .replace("distlock@", &format!("distlock:{password}@"))
        .replace(
            &format!("&password_file={}/zk-password", tls_dir().display()),
            "",
        );
    for u in [url(), inline] {
        let cfg = distlock_zk::ZkConfig::from_url(&u).unwrap();
        assert!(!format!("{cfg:?}").contains(&password), "{cfg:?}");
    }
}
