//! The latency histograms: fixed buckets from 25 µs to 10 s, counted with relaxed atomics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the latency histograms' buckets in µs (a cached hit takes tens of µs, an
/// origin milliseconds to seconds).
pub const BOUNDS_US: [u64; 18] = [
    25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];
const BUCKETS: usize = BOUNDS_US.len() + 1;

/// A latency histogram: a count per bucket (the last is `+Inf`) and the sum in µs.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS],
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        // The first bucket whose bound is ≥ the value (Prometheus buckets are `le`).
        let i = BOUNDS_US.partition_point(|&b| b < us);
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
    }

    pub(crate) fn add_to(&self, into: &mut HistSnap) {
        for (a, c) in into.counts.iter_mut().zip(&self.counts) {
            *a += c.load(Relaxed);
        }
        into.sum_us += self.sum_us.load(Relaxed);
    }
}

/// A histogram's values at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistSnap {
    pub counts: [u64; BUCKETS],
    pub sum_us: u64,
}

impl HistSnap {
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// What was added since `earlier`.
    pub fn since(&self, earlier: &HistSnap) -> HistSnap {
        let mut d = HistSnap::default();
        for (i, c) in d.counts.iter_mut().enumerate() {
            *c = self.counts[i].saturating_sub(earlier.counts[i]);
        }
        d.sum_us = self.sum_us.saturating_sub(earlier.sum_us);
        d
    }

    /// The `q` quantile in seconds, interpolated inside its bucket as Prometheus's
    /// `histogram_quantile` does; `None` without samples. Past the last bound: that bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut below = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            if c > 0 && (below + c) as f64 >= rank {
                let Some(&upper) = BOUNDS_US.get(i) else {
                    return Some(BOUNDS_US[BOUNDS_US.len() - 1] as f64 / 1e6);
                };
                let lower = if i == 0 { 0 } else { BOUNDS_US[i - 1] };
                let within = ((rank - below as f64) / c as f64).clamp(0.0, 1.0);
                return Some((lower as f64 + (upper - lower) as f64 * within) / 1e6);
            }
            below += c;
        }
        None
    }

    pub(crate) fn buckets(&self) -> Vec<(f64, u64)> {
        self.counts
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                let bound = BOUNDS_US.get(i).map_or(f64::INFINITY, |&b| b as f64 / 1e6);
                (bound, c)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_le_and_quantiles_interpolate() {
        let h = Histogram::default();
        h.record(Duration::from_micros(25));
        h.record(Duration::from_micros(26));
        h.record(Duration::from_secs(60));
        let mut s = HistSnap::default();
        h.add_to(&mut s);
        assert_eq!(s.counts[0], 1, "25 µs is in le=25µs");
        assert_eq!(s.counts[1], 1);
        assert_eq!(s.counts[BUCKETS - 1], 1, "+Inf");
        assert_eq!(s.count(), 3);
        assert_eq!(s.sum_us, 25 + 26 + 60_000_000);
        // The median's rank (1.5 of 3) is half-way into the 25–50 µs bucket's one sample.
        assert_eq!(s.quantile(0.5), Some(37.5e-6));
        assert_eq!(
            s.quantile(1.0),
            Some(10.0),
            "past the last bound: that bound"
        );
        assert_eq!(HistSnap::default().quantile(0.5), None);
        let later = {
            h.record(Duration::from_micros(300));
            let mut t = HistSnap::default();
            h.add_to(&mut t);
            t
        };
        let d = later.since(&s);
        assert_eq!(d.count(), 1);
        let p99 = d.quantile(0.99).unwrap_or_default() * 1e6;
        assert!((497.0..498.0).contains(&p99), "{p99}");
    }
}
