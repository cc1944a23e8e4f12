//! Latency histograms and fairness figures.

use std::time::Duration;

use hdrhistogram::Histogram;

/// A latency histogram in microseconds (1 µs .. 10 min, 3 significant digits).
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Latencies(
            Histogram::new_with_bounds(1, 600_000_000, 3)
                .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!())),
        )
    }
}

impl Latencies {
    /// Records one sample.
    pub fn record(&mut self, d: Duration) {
        let us = (d.as_micros() as u64).clamp(1, 600_000_000);
        let _ = self.0.record(us);
    }

    /// Merges another histogram.
    pub fn merge(&mut self, other: &Latencies) {
        let _ = self.0.add(&other.0);
    }

    /// Samples recorded.
    #[cfg(test)]
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// The wait at each of [`LADDER`]'s quantiles, as `[quantile, µs]` (empty when no sample).
    pub fn ladder(&self) -> Vec<[f64; 2]> {
        if self.0.is_empty() {
            return Vec::new();
        }
        LADDER.iter().map(|&q| [q, self.quantile_us(q)]).collect()
    }

    /// The `q` quantile in µs (0 when empty).
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            0.0
        } else {
            self.0.value_at_quantile(q) as f64
        }
    }
}

/// The quantiles a wait distribution is drawn at: a percentile ladder up to the worst wait.
pub const LADDER: [f64; 10] = [0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999, 1.0];

/// The fewest acquisitions one worker got ÷ the mean per worker: 1.0 = everyone got its fair
/// share, 0 = someone starved (0 when nothing was acquired).
pub fn worst_share(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    match counts.iter().min() {
        Some(&min) if total > 0 => min as f64 * counts.len() as f64 / total as f64,
        _ => 0.0,
    }
}

/// Jain's fairness index over per-worker counts: 1.0 = perfectly even.
pub fn jain(counts: &[u64]) -> f64 {
    let n = counts.len() as f64;
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let sq: f64 = counts.iter().map(|&c| (c as f64).powi(2)).sum();
    if sq == 0.0 {
        0.0
    } else {
        sum * sum / (n * sq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index_bounds() {
        assert!((jain(&[5, 5, 5, 5]) - 1.0).abs() < 1e-9);
        assert!((jain(&[20, 0, 0, 0]) - 0.25).abs() < 1e-9);
    }

    #[test]
    fn worst_share_is_the_starved_clients_fraction_of_fair() {
        assert!((worst_share(&[5, 5, 5, 5]) - 1.0).abs() < 1e-9);
        assert!((worst_share(&[1, 3]) - 0.5).abs() < 1e-9);
        assert_eq!(worst_share(&[20, 0, 0, 0]), 0.0);
        assert_eq!(worst_share(&[0, 0]), 0.0);
    }

    #[test]
    fn quantiles() {
        let mut l = Latencies::default();
        for i in 1..=100 {
            l.record(Duration::from_micros(i));
        }
        assert_eq!(l.count(), 100);
        assert!((l.quantile_us(0.5) - 50.0).abs() <= 1.0);
        let ladder = l.ladder();
        assert_eq!(ladder.len(), LADDER.len());
        assert_eq!(ladder.last(), Some(&[1.0, 100.0]));
        assert!(ladder.windows(2).all(|w| w[0][1] <= w[1][1]), "{ladder:?}");
    }
}
