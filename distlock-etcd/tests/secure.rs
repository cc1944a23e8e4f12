//! etcd with TLS and authentication (`scripts/services.sh up`: 12579, the private CA's
//! certificate for `localhost`, client certificates required, user `distlock` whose role may
//! read and write keys under `locks/` only): each way a connection can be wrong is a typed
//! error naming what failed, within the connect timeout; the user cannot lock outside its
//! prefix; no password shows. The conformance suite runs on the same member
//! (tests/conformance.rs, `secure`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::conformance::refusals::{certificate_refusals, connect_and_lock, refused};
use distlock_core::LockError;
use support::*;

const PASSWORD: &str = "distlock-etcd-pw";

async fn try_url(url: &str) -> Result<(), LockError> {
    connect_and_lock(distlock_etcd::connect(url), Duration::from_secs(2)).await
}

async fn check(url: &str, what: &str, expect: &[&str]) {
    refused(try_url(url), Duration::from_secs(8), what, expect, PASSWORD).await;
}

fn url() -> String {
    secure_url() + "&connect_timeout=3s"
}

#[tokio::test]
async fn the_right_ca_certificate_and_password_connect() {
    try_url(&url()).await.unwrap();
}

/// A wrong CA, a certificate for another host and an expired client certificate are each
/// `InvalidConfig` naming what failed.
#[tokio::test]
async fn wrong_certificates_are_named() {
    let try_owned = |u: String| async move { try_url(&u).await };
    certificate_refusals(&url(), try_owned, PASSWORD).await;
}

#[tokio::test]
async fn a_wrong_or_missing_password_is_named() {
    let pw_file = format!("&password_file={}/etcd-password", tls_dir().display());
    let wrong = url()
        .replace("distlock@", "distlock:not-it@")
        .replace(&pw_file, "");
    check(&wrong, "wrong password", &["credentials"]).await;
    let none = url().replace("distlock@", "").replace(&pw_file, "");
    check(&none, "no user", &["credentials"]).await;
}

/// The role grants `locks/` only: the same user locking under another prefix is refused by
/// etcd, and the error says what to grant.
#[tokio::test]
async fn the_user_cannot_lock_outside_its_prefix() {
    check(
        &url().replace("/locks?", "/other?"),
        "another prefix",
        &["permission denied", "prefix"],
    )
    .await;
}

#[test]
fn config_debug_never_shows_the_password() {
    let inline = url()
        .replace("distlock@", &format!("distlock:{PASSWORD}@"))
        .replace(
            &format!("&password_file={}/etcd-password", tls_dir().display()),
            "",
        );
    for u in [url(), inline] {
        let cfg = distlock_etcd::EtcdConfig::from_url(&u).unwrap();
        assert!(!format!("{cfg:?}").contains(PASSWORD), "{cfg:?}");
    }
}
