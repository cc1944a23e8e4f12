//! Lock names to etcd keys, laid out as etcd's `concurrency.Mutex` (and so `etcdctl lock`)
//! lays them out.
//!
//! A lock `name` owns the key range `[<prefix>/]<segment>/`, where `segment` is the name with
//! `%` written `%25` and `/` written `%2F` (nothing else changes). Each contender's key is
//! that range followed by its lease id in lowercase hex, as `concurrency.NewMutex(s, pfx)` +
//! `Lock` name it (`pfx + "/" + fmt.Sprintf("%x", leaseID)`).
//!
//! * A name without `/` or `%` is its own segment, so with no URL prefix the lock `jobs` and
//!   `etcdctl lock jobs` contend on the same keys (`jobs/<lease>`), and with the prefix `app`
//!   it matches `etcdctl lock app/jobs`.
//! * Two names never share a range: the escaping is reversible, and a segment holds no `/`, so
//!   the range of `a` (`a/`) cannot contain a key of `a/b` (`a%2Fb/…`) nor of any other name.

/// The keys of one lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockKeys {
    /// The range every contender's key of this lock starts with (ends with `/`).
    pub range: String,
}

impl LockKeys {
    /// The keys of `name` under `prefix` (empty: none).
    ///
    /// ```
    /// use distlock_etcd::key::LockKeys;
    /// assert_eq!(LockKeys::new("", "jobs").range, "jobs/");
    /// assert_eq!(LockKeys::new("app", "a/b%").range, "app/a%2Fb%25/");
    /// assert_eq!(LockKeys::new("", "jobs").contender(0x694d_7a21_99a0_b10c), "jobs/694d7a2199a0b10c");
    /// ```
    pub fn new(prefix: &str, name: &str) -> Self {
        let mut range = String::with_capacity(prefix.len() + name.len() + 2);
        if !prefix.is_empty() {
            range.push_str(prefix);
            range.push('/');
        }
        for c in name.chars() {
            match c {
                '%' => range.push_str("%25"),
                '/' => range.push_str("%2F"),
                c => range.push(c),
            }
        }
        range.push('/');
        LockKeys { range }
    }

    /// The range of another primitive of `name` (`tag`: `sem`, `rw`), and within it `sub`
    /// (`lock/`, `leases/`, `read/`, `write/`, or empty for all of it):
    /// `[<prefix>/]<segment>%<tag>/<sub>`. A name's segment writes every `%` as `%25` or
    /// `%2F`, so `%sem` and `%rw` never come from a name: these ranges share no key with any
    /// mutex range nor with each other.
    ///
    /// ```
    /// use distlock_etcd::key::LockKeys;
    /// assert_eq!(LockKeys::tagged("", "jobs", "sem", "leases/").range, "jobs%sem/leases/");
    /// assert_eq!(LockKeys::tagged("app", "a/b", "rw", "").range, "app/a%2Fb%rw/");
    /// ```
    pub fn tagged(prefix: &str, name: &str, tag: &str, sub: &str) -> Self {
        let mut range = Self::new(prefix, name).range;
        range.pop();
        range.push('%');
        range.push_str(tag);
        range.push('/');
        range.push_str(sub);
        LockKeys { range }
    }

    /// The key of the contender holding lease `lease`.
    pub fn contender(&self, lease: i64) -> String {
        format!("{}{lease:x}", self.range)
    }

    /// What every contender key of every name that starts with `name_prefix` starts with
    /// (escaping is character by character, so it keeps prefixes).
    ///
    /// ```
    /// use distlock_etcd::key::LockKeys;
    /// assert_eq!(LockKeys::names_from("app", "jobs/"), "app/jobs%2F");
    /// assert_eq!(LockKeys::names_from("", ""), "");
    /// ```
    pub fn names_from(prefix: &str, name_prefix: &str) -> String {
        let mut range = Self::new(prefix, name_prefix).range;
        range.pop();
        range
    }

    /// The lock name and lease of a mutex contender's key under `prefix`; `None` for any other
    /// key (another primitive's, whose segment holds a `%` that is no escape; another
    /// application's; a lease not written as `contender` writes it).
    ///
    /// ```
    /// use distlock_etcd::key::LockKeys;
    /// let key = LockKeys::new("app", "a/b%").contender(0x1f);
    /// assert_eq!(LockKeys::parse("app", &key), Some(("a/b%".to_owned(), 0x1f)));
    /// assert_eq!(LockKeys::parse("app", "app/jobs%sem/lock/1f"), None);
    /// ```
    pub fn parse(prefix: &str, key: &str) -> Option<(String, i64)> {
        let rest = match prefix {
            "" => key,
            p => key.strip_prefix(p)?.strip_prefix('/')?,
        };
        let (segment, lease) = rest.split_once('/')?;
        let id = i64::from_str_radix(lease, 16).ok()?;
        if id <= 0 || format!("{id:x}") != lease {
            return None;
        }
        let mut name = String::with_capacity(segment.len());
        let mut chars = segment.chars();
        while let Some(c) = chars.next() {
            name.push(match c {
                '%' => match (chars.next(), chars.next()) {
                    (Some('2'), Some('5')) => '%',
                    (Some('2'), Some('F')) => '/',
                    _ => return None,
                },
                c => c,
            });
        }
        Some((name, id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_range_holds_another_names_key() {
        let names = ["a", "a/b", "a%2Fb", "a%", "a/", "/a", "%", "a b", "é"];
        for x in names {
            for y in names {
                let (kx, ky) = (LockKeys::new("p", x), LockKeys::new("p", y));
                let key_of_y = ky.contender(0x1f);
                assert_eq!(key_of_y.starts_with(&kx.range), x == y, "{x:?} vs {y:?}");
            }
        }
    }

    #[test]
    fn contender_keys_parse_back_to_their_name_and_lease() {
        for prefix in ["", "p", "a/b"] {
            for name in ["a", "a/b", "a%2Fb", "a%", "/", "é x"] {
                let key = LockKeys::new(prefix, name).contender(0xabc);
                assert_eq!(
                    LockKeys::parse(prefix, &key),
                    Some((name.to_owned(), 0xabc)),
                    "{key}"
                );
                let other = LockKeys::tagged(prefix, name, "sem", "lock/").contender(0xabc);
                assert_eq!(LockKeys::parse(prefix, &other), None, "{other}");
            }
        }
        for not_ours in ["x", "x/", "x/0abc", "x/ABC", "x/-1", "x/y/1f", "x%zz/1f"] {
            assert_eq!(LockKeys::parse("", not_ours), None, "{not_ours}");
        }
    }

    #[test]
    fn no_primitive_shares_a_key_with_another() {
        let names = ["a", "a%sem", "a%25sem", "a/b", "a%rw", "sem", "a%"];
        let ranges = |n: &str| {
            vec![
                LockKeys::new("p", n),
                LockKeys::tagged("p", n, "sem", "lock/"),
                LockKeys::tagged("p", n, "sem", "leases/"),
                LockKeys::tagged("p", n, "rw", "read/"),
                LockKeys::tagged("p", n, "rw", "write/"),
            ]
        };
        for x in names {
            for (i, rx) in ranges(x).iter().enumerate() {
                for y in names {
                    for (j, ry) in ranges(y).iter().enumerate() {
                        let key = ry.contender(0x1f);
                        assert_eq!(
                            key.starts_with(&rx.range),
                            x == y && i == j,
                            "{x:?}#{i} vs {y:?}#{j}"
                        );
                    }
                }
            }
        }
    }
}
