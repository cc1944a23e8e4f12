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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::wait::BellWait;

/// At most this many socket bells per process at once (each is a listening socket and a
/// task): past it, a waiter does without (its followers poll it), as MySQL's bells do past
/// their connections.
const MOST_BELLS: usize = 256;

/// At most this many waiters' connections kept per bell; one more is closed at once (that
/// waiter hears a ring, looks, and polls this place).
const MOST_WAITING: usize = 64;

/// Socket bells held by this process now.
static BELLS: AtomicUsize = AtomicUsize::new(0);

/// The socket of `member`'s bell (a leading NUL: the abstract namespace).
fn address(member: &str) -> String {
    format!("\0distlock-bell/{member}")
}

/// Takes `member`'s bell: listens on its socket until rung or dropped; `None` if the name is
/// taken, the socket cannot be made, [`MOST_BELLS`] are held, or the runtime has no IO driver
/// (tokio panics then; caught here, so a runtime built with timers only polls instead).
pub(super) fn take(member: &str) -> Option<Held> {
    if BELLS.fetch_add(1, Ordering::SeqCst) >= MOST_BELLS {
        BELLS.fetch_sub(1, Ordering::SeqCst);
        return None;
    }
    let count = Counted;
    let address = address(member);
    // Without an IO driver tokio panics (its message still reaches the panic hook, once per
    // try: such runtimes are rare, and a process may run others that have one).
    let bound = std::panic::catch_unwind(|| UnixListener::bind(address)).ok()?;
    let listener = bound.ok()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _count = count;
        listen(listener, stopped).await;
    });
    Some(Held { _stop: stop, task })
}

/// One of [`BELLS`], given back when dropped (with the bell's listener task, or at once when
/// the bell could not be made).
struct Counted;

impl Drop for Counted {
    fn drop(&mut self) {
        BELLS.fetch_sub(1, Ordering::SeqCst);
    }
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
                    if waiting.len() < MOST_WAITING {
                        if let Ok(stream) = stream.into_std() {
                            waiting.push(stream);
                        }
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
/// No one listening (never taken, or let go) is a ring. In a task of its own, so that a
/// runtime without an IO driver (tokio panics) makes this bell `Failed`, not the caller panic.
pub(super) async fn wait(member: &str, within: Duration) -> BellWait {
    let address = address(member);
    tokio::spawn(async move { wait_at(address, within).await })
        .await
        .unwrap_or(BellWait::Failed)
}

async fn wait_at(address: String, within: Duration) -> BellWait {
    let mut stream = match UnixStream::connect(address).await {
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

    /// The tests that take bells run one at a time: one of them takes every bell there is.
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    #[tokio::test]
    async fn past_the_cap_a_waiter_does_without_a_bell() {
        let _one = ONE_AT_A_TIME.lock().await;
        let held: Vec<Held> = (0..MOST_BELLS)
            .map(|_| take(&distlock_core::backend::owner_token()).expect("a bell under the cap"))
            .collect();
        assert!(
            take(&distlock_core::backend::owner_token()).is_none(),
            "a bell past the cap"
        );
        drop(held);
        // Given back as their tasks end.
        let mut again = None;
        for _ in 0..100 {
            again = take(&distlock_core::backend::owner_token());
            if again.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(again.is_some(), "the dropped bells were not given back");
    }

    #[tokio::test]
    async fn a_wait_ends_when_the_bell_rings_and_not_before() {
        let _one = ONE_AT_A_TIME.lock().await;
        let member = distlock_core::backend::owner_token();
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
        let _one = ONE_AT_A_TIME.lock().await;
        let member = distlock_core::backend::owner_token();
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
