//! [`Subscriber`]: ONE pub/sub connection per client and node, fanning release messages out to
//! the waiters of each lock. A release message carries the token of the next queued waiter, so
//! only that waiter is woken (an empty message — no queue — wakes every local waiter of the lock);
//! a holder's release also carries the fencing token it granted that waiter on this node
//! (`<member>\t<fence>`, `lua/release.lua`), which the waiter finds in [`Wake::take_grant`].
//! Channels are subscribed while someone waits on them and unsubscribed when the last one
//! leaves. If the connection dies, waiters still re-check on their heartbeat and the next
//! registration opens a new one.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

type Channels = Arc<Mutex<HashMap<String, HashMap<String, Arc<Wake>>>>>;

/// One waiter's wake-up, and the lock a release handed it, if one did.
#[derive(Default)]
pub(crate) struct Wake {
    pub notify: Notify,
    /// The fencing token of a direct grant (0: none yet).
    granted: AtomicU64,
}

impl Wake {
    /// The fencing token of the grant a release handed this waiter since the last call, if any:
    /// the lock key then holds the waiter's token, with the rest of its queue place as lease.
    pub(crate) fn take_grant(&self) -> Option<u64> {
        Some(self.granted.swap(0, Ordering::SeqCst)).filter(|&f| f > 0)
    }
}

/// Splits a release message into the waiter it names and the fencing token it granted that
/// waiter, if any: `<member>\t<fence>` (a wake-up is the bare member, which may hold spaces —
/// `<token>\n<identity>` — but never a tab: identities have no control characters).
fn parse(message: &str) -> (&str, Option<u64>) {
    match message.split_once('\t') {
        Some((member, fence)) => match fence.parse() {
            Ok(fence) => (member, Some(fence)),
            Err(_) => (message, None),
        },
        None => (message, None),
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
        let empty = {
            let mut ch = self.sub.channels.lock().unwrap_or_else(|p| p.into_inner());
            let empty = match ch.get_mut(&self.channel) {
                Some(w) => {
                    w.remove(&self.token);
                    w.is_empty()
                }
                None => false,
            };
            if empty {
                ch.remove(&self.channel);
            }
            empty
        };
        if empty {
            if let Ok(h) = tokio::runtime::Handle::try_current() {
                let (sub, channel) = (Arc::clone(&self.sub), self.channel.clone());
                h.spawn(async move { sub.unsubscribe_if_idle(&channel).await });
            }
        }
    }
}

impl Subscriber {
    /// A subscriber for the server at `server` (`host:port`); connects on first use.
    pub(crate) fn new(server: &str) -> Self {
        Subscriber {
            server: server.to_owned(),
            channels: Channels::default(),
            live: tokio::sync::Mutex::new(None),
        }
    }

    /// Registers `token` as a waiter on `channel`, subscribing first if needed. Errors are
    /// swallowed into "no push wake-ups" (the waiter's heartbeat still re-checks).
    pub(crate) async fn wait_on(
        self: &Arc<Self>,
        client: &redis::Client,
        channel: &str,
        token: &str,
    ) -> Waiting {
        let wake = Arc::new(Wake::default());
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(channel.to_owned())
            .or_default()
            .insert(token.to_owned(), Arc::clone(&wake));
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
        if let Some(l) = live.as_mut() {
            if !l.subscribed.contains(channel) {
                match l.sink.subscribe(channel).await {
                    Ok(()) => {
                        l.subscribed.insert(channel.to_owned());
                    }
                    Err(e) => {
                        tracing::warn!(server = %self.server, error = %e, "redis SUBSCRIBE failed; waiters fall back to their heartbeat")
                    }
                }
            }
        }
        drop(live);
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
                let ch = channels.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(waiters) = ch.get(msg.get_channel_name()) {
                    // The named head is woken (with its grant, if the release handed it the
                    // lock); a message naming nobody (an empty queue) wakes every local waiter;
                    // one naming another client's waiter wakes nobody here (a departed head's
                    // entry expires and the heartbeat re-checks).
                    match waiters.get(next) {
                        Some(w) => {
                            if let Some(fence) = granted {
                                w.granted.store(fence, Ordering::SeqCst);
                            }
                            w.notify.notify_one();
                        }
                        None if next.is_empty() => {
                            waiters.values().for_each(|w| w.notify.notify_one());
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

    async fn unsubscribe_if_idle(&self, channel: &str) {
        let mut live = self.live.lock().await;
        let idle = !self
            .channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(channel);
        if idle {
            if let Some(l) = live.as_mut() {
                l.subscribed.remove(channel);
                let _ = l.sink.unsubscribe(channel).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn messages_name_a_waiter_and_maybe_its_grant() {
        assert_eq!(
            parse("ab12\t1795409969355928"),
            ("ab12", Some(1795409969355928))
        );
        assert_eq!(parse("ab12"), ("ab12", None));
        assert_eq!(parse(""), ("", None));
        // A member carrying a holder identity with spaces (and digits at its end).
        assert_eq!(parse("ab12\nnode 7"), ("ab12\nnode 7", None));
        assert_eq!(parse("ab12\nnode 7\t42"), ("ab12\nnode 7", Some(42)));
    }
}
