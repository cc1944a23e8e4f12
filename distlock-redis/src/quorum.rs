//! [`gather`]: one call on every node, without waiting on a stalled one.
//!
//! A Redlock call needs a quorum of masters, not all of them. Waiting for the slowest turns
//! one stalled master (a paused process or a blackholed route: connections stay open, nothing
//! answers) into a per-node timeout on every acquisition, renewal, release and undo. So a node
//! whose last call timed out ([`Node::is_stalled`]) is waited for, once every other node called
//! answered (and at least one did), only for a grace as long as the call took so far (at least
//! [`MIN_GRACE`]): enough for a node that recovered, never a timeout. An answer within a call's
//! bound clears the mark ([`Node::within`]); a call cut off by the grace leaves it. Every other
//! node is waited for: a round queues the waiter on each
//! master and must see foreign data on any, and a renewal extends each. A caller whose calls
//! run as tasks of their own (a release) may also stop once its outcome is decided.

use std::future::Future;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use crate::node::Node;

/// The least a stalled node is waited for once the others answered.
const MIN_GRACE: Duration = Duration::from_millis(5);

/// Runs the call for each node (`None`: no call there) and collects the replies until
/// `decided` says the replies so far settle the outcome, every call answered, or only calls to
/// stalled nodes are left and their grace ran out. A reply left `None` was not waited for.
pub(crate) async fn gather<T, Fut>(
    nodes: &[Node],
    calls: impl IntoIterator<Item = Option<Fut>>,
    decided: impl Fn(&[Option<T>]) -> bool,
) -> Vec<Option<T>>
where
    Fut: Future<Output = T>,
{
    let started = Instant::now();
    let mut pending = FuturesUnordered::new();
    let mut waiting = vec![false; nodes.len()];
    let mut replies: Vec<Option<T>> = nodes.iter().map(|_| None).collect();
    for (i, call) in calls.into_iter().enumerate() {
        if let Some(call) = call {
            waiting[i] = true;
            pending.push(async move { (i, call.await) });
        }
    }
    let (mut grace, mut answered) = (None, 0);
    while !pending.is_empty() && !decided(&replies) {
        // Only once some node answered: when every node called is stalled (a client-side
        // outage), each gets its whole bound, as it did before any was marked.
        let only_stalled_left = (waiting.iter().zip(nodes)).all(|(&w, n)| !w || n.is_stalled());
        if only_stalled_left && answered > 0 && grace.is_none() {
            let pause = started.elapsed().max(MIN_GRACE);
            grace = Some(Box::pin(tokio::time::sleep(pause)));
        }
        let next = match grace.as_mut() {
            Some(grace) => tokio::select! {
                next = pending.next() => next,
                () = grace => None,
            },
            None => pending.next().await,
        };
        let Some((i, reply)) = next else { break };
        waiting[i] = false;
        replies[i] = Some(reply);
        answered += 1;
    }
    replies
}
