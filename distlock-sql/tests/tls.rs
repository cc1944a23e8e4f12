//! PostgreSQL and MariaDB that require TLS (`scripts/services.sh up`: 15433 and 13307, the
//! private CA's certificate for `localhost`, user `distlock_tls` with a password): each way a
//! connection can be wrong is a typed error naming what failed, within the connect timeout, and
//! no password shows in errors or `Debug`. The conformance suite runs on the same servers
//! (tests/conformance.rs, `postgres_tls_row`, `mysql_tls_row`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use distlock_core::conformance::refusals::connect_and_lock;

use std::time::Duration;

use distlock_core::LockError;
use support::*;

const PASSWORD: &str = "distlock-tls-pw";

async fn try_url(url: &str) -> Result<(), LockError> {
    connect_and_lock(distlock_sql::connect(url), Duration::from_secs(1)).await
}

async fn refused(url: &str, what: &str, expect: &[&str]) {
    let limit = Duration::from_secs(8);
    distlock_core::conformance::refusals::refused(try_url(url), limit, what, expect, PASSWORD)
        .await;
}

fn urls() -> [String; 2] {
    [postgres_tls_url(), mysql_tls_url()]
}

#[tokio::test]
async fn the_right_ca_name_and_password_connect() {
    for u in urls() {
        try_url(&format!("{u}&connect_timeout=3s"))
            .await
            .unwrap_or_else(|e| panic!("{u}: {e}"));
    }
}

#[tokio::test]
async fn a_wrong_ca_is_named() {
    for u in urls() {
        let u = u.replace("/ca.crt", "/other-ca.crt") + "&connect_timeout=3s";
        refused(&u, "wrong CA", &["TLS", "certificate"]).await;
    }
}

#[tokio::test]
async fn a_certificate_for_another_host_is_named() {
    for u in urls() {
        let u = u.replace("@localhost:", "@127.0.0.1:") + "&connect_timeout=3s";
        refused(&u, "wrong host", &["TLS", "certificate", "127.0.0.1"]).await;
    }
}

#[tokio::test]
async fn a_wrong_password_is_named() {
    for u in urls() {
        let u = u.replace("distlock_tls@", "distlock_tls:not-it@").replace(
            &format!("&password_file={}/sql-password", tls_dir().display()),
            "",
        ) + "&connect_timeout=3s";
        refused(&u, "wrong password", &["password"]).await;
    }
}

#[tokio::test]
async fn without_tls_the_server_refuses() {
    let pg = postgres_tls_url().replace("sslmode=verify-full", "sslmode=disable")
        + "&connect_timeout=3s";
    refused(&pg, "PostgreSQL without TLS", &["no encryption"]).await;
    let my = mysql_tls_url().replace("ssl-mode=VERIFY_IDENTITY", "ssl-mode=DISABLED")
        + "&connect_timeout=3s";
    // MariaDB answers a user that requires TLS only "Access denied" without it: the refusal is
    // typed, the reason is the server's to give.
    refused(&my, "MariaDB without TLS", &["refused the credentials"]).await;
}

#[test]
fn config_debug_never_shows_the_password() {
    for u in urls() {
        let cfg = distlock_sql::SqlConfig::from_url(&u).unwrap();
        assert!(!format!("{cfg:?}").contains(PASSWORD), "{cfg:?}");
        let inline = u
            .replace("distlock_tls@", &format!("distlock_tls:{PASSWORD}@"))
            .replace(
                &format!("&password_file={}/sql-password", tls_dir().display()),
                "",
            );
        let cfg = distlock_sql::SqlConfig::from_url(&inline).unwrap();
        assert!(!format!("{cfg:?}").contains(PASSWORD), "{cfg:?}");
    }
}
