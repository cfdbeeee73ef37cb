//! W3C Trace Context from arbitrary bytes: `traceparent` and `tracestate` fields as a client
//! sends them. Whatever parses must round-trip through rampart's own `traceparent`, and what
//! the origin gets is always a valid version-00 value.
#![no_main]

use http::header::HeaderValue;
use libfuzzer_sys::fuzz_target;
use rampart_otel::context::{parse_traceparent, traceparent_with, Incoming, SpanId};

fuzz_target!(|data: &[u8]| {
    let mut parents = Vec::new();
    let mut states = Vec::new();
    for (i, part) in data.split(|&b| b == b'\n').enumerate() {
        if let Ok(v) = HeaderValue::from_bytes(part) {
            if i % 2 == 0 {
                parents.push(v);
            } else {
                states.push(v);
            }
        }
    }
    let incoming = Incoming::read(&parents, &states);
    if let Some(p) = incoming.parent {
        assert_eq!(parents.len(), 1);
        let again = traceparent_with(p.trace_id, p.span_id, p.flags());
        assert_eq!(parse_traceparent(again.as_bytes()), Some(p));
        let ours = traceparent_with(p.trace_id, SpanId::random(), p.flags());
        assert_eq!(ours.len(), 55);
    } else {
        assert!(incoming.state.is_none());
    }
    if let Some(s) = &incoming.state {
        assert!(s.len() <= rampart_otel::context::MAX_TRACESTATE);
    }
    let _ = parse_traceparent(data);
});
