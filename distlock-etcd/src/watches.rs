//! One watch stream per client, shared by every watch the client keeps: a held lock's own-key
//! watch and a waiter's predecessor watch are entries on it, not gRPC streams of their own.
//!
//! Why: etcd-client opens a gRPC stream per `watch` call, and every stream keeps buffers of its
//! own (tonic's 8 KiB decode and encode buffers, a channel of 100 requests): 10,000 held locks
//! cost 21 KiB of client memory each. etcd multiplexes any number of watches on one stream —
//! events carry their watch's id — and etcd's Go client shares one stream the same way.
//!
//! How: a task per stream sends the create and cancel requests and reads the answers. etcd
//! answers the create requests of one stream in the order they were sent (its receive loop
//! takes them one at a time and queues each `created` answer before reading the next request),
//! so the n-th `created` answer belongs to the n-th request; and etcd holds a watch's events
//! back until its `created` answer went out. A watch ends at the first deletion it sees (the
//! only event this crate waits for), at a cancel, or when its stream breaks; it then reports
//! once, and its entry is gone. A caller that drops its [`Watching`] cancels the watch.
//!
//! A watch created without a start revision sees every event after the revision its `created`
//! answer carries ([`Watching::start`]: etcd reads its revision `header`, then registers the
//! watch from `header + 1`) and is usually served at once, while a watch from an older revision
//! waits for etcd's catch-up loop, which runs only every 100 ms — with contenders changing the
//! range all the time, that made one handoff in ten wait ~100 ms. A watch without a start
//! revision lands in that loop too when a write commits between the member reading `header`
//! and registering the watch (a few in a thousand under contention); waiters read around it
//! (`crate::queue`).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use etcd_client::{
    Client, Error, EventType, WatchOptions, WatchRequestSender, WatchResponse, WatchResponseStream,
};
use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};

/// How a watch ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fired {
    /// A key it watched was deleted.
    Deleted,
    /// It ended without a deletion: cancelled by the member (no leader, a compacted start
    /// revision), or its stream broke. The caller looks at the store again.
    Ended,
}

/// A live watch on the shared stream. Dropping it cancels the watch.
pub(crate) struct Watching {
    id: i64,
    start: i64,
    fired: oneshot::Receiver<Fired>,
    stream: Shared,
    /// Made while the hub was deaf (tests only: [`WatchHub::set_deaf`]).
    deaf: bool,
}

impl Watching {
    /// Whether a linearizable read sent after the watch was confirmed, answered at revision
    /// `read_at`, proves this watch prompt: the member read `start`, then registered the watch;
    /// a later read still at `start` means no write came in between, so the watch was not
    /// filed for the catch-up loop. A deaf watch (tests) stands for a late one, which no read
    /// can prove prompt.
    pub fn proven_prompt_by(&self, read_at: i64) -> bool {
        !self.deaf && read_at == self.start
    }

    /// Made while the hub was deaf (tests only).
    pub fn deaf(&self) -> bool {
        self.deaf
    }

    /// The revision the watch started after: it sees every event of a later revision.
    pub fn start(&self) -> i64 {
        self.start
    }

    /// Whether the watch has ended already (a deletion or an end it has not reported yet is
    /// taken as ended).
    pub fn ended(&mut self) -> bool {
        !matches!(
            self.fired.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        )
    }

    /// Waits until the watch ends. Cancel safe; after it returned, it returns
    /// [`Fired::Ended`] at once.
    pub async fn fired(&mut self) -> Fired {
        (&mut self.fired).await.unwrap_or(Fired::Ended)
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        if self.stream.table().live.remove(&self.id).is_some() {
            let _ = self.stream.cmds.send(Cmd::Cancel(self.id));
        }
    }
}

/// The requests a stream's task sends for its callers.
enum Cmd {
    Create(Vec<u8>, WatchOptions),
    Cancel(i64),
}

/// A create request whose `created` answer has not come yet.
struct Pending {
    created: oneshot::Sender<Result<(i64, i64), String>>,
    fired: oneshot::Sender<Fired>,
}

/// What a stream's task and its callers share.
#[derive(Default)]
struct Table {
    /// Create requests in the order they were sent.
    pending: VecDeque<Pending>,
    /// Created watches by id.
    live: HashMap<i64, oneshot::Sender<Fired>>,
    /// The stream broke: nothing more will be answered.
    closed: bool,
    /// Tests only (`WatchHub::set_deaf`, cargo feature `test-hooks`): deletions are not
    /// reported. Never set otherwise.
    deaf: Arc<AtomicBool>,
}

/// One stream: where its requests go, its table, and the member it runs on.
#[derive(Clone)]
struct Shared {
    cmds: mpsc::UnboundedSender<Cmd>,
    table: Arc<Mutex<Table>>,
    member: usize,
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while the table was locked cannot leave it half-updated: every change is a
        // single insert, remove or push.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The stream in use (replaced when it broke or the client moved to another member).
#[derive(Default)]
pub(crate) struct WatchHub {
    current: tokio::sync::Mutex<Option<Shared>>,
    deaf: Arc<AtomicBool>,
}

impl WatchHub {
    /// Tests only: while set, no watch of this hub reports a deletion — each behaves as a watch
    /// stuck in etcd's catch-up loop (`crate::queue`), which no read proves prompt, so a test
    /// can show what waiters do about late watches.
    #[cfg(feature = "test-hooks")]
    pub fn set_deaf(&self, deaf: bool) {
        self.deaf.store(deaf, Ordering::SeqCst);
    }

