//! What a random run found, and its Markdown: the verdicts, the faults by kind, and the
//! schedule as it ran (so a failure replays from its seed).

use std::fmt::Write as _;

use super::schedule::{Event, Fault, Kind};

/// How an event of the schedule went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Applied and healed.
    Done,
    /// Not applied: its member was busy, the client was down, the store not answering.
    Skipped,
    /// Applying or healing it failed.
    Failed,
}

/// One event of the schedule as it ran.
#[derive(Clone, Debug)]
pub struct Applied {
    /// Planned start, ms into the run.
    pub at_ms: u64,
    /// The fault.
    pub fault: Fault,
    /// How long applying and healing it took, ms.
    pub took_ms: u64,
    /// How it went.
    pub status: Status,
    /// What it hit and what happened (the leader it found, sessions killed, …).
    pub note: String,
}

/// What a random run found.
#[derive(Clone, Debug, Default)]
pub struct NemesisReport {
    /// Backend label.
    pub backend: String,
    /// The seed.
    pub seed: u64,
    /// Minutes of faults.
    pub minutes: f64,
    /// The service set (`default` or `chaos`).
    pub services: String,
    /// The schedule the seed gave.
    pub schedule: Vec<Event>,
    /// The schedule as it ran.
    pub applied: Vec<Applied>,
    /// Successful acquisitions (holds).
    pub acquisitions: u64,
    /// Acquire attempts that failed (timeouts, unreachable store).
    pub failed_attempts: u64,
    /// Acquires that returned later than their wait plus the stated bound (must be 0).
    pub wait_overruns: u64,
    /// How far past that bound the latest of them returned, in ms.
    pub worst_overrun_ms: u64,
    /// Writes the fenced resources accepted.
    pub writes_accepted: u64,
    /// Overlapping believed-valid holds where the backend claims safety (must be 0).
    pub overlaps: u64,
    /// Overlaps across a fault after which the backend makes no claim (a Redis restarted
    /// empty; a `for_update` session ended by the server): fencing must still hold.
    pub overlaps_excused: u64,
    /// Stale writes rejected by the resources.
    pub stale_rejected: u64,
    /// Writes accepted with a token below one the resource had already accepted: stale writes
    /// accepted, i.e. out of token order (must be 0).
    pub out_of_order: u64,
    /// Acquisitions whose token was not above the token of the hold acquired before them on
    /// the same name (must be 0).
    pub token_regressions: u64,
    /// Such tokens across a fault after which the backend makes no claim (a lock granted before
    /// the server ended its session, whose acquire returned after the next holder's).
    pub token_regressions_excused: u64,
    /// The first overlaps and token regressions, with their holds' times (ms into the run).
    pub examples: Vec<String>,
    /// Liveness failures after the heal (must be none).
    pub liveness: Vec<String>,
    /// Locks still held in the store at the end (must be none).
    pub leftovers: Vec<String>,
    /// Other problems (a store that did not come back, a worker that did not stop).
    pub problems: Vec<String>,
}

impl NemesisReport {
    /// Every safety or liveness violation, as text (empty: the run passed).
    pub fn violations(&self) -> Vec<String> {
        let mut v = self.liveness.clone();
        v.extend(self.leftovers.iter().cloned());
        v.extend(self.problems.iter().cloned());
        if self.overlaps > 0 {
            v.push(format!(
                "{} overlapping believed-valid holds",
                self.overlaps
            ));
        }
        if self.out_of_order > 0 {
            v.push(format!(
                "{} stale writes accepted (out of token order)",
                self.out_of_order
            ));
        }
        if self.token_regressions > 0 {
            v.push(format!(
                "{} tokens not above the previous holder's",
                self.token_regressions
            ));
        }
        if self.wait_overruns > 0 {
            v.push(format!(
                "{} acquires returned past their wait plus {:?} (worst by {} ms)",
                self.wait_overruns,
                super::worker::OVERRUN_BOUND,
                self.worst_overrun_ms
            ));
        }
        if self.acquisitions == 0 {
            v.push("no acquisition at all".into());
        }
        v
    }

    /// `(kind, drawn, applied, skipped, failed)` for every kind drawn.
    pub fn by_kind(&self) -> Vec<(Kind, usize, usize, usize, usize)> {
        Kind::ALL
            .iter()
            .map(|k| {
                let of = |s: Status| {
                    self.applied
                        .iter()
                        .filter(|a| a.fault.kind() == *k && a.status == s)
                        .count()
                };
                (
                    *k,
                    self.schedule
                        .iter()
                        .filter(|e| e.fault.kind() == *k)
                        .count(),
                    of(Status::Done),
                    of(Status::Skipped),
                    of(Status::Failed),
                )
            })
            .filter(|r| r.1 > 0)
            .collect()
    }

    /// Faults applied, as `kind label: n` joined by commas.
    pub fn applied_summary(&self) -> String {
        self.by_kind()
            .iter()
            .map(|(k, _, done, _, _)| format!("{} {done}", k.label()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The Markdown report: verdicts, faults by kind, then the schedule as it ran.
    pub fn markdown(&self) -> String {
        let minutes = (self.minutes * 100.0).round() / 100.0;
        let mut s = format!(
            "# Random fault schedule: {} (seed {})\n\nReplay: `scripts/chaos.sh --random --seed {} --minutes {} --backend {} --services {}`\n\n{} min on the `{}` service set; {} faults drawn.\n\n",
            self.backend,
            self.seed,
            self.seed,
            minutes,
            self.backend,
            self.services,
            minutes,
            self.services,
            self.schedule.len()
        );
        let verdict = if self.violations().is_empty() {
            "pass".to_owned()
        } else {
            format!("**FAIL**: {}", self.violations().join("; "))
        };
        let _ = writeln!(
            s,
            "| holds | failed attempts | wait overruns | writes accepted | stale writes rejected | stale writes accepted (out of order) | overlaps where safety is claimed | overlaps excused | token regressions | token regressions excused | liveness after heal | left in store | verdict |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            self.acquisitions,
            self.failed_attempts,
            self.wait_overruns,
            self.writes_accepted,
            self.stale_rejected,
            self.out_of_order,
            self.overlaps,
            self.overlaps_excused,
            self.token_regressions,
            self.token_regressions_excused,
            if self.liveness.is_empty() { "ok" } else { "FAILED" },
            if self.leftovers.is_empty() { "nothing" } else { "LEFTOVERS" },
            verdict
        );
        if !self.examples.is_empty() {
            s.push_str("## Violations in detail (times in ms into the run)\n\n");
            for e in &self.examples {
                let _ = writeln!(s, "- {e}");
            }
            s.push('\n');
        }
        s.push_str("## Faults by kind\n\n| kind | drawn | applied | skipped | failed |\n|---|---:|---:|---:|---:|\n");
        for (k, drawn, done, skipped, failed) in self.by_kind() {
            let _ = writeln!(
                s,
                "| {} | {drawn} | {done} | {skipped} | {failed} |",
                k.label()
            );
        }
        s.push_str("\n## Schedule as it ran\n\n| at ms | fault | took ms | result |\n|---:|---|---:|---|\n");
        for a in &self.applied {
            let _ = writeln!(
                s,
                "| {} | {:?} | {} | {:?}: {} |",
                a.at_ms,
                a.fault,
                a.took_ms,
                a.status,
                a.note.replace('|', "/")
            );
        }
        s
    }
}
