//! PostgreSQL release notifications: ONE `LISTEN` connection per database and channel, shared
//! by every client of the process on one runtime ([`Wakeups::shared`]) and fanned out to the
//! waiters of each lock name: a release's notification reaches a process once, not once per
//! client. Started on the first wait; stopped when the last client sharing it is dropped.
//!
//! A release's payload names the head of the name's queue across processes (`<member>/<name>`,
//! the member empty when nobody is queued; `statements/postgres.rs`), so only that waiter
//! tries at once: every waiting process trying after every release cost ~13 statements per
//! handoff with 8 processes, of which one could win. A payload without a member prefix (a
//! client of an older version) wakes every waiter of the name, as before.
//!
//! And only the head's process hears it: a member made by [`Wakeups::member`] starts with the
//! listener's tag (16 hex digits, then the 32 of the acquisition's own token), and a release
//! whose head has such a member notifies `distlock_w_<tag>`, which only that listener listens
//! on, instead of the table's channel, which every waiting process listens on (8 processes
//! each woke for every release, to find it named another). The table's channel still carries
//! the rest: "nobody queued", and every release by a client of an older version (which notifies
//! only there, naming heads of any kind); a head of an older version (a 32-digit member) is
//! notified there too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lock_core::backend::{owner_token, PerRuntime, Share};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

type Waiters = Arc<Mutex<HashMap<String, (Arc<Signal>, usize)>>>;

/// One name's wake-up: the waiters' notify and the queue head the last release named.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    notify: Notify,
    head: Mutex<String>,
}

impl Signal {
    /// Completes at the next release notification of the name (see [`Notify::notified`]).
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    /// Whether the last release named another waiter than `member` as the queue's head (then
    /// `member` is not next and need not look).
    pub(crate) fn for_other(&self, member: &str) -> bool {
        let head = self.head.lock().unwrap_or_else(|p| p.into_inner());
        !head.is_empty() && *head != member
    }

    fn wake(&self, head: &str) {
        head.clone_into(&mut self.head.lock().unwrap_or_else(|p| p.into_inner()));
        self.notify.notify_waiters();
    }
}

/// Splits a release payload into the queue head named (empty: any) and the lock name.
fn parse(payload: &str) -> (&str, &str) {
    match payload.split_once('/') {
        Some((head, name))
            if head.is_empty()
                || ((head.len() == 32 || head.len() == TAGGED_MEMBER)
                    && head.bytes().all(|b| b.is_ascii_hexdigit())) =>
        {
            (head, name)
        }
        _ => ("", payload),
    }
}

/// How many hex digits a listener's tag has (the start of its waiters' members).
pub(crate) const TAG_LEN: usize = 16;

/// How long a member made by [`Wakeups::member`] is: the tag ([`TAG_LEN`]) and a token's 32
/// (`statements/postgres.rs` tells a tagged member by this length).
pub(crate) const TAGGED_MEMBER: usize = TAG_LEN + 32;

/// The start of the channel that only one listener listens on: its tag follows.
pub(crate) const TAGGED_CHANNEL: &str = "distlock_w_";

/// The channel that only the listener tagged `tag` listens on.
pub(crate) fn tagged_channel(tag: &str) -> String {
    format!("{TAGGED_CHANNEL}{tag}")
}

/// Wake-ups by lock name.
#[derive(Debug)]
pub(crate) struct Wakeups {
    waiters: Waiters,
    listener: Mutex<Option<JoinHandle<()>>>,
    /// 16 random hex digits naming this listener's own channel ([`tagged_channel`]).
    tag: String,
}

impl Default for Wakeups {
    fn default() -> Self {
        Wakeups {
            waiters: Waiters::default(),
            listener: Mutex::default(),
            tag: owner_token()[..TAG_LEN].to_owned(),
        }
    }
}

/// A waiter's registration; deregisters on drop.
pub(crate) struct Registration {
    waiters: Waiters,
    name: String,
    pub signal: Arc<Signal>,
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

/// The wake-ups in use in this process, by database URL and channel.
static IN_USE: PerRuntime<Wakeups> = PerRuntime::new();

impl Wakeups {
    /// The wake-ups every client of this process shares for `channel` of the database at `url`
    /// on the current runtime, held by the client's `share` ([`Share`]: the listener runs on
    /// the runtime of the clients that use it; outside a runtime, wake-ups of its own).
    pub(crate) fn shared(share: &Share<Wakeups>, url: &str, channel: &str) -> Arc<Wakeups> {
        share.get(&IN_USE, &format!("{channel} {url}"), Wakeups::default)
    }

    /// A queue member for one acquisition whose release notifications come to this listener
    /// alone: the tag, then a fresh token ([`TAGGED_MEMBER`] hex digits).
    pub(crate) fn member(&self) -> String {
        format!("{}{}", self.tag, owner_token())
    }

    /// Registers interest in `name`'s release.
    pub(crate) fn register(&self, name: &str) -> Registration {
        let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        let entry = w
            .entry(name.to_owned())
            .or_insert_with(|| (Arc::new(Signal::default()), 0));
        entry.1 += 1;
        Registration {
            waiters: Arc::clone(&self.waiters),
            name: name.to_owned(),
            signal: Arc::clone(&entry.0),
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
        let (url, channels, label, waiters) = (
            url.to_owned(),
            [channel.to_owned(), tagged_channel(&self.tag)],
            label.to_owned(),
            Arc::clone(&self.waiters),
        );
        *slot = Some(tokio::spawn(async move {
            // Bounded retry pace: a broken listener is retried once a second for as long as a
            // client shares it; waiters keep a slow safety poll meanwhile.
            loop {
                if let Err(e) = listen(&url, &channels, &waiters).await {
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
async fn listen(url: &str, channels: &[String], waiters: &Waiters) -> Result<(), sqlx::Error> {
    let mut listener = sqlx::postgres::PgListener::connect(url).await?;
    listener
        .listen_all(channels.iter().map(String::as_str))
        .await?;
    loop {
        let n = listener.recv().await?;
        let (head, name) = parse(n.payload());
        let signal = waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .map(|(s, _)| Arc::clone(s));
        if let Some(signal) = signal {
            signal.wake(head);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn payloads_name_the_head_and_the_lock() {
        let m = "0123456789abcdef0123456789abcdef";
        assert_eq!(parse(&format!("{m}/a/b")), (m, "a/b"));
        assert_eq!(parse("/a/b"), ("", "a/b"));
        // A member tagged with its listener's channel.
        let tagged = format!("fedcba9876543210{m}");
        assert_eq!(parse(&format!("{tagged}/a")), (tagged.as_str(), "a"));
        // An older client's payload is the bare name, slashes and all.
        assert_eq!(parse("jobs/nightly"), ("", "jobs/nightly"));
        assert_eq!(parse("plain"), ("", "plain"));
    }
}