    /// Creates a watch for deletions of `key` (with `opts`: a prefix, a start revision) on
    /// the stream of member `member`, opening that stream through `open` when there is none.
    /// Waits at most `timeout` for the member to confirm the watch.
    pub async fn watch<O, Fut>(
        &self,
        member: usize,
        key: Vec<u8>,
        opts: WatchOptions,
        timeout: Duration,
        open: O,
    ) -> Result<Watching, Error>
    where
        O: FnOnce(Vec<u8>, WatchOptions) -> Fut,
        Fut: std::future::Future<Output = Result<(etcd_client::WatchStream, usize), Error>>,
    {
        let (created_tx, created_rx) = oneshot::channel();
        let (fired_tx, fired_rx) = oneshot::channel();
        let pending = Pending {
            created: created_tx,
            fired: fired_tx,
        };
        let stream = {
            let mut current = self.current.lock().await;
            let mut pending = Some(pending);
            let reused = current
                .as_ref()
                .filter(|s| s.member == member)
                .and_then(|s| {
                    let mut table = s.table();
                    // Checked under the lock the task closes the table with: a request queued on
                    // a table still open is answered, or dropped by the task's final clean-up.
                    let open = !table.closed
                        && s.cmds.send(Cmd::Create(key.clone(), opts.clone())).is_ok();
                    if open {
                        table.pending.extend(pending.take());
                    }
                    open.then(|| s.clone())
                });
            match (reused, pending) {
                (Some(s), _) => s,
                (None, pending) => {
                    let table = Arc::new(Mutex::new(Table {
                        pending: pending.into_iter().collect(),
                        deaf: Arc::clone(&self.deaf),
                        ..Table::default()
                    }));
                    let (stream, member) = open(key, opts).await?;
                    let (requests, answers) = stream.split();
                    let (cmds, cmds_rx) = mpsc::unbounded_channel();
                    tokio::spawn(serve(requests, answers, cmds_rx, Arc::clone(&table)));
                    let s = Shared {
                        cmds,
                        table,
                        member,
                    };
                    *current = Some(s.clone());
                    s
                }
            }
        };
        match tokio::time::timeout(timeout, created_rx).await {
            Ok(Ok(Ok((id, start)))) => Ok(Watching {
                id,
                start,
                fired: fired_rx,
                stream,
                deaf: self.deaf.load(Ordering::SeqCst),
            }),
            Ok(Ok(Err(reason))) => Err(Error::WatchError(format!(
                "the member refused the watch: {reason}"
            ))),
            Ok(Err(_)) => Err(Error::WatchError(
                "the watch stream broke before the watch was created".into(),
            )),
            Err(_) => Err(Error::WatchError(format!(
                "the member did not confirm the watch within {timeout:?}"
            ))),
        }
    }
}

/// Opens a watch stream on `client` with its first create request.
pub(crate) async fn open_on(
    client: Client,
    key: Vec<u8>,
    opts: WatchOptions,
) -> Result<etcd_client::WatchStream, Error> {
    client.watch_client().watch(key, Some(opts)).await
}

/// A stream's task: sends its callers' requests and hands each answer to its watch, until the
/// stream breaks or nobody can use it any more.
async fn serve(
    mut requests: WatchRequestSender,
    mut answers: WatchResponseStream,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    table: Arc<Mutex<Table>>,
) {
    loop {
        tokio::select! {
            cmd = cmds.recv() => {
                let sent = match cmd {
                    // The hub moved on and every watch on this stream is gone.
                    None => break,
                    Some(Cmd::Create(key, opts)) => requests.watch(key, Some(opts)).await,
                    Some(Cmd::Cancel(id)) => requests.cancel(id).await,
                };
                if sent.is_err() {
                    break;
                }
            }
            answer = answers.next() => {
                let Some(Ok(answer)) = answer else { break };
                if let Some(id) = dispatch(&table, &answer) {
                    if requests.cancel(id).await.is_err() {
                        break;
                    }
                }
            }
        }
    }
    // Every waiting caller learns the stream is gone: their senders are dropped.
    let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
    t.closed = true;
    t.pending.clear();
    t.live.clear();
}

/// Hands one answer to its watch; returns a watch id to cancel on the member (a watch that
/// fired, or one whose caller left before it was created).
fn dispatch(table: &Mutex<Table>, answer: &WatchResponse) -> Option<i64> {
    let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
    let id = answer.watch_id();
    if answer.created() {
        let p = t.pending.pop_front()?;
        if answer.canceled() {
            let _ = p.created.send(Err(answer.cancel_reason().to_owned()));
            return None;
        }
        let start = answer.header().map_or(0, |h| h.revision());
        // In the table before the caller hears of it, so its drop finds the entry.
        t.live.insert(id, p.fired);
        if p.created.send(Ok((id, start))).is_err() {
            t.live.remove(&id);
            return Some(id);
        }
        None
    } else if answer.canceled() {
        if let Some(f) = t.live.remove(&id) {
            let _ = f.send(Fired::Ended);
        }
        None
    } else if answer
        .events()
        .iter()
        .any(|e| e.event_type() == EventType::Delete)
        && !t.deaf.load(Ordering::SeqCst)
    {
        let f = t.live.remove(&id)?;
        let _ = f.send(Fired::Deleted);
        Some(id)
    } else {
        None
    }
}
