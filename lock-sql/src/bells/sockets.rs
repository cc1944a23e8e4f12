//! SQLite's bells: a listening Unix socket in Linux's abstract namespace,
//! `distlock-bell/<member>`, per waiting place. The processes sharing an SQLite file share a
//! machine, so the process behind connects to the bell ahead and reads; the read returns when
//! the bell's owner closes it — rung, dropped, or its process gone (the kernel closes its
//! sockets and the read ends).
//!
//! Only the processes of one network namespace see each other's abstract sockets: a process
//! of another (a container sharing the file) finds no bell, hears "rung" at once, and — the
//! same place still ahead — polls that place as before bells. A bell is only a hint: any
//! local process could listen on a name once its owner let it go, which delays whoever waits
//! on it by at most its wait (a second, or the holder's lease), never decides who holds.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::BellWait;

/// The socket of `member`'s bell (a leading NUL: the abstract namespace).
fn address(member: &str) -> String {
    format!("\0distlock-bell/{member}")
}

/// Takes `member`'s bell: listens on its socket until rung or dropped; `None` if the name is
/// taken or the socket cannot be made.
pub(super) fn take(member: &str) -> Option<Held> {
    let listener = UnixListener::bind(address(member)).ok()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(listen(listener, stopped));
    Some(Held { _stop: stop, task })
}

/// Accepts whoever waits on the bell and keeps their connections open until `stopped` (the
/// bell rung or dropped); then closes them all, which ends their reads. Connections whose
/// waiter gave up are let go at the next arrival, so a bell held for hours keeps only the
/// waits still open.
async fn listen(listener: UnixListener, mut stopped: oneshot::Receiver<()>) {
    // Kept as the standard library's sockets: nothing awaits them, and a read of one asks the
    // kernel at once (tokio's would answer from readiness it may not have heard of yet).
    let mut waiting: Vec<std::os::unix::net::UnixStream> = Vec::new();
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            arrival = listener.accept() => match arrival {
                Ok((stream, _)) => {
                    waiting.retain(still_open);
                    if let Ok(stream) = stream.into_std() {
                        waiting.push(stream);
                    }
                }
                // The listener itself failed: closing everything rings the bell early,
                // which only makes its followers look.
                Err(_) => return,
            },
        }
    }
}

/// Whether the waiter at the other end of `s` is still there (it sends nothing; a read of 0
/// bytes means it closed).
fn still_open(s: &std::os::unix::net::UnixStream) -> bool {
    use std::io::Read;
    let mut byte = [0u8; 1];
    // Non-blocking (tokio's sockets are, and stay so once taken out of it).
    match (&mut &*s).read(&mut byte) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
    }
}

/// Waits, at most `within`, for `member`'s bell: connects and reads until the bell closes.
/// No one listening (never taken, or let go) is a ring.
pub(super) async fn wait(member: &str, within: Duration) -> BellWait {
    let mut stream = match UnixStream::connect(address(member)).await {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
            ) =>
        {
            return BellWait::Rung
        }
        Err(_) => return BellWait::Failed,
    };
    let mut byte = [0u8; 1];
    match tokio::time::timeout(within, stream.read(&mut byte)).await {
        // Closed (0 bytes), reset, or anything at all: the bell is not held by a live owner.
        Ok(_) => BellWait::Rung,
        Err(_) => BellWait::TimedOut,
    }
}

/// A held socket bell: rung by [`Held::ring`], or by dropping it (its listener task then ends
/// on its own and closes everything).
#[derive(Debug)]
pub(crate) struct Held {
    /// Dropped to ring.
    _stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Held {
    /// Rings the bell and returns once its socket and every waiter's connection are closed.
    pub(super) async fn ring(self) {
        let Held { _stop, task } = self;
        drop(_stop);
        let _ = task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_ends_when_the_bell_rings_and_not_before() {
        let member = lock_core::backend::owner_token();
        // No bell: rung at once.
        assert_eq!(wait(&member, Duration::from_secs(5)).await, BellWait::Rung);
        let held = take(&member).expect("a fresh bell");
        assert!(take(&member).is_none(), "one bell per member");
        assert_eq!(
            wait(&member, Duration::from_millis(50)).await,
            BellWait::TimedOut
        );
        let waiter = tokio::spawn({
            let member = member.clone();
            async move { wait(&member, Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiter.is_finished(),
            "the wait ended while the bell was held"
        );
        let rung = tokio::time::Instant::now();
        held.ring().await;
        let woke = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the ring woke the waiter")
            .unwrap();
        assert_eq!(woke, BellWait::Rung);
        assert!(rung.elapsed() < Duration::from_secs(1));
        // Let go: the name is free again.
        assert_eq!(wait(&member, Duration::from_secs(5)).await, BellWait::Rung);
    }

    #[test]
    fn a_waiter_that_gave_up_is_told_from_one_still_waiting() {
        use std::os::unix::net::UnixStream;
        let (gone, ours) = UnixStream::pair().unwrap();
        let (waiting, ours2) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        ours2.set_nonblocking(true).unwrap();
        drop(gone);
        assert!(!still_open(&ours), "a closed waiter counted as waiting");
        assert!(still_open(&ours2), "a waiting waiter counted as gone");
        drop(waiting);
    }

    #[tokio::test]
    async fn a_dropped_bell_rings_and_gone_waiters_are_let_go() {
        let member = lock_core::backend::owner_token();
        let held = take(&member).unwrap();
        for _ in 0..3 {
            assert_eq!(
                wait(&member, Duration::from_millis(5)).await,
                BellWait::TimedOut
            );
        }
        let waiter = tokio::spawn({
            let member = member.clone();
            async move { wait(&member, Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(held);
        let woke = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("dropping the bell woke the waiter")
            .unwrap();
        assert_eq!(woke, BellWait::Rung);
    }
}
