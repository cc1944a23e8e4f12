//! [`Subscriber`]: ONE pub/sub connection per node, shared by every client of the process on
//! one runtime ([`Subscriber::shared`]), fanning release messages out to the waiters of each
//! lock. A release message carries the token of the next queued waiter, so only that waiter is
//! woken (an empty message — no queue — wakes every local waiter of the lock); a holder's
//! release also carries the fencing token it granted that waiter on this node (`<member>\t<fence>`,
//! `lua/release.lua`), which the waiter finds in [`Wake::take_grant`].
//! Channels are subscribed while someone waits on them and for [`LINGER`] after the last one
//! left: a waiter that comes back within it joins the live subscription before it looks at the
//! lock ([`Subscriber::join_if_subscribed`]), so it needs no `SUBSCRIBE` and no second look
//! (`tests/subscriptions.rs`). If the connection dies, waiters still re-check on their heartbeat
//! and the next registration opens a new one.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::backend::{PerRuntime, Share};
use futures::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How long a channel stays subscribed after its last local waiter left.
pub(crate) const LINGER: Duration = Duration::from_secs(1);

/// Who waits on which channel, and which channels nobody waits on any more.
#[derive(Default)]
struct Registry {
    /// Per channel, its local waiters by queue member.
    waiting: HashMap<String, HashMap<String, Arc<Wake>>>,
    /// Channels whose last waiter left, and when; each has a linger task that unsubscribes it
    /// once it has stayed idle for [`LINGER`].
    idle: HashMap<String, Instant>,
}

type Channels = Arc<Mutex<Registry>>;

/// A lock a release handed a waiter on one node (`lua/release.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    /// Its fencing token.
    pub fence: u64,
    /// The release it belongs to (Redlock; `None` on a single instance).
    pub release: Option<u64>,
}

/// One waiter's wake-up, and the lock a release handed it, if one did.
#[derive(Default)]
pub(crate) struct Wake {
    pub notify: Notify,
    /// The last grant a release handed this waiter, not yet taken.
    granted: Mutex<Option<Grant>>,
    /// How many messages woke this waiter without a grant (one naming it, or an empty one):
    /// each says the lock is free on that node with nobody ahead of it, so a round would take
    /// that node now.
    plain: AtomicU64,
}

impl Wake {
    /// The grant a release handed this waiter since the last call, if any: the lock key then
    /// holds the waiter's token, with the rest of its queue place as lease.
    pub(crate) fn take_grant(&self) -> Option<Grant> {
        self.granted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// How many wake-ups without a grant reached this waiter so far.
    pub(crate) fn plain_wakeups(&self) -> u64 {
        self.plain.load(Ordering::SeqCst)
    }

    fn wake_plain(&self) {
        self.plain.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_one();
    }
}

/// Splits a release message into the waiter it names and the grant it handed that waiter, if
/// any: `<member>\t<fence>`, or `<member>\t<fence>\t<release id>` from Redlock (a wake-up is
/// the bare member, which may hold spaces — `<token>\n<identity>` — but never a tab:
/// identities have no control characters).
fn parse(message: &str) -> (&str, Option<Grant>) {
    let Some((member, rest)) = message.split_once('\t') else {
        return (message, None);
    };
    let (fence, release) = match rest.split_once('\t') {
        Some((fence, release)) => match release.parse() {
            Ok(release) => (fence, Some(release)),
            Err(_) => return (message, None),
        },
        None => (rest, None),
    };
    match fence.parse() {
        Ok(fence) => (member, Some(Grant { fence, release })),
        Err(_) => (message, None),
    }
}

struct Live {
    sink: PubSubSink,
    reader: JoinHandle<()>,
    /// The channels the server has confirmed this connection is subscribed to.
    subscribed: HashSet<String>,
}

/// One pub/sub connection, opened on first use.
pub(crate) struct Subscriber {
    /// The server's `host:port`, for logs.
    server: String,
    channels: Channels,
    /// Serializes subscribe/unsubscribe so a late unsubscribe never drops a new waiter's channel.
    live: tokio::sync::Mutex<Option<Live>>,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        if let Ok(mut live) = self.live.try_lock() {
            if let Some(l) = live.take() {
                l.reader.abort();
            }
        }
    }
}

