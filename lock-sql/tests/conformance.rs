//! The shared conformance suite on every SQL dialect and mode, against real servers.

mod support;

use lock_sql::{Dialect, Mode};
use support::SqlHarness;

mod sqlite_row {
    use super::*;
    lock_core::conformance_suite!(SqlHarness::new(Dialect::Sqlite, Mode::Row).await);
}

mod postgres_row {
    use super::*;
    lock_core::conformance_suite!(SqlHarness::new(Dialect::Postgres, Mode::Row).await);
}

mod postgres_for_update {
    use super::*;
    lock_core::conformance_suite!(SqlHarness::new(Dialect::Postgres, Mode::ForUpdate).await);
}

mod mysql_row {
    use super::*;
    lock_core::conformance_suite!(SqlHarness::new(Dialect::MySql, Mode::Row).await);
}

mod mysql_for_update {
    use super::*;
    lock_core::conformance_suite!(SqlHarness::new(Dialect::MySql, Mode::ForUpdate).await);
}

mod postgres_advisory {
    use super::*;
    lock_core::conformance_suite!(SqlHarness::new(Dialect::Postgres, Mode::Advisory).await);
}

mod mysql_advisory {
    use super::*;
    lock_core::conformance_suite!(SqlHarness::new(Dialect::MySql, Mode::Advisory).await);
}
