//! [`Session`]: one ZooKeeper session and the guards that live on it.
//!
//! A watcher task follows the session state. When the session expires (or is closed), every
//! guard of that session is reported lost at once. While disconnected, guards stay held — the
//! session may survive a server failover — but only for a quarter of the session timeout: the
//! ensemble expires a session one session timeout after the last heartbeat it received, the
//! client only notices the outage some time after that heartbeat (measured here: ~0.55 s of a
//! 2 s session), so waiting longer would let another client take the lock while this guard
//! still looks valid (the chaos partition scenario showed exactly that with a full timeout).
//! The session is then retired (later acquisitions open a new one) and closed on the ensemble as
//! soon as it can be reached, so nothing of it — a lost guard's node, a waiter's — lives on with
//! a client that reconnects.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::backend::LostSignal;
use distlock_core::LockError;
use futures::future::{self, BoxFuture, FutureExt};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use zookeeper_client::{Client, Error, SessionInfo, SessionState};

use crate::config::ZkConfig;
use crate::error::map;

/// Pause after closing a retired session before checking that the close arrived.
const CLOSE_CHECK: Duration = Duration::from_millis(50);
/// Pause between attempts to close a retired session while the ensemble is unreachable.
const CLOSE_RETRY: Duration = Duration::from_millis(200);

#[derive(Default)]
struct Shared {
    /// The guards' lost signals, and why the session died once it has (under one lock, so a
    /// guard registered while the session dies is either in the list `lose_all` takes or sees
    /// the reason: never neither).
    state: Mutex<GuardList>,
    dead: AtomicBool,
    /// Test seam: runs in `register` between finding the session alive and recording the
    /// guard, where a racing `lose_all` used to slip in.
    #[cfg(test)]
    between: Option<Box<dyn Fn() + Send + Sync>>,
}

#[derive(Default)]
struct GuardList {
    guards: Vec<LostSignal>,
    died: Option<String>,
}

impl Shared {
    /// Marks the session dead and every guard of it lost.
    fn lose_all(&self, why: &str) {
        let guards = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            self.dead.store(true, Ordering::SeqCst);
            st.died.get_or_insert_with(|| why.to_owned());
            std::mem::take(&mut st.guards)
        };
        for g in guards {
            g.mark_lost(why);
        }
    }

    fn register(&self, lost: &LostSignal) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = st.died.clone() {
            drop(st);
            lost.mark_lost(why);
            return;
        }
        #[cfg(test)]
        if let Some(f) = &self.between {
            f();
        }
        st.guards.retain(|s| !s.is_lost());
        st.guards.push(lost.clone());
    }
}

/// One session: the client plus the lost signals of its guards.
pub(crate) struct Session {
    pub client: Client,
    shared: Arc<Shared>,
    watcher: JoinHandle<()>,
    /// The latest `sync` through the leader, shared by the guards that renew meanwhile.
    leader_check: Mutex<Option<LeaderCheck>>,
}