/// A waiter's registration; leaves the channel when dropped.
pub(crate) struct Waiting {
    pub wake: Arc<Wake>,
    channel: String,
    token: String,
    sub: Arc<Subscriber>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let linger = {
            let mut reg = self.sub.channels.lock().unwrap_or_else(|p| p.into_inner());
            let empty = match reg.waiting.get_mut(&self.channel) {
                Some(w) => {
                    w.remove(&self.token);
                    w.is_empty()
                }
                None => false,
            };
            // The first channel to go idle starts a linger task; a later one only moves the
            // idle time on (the task sees it).
            empty && {
                reg.waiting.remove(&self.channel);
                reg.idle
                    .insert(self.channel.clone(), Instant::now())
                    .is_none()
            }
        };
        if linger {
            if let Ok(h) = tokio::runtime::Handle::try_current() {
                let (sub, channel) = (Arc::clone(&self.sub), self.channel.clone());
                h.spawn(async move { sub.linger(&channel).await });
            }
        }
    }
}

/// The subscribers in use in this process, by connection URL (see [`Subscriber::shared`]).
static IN_USE: PerRuntime<Subscriber> = PerRuntime::new();

impl Subscriber {
    /// The subscriber every client of this process shares for the server at `url` (the whole
    /// connection URL, credentials included) on the current runtime, made (`server`:
    /// `host:port`, for logs) if none is in use, and held by the client's `share`: a release
    /// message then reaches a process once per server however many clients wait there, not
    /// once per client (8 clients of one process each read, parsed and dropped every message
    /// meant for one of them). Per runtime ([`Share`]): the connection's tasks run on the
    /// runtime of the clients that use it; outside a runtime, a subscriber of its own.
    pub(crate) fn shared(share: &Share<Subscriber>, url: &str, server: &str) -> Arc<Self> {
        share.get(&IN_USE, url, || Subscriber::new(server))
    }

    /// A subscriber for the server at `server` (`host:port`); connects on first use.
    pub(crate) fn new(server: &str) -> Self {
        Subscriber {
            server: server.to_owned(),
            channels: Channels::default(),
            live: tokio::sync::Mutex::new(None),
        }
    }

    /// Registers `token` as a waiter on `channel`, subscribing first if needed, for at most
    /// `bound` (a stalled server must not hold the waiter past its wait). Errors and a bound
    /// that ran out are swallowed into "no push wake-ups" (the waiter's heartbeat still
    /// re-checks, and the next waiter subscribes again).
    pub(crate) async fn wait_on(
        self: &Arc<Self>,
        client: &redis::Client,
        channel: &str,
        token: &str,
        bound: Duration,
    ) -> Waiting {
        let waiting = self.join(channel, token);
        // Not subscribed in time: the waiter's heartbeat still looks (logged above).
        let _ = self
            .subscription(client.clone(), channel.to_owned(), bound)
            .await;
        waiting
    }

    /// Registers `token` as a waiter on `channel`; wake-ups come once the connection is
    /// subscribed to it ([`Subscriber::subscription`]).
    pub(crate) fn join(self: &Arc<Self>, channel: &str, token: &str) -> Waiting {
        let wake = self.register(channel, token);
        self.waiting(wake, channel, token)
    }

