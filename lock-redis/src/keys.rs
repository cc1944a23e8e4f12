//! How lock names become Redis keys.
//!
//! * lock key: `prefix + name`, byte for byte (default prefix empty, so redis-py's
//!   `Lock(name)` and distlock contend for the same key);
//! * fencing counter: `{prefix + name}:fence`, waiter queue: `{prefix + name}:queue` and
//!   `{prefix + name}:qexp`, release channel: `distlock:released:prefix + name`.
//!
//! The counter and queue keys carry the lock key as a Redis Cluster hash tag, so they share the
//! lock key's slot whenever the lock key itself contains no `{`/`}` (distlock does not run on
//! Redis Cluster; the naming keeps a future Cluster mode possible).

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
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        let lock = format!("{prefix}{name}");
        Keys {
            fence: format!("{{{lock}}}:fence"),
            queue: format!("{{{lock}}}:queue"),
            qexp: format!("{{{lock}}}:qexp"),
            channel: format!("distlock:released:{lock}"),
            lock,
        }
    }
}
