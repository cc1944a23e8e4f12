//! ZooKeeper digest authentication (`zk://user@…?password_file=…`): a session authenticated as
//! a user creates its contender nodes with ACLs only that identity may change or delete, so
//! another user (or an anonymous session) cannot delete a holder's node; a wrong password is
//! another identity, refused with a typed error where an ACL names the right one. The
//! conformance suite runs as the same user (tests/conformance.rs, `auth`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::conformance::refusals::{connect_and_lock, refused};
use distlock_core::LockError;
use support::*;
use zookeeper_client::{Acl, Acls, Client, CreateMode, Error, Permission};

async fn as_user(user_pw: Option<&str>) -> Client {
    let mut c = Client::connector();
    if let Some(up) = user_pw {
        c = c.with_auth("digest", up.as_bytes());
    }
    c.connect(&hosts(&standalone_url())).await.unwrap()
}

#[tokio::test]
async fn another_user_cannot_delete_a_holders_node() {
    let lock = connect_or_explain(&auth_url()).await;
    let name = unique("acl");
    let guard = lock.acquire(&name, &wait(5)).await.unwrap();
    let dir = ZkHarness::dir(&name);
    let admin = raw(&auth_url()).await;
    let (children, _) = admin.get_children(&dir).await.unwrap();
    assert_eq!(children.len(), 1, "{children:?}");
    let node = format!("{dir}/{}", children[0]);

    let (acls, _) = admin.get_acl(&node).await.unwrap();
    assert!(
        acls.iter().any(|a| a.scheme() == "digest"
            && a.id().starts_with("distlock:")
            && a.permission() == Permission::ALL),
        "{acls:?}"
    );
    assert!(
        acls.iter()
            .any(|a| a.scheme() == "world" && a.permission() == Permission::READ),
        "{acls:?}"
    );
    for (who, client) in [
        ("another user", as_user(Some("mallory:secret")).await),
        ("an anonymous session", as_user(None).await),
        ("a wrong password", as_user(Some("distlock:not-it")).await),
    ] {
        assert_eq!(
            client.delete(&node, None).await,
            Err(Error::NoAuth),
            "{who} deleted the holder's node"
        );
        assert!(
            client.get_data(&node).await.is_ok(),
            "{who} may still read it"
        );
    }
    assert!(!guard.is_lost());
    assert!(lock.inspect(&name).await.unwrap().held);
    guard.release().await.unwrap();
}

/// A path whose ACL admits only digest user `distlock` (created by that user with the `auth`
/// scheme): a client with the wrong password cannot lock under it, and says why.
#[tokio::test]
async fn a_wrong_password_is_refused_where_an_acl_names_the_user() {
    let admin = raw(&auth_url()).await;
    let root = format!("/{}", unique("authroot"));
    let only_us = [Acl::new_const(Permission::ALL, "auth", "")];
    admin
        .create(
            &root,
            &[],
            &CreateMode::Persistent.with_acls(Acls::new(&only_us)),
        )
        .await
        .unwrap();
    let url = |pw: &str| {
        format!(
            "zk://distlock:{pw}@{}{root}?connect_timeout=3s",
            hosts(&standalone_url())
        )
    };
    let attempt = |u: String| async move {
        connect_and_lock(distlock_zk::connect(&u), Duration::from_secs(2)).await
    };
    attempt(url(&zk_password())).await.unwrap();
    refused(
        attempt(url("not-it")),
        Duration::from_secs(8),
        "wrong password",
        &["refused access", "password"],
        "not-it",
    )
    .await;
}

#[test]
fn config_debug_never_shows_the_password() {
    let cfg = distlock_zk::ZkConfig::from_url("zk://distlock:s3cret@127.0.0.1:2181").unwrap();
    assert!(!format!("{cfg:?}").contains("s3cret"), "{cfg:?}");
    let e = distlock_zk::ZkConfig::from_url("zk://distlock@127.0.0.1:2181").unwrap_err();
    assert!(
        matches!(e, LockError::InvalidConfig(_))
            && e.to_string().contains("both a user and a password"),
        "{e}"
    );
}
