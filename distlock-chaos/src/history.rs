//! The history checker: every hold as `(client, token, acquired_at, released_at or lost_at)` on
//! one monotonic clock, and the overlaps between holds both holders believed valid.

use std::sync::{Arc, Mutex};

use tokio::time::Instant;

/// One hold.
#[derive(Debug, Clone)]
pub struct Hold {
    /// Which client held it.
    pub client: String,
    /// Its fencing token.
    pub token: u64,
    /// When the acquire was called: the store granted the lock between this and `acquired_at`.
    pub asked_at: Instant,
    /// When acquire returned.
    pub acquired_at: Instant,
    /// When the holder stopped believing it held the lock (release called or lost() fired).
    pub ended_at: Option<Instant>,
    /// Whether it ended by `lost()`.
    pub lost: bool,
}

/// A shared history of holds for one lock name.
#[derive(Clone, Default)]
pub struct History(Arc<Mutex<Vec<Hold>>>);

impl History {
    /// Records an acquisition; returns its index.
    pub fn acquired(&self, client: &str, token: u64) -> usize {
        let now = Instant::now();
        self.acquired_at(client, token, now, now)
    }

    /// Records an acquisition asked for at `asked` that returned at `at` (a client process
    /// reports both); returns its index.
    pub fn acquired_at(&self, client: &str, token: u64, asked: Instant, at: Instant) -> usize {
        let mut h = self.0.lock().unwrap_or_else(|p| p.into_inner());
        h.push(Hold {
            client: client.to_owned(),
            token,
            asked_at: asked.min(at),
            acquired_at: at,
            ended_at: None,
            lost: false,
        });
        h.len() - 1
    }

    /// Records the end of hold `i`.
    pub fn ended(&self, i: usize, lost: bool) {
        let mut h = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(hold) = h.get_mut(i) {
            hold.ended_at.get_or_insert(Instant::now());
            hold.lost |= lost;
        }
    }

    /// Records that hold `i` ended at `at` (a frozen holder's own lease deadline, a killed
    /// client's death, a client process's report), unless it is known to have ended earlier.
    pub fn ended_at(&self, i: usize, at: Instant, lost: bool) {
        let mut h = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(hold) = h.get_mut(i) {
            hold.ended_at = Some(hold.ended_at.map_or(at, |e| e.min(at)));
            hold.lost |= lost;
        }
    }

    /// Spawns the task that ends hold `i` the instant `guard`'s `lost()` resolves (the end of
    /// a believed-valid hold); it yields that instant. Abort it when the hold ends otherwise.
    pub fn end_when_lost(
        &self,
        i: usize,
        guard: &distlock_core::LockGuard,
    ) -> tokio::task::JoinHandle<Instant> {
        let (lost, h) = (guard.lost(), self.clone());
        tokio::spawn(async move {
            let _ = lost.await;
            h.ended(i, true);
            Instant::now()
        })
    }

    /// All holds so far.
    pub fn holds(&self) -> Vec<Hold> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Pairs of holds by different clients whose believed-valid intervals intersect.
    pub fn overlaps(&self) -> u64 {
        self.judge(&[], Instant::now()).overlaps
    }

    /// The verdict on this name's holds. `windows` are faults `(from, to)` that end locks
    /// without telling their holders where the backend claims nothing across them (a store
    /// restarted without persistence, a connection-bound lock's session ended by the server):
    /// an overlap, or a token below the previous acquisition's, is excused when one hold's lock
    /// could have been granted before such a fault ended (asked before `to`) and the other's
    /// after it began (returned after `from`). `origin`: the instant example times count from.
    pub fn judge(&self, windows: &[(Instant, Instant)], origin: Instant) -> Judged {
        let mut holds = self.holds();
        holds.sort_by_key(|h| h.acquired_at);
        let end = |h: &Hold| h.ended_at.unwrap_or_else(Instant::now);
        let across = |first: &Hold, then: &Hold| {
            windows
                .iter()
                .any(|(from, to)| first.asked_at < *to && then.acquired_at > *from)
        };
        let ms = |at: Instant| at.saturating_duration_since(origin).as_millis();
        let show = |h: &Hold| {
            format!(
                "{} token {} asked {} ms, got {} ms, {} {} ms",
                h.client,
                h.token,
                ms(h.asked_at),
                ms(h.acquired_at),
                if h.lost { "lost" } else { "ended" },
                h.ended_at.map_or(0, ms)
            )
        };
        let mut j = Judged::default();
        for (i, a) in holds.iter().enumerate() {
            for b in &holds[i + 1..] {
                if a.client != b.client && a.acquired_at < end(b) && b.acquired_at < end(a) {
                    if across(a, b) || across(b, a) {
                        j.overlaps_excused += 1;
                    } else {
                        j.overlaps += 1;
                        if j.examples.len() < 5 {
                            j.examples
                                .push(format!("overlap: {} / {}", show(a), show(b)));
                        }
                    }
                }
            }
        }
        for w in holds.windows(2) {
            if w[1].token <= w[0].token {
                if across(&w[1], &w[0]) {
                    j.regressions_excused += 1;
                } else {
                    j.regressions += 1;
                    if j.examples.len() < 10 {
                        j.examples.push(format!(
                            "token not above the previous: {} then {}",
                            show(&w[0]),
                            show(&w[1])
                        ));
                    }
                }
            }
        }
        j
    }
}

