//! Holder identities in row mode (`<table>_holders`): created when missing (a table of an
//! earlier version), reported for the current holder only — never an earlier holder's; and in
//! for_update and advisory modes (`<table>_sessions`), reported for the holding session only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
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
        let name = format!("holders-{}", &distlock_core::backend::owner_token()[..8]);
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

/// for_update and advisory record identities by holding session (`<table>_sessions`): `leader()`
/// names the session that holds the lock now, never a released holder whose connection went
/// back to the pool, nor a killed holder whose record stayed behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connection_held_modes_name_only_the_session_that_holds() {
    use distlock_core::conformance::Harness;
    use distlock_sql::config::{Dialect, Mode};
    for (dialect, mode) in [
        (Dialect::Postgres, Mode::ForUpdate),
        (Dialect::Postgres, Mode::Advisory),
        (Dialect::MySql, Mode::ForUpdate),
        (Dialect::MySql, Mode::Advisory),
    ] {
        let h = SqlHarness::new(dialect, mode).await;
        let (a, b) = (
            connect_or_explain(h.url()).await,
            connect_or_explain(h.url()).await,
        );
        let url = h.url();
        assert!(a.capabilities().holder_identity, "{url}");
        let name = format!("sessions-{}", &distlock_core::backend::owner_token()[..8]);
        assert_eq!(b.leader(&name).await.unwrap(), None, "{url}");

        let g = a.campaign(&name, "node-a", &opts()).await.unwrap();
        let l = b.leader(&name).await.unwrap().expect("a leader");
        assert_eq!(
            (l.identity.as_str(), l.fencing_token),
            ("node-a", g.fencing_token()),
            "{url}"
        );
        g.release().await.unwrap();
        assert_eq!(b.leader(&name).await.unwrap(), None, "{url}");
        // A plain holder on the same client (its pool may hand it node-a's connection).
        let plain = a.acquire(&name, &opts()).await.unwrap();
        let e = b.leader(&name).await.unwrap_err();
        assert!(e.to_string().contains("recorded no identity"), "{url}: {e}");
        plain.release().await.unwrap();

        // A holder killed on the server: its record stays, and is not the next holder's.
        let short = opts().ttl(Duration::from_secs(3));
        let g = a.campaign(&name, "node-a2", &short).await.unwrap();
        h.remove_underneath(&name).await;
        tokio::time::timeout(Duration::from_secs(20), g.lost())
            .await
            .unwrap_or_else(|_| panic!("{url}: the killed holder was not lost"));
        let plain = b
            .acquire(&name, &AcquireOptions::new().wait(Duration::from_secs(20)))
            .await
            .unwrap();
        let e = b.leader(&name).await.unwrap_err();
        assert!(e.to_string().contains("recorded no identity"), "{url}: {e}");
        plain.release().await.unwrap();
        let g = b.campaign(&name, "node-b", &opts()).await.unwrap();
        let l = a.leader(&name).await.unwrap().expect("a leader");
        assert_eq!(
            (l.identity.as_str(), l.fencing_token),
            ("node-b", g.fencing_token()),
            "{url}"
        );
        g.release().await.unwrap();
    }
}
