//! The schedule: which fault kinds apply to a target ([`profile`]) and the faults a seed draws
//! from them ([`schedule`]). The same seed, duration and profile always give the same schedule.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::takeover::LEASE;

/// Contending clients: [`IN_PROCESS`] run in this process, [`PROCESSES`] are child processes.
pub const CLIENTS: usize = 4;
/// Clients that are tasks of this process (they can be stalled).
pub const IN_PROCESS: [usize; 2] = [0, 1];
/// Clients that are child processes of the `distlock-chaos` binary (they can be SIGKILLed).
pub const PROCESSES: [usize; 2] = [2, 3];

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A client freezes past its lease while holding, then writes with its old token.
    Stall,
    /// A client process is SIGKILLed while it contends (and replaced later).
    ClientKill,
    /// A client's connections are black-holed, then healed.
    Partition,
    /// Added latency on a client's connections.
    Latency,
    /// What the store sends a client is held (its requests still arrive and are applied):
    /// every reply is lost until healed.
    LostReplies,
    /// The database kills every lock session server-side (`pg_terminate_backend` / `KILL`).
    ServerKill,
    /// A store process (or member) is paused with SIGSTOP, then resumed with SIGCONT.
    StorePause,
    /// A store process (member, leader, master) is killed and started again.
    StoreRestart,
    /// A ZooKeeper follower is cut from its leader (network namespaces), then healed.
    FollowerCut,
}

impl Kind {
    /// Every kind, in report order.
    pub const ALL: [Kind; 9] = [
        Kind::Stall,
        Kind::ClientKill,
        Kind::Partition,
        Kind::Latency,
        Kind::LostReplies,
        Kind::ServerKill,
        Kind::StorePause,
        Kind::StoreRestart,
        Kind::FollowerCut,
    ];

    /// The name in reports.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Stall => "client pause past the lease",
            Kind::ClientKill => "client SIGKILL",
            Kind::Partition => "partition client↔store",
            Kind::Latency => "latency",
            Kind::LostReplies => "replies lost (requests applied)",
            Kind::ServerKill => "server-side connection kill",
            Kind::StorePause => "store pause (SIGSTOP)",
            Kind::StoreRestart => "store kill and restart",
            Kind::FollowerCut => "follower cut (namespaces)",
        }
    }

    /// Whether it acts on the store's side (only on the chaos service set).
    pub fn is_store(self) -> bool {
        matches!(
            self,
            Kind::ServerKill | Kind::StorePause | Kind::StoreRestart | Kind::FollowerCut
        )
    }
}

/// Which store member a fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Member {
    /// The target's only store process.
    Only,
    /// Member `i` of the target's hosts (a Redlock master, an ensemble member).
    Index(usize),
    /// Whichever ensemble member leads when the fault starts.
    Leader,
}

/// One fault in the schedule.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// The client's next hold freezes for 2.5 leases (its connections silent; an embedded
    /// store's guard stops renewing) without looking at `lost()`, then writes its old token.
    Stall {
        /// Which client ([`IN_PROCESS`]).
        client: usize,
    },
    /// The client process is SIGKILLed; a new one takes its place after `respawn_ms`.
    ClientKill {
        /// Which client ([`PROCESSES`]).
        client: usize,
        /// Delay before its replacement starts.
        respawn_ms: u64,
    },
    /// The client's connections are black-holed for `for_ms`, then healed.
    Partition {
        /// Which client.
        client: usize,
        /// How long.
        for_ms: u64,
    },
    /// `ms` of latency each way on the client's connections for `for_ms`.
    Latency {
        /// Which client.
        client: usize,
        /// Added latency each way.
        ms: u64,
        /// How long.
        for_ms: u64,
    },
    /// The store's replies to the client are held for `for_ms` (its requests go through and
    /// are applied), then delivered.
    LostReplies {
        /// Which client.
        client: usize,
        /// How long.
        for_ms: u64,
    },
    /// Every session of the lock database is killed by the server.
    ServerKill,
    /// A store member is paused (SIGSTOP) for `for_ms`, then resumed.
    StorePause {
        /// Which member.
        member: Member,
        /// How long.
        for_ms: u64,
    },
    /// A store member is killed, stays down `down_ms`, then is started again.
    StoreRestart {
        /// Which member.
        member: Member,
        /// Time between the kill and the start.
        down_ms: u64,
    },
    /// Follower `follower` (0 or 1, in member order) is cut from the leader for `for_ms`.
    FollowerCut {
        /// Which follower.
        follower: usize,
        /// How long.
        for_ms: u64,
    },
}

