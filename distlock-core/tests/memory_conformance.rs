//! The conformance suite on the in-memory reference backend: proves the suite itself runs and
//! that the guard machinery in distlock-core keeps every promise without a server.
#![cfg(feature = "conformance")]

use std::sync::Arc;

use async_trait::async_trait;
use distlock_core::backend::{Attempt, LockBackend};
use distlock_core::conformance::{CrashableClient, Harness};
use distlock_core::memory::MemoryStore;
use distlock_core::{DistributedLock, LockError};

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
        CrashableClient::in_process(self.store.client())
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

distlock_core::conformance_suite!(MemoryHarness {
    store: MemoryStore::new()
});

/// A deliberately broken backend: every name maps to one lock (the class of bug where two
/// names share a key). The differential test must catch it.
#[derive(Debug)]
struct OneKeyForAll(Arc<dyn DistributedLock>);

#[async_trait]
impl LockBackend for OneKeyForAll {
    async fn attempt(
        &self,
        _name: &str,
        opts: &distlock_core::AcquireOptions,
        how: Attempt,
    ) -> Result<Option<distlock_core::LockGuard>, LockError> {
        match how {
            Attempt::Try => self.0.try_acquire("shared", opts).await,
            _ => match self.0.acquire("shared", opts).await {
                Err(LockError::Timeout { .. }) => Ok(None),
                other => other.map(Some),
            },
        }
    }

    fn capabilities(&self) -> distlock_core::Capabilities {
        self.0.capabilities()
    }

    fn backend_name(&self) -> &str {
        "one-key-for-all"
    }
}

struct BrokenHarness {
    store: MemoryStore,
}

#[async_trait]
impl Harness for BrokenHarness {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        Arc::new(OneKeyForAll(self.store.client()))
    }

    async fn crashable_client(&self) -> CrashableClient {
        CrashableClient::in_process(self.client().await)
    }

    async fn remove_underneath(&self, _name: &str) {
        self.store.remove("shared");
    }

    async fn traces(&self, _name: &str) -> usize {
        usize::from(self.store.has_entry("shared"))
    }

    async fn unreachable(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        Err(LockError::unavailable("memory", None, "no store", None))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differential_catches_names_sharing_one_lock() {
    let h = BrokenHarness {
        store: MemoryStore::new(),
    };
    let e = distlock_core::conformance::differential_run(&h, 40, 7)
        .await
        .expect_err("the differential test missed two names sharing one lock");
    assert!(e.contains("reference gave"), "{e}");
}

/// The semaphore and read-write lock cases on the reference [`PermitStore`].
mod permits {
    use std::sync::Arc;

    use async_trait::async_trait;
    use distlock_core::conformance::{RwLockHarness, SemaphoreHarness};
    use distlock_core::permits::PermitStore;
    use distlock_core::{DistributedRwLock, DistributedSemaphore};

    struct Permits(PermitStore);

    #[async_trait]
    impl SemaphoreHarness for Permits {
        async fn semaphore(&self) -> Arc<dyn DistributedSemaphore> {
            self.0.semaphore()
        }
    }

    #[async_trait]
    impl RwLockHarness for Permits {
        async fn rwlock(&self) -> Arc<dyn DistributedRwLock> {
            self.0.rwlock()
        }
    }

    mod semaphore {
        distlock_core::semaphore_suite!(super::Permits(super::PermitStore::new()));
    }

    mod rwlock {
        distlock_core::rwlock_suite!(super::Permits(super::PermitStore::new()));
    }
}

/// `list` and `break_lock` on the reference backend, with a fenced file as the resource.
mod operator {
    use distlock_core::conformance::{self, fence::file_register};

    use super::*;

    fn harness() -> MemoryHarness {
        MemoryHarness {
            store: MemoryStore::new(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_broken_holder_is_fenced_out() {
        let dir = std::env::temp_dir().join(format!(
            "distlock-break-{}",
            distlock_core::backend::owner_token()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let (write, read) = file_register(dir.join("register"));
        conformance::a_broken_holder_is_fenced_out(&harness(), write, read).await;
    }

    #[tokio::test]
    async fn a_listing_shows_the_holder() {
        conformance::a_listing_shows_the_holder(&harness()).await;
    }

    #[tokio::test]
    async fn a_listing_is_bounded() {
        conformance::a_listing_is_bounded(&harness()).await;
    }

    /// Bad input is a typed error before any backend is asked.
    #[tokio::test]
    async fn bad_prefixes_limits_and_names_are_typed_errors() {
        let lock: Arc<dyn DistributedLock> = harness().store.client();
        assert!(matches!(
            lock.list("a\0", 10).await,
            Err(LockError::InvalidName { .. })
        ));
        assert!(matches!(
            lock.list("a", 0).await,
            Err(LockError::InvalidConfig(_))
        ));
        assert!(matches!(
            lock.break_lock("").await,
            Err(LockError::InvalidName { .. })
        ));
    }

    /// A backend without `list`/`break_lock` refuses both, by the trait's defaults.
    #[tokio::test]
    async fn a_backend_without_them_refuses_both() {
        let h = harness();
        let lock: Arc<dyn DistributedLock> = Arc::new(OneKeyForAll(h.store.client()));
        assert!(matches!(
            lock.list("", 10).await,
            Err(LockError::Unsupported { .. })
        ));
        assert!(matches!(
            lock.break_lock("x").await,
            Err(LockError::Unsupported { .. })
        ));
    }
}
