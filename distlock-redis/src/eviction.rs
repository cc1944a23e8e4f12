//! The `maxmemory-policy` check: a server that may evict a held lock's key is refused (or, with
//! `eviction=warn`, used with a warning).
//!
//! Why: every lock key carries its lease as an expiry, so `volatile-*` policies may evict it as
//! readily as `allkeys-*` ones; the fencing counters (no expiry) fall to `allkeys-*`. An evicted
//! lock key is a free lock while its holder still believes it holds: two holders, and nothing
//! reports it. Only `noeviction` (writes fail with OOM instead) is safe. A `maxmemory` of 0
//! (no limit) does not make another policy safe: it can be set at run time.
//!
//! Each server is checked once per client: at connect, or, for a Redlock master that was down
//! then, before its first lock (until it passes, it is not counted for any quorum). A server
//! that does not answer `CONFIG GET` (disabled, renamed, or not permitted to the ACL user, as
//! on managed services) has an unknown policy: distlock says so in a warning and goes on.

use distlock_core::LockError;
use redis::{RedisResult, Value};

use crate::config::EvictionCheck;

/// What a server says about its eviction policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Policy {
    /// `noeviction`: safe.
    NoEviction,
    /// Any other policy, by name.
    Evicting(String),
    /// The server did not tell (why).
    Unknown(String),
}

/// `CONFIG GET maxmemory-policy`.
pub(crate) fn command() -> redis::Cmd {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy");
    cmd
}

impl Policy {
    /// Reads the reply to [`command`]. A refusal by the server (unknown command, no permission)
    /// is an unknown policy; a connection failure is returned as the error it is.
    pub(crate) fn from_reply(reply: RedisResult<Value>) -> RedisResult<Policy> {
        let value = match reply {
            Ok(v) => v,
            Err(e) if e.code().is_some() => return Ok(Policy::Unknown(e.to_string())),
            Err(e) => return Err(e),
        };
        let text = |v: &Value| match v {
            Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => Some(s.clone()),
            _ => None,
        };
        // RESP2: [name, value]; RESP3: {name: value}.
        let policy = match &value {
            Value::Array(items) => items.get(1).and_then(text),
            Value::Map(pairs) => pairs.first().and_then(|(_, v)| text(v)),
            Value::ServerError(e) => return Ok(Policy::Unknown(format!("{e:?}"))),
            _ => None,
        };
        Ok(match policy {
            Some(p) if p.eq_ignore_ascii_case("noeviction") => Policy::NoEviction,
            Some(p) => Policy::Evicting(p),
            None => Policy::Unknown(format!("unexpected reply {value:?}")),
        })
    }
}

/// Decides about the server at `addr`: `Ok` (with a warning logged where one is due), or
/// [`LockError::InvalidConfig`] naming the server, the policy and the fix.
pub(crate) fn judge(
    policy: &Policy,
    mode: EvictionCheck,
    label: &str,
    addr: &str,
) -> Result<(), LockError> {
    match (policy, mode) {
        (Policy::NoEviction, _) => Ok(()),
        (Policy::Evicting(p), EvictionCheck::Refuse) => Err(LockError::invalid_config(format!(
            "{label}: the Redis server at {addr} has maxmemory-policy {p}, which can evict a held \
             lock's key (two holders at once, silently) or a fencing counter; set it to noeviction \
             (`CONFIG SET maxmemory-policy noeviction`, and `maxmemory-policy noeviction` in \
             redis.conf), or accept the risk with eviction=warn in the URL"
        ))),
        (Policy::Evicting(p), EvictionCheck::Warn) => {
            tracing::warn!(
                backend = label,
                server = addr,
                policy = %p,
                "maxmemory-policy can evict a held lock's key (two holders at once) or a fencing \
                 counter; used anyway because of eviction=warn: set it to noeviction"
            );
            Ok(())
        }
        (Policy::Unknown(why), _) => {
            tracing::warn!(
                backend = label,
                server = addr,
                reason = %why,
                "could not read maxmemory-policy (CONFIG GET refused): make sure it is noeviction, \
                 or an evicted lock key can give two holders at once"
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn reads_resp2_and_resp3_replies_and_refusals() {
        let resp2 = Value::Array(vec![bulk("maxmemory-policy"), bulk("allkeys-lru")]);
        assert_eq!(
            Policy::from_reply(Ok(resp2)).unwrap(),
            Policy::Evicting("allkeys-lru".into())
        );
        let resp3 = Value::Map(vec![(bulk("maxmemory-policy"), bulk("noeviction"))]);
        assert_eq!(Policy::from_reply(Ok(resp3)).unwrap(), Policy::NoEviction);
        assert!(matches!(
            Policy::from_reply(Ok(Value::Array(vec![]))).unwrap(),
            Policy::Unknown(_)
        ));
        let refused: redis::RedisError =
            redis::RedisError::from((redis::ErrorKind::Io, "connection reset"));
        assert!(Policy::from_reply(Err(refused)).is_err());
    }

    /// Counts the WARN events emitted while it is the default subscriber.
    #[derive(Default)]
    struct Warnings(std::sync::atomic::AtomicUsize);

    impl tracing::Subscriber for Warnings {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, e: &tracing::Event<'_>) {
            if *e.metadata().level() == tracing::Level::WARN {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// `judge`'s result and how many warnings it logged.
    fn judged(p: &Policy, mode: EvictionCheck) -> (Result<(), LockError>, usize) {
        let w = std::sync::Arc::new(Warnings::default());
        let r = tracing::subscriber::with_default(w.clone(), || judge(p, mode, "redis", "h:1"));
        (r, w.0.load(std::sync::atomic::Ordering::SeqCst))
    }

    #[test]
    fn refuses_or_warns_by_mode() {
        let p = Policy::Evicting("volatile-lru".into());
        let (r, warned) = judged(&p, EvictionCheck::Refuse);
        let m = r.unwrap_err().to_string();
        for part in ["h:1", "volatile-lru", "noeviction", "eviction=warn"] {
            assert!(m.contains(part), "{m}");
        }
        assert_eq!(warned, 0);
        assert!(matches!(judged(&p, EvictionCheck::Warn), (Ok(()), 1)));
        let unknown = Policy::Unknown("ERR unknown command".into());
        assert!(matches!(
            judged(&unknown, EvictionCheck::Refuse),
            (Ok(()), 1)
        ));
        assert!(matches!(
            judged(&Policy::NoEviction, EvictionCheck::Refuse),
            (Ok(()), 0)
        ));
    }
}
