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
        self.acquired_at(client, token, Instant::now())
    }

    /// Records an acquisition that happened at `at` (reported by a client process); returns
    /// its index.
    pub fn acquired_at(&self, client: &str, token: u64, at: Instant) -> usize {
        let mut h = self.0.lock().unwrap_or_else(|p| p.into_inner());
        h.push(Hold {
            client: client.to_owned(),
            token,
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
        guard: &lock_core::LockGuard,
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
        self.overlaps_excusing(&[]).0
    }

    /// Overlapping pairs as `(unexcused, excused)`: a pair is excused when some window
    /// `(from, to)` in `windows` separates the two acquisitions (the earlier before `to`, the
    /// later after `from`) — a fault that ends locks without telling their holders (a store
    /// restarted without persistence, a connection-bound lock's session killed by the server)
    /// happened in between.
    pub fn overlaps_excusing(&self, windows: &[(Instant, Instant)]) -> (u64, u64) {
        let mut holds = self.holds();
        holds.sort_by_key(|h| h.acquired_at);
        let end = |h: &Hold| h.ended_at.unwrap_or_else(Instant::now);
        let (mut bad, mut excused) = (0, 0);
        for (i, a) in holds.iter().enumerate() {
            for b in &holds[i + 1..] {
                if a.client != b.client && a.acquired_at < end(b) && b.acquired_at < end(a) {
                    if windows
                        .iter()
                        .any(|(from, to)| a.acquired_at < *to && b.acquired_at > *from)
                    {
                        excused += 1;
                    } else {
                        bad += 1;
                    }
                }
            }
        }
        (bad, excused)
    }
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
        assert_eq!(h.overlaps_excusing(&[(from, to)]), (0, 1));
        // A window after both acquisitions excuses nothing.
        let later = Instant::now();
        assert_eq!(h.overlaps_excusing(&[(later, later)]), (1, 0));
        // A client's report of an earlier end wins over a later one.
        let c = h.acquired_at("c", 3, later + ms(100));
        h.ended_at(c, later + ms(300), false);
        h.ended_at(c, later + ms(200), true);
        assert_eq!(h.holds()[c].ended_at, Some(later + ms(200)));
    }
}
