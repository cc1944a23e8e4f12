//! When a pooled connection is checked for liveness before use: only once it has sat idle in
//! the pool for [`CHECK_AFTER_IDLE`].
//!
//! sqlx pings every connection it takes from the pool (`test_before_acquire`) and again when
//! it goes back. The ping on the way out is a round trip before each statement, the largest
//! cost of a short lock statement after the statement itself. A connection that went back to
//! the pool moments ago was answered moments ago, so the check is skipped for it, as HikariCP
//! does (its `aliveBypassWindowMs`, 500 ms by default).
//!
//! The trade-off, which docs/safety.md states: a connection that dies within that window (the
//! server restarted, the backend was terminated) fails the statement that next uses it, with
//! [`distlock_core::LockError::Unavailable`], instead of being replaced silently; sqlx's ping when
//! the connection goes back closes it, so the call after that gets a live one. A holder's own
//! statements (renewal, release), which are safe to run twice, are sent again at once
//! (`resend_on_dead_connection`), so a release is not lost to a dead connection; so are a
//! `for_update` acquisition's `BEGIN`, which takes nothing, and its token draw, which sent
//! twice only skips a token.

use std::future::Future;
use std::time::Duration;

use distlock_core::LockError;
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Connection};

use crate::error::connection_died;

/// How long a connection sits idle in the pool before it is pinged on its way out.
pub const CHECK_AFTER_IDLE: Duration = Duration::from_millis(500);

/// `options` with the pool's liveness check limited to connections idle for at least
/// [`CHECK_AFTER_IDLE`].
pub fn check_when_idle(options: AnyPoolOptions) -> AnyPoolOptions {
    options
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= CHECK_AFTER_IDLE {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
}

/// Runs `f` — a statement keyed by its holder's token or member id, safe to run twice — and
/// sends it again when the connection died under it ([`crate::error::connection_died`]): at
/// most once per connection idle in `pool` when it starts, and once more (every idle one may
/// have died with the first). Other outcomes are returned at once. With the result comes the
/// first such failure when the statement was sent again: the first send may have run, so a
/// statement that finds nothing the second time cannot tell "already done" from "never
/// there".
pub(crate) async fn resend_on_dead_connection<T, F, Fut>(
    pool: &AnyPool,
    (label, name): (&str, &str),
    f: F,
) -> Result<(T, Option<LockError>), LockError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
{
    // sqlx's idle count is an atomic kept beside its queue, and it can read past the pool's
    // size, even wrap below zero, while connections come and go (cc6 read usize::MAX under
    // 1,000 concurrent for_update acquisitions): bounded by the pool's size.
    let idle = pool
        .num_idle()
        .min(usize::try_from(pool.size()).unwrap_or(usize::MAX));
    let mut tries = idle.saturating_add(1);
    let mut first_failure = None;
    loop {
        match f().await {
            Ok(v) => return Ok((v, first_failure)),
            Err(e) if tries > 0 && connection_died(&e) => {
                tries -= 1;
                tracing::debug!(backend = %label, name = %name, error = %e, "the connection died under a holder's statement; sending it again");
                first_failure.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
}

/// The error of a release that was sent again after its connection died under it
/// ([`resend_on_dead_connection`]) and then found nothing to release: the first send may have
/// released it, or the lease had lapsed before — the store cannot tell which. `Unavailable`
/// (as the first failure was), never `NotHeld`, which would say the hold had lapsed.
pub(crate) fn unclear_release(label: &str, name: &str, first: LockError) -> LockError {
    LockError::unavailable(
        label,
        Some(name),
        "the connection died under the release, and the release sent again found nothing: the \
         first one may have released the lock, or the lease had lapsed before",
        Some(Box::new(first) as distlock_core::BoxError),
    )
}
