//! Lock names → ZooKeeper paths, and Apache Curator's contender naming and ordering.
//!
//! * a name starting with `/` is the lock's absolute path; any other name lives under the
//!   configured base (`/distlock/<name>`);
//! * the path must be a valid ZooKeeper path: no empty segment (`//`), no `.`/`..` segment, no
//!   trailing `/`, no control or reserved characters, and nothing under `/zookeeper`;
//!   otherwise the name is rejected with `InvalidName` (never mapped to something else);
//! * contenders are `EPHEMERAL_SEQUENTIAL` children named `_c_<uuid>-lock-<10-digit sequence>`
//!   exactly as Curator's `InterProcessMutex` names them, ordered by the sequence after
//!   `lock-` (Curator's `StandardLockInternalsDriver.fixForSorting`), so Curator and distlock
//!   processes on the same path exclude each other. Only children shaped like that — ending
//!   in `lock-` and exactly 10 digits — are contenders: nested lock directories such as `a/b`,
//!   `a/block-` or `a/lock-0` under `a` are not;
//! * a name with a path element shaped like a contender (`a/lock-0000000001`) or an election
//!   participant (`a/latch-0000000001`) is rejected with `InvalidName`: its directory would sit
//!   among `a`'s contenders and block `a`;
//! * election participants (Curator's `LeaderLatch`, [`NodeKind::Latch`]) are named
//!   `_c_<uuid>-latch-<10-digit sequence>` and ordered the same way;
//! * a read-write lock's readers and writers (Curator's `InterProcessReadWriteLock`,
//!   [`NodeKind::Read`], [`NodeKind::Write`]) are `_c_<uuid>-__READ__<sequence>` and
//!   `_c_<uuid>-__WRIT__<sequence>` in one directory, ordered together by sequence;
//! * a semaphore's permits (Curator's `InterProcessSemaphoreV2`, [`NodeKind::Lease`]) are
//!   `_c_<uuid>-lease-<sequence>` in its `leases` directory.

use distlock_core::LockError;
use rand::Rng;

/// Curator's lock-node name marker.
pub const LOCK_NAME: &str = "lock-";

/// Checks a path by ZooKeeper's rules (`PathUtils.validatePath`).
pub fn validate_absolute(path: &str) -> Result<(), &'static str> {
    if !path.starts_with('/') {
        return Err("must start with '/'");
    }
    if path.len() > 1 && path.ends_with('/') {
        return Err("must not end with '/'");
    }
    for seg in path[1..].split('/') {
        if seg.is_empty() && path.len() > 1 {
            return Err("empty path element ('//')");
        }
        if seg == "." || seg == ".." {
            return Err("relative path element ('.' or '..')");
        }
    }
    let bad = |c: char| {
        let u = u32::from(c);
        [
            0x0000..=0x001f,
            0x007f..=0x009f,
            0xd800..=0xf8ff,
            0xfff0..=0xffff,
        ]
        .into_iter()
        .any(|r| r.contains(&u))
    };
    if path.chars().any(bad) {
        return Err("control or reserved character");
    }
    // ZooKeeper (Java) validates UTF-16 units: characters beyond U+FFFF become surrogates,
    // which it rejects.
    if path.chars().any(|c| u32::from(c) > 0xffff) {
        return Err("character outside the Basic Multilingual Plane (e.g. an emoji)");
    }
    Ok(())
}

/// The lock directory for `name`.
pub fn lock_path(base: &str, name: &str) -> Result<String, LockError> {
    let path = if name.starts_with('/') {
        name.to_owned()
    } else {
        format!("{}/{name}", base.trim_end_matches('/'))
    };
    validate_absolute(&path).map_err(|why| {
        LockError::invalid_name(
            name,
            format!("not a valid ZooKeeper path ({path:?}): {why}"),
        )
    })?;
    if path == "/" {
        return Err(LockError::invalid_name(
            name,
            "the root node cannot be a lock",
        ));
    }
    if path == "/zookeeper" || path.starts_with("/zookeeper/") {
        return Err(LockError::invalid_name(
            name,
            "the /zookeeper tree is reserved by ZooKeeper",
        ));
    }
    if path
        .split('/')
        .any(|seg| NodeKind::ALL.iter().any(|k| k.sequence_of(seg).is_some()))
    {
        return Err(LockError::invalid_name(
            name,
            "a path element ends in `lock-`, `latch-`, `lease-`, `__READ__` or `__WRIT__` and 10 digits, the shape of a recipe's node, so it would queue in its parent's lock; rename it",
        ));
    }
    Ok(path)
}

