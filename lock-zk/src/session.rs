//! [`Session`]: one ZooKeeper session and the guards that live on it.
//!
//! A watcher task follows the session state. When the session expires (or is closed), every
//! guard of that session is reported lost at once. While disconnected, guards stay held — the
//! session may survive a server failover — but only for a quarter of the session timeout: the
//! ensemble expires a session one session timeout after the last heartbeat it received, the
//! client only notices the outage some time after that heartbeat (measured here: ~0.55 s of a
//! 2 s session), so waiting longer would let another client take the lock while this guard
//! still looks valid (the chaos partition scenario showed exactly that with a full timeout).
//! The session is then retired; later acquisitions open a new one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LockError, LostSignal};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use zookeeper_client::{Client, SessionState};

use crate::config::ZkConfig;
use crate::error::map;

#[derive(Default)]
struct Shared {
    guards: Mutex<Vec<LostSignal>>,
    dead: AtomicBool,
}

impl Shared {
    fn lose_all(&self, why: &str) {
        self.dead.store(true, Ordering::SeqCst);
        let guards = std::mem::take(&mut *self.guards.lock().unwrap_or_else(|p| p.into_inner()));
        for g in guards {
            g.mark_lost(why);
        }
    }
}

/// One session: the client plus the lost signals of its guards.
pub(crate) struct Session {
    pub client: Client,
    shared: Arc<Shared>,
    watcher: JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

impl Session {
    /// Opens a session, bounded by the connect timeout; checks that the chroot exists.
    pub(crate) async fn open(cfg: &ZkConfig, label: &str) -> Result<Arc<Session>, LockError> {
        let connector = Client::connector()
            .with_session_timeout(cfg.session_timeout)
            .with_connection_timeout(cfg.connect_timeout)
            .with_fail_eagerly();
        let target = cfg.connect_string();
        let client = match tokio::time::timeout(
            cfg.connect_timeout + Duration::from_secs(1),
            connector.connect(&target),
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(map(e, label, None)),
            Err(_) => {
                return Err(LockError::unavailable(
                    label,
                    None,
                    format!(
                        "no ZooKeeper server of {:?} answered within {:?}",
                        cfg.hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
                        cfg.connect_timeout
                    ),
                    None,
                ))
            }
        };
        if !cfg.chroot.is_empty()
            && client
                .check_stat("/")
                .await
                .map_err(|e| map(e, label, None))?
                .is_none()
        {
            return Err(LockError::invalid_config(format!(
                "{label}: the chroot {:?} does not exist; create it or drop it from the URL",
                cfg.chroot
            )));
        }
        let shared = Arc::new(Shared::default());
        let watcher = tokio::spawn(watch(
            client.clone(),
            Arc::clone(&shared),
            cfg.session_timeout,
        ));
        Ok(Arc::new(Session {
            client,
            shared,
            watcher,
        }))
    }

    /// Whether the session is gone (expired, closed, or disconnected past its timeout).
    pub(crate) fn is_dead(&self) -> bool {
        self.shared.dead.load(Ordering::SeqCst)
    }

    /// Tracks a guard's lost signal; it fires if the session dies.
    pub(crate) fn register(&self, lost: &LostSignal) {
        if self.is_dead() {
            lost.mark_lost("the ZooKeeper session expired");
            return;
        }
        let mut g = self.shared.guards.lock().unwrap_or_else(|p| p.into_inner());
        g.retain(|s| !s.is_lost());
        g.push(lost.clone());
    }
}

async fn watch(client: Client, shared: Arc<Shared>, session_timeout: Duration) {
    let mut states = client.state_watcher();
    let mut disconnected_at: Option<Instant> = None;
    loop {
        let state = match disconnected_at {
            Some(since) => tokio::select! {
                s = states.changed() => s,
                _ = tokio::time::sleep_until(since + session_timeout / 4) => {
                    shared.lose_all("disconnected from ZooKeeper for a quarter of the session timeout; the ensemble may expire the session before this client can tell");
                    return;
                }
            },
            None => states.changed().await,
        };
        match state {
            SessionState::Disconnected => {
                disconnected_at.get_or_insert_with(Instant::now);
            }
            SessionState::SyncConnected | SessionState::ConnectedReadOnly => disconnected_at = None,
            SessionState::Expired => return shared.lose_all("the ZooKeeper session expired"),
            SessionState::Closed => return shared.lose_all("the ZooKeeper session was closed"),
            SessionState::AuthFailed => return shared.lose_all("ZooKeeper authentication failed"),
        }
    }
}
