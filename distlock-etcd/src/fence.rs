//! Fenced writes on the user's own etcd client: [`put`] stores a value in one transaction whose
//! compare includes the fence, so it lands only if no write with a higher fencing token has.
//!
//! The highest accepted token lives in a companion key ([`fence_key`], under its own prefix so
//! it never shows in a range read of the user's keys), as 20 zero-padded digits: etcd compares
//! values as bytes, and padded decimals compare as the numbers do.
//!
//! ```no_run
//! # async fn demo(mut client: etcd_client::Client, guard: &distlock_core::LockGuard)
//! # -> Result<(), distlock_etcd::fence::FenceError<etcd_client::Error>> {
//! distlock_etcd::fence::put(&mut client, "config/leader", "node-3", guard.fencing_token()).await?;
//! # Ok(()) }
//! ```

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};

pub use distlock_core::fence::{FenceError, Stale};

/// The companion key holding `key`'s highest accepted token: `distlock-fence/<key>`.
pub fn fence_key(key: &str) -> String {
    format!("distlock-fence/{key}")
}

fn padded(token: u64) -> String {
    format!("{token:020}")
}

/// `PUT key value`, unless a write with a higher token than `token` was accepted for `key`.
///
/// One transaction: if the fence holds a higher token, read it (and write nothing); otherwise
/// put the fence and the value. A missing fence fails etcd's value compare, so the first write
/// goes through.
pub async fn put(
    client: &mut etcd_client::Client,
    key: &str,
    value: impl Into<Vec<u8>>,
    token: u64,
) -> Result<(), FenceError<etcd_client::Error>> {
    let fence = fence_key(key);
    let txn = Txn::new()
        .when([Compare::value(
            fence.clone(),
            CompareOp::Greater,
            padded(token),
        )])
        .and_then([TxnOp::get(fence.clone(), None)])
        .or_else([
            TxnOp::put(fence, padded(token), None),
            TxnOp::put(key, value, None),
        ]);
    let resp = client.txn(txn).await.map_err(FenceError::Store)?;
    if !resp.succeeded() {
        return Ok(());
    }
    let seen = resp
        .op_responses()
        .into_iter()
        .find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        })
        .and_then(|v| String::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(u64::MAX);
    Err(Stale {
        resource: key.to_owned(),
        token,
        seen,
    }
    .into())
}
