//! Guards that undo a store fault when dropped, whatever the scenario or fault task did (returned
//! early, failed, panicked): a killed member started again, paused processes resumed, a
//! namespace cut healed. Used by the scripted store faults and by the nemesis.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::services::ServiceSet;

/// Starts a stopped store member (`services.sh start-one NAME`) when dropped, unless it was
/// started already with [`Restart::now`].
pub(crate) struct Restart(ServiceSet, Option<String>);

impl Restart {
    pub(crate) fn new(set: ServiceSet, member: &str) -> Self {
        Restart(set, Some(member.to_owned()))
    }

    /// Starts it now, off the async worker threads (starting a store takes seconds), and waits
    /// until it answers.
    pub(crate) async fn now(mut self) -> Result<(), String> {
        let (set, member) = (self.0, self.1.take());
        match member {
            Some(m) => set.run_async(&["start-one", &m]).await.map(drop),
            None => Ok(()),
        }
    }
}

impl Drop for Restart {
    fn drop(&mut self) {
        if let Some(m) = self.1.take() {
            let _ = self.0.run(&["start-one", &m]);
        }
    }
}

/// Resumes (SIGCONT) processes stopped with SIGSTOP when dropped.
pub(crate) struct Resume(pub(crate) Vec<Pid>);

impl Drop for Resume {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = kill(*p, Signal::SIGCONT);
        }
    }
}

/// Heals the namespace cut between members A and B (`services.sh netns-heal A B`) when dropped.
pub(crate) struct Uncut(pub(crate) ServiceSet, pub(crate) String, pub(crate) String);

impl Drop for Uncut {
    fn drop(&mut self) {
        let _ = self.0.run(&["netns-heal", &self.1, &self.2]);
    }
}