/// The verdict on one name's holds ([`History::judge`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Judged {
    /// Overlapping believed-valid holds not excused (must be 0).
    pub overlaps: u64,
    /// Overlaps across a fault after which the backend makes no claim.
    pub overlaps_excused: u64,
    /// Acquisitions (in the order they returned) whose token was not above the previous one's,
    /// not excused (must be 0).
    pub regressions: u64,
    /// Such tokens across a fault after which the backend makes no claim: a lock granted before
    /// the fault whose acquire returned after the next holder's.
    pub regressions_excused: u64,
    /// The first violations, with their holds' times.
    pub examples: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn finds_overlaps() {
        let h = History::default();
        let a = h.acquired("a", 1);
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        let b = h.acquired("b", 2);
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        h.ended(a, false);
        h.ended(b, false);
        assert_eq!(h.overlaps(), 1);
        let h2 = History::default();
        let a = h2.acquired("a", 1);
        h2.ended(a, false);
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        let b = h2.acquired("b", 2);
        h2.ended(b, false);
        assert_eq!(h2.overlaps(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_between_acquisitions_excuses_an_overlap() {
        let ms = std::time::Duration::from_millis;
        let h = History::default();
        let a = h.acquired("a", 1);
        tokio::time::sleep(ms(10)).await;
        let (from, to) = (Instant::now(), Instant::now() + ms(5));
        tokio::time::sleep(ms(10)).await;
        let b = h.acquired("b", 2);
        tokio::time::sleep(ms(10)).await;
        h.ended(a, false);
        h.ended(b, false);
        let j = h.judge(&[(from, to)], from);
        assert_eq!((j.overlaps, j.overlaps_excused), (0, 1));
        // A window after both acquisitions excuses nothing.
        let later = Instant::now();
        let j = h.judge(&[(later, later)], from);
        assert_eq!((j.overlaps, j.overlaps_excused), (1, 0));
        assert_eq!(j.examples.len(), 1);
        // A client's report of an earlier end wins over a later one.
        let c = h.acquired_at("c", 3, later + ms(100), later + ms(100));
        h.ended_at(c, later + ms(300), false);
        h.ended_at(c, later + ms(200), true);
        assert_eq!(h.holds()[c].ended_at, Some(later + ms(200)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_granted_before_a_kill_but_returned_after_the_next_holders_is_excused() {
        let ms = std::time::Duration::from_millis;
        let h = History::default();
        let t0 = Instant::now();
        // a asks at 0 and is granted token 1 at once, but its reply takes until 50 ms; the
        // server kills its session at 10-20 ms and b gets token 2 at 30 ms.
        let b = h.acquired_at("b", 2, t0 + ms(25), t0 + ms(30));
        let a = h.acquired_at("a", 1, t0, t0 + ms(50));
        h.ended_at(a, t0 + ms(60), true);
        h.ended_at(b, t0 + ms(70), false);
        let j = h.judge(&[(t0 + ms(10), t0 + ms(20))], t0);
        assert_eq!(
            (
                j.overlaps,
                j.overlaps_excused,
                j.regressions,
                j.regressions_excused
            ),
            (0, 1, 0, 1)
        );
        let j = h.judge(&[], t0);
        assert_eq!((j.overlaps, j.regressions), (1, 1));
    }
}
