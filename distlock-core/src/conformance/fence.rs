//! The fenced-register check every fence adapter passes (`crate::fence`): a holder whose lease
//! lapsed while it stalled writes with its old token after the next holder wrote, and is refused.

use std::time::Duration;

use futures::future::BoxFuture;

use super::Harness;
use crate::fence::FenceError;
use crate::AcquireOptions;

/// A fenced write of `body` with a token; store errors as text.
pub type Write = Box<
    dyn Fn(u64, &'static str) -> BoxFuture<'static, Result<(), FenceError<String>>> + Send + Sync,
>;
/// The register's current body.
pub type Read = Box<dyn Fn() -> BoxFuture<'static, String> + Send + Sync>;

/// Two holders of `name` in turn, each on its own client of `h`: the first stalls (no renewal)
/// until its lease lapses (and, on stores whose lease is a session, until the store drops its
/// claim: `remove_underneath`), and the second takes over. Both write while they hold; then the
/// first wakes and writes with its token: the write must be refused and leave the second's
/// body, and the second writes on.
pub async fn a_stalled_holders_write_is_refused(
    h: &dyn Harness,
    name: &str,
    write: Write,
    read: Read,
) {
    let (stalled, next_client) = (h.client().await, h.client().await);
    let first = stalled
        .acquire(
            name,
            &AcquireOptions::new()
                .ttl(Duration::from_millis(800))
                .renew(false),
        )
        .await
        .expect("first holder");
    let a = first.fencing_token();
    write(a, "first").await.expect("the first holder's write");
    tokio::time::sleep(Duration::from_secs(1)).await;
    h.remove_underneath(name).await;
    let next = next_client
        .acquire(name, &AcquireOptions::new().wait(Duration::from_secs(10)))
        .await
        .expect("the next holder, once the first's lease lapsed");
    let b = next.fencing_token();
    assert!(b > a, "tokens rise: {a} then {b}");
    write(b, "next").await.expect("the next holder's write");

    let err = write(a, "stale")
        .await
        .expect_err("the stalled holder's write was accepted");
    let stale = err
        .stale()
        .unwrap_or_else(|| panic!("a store error, not a refusal: {err}"));
    assert_eq!((stale.token, stale.seen), (a, b), "{err}");
    assert_eq!(read().await, "next", "the refused write left nothing");

    write(b, "next again").await.expect("the holder writes on");
    assert_eq!(read().await, "next again");
    drop(first);
    next.release().await.expect("release");
}

/// A register in the file at `path`, fenced by [`crate::fence::write_file`]: its [`Write`] and
/// [`Read`] for the cases that need a fenced resource but no store of their own.
pub fn file_register(path: std::path::PathBuf) -> (Write, Read) {
    let p = path.clone();
    let write: Write = Box::new(move |token, body| {
        let p = p.clone();
        Box::pin(async move {
            crate::fence::write_file(&p, token, body.as_bytes())
                .map_err(|e| e.map_store(|e| e.to_string()))
        })
    });
    let read: Read = Box::new(move || {
        let p = path.clone();
        Box::pin(async move { std::fs::read_to_string(&p).unwrap_or_default() })
    });
    (write, read)
}
