//! How semaphore and read-write lock names become Redis keys.
//!
//! For lock key `L = prefix + name` (as the mutex's, see `crate::keys`) and family `f` (`sem`
//! for semaphores, `rw` for read-write locks): `{L}\0f.holders`, `{L}\0f.fence`,
//! `{L}\0f.queue`, `{L}\0f.qexp`, `{L}\0f.max`; wake-ups go to the channel
//! `distlock:permits\0f\0L`.
//!
//! No key is shared with another name, another family or a mutex: `L` has no NUL, so the first
//! NUL of `{L}\0s` ends `L` and the suffixes differ (the mutex's are `fence`, `queue`, `qexp`
//! without a family); no mutex key or channel has a NUL where these do.

/// Which primitive a name belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    Semaphore,
    RwLock,
}

/// The keys and channel of one semaphore or read-write lock.
#[derive(Clone, Debug)]
pub(crate) struct PermitKeys {
    pub holders: String,
    pub fence: String,
    pub queue: String,
    pub qexp: String,
    pub max: String,
    pub channel: String,
}

impl PermitKeys {
    pub(crate) fn new(prefix: &str, name: &str, family: Family) -> Self {
        let f = match family {
            Family::Semaphore => "sem",
            Family::RwLock => "rw",
        };
        let lock = format!("{prefix}{name}");
        PermitKeys {
            holders: format!("{{{lock}}}\0{f}.holders"),
            fence: format!("{{{lock}}}\0{f}.fence"),
            queue: format!("{{{lock}}}\0{f}.queue"),
            qexp: format!("{{{lock}}}\0{f}.qexp"),
            max: format!("{{{lock}}}\0{f}.max"),
            channel: format!("distlock:permits\0{f}\0{lock}"),
        }
    }

    /// What `key` is to distlock, for error messages.
    pub(crate) fn role(&self, key: &str) -> &'static str {
        match key {
            k if k == self.holders => "distlock's holder set",
            k if k == self.fence => "distlock's fencing counter",
            k if k == self.queue => "distlock's waiter queue",
            k if k == self.qexp => "distlock's waiter-queue expiry",
            k if k == self.max => "distlock's semaphore count",
            _ => "a key distlock uses",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Family, PermitKeys};
    use crate::keys::Keys;

    #[test]
    fn no_key_is_shared_between_names_families_or_the_mutex() {
        let names = ["x", "{x}", "x}\0", "{x}\0sem.max", "sem.max", "rw", "x\0rw"];
        let mut seen = std::collections::HashMap::new();
        for name in names.iter().filter(|n| !n.contains('\0')) {
            let m = Keys::new("", name);
            for key in [m.lock, m.fence, m.queue, m.qexp, m.channel] {
                assert!(
                    seen.insert(key.clone(), ("mutex", *name)).is_none(),
                    "{key:?}"
                );
            }
            for family in [Family::Semaphore, Family::RwLock] {
                let k = PermitKeys::new("", name, family);
                for key in [k.holders, k.fence, k.queue, k.qexp, k.max, k.channel] {
                    let was = seen.insert(key.clone(), ("permits", *name));
                    assert!(was.is_none(), "{key:?} shared with {was:?}");
                }
            }
        }
    }
}
