//! `list` and `break_lock` (`distlock ls`, `distlock break`) on real PostgreSQL, MariaDB and
//! SQLite, by the shared operator cases (`distlock_core::conformance`): row mode lists and
//! breaks on every dialect (the broken holder fenced out by `distlock_sql::fence`);
//! for_update and advisory list on PostgreSQL only and break nowhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use distlock_core::conformance;
use distlock_sql::{Dialect, Mode};
use support::*;

macro_rules! row_mode {
    ($module:ident, $dialect:ident, $dial:ident) => {
        mod $module {
            use super::*;

            async fn harness() -> SqlHarness {
                SqlHarness::new(Dialect::$dial, Mode::Row).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_broken_holder_is_fenced_out() {
                let (write, read) = fenced_register!($dialect);
                conformance::a_broken_holder_is_fenced_out(&harness().await, write, read).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_listing_is_bounded() {
                conformance::a_listing_is_bounded(&harness().await).await;
            }
        }
    };
}

row_mode!(postgres_row, postgres, Postgres);
row_mode!(mysql_row, mysql, MySql);
row_mode!(sqlite_row, sqlite, Sqlite);

/// Modes whose locks are held by a database session: listed where the database shows its
/// holders (PostgreSQL), never broken.
macro_rules! session_mode {
    ($module:ident, $dial:ident, $mode:ident, lists) => {
        session_mode!(@ $module, $dial, $mode, {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_listing_shows_the_holder() {
                conformance::a_listing_shows_the_holder(&harness().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_listing_is_bounded() {
                conformance::a_listing_is_bounded(&harness().await).await;
            }
        });
    };
    ($module:ident, $dial:ident, $mode:ident, refuses) => {
        session_mode!(@ $module, $dial, $mode, {
            #[tokio::test]
            async fn listing_is_refused() {
                conformance::listing_is_refused(&harness().await).await;
            }
        });
    };
    (@ $module:ident, $dial:ident, $mode:ident, { $($tests:item)* }) => {
        mod $module {
            use super::*;

            async fn harness() -> SqlHarness {
                SqlHarness::new(Dialect::$dial, Mode::$mode).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn breaking_is_refused() {
                conformance::breaking_is_refused(&harness().await).await;
            }

            $($tests)*
        }
    };
}

session_mode!(postgres_for_update, Postgres, ForUpdate, lists);
session_mode!(postgres_advisory, Postgres, Advisory, lists);
session_mode!(mysql_for_update, MySql, ForUpdate, refuses);
session_mode!(mysql_advisory, MySql, Advisory, refuses);