    /// Subscribes to `channel` unless subscribed already, for at most `bound`; an owned
    /// future, so a subscription a caller stops waiting for can go on in a task of its own.
    /// `Ok(subscribed)`, or `Err` when the server did not answer in time.
    pub(crate) fn subscription(
        self: &Arc<Self>,
        client: redis::Client,
        channel: String,
        bound: Duration,
    ) -> impl std::future::Future<Output = Result<bool, tokio::time::error::Elapsed>> + Send + 'static
    {
        let me = Arc::clone(self);
        async move {
            let answered = tokio::time::timeout(bound, me.subscribe(&client, &channel)).await;
            if answered.is_err() {
                tracing::warn!(server = %me.server, ?bound, "redis SUBSCRIBE not confirmed in time; waiters fall back to their heartbeat");
            }
            answered
        }
    }

    /// Whether the connection is subscribed to `channel` now.
    async fn subscribe(&self, client: &redis::Client, channel: &str) -> bool {
        // Every waiter, not only the channel's first, returns only once the server confirmed
        // the subscription: a waiter that looked at the lock again while another waiter's
        // SUBSCRIBE was still on its way could miss the release in between and sleep until
        // its heartbeat (tests/wakeups.rs).
        let mut live = self.live.lock().await;
        if live.as_ref().is_none_or(|l| l.reader.is_finished()) {
            if live.is_some() {
                tracing::debug!(server = %self.server, "redis pub/sub connection was lost; reconnecting");
            }
            *live = self.open(client).await;
        }
        let Some(l) = live.as_mut() else {
            return false;
        };
        if !l.subscribed.contains(channel) {
            match l.sink.subscribe(channel).await {
                Ok(()) => {
                    l.subscribed.insert(channel.to_owned());
                }
                Err(e) => {
                    tracing::warn!(server = %self.server, error = %e, "redis SUBSCRIBE failed; waiters fall back to their heartbeat");
                    return false;
                }
            }
        }
        true
    }

    /// Registers `token` as a waiter on `channel` only if this connection is subscribed to it
    /// now (a channel with waiters, or one lingering after its last waiter left) and free to
    /// look at this instant; `None` otherwise, with nothing registered (the caller then
    /// subscribes after its first look, [`Subscriber::wait_on`]). Registered under the
    /// connection's lock, so the linger cannot unsubscribe the channel in between: every
    /// release message from here on reaches the waiter.
    pub(crate) fn join_if_subscribed(
        self: &Arc<Self>,
        channel: &str,
        token: &str,
    ) -> Option<Waiting> {
        let live = self.live.try_lock().ok()?;
        let l = live.as_ref()?;
        if l.reader.is_finished() || !l.subscribed.contains(channel) {
            return None;
        }
        let wake = self.register(channel, token);
        drop(live);
        Some(self.waiting(wake, channel, token))
    }

    /// Adds `token`'s wake-up to `channel`'s waiters.
    fn register(&self, channel: &str, token: &str) -> Arc<Wake> {
        let wake = Arc::new(Wake::default());
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .waiting
            .entry(channel.to_owned())
            .or_default()
            .insert(token.to_owned(), Arc::clone(&wake));
        wake
    }

    fn waiting(self: &Arc<Self>, wake: Arc<Wake>, channel: &str, token: &str) -> Waiting {
        Waiting {
            wake,
            channel: channel.to_owned(),
            token: token.to_owned(),
            sub: Arc::clone(self),
        }
    }

