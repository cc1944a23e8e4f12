//! What an operator can see and break (`distlock ls`, `distlock break`), per mode and dialect;
//! the statements are in `statements/operator.rs`.
//!
//! | mode | list | break |
//! |---|---|---|
//! | row (every dialect) | the rows whose lease has not run out: token, owner, lease left, identity | the live row deleted and the name's counter bumped at once (PostgreSQL: one statement that also wakes the queue's head; MySQL/MariaDB, SQLite: one transaction) |
//! | for_update, advisory on PostgreSQL | the names whose row lock (the row's `xmax` transaction) or advisory key (`<table>_keys`) a session holds now, by `pg_locks`; token and identity where the holder recorded an identity, advisory waiters | unsupported |
//! | for_update, advisory on MySQL/MariaDB | unsupported | unsupported |
//!
//! A broken row-mode holder's renewal finds no row of its owner and reports the guard lost (at
//! its next renewal, every ttl/3). for_update and advisory locks are held by a database
//! session: only ending that session would free one, which needs elevated privileges and would
//! end whatever else that pooled connection is doing at that moment, so they are not broken.
//! MySQL/MariaDB does not show another session which rows or `GET_LOCK` names it holds.

use std::time::Duration;

use distlock_core::operator::{cannot_break, cannot_list, nobody_holds};
use distlock_core::{Broken, Listed, Listing, LockError, LockInfo};
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use crate::client::SqlClient;
use crate::error::retrying;
use crate::error::{classify, map, Failure};
use crate::holders::{is_missing_table, HolderStatements};
use crate::statements::{self, Atomic, OperatorStatements, RowBreak};

/// What `client`'s dialect and mode can do for an operator.
pub(crate) fn statements(client: &SqlClient) -> OperatorStatements {
    let cfg = &client.cfg;
    statements::operator(cfg.dialect, cfg.mode, &cfg.table)
}

/// The held names starting with `prefix`, at most `limit` (on the side pool: a client's own
/// locks may hold every lock connection).
pub(crate) async fn list(
    client: &SqlClient,
    prefix: &str,
    limit: usize,
) -> Result<Listing, LockError> {
    let label = &client.label;
    let sql = statements(client)
        .list
        .map_err(|why| cannot_list(label, why))?;
    // One row more than asked tells whether there are more.
    let rows = i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1);
    let fetch = |text: &str| {
        sqlx::query(AssertSqlSafe(text.to_owned()))
            .bind(prefix)
            .bind(prefix)
            .bind(rows)
            .fetch_all(&client.side)
    };
    let found = match fetch(&sql.with_identities).await {
        Err(e) if is_missing_table(&e) => fetch(&sql.without_identities).await,
        other => other,
    }
    .map_err(|e| map(e, label, None))?;
    let found = found
        .iter()
        .map(listed)
        .collect::<Result<Vec<_>, sqlx::Error>>()
        .map_err(|e| map(e, label, None))?;
    Ok(Listing::page(found, limit, false))
}

/// One listing row: name, owner, token, ms left, identity, waiters.
fn listed(r: &AnyRow) -> Result<Listed, sqlx::Error> {
    let token: Option<i64> = r.try_get(2)?;
    let left: Option<i64> = r.try_get(3)?;
    let waiters: Option<i64> = r.try_get(5)?;
    let info = LockInfo::held(
        token.and_then(|t| u64::try_from(t).ok()),
        r.try_get(1)?,
        left.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
        waiters.and_then(|w| usize::try_from(w).ok()),
    )
    .with_holder(r.try_get(4)?);
    Ok(Listed::new(r.try_get::<String, _>(0)?, info))
}

/// Breaks the live row of `name` (row mode), reporting the identity recorded by the broken
/// holder (`holders`).
pub(crate) async fn break_lock(
    client: &SqlClient,
    holders: Option<&HolderStatements>,
    name: &str,
) -> Result<Broken, LockError> {
    let label = &client.label;
    let sql = statements(client)
        .break_row
        .map_err(|why| cannot_break(label, why))?;
    // Read first: the next holder may record its own as soon as the break is done.
    let recorded = match holders {
        Some(h) => h.recorded(&client.side, label, name).await?,
        None => None,
    };
    let taken = retrying(label, name, || take(client, &sql, name)).await?;
    let (owner, token) = taken.ok_or_else(|| nobody_holds(name, label))?;
    let token = u64::try_from(token).ok();
    let holder = recorded.and_then(|(t, holder)| (Some(t) == token).then_some(holder));
    Ok(Broken::new(name, token).with_owner(Some(owner), holder))
}

/// One try at [`RowBreak`]: the broken holder's owner and token, `None` when nobody held it.
async fn take(
    client: &SqlClient,
    sql: &RowBreak,
    name: &str,
) -> Result<Option<(String, i64)>, Failure> {
    let c = |e| classify(e, &client.label, Some(name));
    let take = sqlx::query(AssertSqlSafe(sql.take.as_str())).bind(name);
    let owner_token = |r: AnyRow| -> Result<(String, i64), Failure> {
        Ok((r.try_get(0).map_err(c)?, r.try_get(1).map_err(c)?))
    };
    let begin = match &sql.atomic {
        Atomic::Statement => {
            let row = take.fetch_optional(&client.pool).await.map_err(c)?;
            return row.map(owner_token).transpose();
        }
        Atomic::Transaction(begin) => begin.clone(),
    };
    let mut tx = crate::begin::begin(&client.pool, begin).await.map_err(c)?;
    let Some(row) = take.fetch_optional(&mut *tx).await.map_err(c)? else {
        return Ok(None);
    };
    let broken = owner_token(row)?;
    for then in &sql.then {
        sqlx::query(AssertSqlSafe(then.as_str()))
            .bind(name)
            .execute(&mut *tx)
            .await
            .map_err(c)?;
    }
    tx.commit().await.map_err(c)?;
    Ok(Some(broken))
}