/// A `sync` sent at `sent`; every guard of the session that joins it shares its answer.
struct LeaderCheck {
    sent: Instant,
    answer: future::Shared<BoxFuture<'static, Result<(), Error>>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// Pause between passes over the servers while none takes a session.
const CONNECT_RETRY: Duration = Duration::from_millis(200);

/// Connects to `target`, passing over its servers again until `within` has passed: during an
/// election (a paused or dead leader) every server turns clients away for seconds, and one
/// pass (`with_fail_eagerly`) would give up long before the caller's connect timeout.
async fn connect_within(
    connector: zookeeper_client::Connector,
    cfg: &ZkConfig,
    within: Duration,
) -> Result<Client, Error> {
    let until = Instant::now() + within;
    let target = cfg.connect_string();
    loop {
        match crate::dial::dial(connector.clone(), cfg).await {
            Err(e @ (Error::NoHosts | Error::ConnectionLoss | Error::Timeout))
                if Instant::now() + CONNECT_RETRY < until =>
            {
                tracing::debug!(%target, error = %e, "no ZooKeeper server took a session; trying them again");
                tokio::time::sleep(CONNECT_RETRY).await;
            }
            other => return other,
        }
    }
}

impl Session {
    /// Opens a session, passing over the servers for up to `within` (at most the connect
    /// timeout; zero: one pass); checks that the chroot exists.
    pub(crate) async fn open(
        cfg: &ZkConfig,
        label: &str,
        within: Duration,
    ) -> Result<Arc<Session>, LockError> {
        let connector = crate::dial::connector(cfg)?;
        let client = match tokio::time::timeout(
            cfg.connect_timeout + Duration::from_secs(1),
            connect_within(connector, cfg, within.min(cfg.connect_timeout)),
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
        tracing::debug!(backend = %label, session = %client.session_id(), timeout = ?client.session_timeout(), "opened a ZooKeeper session");
        let shared = Arc::new(Shared::default());
        let watcher = tokio::spawn(watch(
            client.clone(),
            Arc::clone(&shared),
            cfg.clone(),
            label.to_owned(),
        ));
        Ok(Arc::new(Session {
            client,
            shared,
            watcher,
            leader_check: Mutex::new(None),
        }))
    }

    /// Confirms the session through the leader with a `sync` (answered only once the leader has
    /// seen it) and returns when that `sync` was sent: the session is vouched for from then on
    /// (see `validity::leader_validity`). A `sync` sent at most `join_within` ago, answered or
    /// not, is joined instead of sending another, so a session's guards cost one `sync` per
    /// `join_within` however many there are (1,000 guards each sending their own overloaded the
    /// session, and guards were lost).
    pub(crate) async fn confirm(&self, join_within: Duration) -> Result<Instant, Error> {
        let now = Instant::now();
        let (sent, answer) = {
            let mut slot = self.leader_check.lock().unwrap_or_else(|p| p.into_inner());
            match slot.as_ref() {
                Some(c) if now.saturating_duration_since(c.sent) <= join_within => {
                    (c.sent, c.answer.clone())
                }
                _ => {
                    let client = self.client.clone();
                    let answer = async move { client.sync("/").await }.boxed().shared();
                    *slot = Some(LeaderCheck {
                        sent: now,
                        answer: answer.clone(),
                    });
                    (now, answer)
                }
            }
        };
        answer.await.map(|()| sent)
    }

    /// Whether the session is gone (expired, closed, or disconnected past its timeout).
    pub(crate) fn is_dead(&self) -> bool {
        self.shared.dead.load(Ordering::SeqCst)
    }

    /// Tracks a guard's lost signal; it fires if the session dies (at once if it already has).
    pub(crate) fn register(&self, lost: &LostSignal) {
        self.shared.register(lost);
    }
}

async fn watch(client: Client, shared: Arc<Shared>, cfg: ZkConfig, label: String) {
    let session_timeout = cfg.session_timeout;
    let session = client.session_id();
    let mut states = client.state_watcher();
    let mut disconnected_at: Option<Instant> = None;
    loop {
        let state = match disconnected_at {
            Some(since) => tokio::select! {
                s = states.changed() => s,
                _ = tokio::time::sleep_until(since + session_timeout / 4) => {
                    shared.lose_all("disconnected from ZooKeeper for a quarter of the session timeout; the ensemble may expire the session before this client can tell");
                    tracing::warn!(backend = %label, %session, disconnected_for = ?since.elapsed(), "ZooKeeper session retired: disconnected for a quarter of its timeout, so its guards are lost; the next acquisition opens a new session");
                    let info = client.session().clone();
                    drop(client);
                    return close_retired(&cfg, info, &label).await;
                }
            },
            None => states.changed().await,
        };
        let why = match state {
            SessionState::Disconnected => {
                tracing::debug!(backend = %label, %session, "disconnected from ZooKeeper; guards stay held while the client reconnects (up to a quarter of the session timeout)");
                disconnected_at.get_or_insert_with(Instant::now);
                continue;
            }
            SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                if let Some(since) = disconnected_at.take() {
                    tracing::debug!(backend = %label, %session, state = ?state, after = ?since.elapsed(), "reconnected to ZooKeeper");
                }
                continue;
            }
            SessionState::Expired => "the ZooKeeper session expired",
            SessionState::Closed => "the ZooKeeper session was closed",
            SessionState::AuthFailed => "ZooKeeper authentication failed",
        };
        shared.lose_all(why);
        if state == SessionState::Closed {
            tracing::debug!(backend = %label, %session, "{why}; its guards are lost");
        } else {
            tracing::warn!(backend = %label, %session, "{why}; every guard of the session is lost");
        }
        return;
    }
}

/// Ends a session retired after a long disconnection, so that its nodes (a lost guard's, a
/// waiter's) go as soon as the ensemble is reachable again, instead of living on with the
/// reconnected client until the process exits (issue 14).
///
/// zookeeper-client closes a session only when its last `Client` is dropped, and guards and
/// waiters still hold clones: so a second client attaches to the same session (the server
/// drops the old connection) and is dropped, which closes it — unless the old client, still
/// reconnecting, took the session back first and the close was lost with the dropped
/// connection (a test saw the session live on for 6 s). So it is tried until an attempt to
/// attach finds the session closed or expired on the ensemble, for at most twice the session
/// timeout plus one
/// connect timeout: by then the ensemble has expired the session (the old client gives up
/// reconnecting after 7/5 of it).
async fn close_retired(cfg: &ZkConfig, info: SessionInfo, label: &str) {
    let until = Instant::now() + cfg.session_timeout * 2 + cfg.connect_timeout;
    let connector = match crate::dial::connector(cfg) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(backend = %label, error = %e, "cannot close a retired ZooKeeper session (its TLS files?); the ensemble expires it");
            return;
        }
    };
    while Instant::now() < until {
        let attempt = crate::dial::dial(connector.clone().with_session(info.clone()), cfg);
        match tokio::time::timeout_at(until, attempt).await {
            Ok(Ok(closer)) => {
                // Dropping the last clone closes the session — unless the old client
                // reconnected to it in between and the server dropped this connection, so
                // the close never arrived. The next attempt tells: the session expired
                // (closed) on the ensemble, or it attaches and closes again.
                let mut states = closer.state_watcher();
                drop(closer);
                let closed = async { while !states.changed().await.is_terminated() {} };
                let _ = tokio::time::timeout(cfg.connect_timeout, closed).await;
                let left = until.saturating_duration_since(Instant::now());
                tokio::time::sleep(CLOSE_CHECK.min(left)).await;
            }
            Ok(Err(Error::SessionExpired)) => {
                tracing::debug!(backend = %label, session = %info.id(), "a retired ZooKeeper session is closed (or expired) on the ensemble");
                return;
            }
            Err(_) => {
                tracing::debug!(backend = %label, session = %info.id(), "gave up closing a retired ZooKeeper session; the ensemble has expired it by now");
                return;
            }
            Ok(Err(_)) => {
                let left = until.saturating_duration_since(Instant::now());
                tokio::time::sleep(CLOSE_RETRY.min(left)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// A guard registered while its session dies is reported lost (issue 14: one registered
    /// just after `lose_all` took the list stayed held forever). The seam runs `lose_all` on
    /// another thread at the worst moment and gives it 300 ms to finish.
    #[test]
    fn registration_racing_session_death_is_lost() {
        let shared = Arc::new(std::sync::OnceLock::<Arc<Shared>>::new());
        let killer = Arc::new(Mutex::new(None));
        let seam = {
            let (shared, killer) = (Arc::clone(&shared), Arc::clone(&killer));
            move || {
                let Some(s) = shared.get().cloned() else {
                    return;
                };
                let (done_tx, done_rx) = mpsc::channel();
                let t = std::thread::spawn(move || {
                    s.lose_all("the ZooKeeper session expired");
                    let _ = done_tx.send(());
                });
                let _ = done_rx.recv_timeout(Duration::from_millis(300));
                *killer.lock().unwrap() = Some(t);
            }
        };
        let s = Arc::new(Shared {
            between: Some(Box::new(seam)),
            ..Default::default()
        });
        assert!(shared.set(Arc::clone(&s)).is_ok());
        let lost = LostSignal::new();
        s.register(&lost);
        let t = killer.lock().unwrap().take().expect("the seam ran");
        t.join().unwrap();
        assert!(s.dead.load(Ordering::SeqCst));
        assert!(
            lost.is_lost(),
            "a guard registered while the session died is still held"
        );
        // Registered after the death: lost at once, with the reason.
        let late = LostSignal::new();
        s.register(&late);
        assert_eq!(
            late.reason().as_deref(),
            Some("the ZooKeeper session expired")
        );
    }
}
