//! The figures every report computes: medians of runs and nearest-rank percentiles of latencies.

/// The median of `v` (the upper one of an even count; 0 when empty), sorting `v` in place.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

/// [`median`] of the values of an iterator.
pub fn median_of(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().collect();
    median(&mut v)
}

/// The nearest-rank `p`th percentile (0–100) of `sorted` (ascending), as it is stored (0 when
/// empty): the smallest value at least `p` % of the values are at or below.
pub fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_nearest_rank_percentiles() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(median_of([]), 0.0);
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(
            (
                percentile(&v, 50.0),
                percentile(&v, 90.0),
                percentile(&v, 99.0)
            ),
            (50, 90, 99)
        );
        assert_eq!((percentile(&v, 0.0), percentile(&v, 100.0)), (1, 100));
        assert_eq!(percentile(&[], 50.0), 0);
    }
}
