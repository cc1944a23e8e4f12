//! The conformance suite: every behaviour the contract promises (`docs/safety.md`), written
//! once, run unchanged on every backend and mode.
//!
//! A backend supplies a [`Harness`] and instantiates every case as its own `#[tokio::test]`:
//!
//! ```ignore
//! mod sqlite_row {
//!     distlock_core::conformance_suite!(crate::harness::sqlite_row().await);
//! }
//! ```
//!
//! Each case is also a public async function taking `&dyn Harness`, so wrappers and the
//! in-memory reference backend call the same code.

mod cases;
mod differential;
pub mod fence;
mod gray;
mod harness;
mod operator;
mod permits;
mod recipes;
pub mod refusals;

pub use cases::*;
pub use differential::{differential_against_reference, differential_run, Case, Op};
pub use gray::{
    a_cut_off_holder_knows_first, a_stalled_store_bounds_every_wait,
    extend_of_unknown_outcome_is_not_believed, permit_extend_of_unknown_outcome_is_not_believed,
};
pub use harness::{proxies, Crash, CrashableClient, Harness};
pub use operator::*;
pub use permits::*;
pub use recipes::*;

/// The limit every conformance case runs under; a case that hangs fails instead.
pub const CASE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

/// A lock name unique to one case run, so parallel and repeated runs never collide.
pub fn unique_name(case: &str) -> String {
    format!("conf-{case}-{}", &crate::backend::owner_token()[..12])
}

/// Runs `fut` under [`CASE_TIMEOUT`], failing the test if it hangs.
pub async fn bounded<F: std::future::Future<Output = ()>>(case: &str, fut: F) {
    if tokio::time::timeout(CASE_TIMEOUT, fut).await.is_err() {
        panic!("conformance case {case} did not finish within {CASE_TIMEOUT:?}");
    }
}

/// Instantiates every conformance case as a `#[tokio::test]` for a harness expression, which
/// is evaluated (and may `.await`) inside each test.
#[macro_export]
macro_rules! conformance_suite {
    ($harness:expr) => {
        $crate::conformance_suite!(@cases $harness;
            try_acquire_on_held_lock,
            acquire_woken_by_release,
            wait_timeout_honoured,
            mutual_exclusion_under_contention,
            fencing_tokens_strictly_increase,
            stale_release_is_not_held,
            holder_crash_frees_lock,
            guard_drop_releases,
            cancelled_acquire_leaves_no_trace,
            lost_fires_when_removed_underneath,
            renewal_keeps_short_lease,
            hostile_names,
            unreachable_store_errors_promptly,
            independent_names_do_not_block,
            local_waiters_served_in_arrival_order,
            thousand_locks_held_at_once,
            look_alike_names_are_distinct,
            zero_wait_on_fresh_name,
            extend_shorter_keeps_lock,
            extend_of_unknown_outcome_is_not_believed,
            a_stalled_store_bounds_every_wait,
            a_cut_off_holder_knows_first,
            differential_against_reference,
            run_locked_stops_work_at_loss,
            acquire_all_is_all_or_nothing,
            election_one_leader_at_a_time,
            election_loss_ends_leadership,
            election_observe_yields_each_leader,
        );
    };
    (@cases $harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let harness = $harness;
                $crate::conformance::bounded(
                    stringify!($case),
                    $crate::conformance::$case(&harness),
                )
                .await;
            }
        )*
    };
}