/// A random UUID v4 in its canonical text form.
pub fn uuid() -> String {
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Curator's protected prefix for one contender: `_c_<uuid>-`.
pub fn protected_prefix(uuid: &str) -> String {
    format!("_c_{uuid}-")
}

/// Digits ZooKeeper appends to a sequential node's name (`%010d`).
pub const SEQUENCE_DIGITS: usize = 10;

/// Curator's `LeaderLatch` node-name marker.
pub const LATCH_NAME: &str = "latch-";

/// Curator's `InterProcessReadWriteLock` reader marker.
pub const READ_NAME: &str = "__READ__";

/// Curator's `InterProcessReadWriteLock` writer marker.
pub const WRITE_NAME: &str = "__WRIT__";

/// Curator's `InterProcessSemaphoreV2` lease marker.
pub const LEASE_NAME: &str = "lease-";

/// Which Curator recipe a directory's sequential nodes belong to: the marker before their
/// sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// `InterProcessMutex`: `_c_<uuid>-lock-<sequence>`.
    Lock,
    /// `LeaderLatch`: `_c_<uuid>-latch-<sequence>`.
    Latch,
    /// `InterProcessReadWriteLock` reader: `_c_<uuid>-__READ__<sequence>`.
    Read,
    /// `InterProcessReadWriteLock` writer: `_c_<uuid>-__WRIT__<sequence>`.
    Write,
    /// `InterProcessSemaphoreV2` lease: `_c_<uuid>-lease-<sequence>` (in `<path>/leases`).
    Lease,
}

/// Whose turn it is, for a node of some kind among its directory's sorted nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Ours: the node holds.
    Ours,
    /// Not yet: watch the node at this index of the sorted list.
    After(usize),
    /// Not yet: watch the directory's children (a semaphore lease waits for a count).
    Count,
}

impl NodeKind {
    /// Every kind.
    pub const ALL: [NodeKind; 5] = [
        NodeKind::Lock,
        NodeKind::Latch,
        NodeKind::Read,
        NodeKind::Write,
        NodeKind::Lease,
    ];

    /// The marker before the sequence (`lock-`, `latch-`, `__READ__`, `__WRIT__`, `lease-`).
    pub fn marker(self) -> &'static str {
        match self {
            NodeKind::Lock => LOCK_NAME,
            NodeKind::Latch => LATCH_NAME,
            NodeKind::Read => READ_NAME,
            NodeKind::Write => WRITE_NAME,
            NodeKind::Lease => LEASE_NAME,
        }
    }

    /// The kinds that queue with this one in a directory: readers and writers share one
    /// queue; every other kind queues alone.
    fn queue(self) -> &'static [NodeKind] {
        match self {
            NodeKind::Read | NodeKind::Write => &[NodeKind::Read, NodeKind::Write],
            NodeKind::Lock => &[NodeKind::Lock],
            NodeKind::Latch => &[NodeKind::Latch],
            NodeKind::Lease => &[NodeKind::Lease],
        }
    }

    /// The sort key of `child` in this kind's queue (its sequence), or `None` for a child
    /// that does not queue with this kind.
    fn queue_key(self, child: &str) -> Option<&str> {
        self.queue().iter().find_map(|k| k.sequence_of(child))
    }

    /// Whether node `idx` of `sorted` (this kind's queue, in order) holds, Curator's rules:
    /// * a lock contender, election participant or writer holds when it is first, and
    ///   otherwise watches its predecessor;
    /// * a reader holds when no writer is ahead of it, and otherwise watches the first
    ///   writer (`InterProcessReadWriteLock`'s read predicate), so readers that arrive after
    ///   a waiting writer wait behind it;
    /// * a semaphore lease holds while the leases number at most `max_leases`, and otherwise
    ///   waits for the count to change.
    pub fn turn(self, sorted: &[String], idx: usize, max_leases: usize) -> Turn {
        match self {
            NodeKind::Read => match sorted[..idx]
                .iter()
                .position(|c| NodeKind::Write.sequence_of(c).is_some())
            {
                Some(first_writer) => Turn::After(first_writer),
                None => Turn::Ours,
            },
            NodeKind::Lease if sorted.len() <= max_leases => Turn::Ours,
            NodeKind::Lease => Turn::Count,
            _ if idx == 0 => Turn::Ours,
            _ => Turn::After(idx - 1),
        }
    }

    /// The sort key of a node of this kind: the 10-digit sequence after its final marker
    /// (Curator's `fixForSorting`), or `None` for a child not shaped like one — nested lock
    /// directories such as `block-`, `lock-0` or `x-lock-` must not count (issue 14).
    pub fn sequence_of(self, child: &str) -> Option<&str> {
        let split = child.len().checked_sub(SEQUENCE_DIGITS)?;
        let (head, seq) = (child.get(..split)?, child.get(split..)?);
        (head.ends_with(self.marker()) && seq.bytes().all(|b| b.is_ascii_digit())).then_some(seq)
    }

    /// The nodes that queue with this kind among `children` (readers and writers together),
    /// in Curator's order.
    pub fn sorted(self, children: Vec<String>) -> Vec<String> {
        let mut v: Vec<String> = children
            .into_iter()
            .filter(|c| self.queue_key(c).is_some())
            .collect();
        v.sort_by(|a, b| self.queue_key(a).cmp(&self.queue_key(b)));
        v
    }
}

/// [`NodeKind::sequence_of`] for lock contenders.
pub fn sequence_of(child: &str) -> Option<&str> {
    NodeKind::Lock.sequence_of(child)
}