impl Fault {
    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Fault::Stall { .. } => Kind::Stall,
            Fault::ClientKill { .. } => Kind::ClientKill,
            Fault::Partition { .. } => Kind::Partition,
            Fault::Latency { .. } => Kind::Latency,
            Fault::LostReplies { .. } => Kind::LostReplies,
            Fault::ServerKill => Kind::ServerKill,
            Fault::StorePause { .. } => Kind::StorePause,
            Fault::StoreRestart { .. } => Kind::StoreRestart,
            Fault::FollowerCut { .. } => Kind::FollowerCut,
        }
    }

    /// The client it hits, if a client fault.
    pub fn client(&self) -> Option<usize> {
        match self {
            Fault::Stall { client }
            | Fault::ClientKill { client, .. }
            | Fault::Partition { client, .. }
            | Fault::Latency { client, .. }
            | Fault::LostReplies { client, .. } => Some(*client),
            _ => None,
        }
    }

    /// Its planned length in ms (0: instantaneous).
    pub fn planned_ms(&self) -> u64 {
        match self {
            Fault::Stall { .. } => (LEASE * 5 / 2).as_millis() as u64,
            Fault::ClientKill { respawn_ms, .. } => *respawn_ms,
            Fault::Partition { for_ms, .. }
            | Fault::Latency { for_ms, .. }
            | Fault::LostReplies { for_ms, .. }
            | Fault::StorePause { for_ms, .. }
            | Fault::FollowerCut { for_ms, .. } => *for_ms,
            Fault::StoreRestart { down_ms, .. } => *down_ms,
            Fault::ServerKill => 0,
        }
    }
}

/// A fault and when it starts (ms into the run).
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Start, ms after the run began.
    pub at_ms: u64,
    /// What.
    pub fault: Fault,
}

/// What a target offers the nemesis.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// The fault kinds drawn.
    pub kinds: Vec<Kind>,
    /// Store members that can be hit (1: a single store process).
    pub members: usize,
    /// Whether [`Member::Leader`] means something (ensembles).
    pub leader: bool,
    /// Store faults at once (on distinct members).
    pub store_overlap: usize,
    /// Least time a killed member stays down (Redlock's assumption: one lease).
    pub min_down_ms: u64,
    /// Planning estimate of how long a restarted member takes to answer again.
    pub restart_ms: u64,
}

