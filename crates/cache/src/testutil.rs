//! Test helpers shared by the parsers' tests.
#![allow(clippy::unwrap_used)]

use http::HeaderValue;

/// Deterministic pseudo-random header lines (0–23 bytes) drawn from `alphabet`, for "no panic
/// on any input" tests. `alphabet` must hold only bytes a `HeaderValue` accepts.
pub(crate) fn arbitrary_lines(seed: u64, count: usize, alphabet: &[u8]) -> Vec<HeaderValue> {
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize
    };
    (0..count)
        .map(|_| {
            let len = next() % 24;
            let bytes: Vec<u8> = (0..len)
                .map(|_| alphabet[next() % alphabet.len()])
                .collect();
            HeaderValue::from_bytes(&bytes).unwrap()
        })
        .collect()
}
