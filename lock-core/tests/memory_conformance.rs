//! The conformance suite on the in-memory reference backend: proves the suite itself runs and
//! that the guard machinery in lock-core keeps every promise without a server.
#![cfg(feature = "conformance")]

use std::sync::Arc;

use async_trait::async_trait;
use lock_core::conformance::{CrashableClient, Harness};
use lock_core::memory::MemoryStore;
use lock_core::{DistributedLock, LockError};

struct MemoryHarness {
    store: MemoryStore,
}

#[async_trait]
impl Harness for MemoryHarness {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        self.store.client()
    }

    async fn crashable_client(&self) -> CrashableClient {
        // A crashed in-process client is one whose guard is abandoned: no extra cut needed.
        CrashableClient {
            lock: self.store.client(),
            crash: Box::new(|| Box::pin(async {})),
        }
    }

    async fn remove_underneath(&self, name: &str) {
        self.store.remove(name);
    }

    async fn traces(&self, name: &str) -> usize {
        usize::from(self.store.has_entry(name))
    }

    async fn unreachable(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        Err(LockError::unavailable(
            "memory",
            None,
            "no store to reach",
            None,
        ))
    }
}

lock_core::conformance_suite!(MemoryHarness {
    store: MemoryStore::new()
});