/// The fault kinds and store members of target `label`. `networked`: it has a network (not
/// SQLite); `processes`: client processes can be spawned; `store_faults`: the target is on the
/// chaos service set, whose stores may be paused and killed.
pub fn profile(label: &str, networked: bool, processes: bool, store_faults: bool) -> Profile {
    let mut kinds = vec![Kind::Stall];
    if processes {
        kinds.push(Kind::ClientKill);
    }
    if networked {
        kinds.extend([Kind::Partition, Kind::Latency, Kind::LostReplies]);
    }
    let mut p = Profile {
        kinds,
        members: 1,
        leader: false,
        store_overlap: 1,
        min_down_ms: 0,
        restart_ms: 2000,
    };
    if !(networked && store_faults) {
        return p;
    }
    match label {
        l if l.starts_with("postgres-") || l.starts_with("mysql-") => {
            p.kinds
                .extend([Kind::ServerKill, Kind::StorePause, Kind::StoreRestart]);
            p.restart_ms = if label.starts_with("mysql") {
                6000
            } else {
                3000
            };
        }
        "redis" => {
            p.kinds.extend([Kind::StorePause, Kind::StoreRestart]);
            p.restart_ms = 500;
        }
        "redlock" => {
            p.kinds.extend([Kind::StorePause, Kind::StoreRestart]);
            p.members = 5;
            p.store_overlap = 2;
            p.min_down_ms = (LEASE + Duration::from_millis(200)).as_millis() as u64;
            p.restart_ms = 500;
        }
        "zookeeper" => {
            p.kinds.extend([Kind::StorePause, Kind::StoreRestart]);
            p.restart_ms = 6000;
        }
        "etcd" => {
            p.kinds.extend([Kind::StorePause, Kind::StoreRestart]);
            p.restart_ms = 3000;
        }
        "etcd-cluster" => {
            p.kinds.extend([Kind::StorePause, Kind::StoreRestart]);
            p.members = 3;
            p.leader = true;
            p.restart_ms = 3000;
        }
        "zookeeper-ensemble" | "zookeeper-netns" => {
            p.kinds.extend([Kind::StorePause, Kind::StoreRestart]);
            if label == "zookeeper-netns" {
                p.kinds.push(Kind::FollowerCut);
            }
            p.members = 3;
            p.leader = true;
            p.restart_ms = 6000;
        }
        _ => {}
    }
    p
}

fn client_fault(rng: &mut StdRng, kind: Kind) -> Fault {
    let any = rng.random_range(0..CLIENTS);
    match kind {
        Kind::Stall => Fault::Stall {
            client: IN_PROCESS[rng.random_range(0..IN_PROCESS.len())],
        },
        Kind::ClientKill => Fault::ClientKill {
            client: PROCESSES[rng.random_range(0..PROCESSES.len())],
            respawn_ms: rng.random_range(100..2000),
        },
        Kind::Partition => Fault::Partition {
            client: any,
            for_ms: rng.random_range(200..2500),
        },
        Kind::LostReplies => Fault::LostReplies {
            client: any,
            for_ms: rng.random_range(200..2500),
        },
        _ => Fault::Latency {
            client: any,
            ms: rng.random_range(5..80),
            for_ms: rng.random_range(300..2000),
        },
    }
}

