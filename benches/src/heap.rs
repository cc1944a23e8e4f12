//! Live heap bytes of this process: the system allocator, counted (`stats_alloc`). The
//! 10,000-held-names step reads it beside the resident-set growth, which cannot see memory an
//! earlier scenario freed and the allocator hands out again (an etcd run once showed 0 bytes
//! per held lock that way).

use std::alloc::System;

use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

/// The process's allocator: `System`, counting what it hands out and gets back.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes allocated and not yet freed, now.
pub fn live() -> u64 {
    let s = GLOBAL.stats();
    let live =
        s.bytes_allocated as i128 - s.bytes_deallocated as i128 + s.bytes_reallocated as i128;
    u64::try_from(live.max(0)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_allocation_counts_until_freed() {
        // Other test threads allocate and free meanwhile (a few hundred KiB at most; a run saw
        // 167 KiB freed between two readings): hold 64 MiB and allow 8 MiB of their churn.
        const HELD: u64 = 64 << 20;
        const CHURN: u64 = 8 << 20;
        let before = live();
        let held = vec![1u8; HELD as usize];
        let during = live();
        assert_eq!(held.len() as u64, HELD);
        drop(held);
        let after = live();
        assert!(during + CHURN >= before + HELD, "{before} -> {during}");
        assert!(after + HELD <= during + CHURN, "{during} -> {after}");
    }
}
