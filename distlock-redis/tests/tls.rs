//! Redis over TLS (`rediss://`) against the TLS-only server `scripts/services.sh up` starts
//! (16390: a private CA, a certificate for `localhost`, ACL user `distlock`, default user off):
//! each way a connection can be wrong is a typed error naming what failed, within the connect
//! timeout, and no password shows in errors or `Debug`. The conformance suite runs on the same
//! server (tests/conformance.rs, `tls`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use distlock_core::conformance::refusals::connect_and_lock;

use std::time::{Duration, Instant};

use distlock_core::LockError;
use support::*;

const PASSWORD: &str = "distlock-tls-pw";

fn url(host: &str, query: &str) -> String {
    let d = tls_dir();
    format!(
        "rediss://distlock@{host}:16390?timeout=2s&ca={}/ca.crt&password_file={}/redis-password{query}",
        d.display(),
        d.display()
    )
}

/// Connects and takes a lock: the error, if any.
async fn try_url(url: &str) -> Result<(), LockError> {
    connect_and_lock(distlock_redis::connect(url), Duration::from_secs(1)).await
}

async fn refused(url: &str, what: &str, expect: &[&str]) {
    let limit = Duration::from_secs(5);
    distlock_core::conformance::refusals::refused(try_url(url), limit, what, expect, PASSWORD)
        .await;
}

#[tokio::test]
async fn the_right_ca_name_and_password_connect() {
    try_url(&url("localhost", "")).await.unwrap();
    // A client certificate from the same CA is accepted too.
    let d = tls_dir();
    let with_cert = url(
        "localhost",
        &format!(
            "&cert={}/client.crt&key={}/client.key",
            d.display(),
            d.display()
        ),
    );
    try_url(&with_cert).await.unwrap();
}

#[tokio::test]
async fn a_wrong_ca_is_named() {
    let u = url("localhost", "").replace("/ca.crt", "/other-ca.crt");
    refused(&u, "wrong CA", &["TLS", "UnknownIssuer", "ca="]).await;
}

#[tokio::test]
async fn a_certificate_for_another_host_is_named() {
    // The certificate names `localhost` only; dialling the address is another name.
    refused(
        &url("127.0.0.1", ""),
        "wrong host",
        &["TLS", "certificate", "127.0.0.1"],
    )
    .await;
}

#[tokio::test]
async fn an_expired_client_certificate_is_refused() {
    let d = tls_dir();
    let u = url(
        "localhost",
        &format!(
            "&cert={}/expired-client.crt&key={}/expired-client.key",
            d.display(),
            d.display()
        ),
    );
    refused(
        &u,
        "expired client certificate",
        &["expired at 2020-01-02T00:00:00Z", "cert="],
    )
    .await;
}

#[tokio::test]
async fn a_wrong_or_missing_password_is_named() {
    let u = format!(
        "rediss://distlock:not-it@localhost:16390?ca={}/ca.crt",
        tls_dir().display()
    );
    refused(&u, "wrong password", &["credentials"]).await;
    let u = format!("rediss://localhost:16390?ca={}/ca.crt", tls_dir().display());
    refused(&u, "no password", &["credentials"]).await;
}

#[tokio::test]
async fn plain_tcp_to_a_tls_server_is_not_a_hang() {
    let t = Instant::now();
    let err = try_url("redis://localhost:16390?timeout=1s")
        .await
        .unwrap_err();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    assert!(
        matches!(
            err,
            LockError::Unavailable { .. } | LockError::InvalidConfig(_)
        ),
        "{err:?}"
    );
}

#[test]
fn config_debug_never_shows_the_password() {
    let cfg = distlock_redis::RedisConfig::from_url(&format!(
        "rediss://distlock:{PASSWORD}@localhost:16390?ca=/x/ca.crt"
    ))
    .unwrap();
    assert!(!format!("{cfg:?}").contains(PASSWORD));
    let file_cfg = distlock_redis::RedisConfig::from_url(&url("localhost", "")).unwrap();
    assert!(!format!("{file_cfg:?}").contains(PASSWORD), "{file_cfg:?}");
}
