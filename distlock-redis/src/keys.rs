//! How lock names become Redis keys.
//!
//! * lock key: `prefix + name`, byte for byte (default prefix empty, so redis-py's
//!   `Lock(name)` and distlock contend for the same key);
//! * fencing counter `{L}\0fence`, waiter queue `{L}\0queue`, queue expiry `{L}\0qexp`, where
//!   `L` is the lock key and `\0` one NUL byte;
//! * release channel (pub/sub, not a key): `distlock:released:L`.
//!
//! # Two different names never share a key
//! * Lock keys of different names differ: `name ↦ prefix + name` is injective for a fixed
//!   prefix.
//! * No lock key is an auxiliary key: names have no NUL (`distlock_core::name`) and neither has the
//!   prefix ([`RedisConfig::validate`](crate::RedisConfig::validate)), so every lock key is
//!   NUL-free, while every auxiliary key contains a NUL.
//! * Auxiliary keys of different names differ: `L` has no NUL, so in `{L}\0s` the first NUL
//!   sits right after `{L}`, and `L` and the suffix `s` are read back unambiguously.
//!
//! The previous layout, `{L}:fence` / `{L}:queue` / `{L}:qexp`, broke the second point: the
//! lock named `{X}:fence` had exactly the key of name `X`'s counter, so taking `X` overwrote
//! that holder's key with a counter that never expires, and holding `X` made `{X}:fence` wait
//! forever. Its counters (strings without expiry) are left where they are: one stops the lock
//! literally named `{X}:fence` (it looks like a lock held without expiry) until it is deleted.
//!
//! # Fencing across the layout change
//! Counters under this layout start empty, and tokens stay monotonic across the change anyway:
//! a token is `max(counter + 1, floor)`, and each token drawn under the old layout was at most
//! the floor's clock at its time (a counter only runs ahead of the clock when one name is
//! taken twice within a µs). Single instance: the floor is the server's `TIME` in µs, so the
//! first new token is above every old one unless the server clock went back. Redlock: the
//! floor is the client's clock, so the same holds unless the new client's clock is behind the
//! old holders' clocks — the assumption Redlock fencing makes whenever counters are lost (see
//! `redlock/fence.rs`).
//!
//! All of a lock's keys carry `L` as a Redis Cluster hash tag, so they share the lock key's slot
//! whenever `L` contains no `{`/`}` (a name whose braces split them is refused on a cluster).
//!
//! # `lock_delay=`'s keys
//! A master's record (its run id) and quiet time: `distlock\0epoch` and `distlock\0quiet` on
//! one server; on a cluster one pair per hash slot, `{T}\0epoch` and `{T}\0quiet` with `T` a
//! tag of that slot (`distlock:N`, the first `N` that hashes there), so the acquire script
//! touches keys of the lock's slot only. Neither suffix is one of a lock's, and lock keys have
//! no NUL, so these keys are no lock's.

use std::collections::HashMap;
use std::sync::OnceLock;

use redis::cluster_routing::Slot;

/// The keys and channel of one lock.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    pub lock: String,
    pub fence: String,
    pub queue: String,
    pub qexp: String,
    pub channel: String,
}

impl Keys {
    /// The keys of lock `name` under `prefix` (neither contains a NUL: both are validated).
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        let lock = format!("{prefix}{name}");
        Keys {
            fence: format!("{{{lock}}}\0fence"),
            queue: format!("{{{lock}}}\0queue"),
            qexp: format!("{{{lock}}}\0qexp"),
            channel: format!("distlock:released:{lock}"),
            lock,
        }
    }

    /// What `key` is to distlock, for error messages.
    pub(crate) fn role(&self, key: &str) -> &'static str {
        match key {
            k if k == self.lock => "the lock key",
            k if k == self.fence => "distlock's fencing counter",
            k if k == self.queue => "distlock's waiter queue",
            k if k == self.qexp => "distlock's waiter-queue expiry",
            _ => "a key distlock uses",
        }
    }
}

