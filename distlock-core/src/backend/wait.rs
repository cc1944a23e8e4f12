//! Waiting helpers: a [`Deadline`] for `wait`, and [`Backoff`] with jitter for stores that
//! cannot notify.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

/// The end of an acquire's `wait` (or none: wait forever).
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    start: Instant,
    end: Option<Instant>,
}

impl Deadline {
    /// Starts now; `None` never expires.
    pub fn after(wait: Option<Duration>) -> Self {
        let start = Instant::now();
        Deadline {
            start,
            end: wait.map(|w| start + w),
        }
    }

    /// The deadline instant, if any.
    pub fn instant(&self) -> Option<Instant> {
        self.end
    }

    /// Time left (`None` = forever).
    pub fn remaining(&self) -> Option<Duration> {
        self.end
            .map(|e| e.saturating_duration_since(Instant::now()))
    }

    /// Whether the deadline has passed.
    pub fn expired(&self) -> bool {
        self.end.is_some_and(|e| Instant::now() >= e)
    }

    /// How long since the start.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// `d`, cut to the time left.
    pub fn clamp(&self, d: Duration) -> Duration {
        self.remaining().map_or(d, |r| r.min(d))
    }

    /// Sleeps `d` or until the deadline, whichever is first.
    pub async fn sleep(&self, d: Duration) {
        tokio::time::sleep(self.clamp(d)).await;
    }
}

/// Bounded exponential backoff with full jitter: each delay is uniform in
/// `[cur/2, cur]`, and `cur` doubles from `min` up to `max`.
#[derive(Clone, Debug)]
pub struct Backoff {
    cur: Duration,
    min: Duration,
    max: Duration,
}

impl Backoff {
    /// Starts at `min`, never exceeds `max`.
    pub fn new(min: Duration, max: Duration) -> Self {
        Backoff {
            cur: min,
            min,
            max: max.max(min),
        }
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        let d = jitter(self.cur, 0.5);
        self.cur = (self.cur * 2).min(self.max);
        d
    }

    /// Back to `min` (after progress).
    pub fn reset(&mut self) {
        self.cur = self.min;
    }
}

/// `d` scaled by a random factor in `[1 - spread, 1]`.
pub fn jitter(d: Duration, spread: f64) -> Duration {
    let f = 1.0 - rand::rng().random_range(0.0..=spread.clamp(0.0, 1.0));
    d.mul_f64(f)
}

/// A random extra delay in `[0, max]` (added to expiry wake-ups so waiters do not stampede).
pub fn random_up_to(max: Duration) -> Duration {
    max.mul_f64(rand::rng().random_range(0.0..=1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_and_grows() {
        let mut b = Backoff::new(Duration::from_millis(2), Duration::from_millis(50));
        let delays: Vec<_> = (0..20).map(|_| b.next_delay()).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(50)));
        assert!(delays[19] >= Duration::from_millis(25));
        assert!(delays[0] <= Duration::from_millis(2));
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_clamps() {
        let d = Deadline::after(Some(Duration::from_millis(100)));
        assert_eq!(d.clamp(Duration::from_secs(5)), Duration::from_millis(100));
        d.sleep(Duration::from_secs(5)).await;
        assert!(d.expired());
        assert!(!Deadline::after(None).expired());
    }
}
