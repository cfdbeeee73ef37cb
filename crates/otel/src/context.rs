//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): the `traceparent` and
//! `tracestate` fields, read from a client's request and written on the request to the origin;
//! and the identifiers rampart gives its own spans.
//!
//! A `traceparent` that does not parse is as if it were absent: never an error, and never
//! forwarded as it was (the request to the origin carries rampart's own).

use std::cell::Cell;

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;

pub static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
pub static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The longest `tracestate` carried on (the spec's 32 members of up to 256 characters each are
/// more than any vendor uses; 512 is the length it asks every participant to propagate).
pub const MAX_TRACESTATE: usize = 512;
/// The spec's limit on `tracestate` members.
const MAX_TRACESTATE_MEMBERS: usize = 32;

/// A trace's 16-byte identifier (never all zeros).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId(pub [u8; 16]);

/// A span's 8-byte identifier (never all zeros).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(pub [u8; 8]);

impl TraceId {
    /// A new random trace id.
    pub fn random() -> TraceId {
        let (a, b) = (next_random(), next_random());
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&a.to_be_bytes());
        id[8..].copy_from_slice(&b.to_be_bytes());
        TraceId(id)
    }

    /// The id in 32 lowercase hex digits.
    pub fn to_hex(self) -> String {
        let mut out = [0u8; 32];
        hex_into(&self.0, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}

impl SpanId {
    /// A new random span id.
    pub fn random() -> SpanId {
        SpanId(next_random().to_be_bytes())
    }

    /// The id in 16 lowercase hex digits.
    pub fn to_hex(self) -> String {
        let mut out = [0u8; 16];
        hex_into(&self.0, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// A non-zero random 64-bit number from a per-thread generator (splitmix64 over a counter
/// seeded once per thread from the process's random hasher keys, the time and the thread):
/// unique within a thread, unpredictable enough for identifiers, not for secrets.
fn next_random() -> u64 {
    use std::hash::{BuildHasher as _, Hash as _, Hasher as _};
    thread_local! {
        static STATE: Cell<u64> = const { Cell::new(0) };
    }
    STATE.with(|s| {
        let mut x = s.get();
        if x == 0 {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
            );
            std::thread::current().id().hash(&mut h);
            x = h.finish() | 1;
        }
        loop {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            if z != 0 {
                s.set(x);
                return z;
            }
        }
    })
}

/// A client's `traceparent`, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// The client's sampling decision (the `sampled` flag).
    pub sampled: bool,
    /// The trace id is random (Trace Context level 2's `random` flag), carried on.
    pub random: bool,
}

/// The `sampled` flag.
pub const FLAG_SAMPLED: u8 = 0x01;
/// Trace Context level 2's `random` flag: the trace id's right 7 bytes are random.
pub const FLAG_RANDOM: u8 = 0x02;

impl Parent {
    /// The flags rampart carries on (the others are not its to repeat).
    pub fn flags(&self) -> u8 {
        (if self.sampled { FLAG_SAMPLED } else { 0 }) | (if self.random { FLAG_RANDOM } else { 0 })
    }
}

/// The trace context of a request: what the client sent, when it parses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Incoming {
    pub parent: Option<Parent>,
    /// The client's `tracestate`, only with a parent that parsed, when it is within the
    /// spec's limits (else dropped, as the spec allows).
    pub state: Option<HeaderValue>,
}

impl Incoming {
    /// Reads a request's `traceparent` fields (more than one is as malformed as one that does
    /// not parse) and `tracestate` fields (a list may be split over several).
    pub fn read<'a>(
        traceparent: impl IntoIterator<Item = &'a HeaderValue>,
        tracestate: impl IntoIterator<Item = &'a HeaderValue>,
    ) -> Incoming {
        let mut values = traceparent.into_iter();
        let parent = match (values.next(), values.next()) {
            (Some(v), None) => parse_traceparent(v.as_bytes()),
            _ => None,
        };
        let state = parent.and_then(|_| joined_tracestate(tracestate));
        Incoming { parent, state }
    }

    /// [`Incoming::read`] from an `http` field map.
    pub fn from_map(fields: &HeaderMap) -> Incoming {
        Incoming::read(fields.get_all(&TRACEPARENT), fields.get_all(&TRACESTATE))
    }
}

/// The `tracestate` fields joined, when they are within the limits.
fn joined_tracestate<'a>(values: impl IntoIterator<Item = &'a HeaderValue>) -> Option<HeaderValue> {
    let mut values = values.into_iter();
    let first = values.next()?;
    let rest: Vec<&HeaderValue> = values.collect();
    let joined = if rest.is_empty() {
        first.clone()
    } else {
        let mut v = first.as_bytes().to_vec();
        for r in rest {
            v.push(b',');
            v.extend_from_slice(r.as_bytes());
        }
        HeaderValue::from_bytes(&v).ok()?
    };
    let b = joined.as_bytes();
    let members = b
        .split(|c| *c == b',')
        .filter(|m| m.iter().any(|c| !matches!(c, b' ' | b'\t')))
        .count();
    let valid = !b.is_empty()
        && b.len() <= MAX_TRACESTATE
        && members <= MAX_TRACESTATE_MEMBERS
        && b.iter().all(|c| matches!(c, 0x20..=0x7e | b'\t'));
    valid.then_some(joined)
}