/// The keys `lock_delay=` keeps for the server or, on a cluster, the hash slot of `lock`:
/// `(epoch, quiet)` (see the module's doc).
pub(crate) fn quiet_keys(lock: &str, cluster: bool) -> (String, String) {
    if !cluster {
        return ("distlock\0epoch".into(), "distlock\0quiet".into());
    }
    let tag = slot_tag(Slot::for_key(lock));
    (format!("{{{tag}}}\0epoch"), format!("{{{tag}}}\0quiet"))
}

/// `distlock:N` for the first `N` whose key hashes to `slot` (every slot has one below
/// 200,000; the table is built once, in a few ms).
fn slot_tag(slot: Slot) -> &'static str {
    static TAGS: OnceLock<HashMap<Slot, String>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags = HashMap::with_capacity(16384);
        for n in 0..1_000_000u32 {
            let tag = format!("distlock:{n}");
            tags.entry(Slot::for_key(&tag)).or_insert(tag);
            if tags.len() == 16384 {
                break;
            }
        }
        tags
    });
    tags.get(&slot).map_or("distlock:0", String::as_str)
}

/// The part of `key` Redis Cluster hashes to pick its slot: the first `{…}` with something
/// in it, else the whole key.
fn hashed(key: &str) -> &str {
    key.find('{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.find('}')
                .filter(|&len| len > 0)
                .map(|len| &rest[..len])
        })
        .unwrap_or(key)
}

/// Whether the lock key `lock` and distlock's keys beside it (`{lock}\0…`) share a hash slot,
/// as a Redis Cluster needs for one script to touch them all. True for every key without `{`
/// and `}`; a name whose braces make them differ is refused on a cluster.
pub(crate) fn one_slot(lock: &str) -> bool {
    hashed(lock) == hashed(&format!("{{{lock}}}\0fence"))
}

/// The refusal of a name [`one_slot`] rejects.
pub(crate) fn split_by_braces(name: &str) -> distlock_core::LockError {
    distlock_core::LockError::invalid_name(
        name,
        "on a Redis Cluster a lock's keys must share one hash slot, and this name's `{`/`}` \
         would put them in different slots: avoid braces in names there",
    )
}

#[cfg(test)]
mod tests {
    use super::Keys;

    #[test]
    fn a_clusters_slot_is_shared_by_brace_free_names_only() {
        for ok in ["x", "a:b", "ключ", "{", "a{b"] {
            assert!(super::one_slot(ok), "{ok}");
        }
        for split in ["{slot}", "${x}", "x}", "{}", "a{}b{c}"] {
            assert!(!super::one_slot(split), "{split}");
        }
    }

    #[test]
    fn a_clusters_quiet_keys_share_the_locks_slot() {
        use redis::cluster_routing::Slot;
        for lock in ["x", "a:b", "ключ", "p:{", "distlock:7"] {
            let (epoch, quiet) = super::quiet_keys(lock, true);
            assert_eq!(
                Slot::for_key(&epoch),
                Slot::for_key(lock),
                "{lock} {epoch:?}"
            );
            assert_eq!(
                Slot::for_key(&quiet),
                Slot::for_key(lock),
                "{lock} {quiet:?}"
            );
        }
        // Every slot has its tag.
        for slot in 0..16384u16 {
            let tag = super::slot_tag(Slot::new(slot).unwrap());
            assert_eq!(Slot::for_key(tag), Slot::new(slot).unwrap(), "{slot}");
        }
        assert_eq!(super::quiet_keys("x", false).0, "distlock\0epoch");
    }

    #[test]
    fn no_key_of_one_name_is_a_key_of_another() {
        let names = [
            "x",
            "{x}:fence",
            "{x}:queue",
            "{x}:qexp",
            "{x}",
            "x}",
            "{x",
            "{x}fence",
            "x:fence",
            "distlock:released:x",
        ];
        for prefix in ["", "p:", "{"] {
            let mut seen = std::collections::HashMap::new();
            for name in names {
                let k = Keys::new(prefix, name);
                assert!(!k.lock.contains('\0'));
                for key in [&k.lock, &k.fence, &k.queue, &k.qexp] {
                    if let Some(other) = seen.insert(key.clone(), (prefix, name)) {
                        assert_eq!(other, (prefix, name), "{key:?} shared");
                    }
                }
            }
        }
    }
}
