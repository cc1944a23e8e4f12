//! The shared conformance suite on every SQL dialect and mode, against real servers, and in row
//! mode on the PostgreSQL and MariaDB servers that require TLS (verified against the private CA).

mod support;

use distlock_sql::{Dialect, Mode};
use support::SqlHarness;

mod sqlite_row {
    use super::*;
    distlock_core::conformance_suite!(SqlHarness::new(Dialect::Sqlite, Mode::Row).await);
}

mod postgres_row {
    use super::*;
    distlock_core::conformance_suite!(SqlHarness::new(Dialect::Postgres, Mode::Row).await);
}

mod postgres_for_update {
    use super::*;
    distlock_core::conformance_suite!(SqlHarness::new(Dialect::Postgres, Mode::ForUpdate).await);
}

mod mysql_row {
    use super::*;
    distlock_core::conformance_suite!(SqlHarness::new(Dialect::MySql, Mode::Row).await);
}

mod mysql_for_update {
    use super::*;
    distlock_core::conformance_suite!(SqlHarness::new(Dialect::MySql, Mode::ForUpdate).await);
}

mod postgres_advisory {
    use super::*;
    distlock_core::conformance_suite!(SqlHarness::new(Dialect::Postgres, Mode::Advisory).await);
}

mod mysql_advisory {
    use super::*;
    distlock_core::conformance_suite!(SqlHarness::new(Dialect::MySql, Mode::Advisory).await);
}

mod postgres_tls_row {
    use super::*;
    distlock_core::conformance_suite!(SqlHarness::tls(Dialect::Postgres).await);
}

mod mysql_tls_row {
    use super::*;
    distlock_core::conformance_suite!(SqlHarness::tls(Dialect::MySql).await);
}
