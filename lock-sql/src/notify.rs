//! PostgreSQL release notifications: ONE `LISTEN` connection per client, fanned out to the
//! waiters of each lock name. Started on the first wait; stopped when the client is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::task::JoinHandle;

type Waiters = Arc<Mutex<HashMap<String, (Arc<Notify>, usize)>>>;

/// Wake-ups by lock name.
#[derive(Debug, Default)]
pub(crate) struct Wakeups {
    waiters: Waiters,
    listener: Mutex<Option<JoinHandle<()>>>,
}

/// A waiter's registration; deregisters on drop.
pub(crate) struct Registration {
    waiters: Waiters,
    name: String,
    pub notify: Arc<Notify>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, count)) = w.get_mut(&self.name) {
            *count -= 1;
            if *count == 0 {
                w.remove(&self.name);
            }
        }
    }
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        if let Some(h) = self
            .listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            h.abort();
        }
    }
}

impl Wakeups {
    /// Registers interest in `name`'s release.
    pub(crate) fn register(&self, name: &str) -> Registration {
        let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        let entry = w
            .entry(name.to_owned())
            .or_insert_with(|| (Arc::new(Notify::new()), 0));
        entry.1 += 1;
        Registration {
            waiters: Arc::clone(&self.waiters),
            name: name.to_owned(),
            notify: Arc::clone(&entry.0),
        }
    }

    /// Starts the shared listener on `channel` once (PostgreSQL; without the `postgres`
    /// feature there is no PostgreSQL client to listen for). `label` names the backend in logs;
    /// the URL, which may hold a password, never appears in them.
    #[cfg(not(feature = "postgres"))]
    pub(crate) fn ensure_listener(&self, _url: &str, _channel: &str, _label: &str) {}

    /// Starts the shared listener on `channel` once (PostgreSQL). `label` names the backend in
    /// logs; the URL, which may hold a password, never appears in them.
    #[cfg(feature = "postgres")]
    pub(crate) fn ensure_listener(&self, url: &str, channel: &str, label: &str) {
        let mut slot = self.listener.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        let (url, channel, label, waiters) = (
            url.to_owned(),
            channel.to_owned(),
            label.to_owned(),
            Arc::clone(&self.waiters),
        );
        *slot = Some(tokio::spawn(async move {
            // Bounded retry pace: a broken listener is retried once a second for the life of
            // the client; waiters keep a slow safety poll meanwhile.
            loop {
                if let Err(e) = listen(&url, &channel, &waiters).await {
                    tracing::warn!(
                        backend = %label,
                        error = %e,
                        "the LISTEN connection for release notifications failed; waiters poll \
                         every second until it is back (retrying in 1 s)"
                    );
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }));
    }
}

#[cfg(feature = "postgres")]
async fn listen(url: &str, channel: &str, waiters: &Waiters) -> Result<(), sqlx::Error> {
    let mut listener = sqlx::postgres::PgListener::connect(url).await?;
    listener.listen(channel).await?;
    loop {
        let n = listener.recv().await?;
        let notify = waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(n.payload())
            .map(|(n, _)| Arc::clone(n));
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }
}
