//! The HTTP/1.1 framing guard on arbitrary byte streams: never panics, and its decision does not
//! depend on how the stream was split into reads (the first byte of the input picks the split).
//! Found by this target: the first version of this invariant was too strict for malformed heads
//! (see below); the guard itself was right.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_screen::h1::{Guard, Verdict};

fn absolute(data: &[u8], step: usize) -> Option<(usize, &'static str)> {
    let mut g = Guard::new(8192, 32);
    let mut at = 0;
    for chunk in data.chunks(step.max(1)) {
        if let Verdict::Reject { keep, reason, .. } = g.feed(chunk) {
            return Some((at + keep, reason));
        }
        at += chunk.len();
        if g.is_passthrough() {
            return None;
        }
    }
    None
}

fuzz_target!(|input: &[u8]| {
    let Some((&step, data)) = input.split_first() else {
        return;
    };
    let whole = absolute(data, data.len());
    let split = absolute(data, step as usize % 17 + 1);
    // A stream the parser itself will refuse turns the guard off at different points depending
    // on the split; compare only when neither run stepped aside.
    if let (Some(a), Some(b)) = (whole, split) {
        assert_eq!(a.1, b.1, "split reads changed the reason");
        // A malformed or oversized head is cut at the start of the read that revealed it (any
        // prefix of it plus the poison is refused by hyper), so only complete-head and body
        // refusals have a split-independent position.
        if !matches!(a.1, "malformed request head" | "request head too large") {
            assert_eq!(a.0, b.0, "split reads changed where the stream is cut");
        }
    }
});
