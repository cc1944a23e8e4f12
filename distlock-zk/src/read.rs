//! Reads that answer with the ensemble's state as of the call, for `inspect` and `leader()`.
//!
//! ZooKeeper's reads are sequentially consistent, not linearizable: a member serves them from
//! its own copy, which can lag behind a write that the ensemble has committed and another
//! client has already been told about. `tests/reads.rs` caught the ensemble's *leader*
//! answering "free" for a lock a client of a follower had just taken, and `leader()` answering
//! "nobody" right after another client had won — the leader answers a read while a commit is
//! still queued for it, so a `sync` (which on the leader orders nothing) does not help. Had the
//! change been a release, the read would have named a holder that had already let go.
//!
//! So the read goes behind a write of our own: a `multi` holding one version check of the
//! root (any version), which the ensemble orders after every write committed before it, and
//! which our member applies, in order, before it answers our session's next request. The two
//! are pipelined; the cost is one round trip and one quorum write (an fsync) per snapshot,
//! paid by `inspect` and `leader()` only, never by an acquisition.

use std::future::Future;

use zookeeper_client::{Client, Error, MultiWriteError};

/// Sends the write the next reads of `client`'s session go behind (see above); the future
/// resolves once the member has applied it.
fn barrier(client: &Client) -> Result<impl Future<Output = Result<(), Error>> + '_, Error> {
    let mut check = client.new_multi_writer();
    check.add_check_version("/", -1)?;
    let sent = check.commit();
    Ok(async move {
        match sent.await {
            // A failed check is ordered like a passed one: only the request's own failure
            // counts.
            Ok(_) | Err(MultiWriteError::OperationFailed { .. }) => Ok(()),
            Err(MultiWriteError::RequestFailed { source }) => Err(source),
        }
    })
}

/// Makes every later read of `client`'s session see the ensemble's state as of this call.
pub(crate) async fn catch_up(client: &Client) -> Result<(), Error> {
    barrier(client)?.await
}

/// The children of `dir` as of the call (see above); `None` when `dir` does not exist.
pub(crate) async fn children_now(client: &Client, dir: &str) -> Result<Option<Vec<String>>, Error> {
    let barrier = barrier(client)?;
    let listed = client.get_children(dir);
    let (barrier, listed) = tokio::join!(barrier, listed);
    barrier?;
    match listed {
        Ok((children, _)) => Ok(Some(children)),
        Err(Error::NoNode) => Ok(None),
        Err(e) => Err(e),
    }
}