/// The lock contenders among `children`, in Curator's order.
pub fn sorted_contenders(children: Vec<String>) -> Vec<String> {
    NodeKind::Lock.sorted(children)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_invalid_name(bad: &str) {
        let r = lock_path("/distlock", bad);
        assert!(
            matches!(r, Err(LockError::InvalidName { .. })),
            "{bad}: {r:?}"
        );
    }

    #[test]
    fn maps_and_rejects() {
        assert_eq!(lock_path("/distlock", "jobs").unwrap(), "/distlock/jobs");
        assert_eq!(lock_path("/distlock", "/abs/x").unwrap(), "/abs/x");
        for bad in [
            "a//b",
            "a/../b",
            "..",
            "a/",
            "/zookeeper",
            "/zookeeper/quota",
            "/",
            "a\u{1}b",
        ] {
            assert_invalid_name(bad);
        }
    }

    #[test]
    fn curator_order() {
        let kids = vec![
            "_c_b-lock-0000000011".to_owned(),
            "sub".to_owned(),
            "_c_a-lock-0000000010".to_owned(),
            "_c_c-lock-0000000002".to_owned(),
        ];
        assert_eq!(
            sorted_contenders(kids),
            vec![
                "_c_c-lock-0000000002",
                "_c_a-lock-0000000010",
                "_c_b-lock-0000000011"
            ]
        );
        assert_eq!(uuid().len(), 36);
    }

    #[test]
    fn only_curator_shaped_children_are_contenders() {
        // Nested lock directories whose names merely end in `lock-` (issue 14) are not
        // contenders; a contender is `…lock-` plus exactly the 10 digits ZooKeeper appends.
        let kids: Vec<String> = [
            "block-",
            "lock-0",
            "x-lock-",
            "lock-",
            "lock-00000000001",
            "lock-000000000a",
            "_c_b-lock-0000000007",
            "lock-0000000003",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        assert_eq!(
            sorted_contenders(kids),
            vec!["lock-0000000003", "_c_b-lock-0000000007"]
        );
        for not in ["block-", "lock-0", "x-lock-", "a/lock-", "lock-+000000001"] {
            assert_eq!(sequence_of(not), None, "{not}");
            assert_eq!(NodeKind::Latch.sequence_of(not), None, "{not}");
        }
        assert_eq!(sequence_of("_c_x-lock-0000000042"), Some("0000000042"));
        assert_eq!(sequence_of("_c_x-latch-0000000042"), None);
        assert_eq!(
            NodeKind::Latch.sequence_of("_c_x-latch-0000000042"),
            Some("0000000042")
        );
        assert!(lock_path("/distlock", "g/_c_x-latch-0000000001").is_err());
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn readers_and_writers_queue_together_in_curator_order() {
        let kids = names(&[
            "_c_a-__WRIT__0000000004",
            "_c_b-__READ__0000000002",
            "_c_c-lock-0000000001",
            "_c_d-__READ__0000000007",
            "leases",
        ]);
        let sorted = NodeKind::Read.sorted(kids.clone());
        assert_eq!(
            sorted,
            names(&[
                "_c_b-__READ__0000000002",
                "_c_a-__WRIT__0000000004",
                "_c_d-__READ__0000000007"
            ])
        );
        assert_eq!(NodeKind::Write.sorted(kids), sorted);
        // The first reader holds; the writer waits for it; the later reader waits for the
        // writer (not its own predecessor's kind).
        assert_eq!(NodeKind::Read.turn(&sorted, 0, 0), Turn::Ours);
        assert_eq!(NodeKind::Write.turn(&sorted, 1, 0), Turn::After(0));
        assert_eq!(NodeKind::Read.turn(&sorted, 2, 0), Turn::After(1));
        let readers = names(&["_c_b-__READ__0000000002", "_c_d-__READ__0000000007"]);
        assert_eq!(NodeKind::Read.turn(&readers, 1, 0), Turn::Ours);
    }

    #[test]
    fn a_lease_holds_while_the_count_fits() {
        let two = names(&["_c_a-lease-0000000001", "_c_b-lease-0000000002"]);
        assert_eq!(NodeKind::Lease.turn(&two, 1, 2), Turn::Ours);
        assert_eq!(NodeKind::Lease.turn(&two, 1, 1), Turn::Count);
        assert!(lock_path("/distlock", "s/leases/_c_x-lease-0000000001").is_err());
        assert!(lock_path("/distlock", "r/_c_x-__WRIT__0000000001").is_err());
    }

    #[test]
    fn contender_shaped_segments_are_rejected() {
        // A lock directory named like a contender would sit among its parent's contenders.
        for bad in [
            "a/lock-0000000001",
            "a/_c_00000000-0000-0000-0000-000000000000-lock-0000000001",
            "/x/lock-0000000001/y",
            "lock-0000000001",
        ] {
            assert_invalid_name(bad);
        }
        for good in [
            "a/lock-0",
            "a/block-",
            "a/x-lock-",
            "a/a/lock-",
            "lock-000000001",
        ] {
            assert!(lock_path("/distlock", good).is_ok(), "{good}");
        }
    }
}