/// The schedule a seed gives for a run of `duration` on a target with profile `p`. Store faults
/// are planned so that at most `p.store_overlap` run at once, on distinct members (a store fault
/// that would break that becomes a client fault); client faults overlap freely, with each other
/// and with store faults.
pub fn schedule(seed: u64, duration: Duration, p: &Profile) -> Vec<Event> {
    let mut rng = StdRng::seed_from_u64(seed);
    let total = duration.as_millis() as u64;
    let client_kinds: Vec<Kind> = p.kinds.iter().copied().filter(|k| !k.is_store()).collect();
    // Planned store-fault windows: (until ms, member; None = unknown, e.g. the leader).
    let mut busy: Vec<(u64, Option<usize>)> = Vec::new();
    let mut at = rng.random_range(100..800u64);
    let mut v = Vec::new();
    // Bounded: at most one event per 100 ms of run; none in the last half second.
    while at < total.saturating_sub(500) && v.len() < (total / 100) as usize {
        let kind = p.kinds[rng.random_range(0..p.kinds.len())];
        let member = if p.members == 1 {
            Member::Only
        } else if p.leader && rng.random_bool(0.5) {
            Member::Leader
        } else {
            Member::Index(rng.random_range(0..p.members))
        };
        let fault = match kind {
            Kind::ServerKill => Fault::ServerKill,
            Kind::StorePause => Fault::StorePause {
                member,
                for_ms: rng.random_range(200..3000),
            },
            Kind::StoreRestart => Fault::StoreRestart {
                member: if p.leader && rng.random_bool(0.5) {
                    Member::Leader
                } else {
                    member
                },
                down_ms: rng.random_range(p.min_down_ms..p.min_down_ms + 2000),
            },
            Kind::FollowerCut => Fault::FollowerCut {
                follower: rng.random_range(0..2),
                for_ms: rng.random_range(1000..8000),
            },
            k => client_fault(&mut rng, k),
        };
        let fault = if fault.kind().is_store() {
            busy.retain(|(until, _)| *until > at);
            let m = match &fault {
                Fault::StorePause {
                    member: Member::Index(i),
                    ..
                }
                | Fault::StoreRestart {
                    member: Member::Index(i),
                    ..
                } => Some(*i),
                _ => None,
            };
            let clash = busy.len() >= p.store_overlap
                || busy.iter().any(|(_, b)| b.is_none() || *b == m)
                || (m.is_none() && !busy.is_empty());
            if clash {
                let k = client_kinds[rng.random_range(0..client_kinds.len())];
                client_fault(&mut rng, k)
            } else {
                let extra = match fault.kind() {
                    Kind::StoreRestart => p.restart_ms + 1000,
                    _ => 500,
                };
                busy.push((at + fault.planned_ms() + extra, m));
                fault
            }
        } else {
            fault
        };
        v.push(Event { at_ms: at, fault });
        at += rng.random_range(300..2500);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_schedule() {
        let p = profile("redis", true, true, true);
        let a = schedule(42, Duration::from_secs(60), &p);
        assert_eq!(a, schedule(42, Duration::from_secs(60), &p));
        assert_ne!(a, schedule(43, Duration::from_secs(60), &p));
        assert!(!a.is_empty());
        assert!(a.iter().all(|e| e.at_ms < 60_000));
        // Without a network only stalls and client kills are drawn.
        let embedded = profile("sqlite-row", false, true, true);
        assert!(schedule(42, Duration::from_secs(60), &embedded)
            .iter()
            .all(|e| matches!(e.fault, Fault::Stall { .. } | Fault::ClientKill { .. })));
    }

    #[test]
    fn store_faults_only_on_the_chaos_set_and_only_where_they_exist() {
        for label in ["redis", "postgres-row", "zookeeper-netns"] {
            assert!(profile(label, true, true, false)
                .kinds
                .iter()
                .all(|k| !k.is_store()));
        }
        let has = |label: &str, k: Kind| profile(label, true, true, true).kinds.contains(&k);
        assert!(has("mysql-for_update", Kind::ServerKill));
        assert!(has("postgres-advisory", Kind::StoreRestart));
        assert!(has("mysql-advisory", Kind::ServerKill));
        assert!(!has("redis", Kind::ServerKill));
        assert!(has("zookeeper-netns", Kind::FollowerCut));
        assert!(!has("zookeeper-ensemble", Kind::FollowerCut));
        assert!(has("redlock", Kind::StoreRestart));
        assert!(!profile("sqlite-row", false, true, true)
            .kinds
            .contains(&Kind::StorePause));
    }

    #[test]
    fn store_faults_respect_the_overlap_limit_and_redlock_downtime() {
        for (label, seed) in [("redlock", 7), ("zookeeper-ensemble", 8), ("redis", 9)] {
            let p = profile(label, true, true, true);
            let plan = schedule(seed, Duration::from_secs(600), &p);
            let kinds: std::collections::BTreeSet<Kind> =
                plan.iter().map(|e| e.fault.kind()).collect();
            assert_eq!(kinds.len(), p.kinds.len(), "{label}: every kind drawn");
            let mut windows: Vec<(u64, u64)> = Vec::new();
            for e in plan.iter().filter(|e| e.fault.kind().is_store()) {
                if let Fault::StoreRestart { down_ms, .. } = e.fault {
                    assert!(down_ms >= p.min_down_ms);
                }
                windows.retain(|(_, until)| *until > e.at_ms);
                assert!(windows.len() < p.store_overlap, "{label}: {e:?}");
                windows.push((e.at_ms, e.at_ms + e.fault.planned_ms()));
            }
        }
    }
}
