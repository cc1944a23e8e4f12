//! [`Capabilities`]: what a backend guarantees, as data that docs, tests and the benchmark
//! report all read.

/// How a crashed holder's lock is freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CrashRelease {
    /// When its lease (`ttl`) runs out unrenewed.
    Lease,
    /// When the store expires its session (ZooKeeper session timeout).
    Session,
    /// When the store sees its connection close (SQL `for_update`).
    Connection,
}

/// How a waiter learns that the lock may be free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wakeup {
    /// A watch on the predecessor (ZooKeeper).
    Watch,
    /// A published release message (Redis pub/sub, PostgreSQL `LISTEN/NOTIFY`).
    Notify,
    /// The store's own lock queue (`SELECT … FOR UPDATE`).
    LockQueue,
    /// Bounded exponential backoff with jitter, plus a wake-up at the holder's expiry. Only
    /// one waiter per process and lock polls (the others queue in the process and are woken by
    /// a local release, see [`crate::backend::local_queue`]).
    Backoff,
}

/// What a backend guarantees beyond the contract every backend keeps (mutual exclusion,
/// fencing tokens that strictly increase per name, `lost()`, release on drop).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// The lock expires after `ttl` unless renewed (false: held while a session/connection lives).
    pub lease: bool,
    /// How a crashed holder's lock is freed.
    pub crash_release: CrashRelease,
    /// How waiters are woken.
    pub wakeup: Wakeup,
    /// Waiters are served in arrival order.
    pub fifo: bool,
    /// The backend can report the waiting queue length.
    pub queue_length: bool,
    /// The longest store stall (no reply at all: fsync stalls, GC, leader elections) a held
    /// guard rides out at the default lease without being reported lost, where the backend
    /// bounds it by its own configuration (ZooKeeper: a share of the session timeout). `None`:
    /// bounded by the lease alone (a renewal has two thirds of the lease to come back).
    pub stall_tolerance: Option<std::time::Duration>,
    /// The backend records a holder identity with an acquisition
    /// ([`crate::AcquireOptions::holder`]) and `inspect` reports it, so
    /// [`crate::DistributedLock::leader`] can name a leader. `false`: `leader` answers
    /// [`crate::LockError::Unsupported`] (elections still work; observers cannot see who leads).
    pub holder_identity: bool,
    /// [`crate::DistributedLock::list`] names the locks held now (`false`: it answers
    /// [`crate::LockError::Unsupported`]).
    pub list: bool,
    /// [`crate::DistributedLock::break_lock`] can force a holder out safely (`false`: it answers
    /// [`crate::LockError::Unsupported`]).
    pub break_lock: bool,
}

impl Capabilities {
    /// A lease-based backend (Redis, SQL row mode).
    pub const fn leased(wakeup: Wakeup, fifo: bool) -> Self {
        Capabilities {
            lease: true,
            crash_release: CrashRelease::Lease,
            wakeup,
            fifo,
            queue_length: false,
            stall_tolerance: None,
            holder_identity: false,
            list: false,
            break_lock: false,
        }
    }

    /// A session- or connection-bound backend (ZooKeeper, SQL `for_update`).
    pub const fn bound(crash_release: CrashRelease, wakeup: Wakeup, fifo: bool) -> Self {
        Capabilities {
            lease: false,
            crash_release,
            wakeup,
            fifo,
            queue_length: false,
            stall_tolerance: None,
            holder_identity: false,
            list: false,
            break_lock: false,
        }
    }

    /// Sets `stall_tolerance`.
    pub const fn with_stall_tolerance(mut self, tolerance: std::time::Duration) -> Self {
        self.stall_tolerance = Some(tolerance);
        self
    }

    /// Sets `holder_identity`.
    pub const fn with_holder_identity(mut self, yes: bool) -> Self {
        self.holder_identity = yes;
        self
    }

    /// Sets `list` and `break_lock`.
    pub const fn with_operator(mut self, list: bool, break_lock: bool) -> Self {
        self.list = list;
        self.break_lock = break_lock;
        self
    }

    /// Sets `queue_length`.
    pub const fn with_queue_length(mut self, yes: bool) -> Self {
        self.queue_length = yes;
        self
    }
}