    async fn open(&self, client: &redis::Client) -> Option<Live> {
        let pubsub = match client.get_async_pubsub().await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(server = %self.server, error = %e, "redis pub/sub connection failed; waiters fall back to their heartbeat");
                return None;
            }
        };
        let (sink, mut stream) = pubsub.split();
        let channels = Arc::clone(&self.channels);
        let server = self.server.clone();
        let reader = tokio::spawn(async move {
            while let Some(msg) = stream.next().await {
                let message: String = msg.get_payload().unwrap_or_default();
                let (next, granted) = parse(&message);
                let reg = channels.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(waiters) = reg.waiting.get(msg.get_channel_name()) {
                    // The named head is woken (with its grant, if the release handed it the
                    // lock); a message naming nobody (an empty queue) wakes every local waiter;
                    // one naming another client's waiter wakes nobody here (a departed head's
                    // entry expires and the heartbeat re-checks).
                    match waiters.get(next) {
                        Some(w) => match granted {
                            Some(grant) => {
                                *w.granted.lock().unwrap_or_else(|p| p.into_inner()) = Some(grant);
                                w.notify.notify_one();
                            }
                            None => w.wake_plain(),
                        },
                        None if next.is_empty() => {
                            waiters.values().for_each(|w| w.wake_plain());
                        }
                        None => {}
                    }
                }
            }
            tracing::debug!(server = %server, "redis pub/sub connection closed; waiters re-check on their heartbeat until the next one reconnects");
        });
        // Re-subscribe everything waited on (after a reconnect).
        let mut live = Live {
            sink,
            reader,
            subscribed: HashSet::new(),
        };
        let names: Vec<String> = self
            .channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .waiting
            .keys()
            .cloned()
            .collect();
        for c in names {
            if live.sink.subscribe(&c).await.is_ok() {
                live.subscribed.insert(c);
            }
        }
        Some(live)
    }

    /// The linger task of `channel`, started when its last waiter left: unsubscribes it once
    /// nobody has waited there for [`LINGER`]; ends at once if a waiter is back (the next one to
    /// leave starts another).
    async fn linger(&self, channel: &str) {
        let mut since = match self.idle_since(channel) {
            Some(t) => t,
            None => return,
        };
        loop {
            tokio::time::sleep_until(since + LINGER).await;
            // Under the connection's lock, so no waiter joins the subscription in between.
            let mut live = self.live.lock().await;
            {
                let mut reg = self.channels.lock().unwrap_or_else(|p| p.into_inner());
                let busy = reg.waiting.contains_key(channel);
                match reg.idle.get(channel).copied() {
                    None => return,
                    Some(_) if busy => {
                        reg.idle.remove(channel);
                        return;
                    }
                    // Idle again since then, after a waiter came and went.
                    Some(t) if t != since => {
                        since = t;
                        continue;
                    }
                    Some(_) => {
                        reg.idle.remove(channel);
                    }
                }
            }
            if let Some(l) = live.as_mut() {
                l.subscribed.remove(channel);
                // A stalled server must not keep the connection's lock (every waiter's
                // subscription waits on it): no answer in time, and the connection is dropped.
                let answered = tokio::time::timeout(LINGER, l.sink.unsubscribe(channel)).await;
                if answered.is_err() {
                    tracing::debug!(server = %self.server, "redis UNSUBSCRIBE not answered; dropping the pub/sub connection");
                    if let Some(old) = live.take() {
                        old.reader.abort();
                    }
                }
            }
            return;
        }
    }

    fn idle_since(&self, channel: &str) -> Option<Instant> {
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .idle
            .get(channel)
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, Grant};

    #[test]
    fn messages_name_a_waiter_and_maybe_its_grant() {
        let grant = |fence, release| Some(Grant { fence, release });
        assert_eq!(
            parse("ab12\t1795409969355928"),
            ("ab12", grant(1795409969355928, None))
        );
        assert_eq!(parse("ab12\t7\t99"), ("ab12", grant(7, Some(99))));
        assert_eq!(parse("ab12"), ("ab12", None));
        assert_eq!(parse(""), ("", None));
        // A member carrying a holder identity with spaces (and digits at its end).
        assert_eq!(parse("ab12\nnode 7"), ("ab12\nnode 7", None));
        assert_eq!(parse("ab12\nnode 7\t42"), ("ab12\nnode 7", grant(42, None)));
        // Anything else after the member is no grant.
        assert_eq!(parse("ab12\tx"), ("ab12\tx", None));
        assert_eq!(parse("ab12\t7\tx"), ("ab12\t7\tx", None));
    }
}
