//! Safety under faults: fault scenarios against every backend, a fenced resource that accepts
//! a write only with a token ≥ the highest it has seen, and a history checker that counts holds
//! both holders believed valid at once.
//!
//! `scripts/chaos.sh` runs every scenario on every backend and writes
//! `target/chaos-report/report.md`; `tests/short.rs` runs a short version in `scripts/test.sh`.
//! [`nemesis`] draws faults at random times from a seed (`scripts/chaos.sh --random`).

pub mod backends;
pub mod failovers;
pub mod fenced;
pub mod history;
pub mod nemesis;
pub mod outcome;
pub mod report;
pub mod scenarios;
pub mod services;
pub mod store_faults;
pub mod takeover;
mod undo;
