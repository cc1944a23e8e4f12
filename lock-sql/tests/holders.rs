//! Holder identities in row mode (`<table>_holders`): created when missing (a table of an
//! earlier version), reported for the current holder only — never an earlier holder's — and
//! not recorded by for_update (`leader` is `Unsupported` there).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockError};
use sqlx::AssertSqlSafe;
use support::*;

fn opts() -> AcquireOptions {
    AcquireOptions::new().wait(Duration::from_secs(10))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn row_mode_records_identities_in_a_table_made_when_missing() {
    for (url, table) in [
        (
            format!("{}?mode=row&table=holders_pg", postgres_url()),
            "holders_pg",
        ),
        (
            format!("{}?mode=row&table=holders_my", mysql_url()),
            "holders_my",
        ),
        (
            format!("{}?table=holders_lite", sqlite_url()),
            "holders_lite",
        ),
    ] {
        let (a, b) = (
            connect_or_explain(&url).await,
            connect_or_explain(&url).await,
        );
        // As a deployment of an earlier version would have it: no holders table.
        sqlx::query(AssertSqlSafe(format!(
            "DROP TABLE IF EXISTS {table}_holders"
        )))
        .execute(a.pool())
        .await
        .unwrap();
        assert!(a.capabilities().holder_identity);
        let name = format!("holders-{}", &lock_core::backend::owner_token()[..8]);
        assert_eq!(a.leader(&name).await.unwrap(), None, "{url}");

        let g = a.campaign(&name, "node-a", &opts()).await.unwrap();
        let l = b.leader(&name).await.unwrap().expect("a leader");
        assert_eq!(
            (l.identity.as_str(), l.fencing_token),
            ("node-a", g.fencing_token())
        );
        assert_eq!(
            b.inspect(&name).await.unwrap().holder.as_deref(),
            Some("node-a")
        );
        g.release().await.unwrap();

        // A later holder without an identity: the record of node-a is not shown as its own.
        let plain = b.acquire(&name, &opts()).await.unwrap();
        assert_eq!(b.inspect(&name).await.unwrap().holder, None, "{url}");
        let e = a.leader(&name).await.unwrap_err();
        assert!(e.to_string().contains("recorded no identity"), "{url}: {e}");
        plain.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn for_update_records_none_and_says_so() {
    let lock = connect_or_explain(&format!("{}?mode=for_update", postgres_url())).await;
    assert!(!lock.capabilities().holder_identity);
    let name = format!("holders-fu-{}", &lock_core::backend::owner_token()[..8]);
    let g = lock.campaign(&name, "node-a", &opts()).await.unwrap();
    let e = lock.leader(&name).await.unwrap_err();
    assert!(matches!(e, LockError::Unsupported { .. }), "{e}");
    g.release().await.unwrap();
}
