//! etcd with TLS and authentication (`scripts/services.sh up`: 12579, the private CA's
//! certificate for `localhost`, client certificates required, user `distlock` whose role may
//! read and write keys under `locks/` only): each way a connection can be wrong is a typed
//! error naming what failed, within the connect timeout; the user cannot lock outside its
//! prefix; no password shows. The conformance suite runs on the same member
//! (tests/conformance.rs, `secure`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::conformance::refusals::{connect_and_lock, refused};
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

#[tokio::test]
async fn a_wrong_ca_is_named() {
    check(
        &url().replace("/ca.crt", "/other-ca.crt"),
        "wrong CA",
        &["TLS", "UnknownIssuer"],
    )
    .await;
}

#[tokio::test]
async fn a_certificate_for_another_host_is_named() {
    check(
        &url().replace("@localhost:", "@127.0.0.1:"),
        "wrong host",
        &["TLS", "127.0.0.1"],
    )
    .await;
}

#[tokio::test]
async fn an_expired_client_certificate_is_refused() {
    let u = url()
        .replace("/client.crt", "/expired-client.crt")
        .replace("/client.key", "/expired-client.key");
    check(
        &u,
        "expired client certificate",
        &["expired at 2020-01-02T00:00:00Z", "cert="],
    )
    .await;
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
