//! The sets of private store instances `scripts/services.sh` runs: the shared set every test uses,
//! and the chaos set (`DISTLOCK_SERVICES_SET=chaos`, every port +1000) whose stores the random
//! fault schedule may pause, kill and restart without breaking tests that run at the same time.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::OnceLock;

/// Where [`ServiceSet::from_env`] reads the set, as `scripts/services.sh` does.
pub const ENV: &str = "DISTLOCK_SERVICES_SET";

static SELECTED: OnceLock<ServiceSet> = OnceLock::new();

/// One set of store instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceSet {
    /// The instances the test suite uses (ports as in `docs/testing.md`). Never paused or killed.
    Shared,
    /// A second, independent set for store faults: ports +1000, its own data and namespaces.
    Chaos,
}

impl ServiceSet {
    /// `default` (or `shared`) or `chaos`.
    ///
    /// # Errors
    /// Any other word.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "" | "default" | "shared" => Ok(Self::Shared),
            "chaos" => Ok(Self::Chaos),
            other => Err(format!(
                "unknown service set '{other}' (known: default, chaos)"
            )),
        }
    }

    /// The set [`ServiceSet::select`] chose, else the one `DISTLOCK_SERVICES_SET` names
    /// (unset: the shared set).
    ///
    /// # Errors
    /// An unknown name.
    pub fn from_env() -> Result<Self, String> {
        match SELECTED.get() {
            Some(s) => Ok(*s),
            None => Self::parse(&std::env::var(ENV).unwrap_or_default()),
        }
    }

    /// Chooses the set [`ServiceSet::from_env`] answers for the rest of the process (the
    /// command line's `--services`); the first choice stays.
    pub fn select(set: Self) {
        let _ = SELECTED.set(set);
    }

    /// The name `scripts/services.sh` knows it by.
    pub fn name(self) -> &'static str {
        match self {
            Self::Shared => "default",
            Self::Chaos => "chaos",
        }
    }

    /// This set's port for the shared set's `port`.
    pub fn port(self, port: u16) -> u16 {
        match self {
            Self::Shared => port,
            Self::Chaos => port + 1000,
        }
    }

    /// The address of member `n` (1-3) of this set's ensemble in network namespaces.
    pub fn netns_ip(self, n: u8) -> Ipv4Addr {
        match self {
            Self::Shared => Ipv4Addr::new(10, 231, 0, n),
            Self::Chaos => Ipv4Addr::new(10, 231, 1, n),
        }
    }

    /// The PostgreSQL database `db` of this set.
    pub fn postgres_url(self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port(15432))
    }

    /// Runs `scripts/services.sh ARGS` on this set; its standard output.
    ///
    /// # Errors
    /// The script failed (its standard error).
    pub fn run(self, args: &[&str]) -> Result<String, String> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services.sh");
        let out = Command::new(script)
            .args(args)
            .env(ENV, self.name())
            .output()
            .map_err(|e| format!("{script}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{ENV}={} services.sh {args:?}: {}",
                self.name(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// [`ServiceSet::run`] off the async worker threads (starting a store takes seconds).
    ///
    /// # Errors
    /// As [`ServiceSet::run`].
    pub async fn run_async(self, args: &[&str]) -> Result<String, String> {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            self.run(&args)
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// The port of this set's ZooKeeper ensemble leader.
    ///
    /// # Errors
    /// No leader (the ensemble is down or electing).
    pub fn zk_leader(self) -> Result<u16, String> {
        self.leader_of("zk-ensemble")
    }

    /// The port `services.sh status SERVICE` marks `(leader)`.
    fn leader_of(self, service: &str) -> Result<u16, String> {
        self.run(&["status", service])?
            .lines()
            .find(|l| l.contains("(leader)"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| self.up_hint(&format!("no {service} leader")))
    }

    /// The client port of this set's etcd cluster leader (from `services.sh status`).
    ///
    /// # Errors
    /// No member says it leads (electing, or the cluster is down).
    pub fn etcd_leader(self) -> Result<u16, String> {
        self.leader_of("etcd-cluster")
    }

    /// `what`, and how to bring this set up.
    pub fn up_hint(self, what: &str) -> String {
        match self {
            Self::Shared => format!("{what}; run `scripts/services.sh up`"),
            Self::Chaos => format!("{what}; run `{ENV}=chaos scripts/services.sh up`"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chaos_set_shifts_every_port() {
        assert_eq!(ServiceSet::Shared.port(16379), 16379);
        assert_eq!(ServiceSet::Chaos.port(16379), 17379);
        assert_eq!(ServiceSet::parse("chaos"), Ok(ServiceSet::Chaos));
        assert_eq!(ServiceSet::parse("default"), Ok(ServiceSet::Shared));
        assert!(ServiceSet::parse("prod").is_err());
        assert_eq!(
            ServiceSet::Chaos.postgres_url("distlock"),
            "postgres://postgres@127.0.0.1:16432/distlock"
        );
    }
}