/// Parses a `traceparent` value (version 00, or a later version read as 00's fields, as the
/// spec says). `None` for anything else: wrong length, upper-case or non-hex digits, version
/// `ff`, an all-zero trace or parent id.
pub fn parse_traceparent(v: &[u8]) -> Option<Parent> {
    if v.len() < 55 {
        return None;
    }
    let version = hex_byte(&v[0..2])?;
    if version == 0xff
        || (version == 0 && v.len() != 55)
        || (version > 0 && v.len() > 55 && v[55] != b'-')
    {
        return None;
    }
    if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let mut trace = [0u8; 16];
    for (i, b) in trace.iter_mut().enumerate() {
        *b = hex_byte(&v[3 + 2 * i..5 + 2 * i])?;
    }
    let mut span = [0u8; 8];
    for (i, b) in span.iter_mut().enumerate() {
        *b = hex_byte(&v[36 + 2 * i..38 + 2 * i])?;
    }
    let flags = hex_byte(&v[53..55])?;
    if trace == [0; 16] || span == [0; 8] {
        return None;
    }
    Some(Parent {
        trace_id: TraceId(trace),
        span_id: SpanId(span),
        sampled: flags & FLAG_SAMPLED != 0,
        random: flags & FLAG_RANDOM != 0,
    })
}

/// Two lowercase hex digits.
fn hex_byte(d: &[u8]) -> Option<u8> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    Some(digit(d[0])? << 4 | digit(d[1])?)
}

/// Each byte's two lowercase hex digits.
const HEX_PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [DIGITS[i >> 4], DIGITS[i & 0xf]];
        i += 1;
    }
    t
};

fn hex_into(bytes: &[u8], out: &mut [u8]) {
    for (b, o) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        o.copy_from_slice(&HEX_PAIRS[usize::from(*b)]);
    }
}

/// The `traceparent` rampart sends on, as text: version 00, the trace, rampart's span as the
/// parent, and its flags. Not a `HeaderValue`, which every traced request would pay an
/// allocation and a check of each byte for (~250 instructions, callgrind): the HTTP/1.1
/// client writes these bytes as they are.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TraceParent([u8; 55]);

impl TraceParent {
    /// `trace` and `span` with `flags` (of which the `sampled` and `random` flags rampart
    /// knows are kept).
    pub fn new(trace: TraceId, span: SpanId, flags: u8) -> TraceParent {
        let flags = flags & (FLAG_SAMPLED | FLAG_RANDOM);
        let mut out = [0u8; 55];
        out[..3].copy_from_slice(b"00-");
        hex_into(&trace.0, &mut out[3..35]);
        out[35] = b'-';
        hex_into(&span.0, &mut out[36..52]);
        out[52] = b'-';
        out[53..].copy_from_slice(&HEX_PAIRS[usize::from(flags)]);
        TraceParent(out)
    }

    /// The text (hex digits and dashes).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// As a field value (an HTTP/2 origin's request).
    pub fn to_header_value(self) -> HeaderValue {
        // invariant: hex digits and dashes are a valid header value.
        HeaderValue::from_bytes(&self.0).unwrap_or(HeaderValue::from_static(""))
    }
}

impl std::fmt::Debug for TraceParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

/// The `traceparent` rampart sends on: version 00, the trace, rampart's span as the parent,
/// and its sampling decision (no other flag).
pub fn traceparent(trace: TraceId, span: SpanId, sampled: bool) -> HeaderValue {
    traceparent_with(trace, span, if sampled { FLAG_SAMPLED } else { 0 })
}

/// [`traceparent`] with `flags` (the `sampled` and `random` flags rampart knows).
pub fn traceparent_with(trace: TraceId, span: SpanId, flags: u8) -> HeaderValue {
    TraceParent::new(trace, span, flags).to_header_value()
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn every_byte_is_two_lowercase_hex_digits() {
        let all: Vec<u8> = (0..=255).collect();
        let mut out = vec![0u8; 512];
        hex_into(&all, &mut out);
        let want: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(out, want.as_bytes());
    }

    #[test]
    fn the_specs_example_parses_and_round_trips() {
        let p = parse_traceparent(VALID.as_bytes()).expect("valid");
        assert_eq!(p.trace_id.to_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(p.span_id.to_hex(), "00f067aa0ba902b7");
        assert!(p.sampled);
        assert_eq!(traceparent(p.trace_id, p.span_id, true), VALID);
        let off = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert!(!parse_traceparent(off.as_bytes()).expect("valid").sampled);
        // Sampled and random are read and carried on; other flags are not rampart's to repeat.
        let p = parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-83")
            .expect("valid");
        assert!(p.sampled && p.random);
        assert_eq!(p.flags(), 3);
        assert!(traceparent_with(p.trace_id, p.span_id, 0xff)
            .to_str()
            .unwrap_or("")
            .ends_with("-03"));
    }

    #[test]
    fn malformed_values_are_as_if_absent() {
        let bad = [
            "",
            "00",
            // upper-case hex
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
            // all-zero trace id, all-zero parent id
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            // version ff
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            // version 00 with something after it
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            // wrong separators, short fields, non-hex
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            // a later version with more fields must separate them with a dash
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ];
        for b in bad {
            assert_eq!(parse_traceparent(b.as_bytes()), None, "{b:?}");
        }
    }

    #[test]
    fn a_later_version_is_read_as_version_00() {
        let v = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-adds";
        let p = parse_traceparent(v.as_bytes()).expect("read as 00");
        assert_eq!(p.span_id.to_hex(), "00f067aa0ba902b7");
        let v = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(parse_traceparent(v.as_bytes()).is_some());
    }

    #[test]
    fn two_traceparent_fields_are_malformed_and_tracestate_needs_a_parent() {
        let mut h = HeaderMap::new();
        h.append(&TRACEPARENT, HeaderValue::from_static(VALID));
        h.append(&TRACESTATE, HeaderValue::from_static("congo=t61rcWkgMzE"));
        h.append(
            &TRACESTATE,
            HeaderValue::from_static("rojo=00f067aa0ba902b7"),
        );
        let i = Incoming::from_map(&h);
        assert!(i.parent.is_some());
        assert_eq!(
            i.state.as_ref().map(|s| s.to_str().unwrap_or("")),
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        );
        h.append(&TRACEPARENT, HeaderValue::from_static(VALID));
        assert_eq!(Incoming::from_map(&h), Incoming::default());
        let mut h = HeaderMap::new();
        h.append(&TRACEPARENT, HeaderValue::from_static("00-garbage"));
        h.append(&TRACESTATE, HeaderValue::from_static("congo=t61rcWkgMzE"));
        assert_eq!(Incoming::from_map(&h), Incoming::default());
    }

    #[test]
    fn a_tracestate_over_the_limits_is_dropped() {
        let mut h = HeaderMap::new();
        h.append(&TRACEPARENT, HeaderValue::from_static(VALID));
        let long = format!("k={}", "v".repeat(MAX_TRACESTATE));
        h.insert(&TRACESTATE, HeaderValue::from_str(&long).expect("ascii"));
        assert_eq!(Incoming::from_map(&h).state, None);
        let many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        h.insert(
            &TRACESTATE,
            HeaderValue::from_str(&many.join(",")).expect("ascii"),
        );
        assert_eq!(Incoming::from_map(&h).state, None);
        let ok: Vec<String> = (0..32).map(|i| format!("k{i}=v")).collect();
        h.insert(
            &TRACESTATE,
            HeaderValue::from_str(&ok.join(",")).expect("ascii"),
        );
        assert!(Incoming::from_map(&h).state.is_some());
    }

    #[test]
    fn random_ids_are_not_zero_and_do_not_repeat() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let t = TraceId::random();
            assert_ne!(t.0, [0; 16]);
            assert!(seen.insert(t));
            assert_ne!(SpanId::random().0, [0; 8]);
        }
        let hex = TraceId::random().to_hex();
        assert_eq!(hex.len(), 32);
        assert!(parse_traceparent(
            traceparent(TraceId::random(), SpanId::random(), false).as_bytes()
        )
        .is_some());
    }
}
