//! Spans as OTLP's `ExportTraceServiceRequest` (opentelemetry-proto's
//! `collector/trace/v1/trace_service.proto` and `trace/v1/trace.proto`), written with prost's
//! wire-format primitives straight from rampart's [`Span`]s: no message structs with a `String`
//! per attribute key are built per span. The field numbers are the proto's; the tests decode
//! what is written here with opentelemetry-proto's own messages.

use std::net::IpAddr;

use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};

use crate::span::{AttrValue, Span, Status};

/// What describes every span of a process (OTLP's `Resource` and `InstrumentationScope`).
#[derive(Debug, Clone)]
pub struct Resource {
    pub attrs: Vec<(String, AttrValue)>,
    pub scope_name: &'static str,
    pub scope_version: &'static str,
}

/// `spans` as one `ExportTraceServiceRequest`, appended to `out`. Each span is written into
/// `scratch` first (its length comes before it on the wire); the levels above are written once
/// the spans' total is known.
pub fn encode_request(resource: &Resource, spans: &[&Span], out: &mut Vec<u8>) {
    let mut body = Vec::with_capacity(spans.len() * 512);
    let mut scratch = Vec::with_capacity(1024);
    for s in spans {
        scratch.clear();
        span(&mut scratch, s);
        // ScopeSpans.spans = 2
        header(&mut body, 2, scratch.len());
        body.extend_from_slice(&scratch);
    }
    let resource_len: usize = resource
        .attrs
        .iter()
        .map(|(k, v)| ld(kv_len(k, any_len(v))))
        .sum();
    let scope_len = ld(resource.scope_name.len()) + ld(resource.scope_version.len());
    let scope_spans_len = ld(scope_len) + body.len();
    let resource_spans_len = ld(resource_len) + ld(scope_spans_len);
    out.reserve(ld(resource_spans_len));
    // ExportTraceServiceRequest.resource_spans = 1
    header(out, 1, resource_spans_len);
    // ResourceSpans.resource = 1: Resource.attributes = 1
    header(out, 1, resource_len);
    for (k, v) in &resource.attrs {
        attr(out, 1, k, v);
    }
    // ResourceSpans.scope_spans = 2
    header(out, 2, scope_spans_len);
    // ScopeSpans.scope = 1: InstrumentationScope { name = 1, version = 2 }
    header(out, 1, scope_len);
    string(out, 1, resource.scope_name);
    string(out, 2, resource.scope_version);
    out.extend_from_slice(&body);
}

/// Span flags (field 16): the W3C trace flags in bits 0–7, and whether the parent is remote
/// (bits 8 and 9: "has is_remote", "is_remote").
pub const FLAG_SAMPLED: u32 = 0x01;
pub const FLAG_HAS_IS_REMOTE: u32 = 0x100;
pub const FLAG_IS_REMOTE: u32 = 0x200;

/// The bytes of a length-delimited field of `len` bytes (every field number here is below
/// 16: a one-byte key).
#[inline]
fn ld(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

/// A varint: one byte for the small numbers that are most of a span's lengths.
#[inline]
fn varint(out: &mut Vec<u8>, v: u64) {
    if v < 0x80 {
        out.push(v as u8);
    } else {
        encode_varint(v, out);
    }
}

/// The key of field `tag` (< 16) with `wire` (prost's `WireType` numbering).
#[inline]
fn key(out: &mut Vec<u8>, tag: u32, wire: WireType) {
    debug_assert!(tag < 16);
    out.push(((tag << 3) | wire as u32) as u8);
}

#[inline]
fn header(out: &mut Vec<u8>, tag: u32, len: usize) {
    key(out, tag, WireType::LengthDelimited);
    varint(out, len as u64);
}

fn span(out: &mut Vec<u8>, s: &Span) {
    bytes(out, 1, &s.trace_id.0);
    bytes(out, 2, &s.span_id.0);
    if let Some(ts) = &s.trace_state {
        string(out, 3, ts);
    }
    if let Some(p) = &s.parent {
        bytes(out, 4, &p.0);
    }
    string(out, 5, &s.name);
    key(out, 6, WireType::Varint);
    varint(out, s.kind as u64);
    fixed64(out, 7, s.start);
    fixed64(out, 8, s.end.max(s.start));
    for (k, v) in &s.attrs {
        attr(out, 9, k, v);
    }
    for e in &s.events {
        let len = 9
            + ld(e.name.len())
            + e.attrs
                .iter()
                .map(|(k, v)| ld(kv_len(k, any_len(v))))
                .sum::<usize>();
        header(out, 11, len);
        fixed64(out, 1, e.time);
        string(out, 2, e.name);
        for (k, v) in &e.attrs {
            attr(out, 3, k, v);
        }
    }
    if let Status::Error(msg) = &s.status {
        // Status { message = 2, code = 3 (STATUS_CODE_ERROR = 2) }
        header(out, 15, ld(msg.len()) + 2);
        string(out, 2, msg);
        key(out, 3, WireType::Varint);
        out.push(2);
    }
    let remote = match (s.parent.is_some(), s.remote_parent) {
        (true, true) => FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE,
        (true, false) => FLAG_HAS_IS_REMOTE,
        (false, _) => 0,
    };
    // Field 16: a two-byte key.
    encode_key(16, WireType::ThirtyTwoBit, out);
    out.extend_from_slice(&(FLAG_SAMPLED | remote).to_le_bytes());
}

/// An address as text, without the formatting machinery for the common IPv4 case.
fn ip_text(ip: &IpAddr, buf: &mut [u8; 46]) -> usize {
    match ip {
        IpAddr::V4(v4) => {
            let mut n = 0;
            for (i, o) in v4.octets().iter().enumerate() {
                if i > 0 {
                    buf[n] = b'.';
                    n += 1;
                }
                if *o >= 100 {
                    buf[n] = b'0' + o / 100;
                    n += 1;
                }
                if *o >= 10 {
                    buf[n] = b'0' + (o / 10) % 10;
                    n += 1;
                }
                buf[n] = b'0' + o % 10;
                n += 1;
            }
            n
        }
        IpAddr::V6(v6) => {
            use std::io::Write as _;
            let mut w = &mut buf[..];
            let _ = write!(w, "{v6}");
            46 - w.len()
        }
    }
}

/// The length of the `AnyValue` of `v`: `string_value = 1 | bool_value = 2 | int_value = 3`.
fn any_len(v: &AttrValue) -> usize {
    match v {
        AttrValue::Str(s) => ld(s.len()),
        AttrValue::Static(s) => ld(s.len()),
        AttrValue::Ip(ip) => ld(ip_text(ip, &mut [0; 46])),
        AttrValue::Bool(_) => 2,
        AttrValue::Int(i) => 1 + encoded_len_varint(*i as u64),
    }
}

/// The length of `KeyValue { key = 1, value = 2 }`.
#[inline]
fn kv_len(k: &str, any: usize) -> usize {
    ld(k.len()) + ld(any)
}

/// A `KeyValue` as field `tag` of its message.
fn attr(out: &mut Vec<u8>, tag: u32, k: &str, v: &AttrValue) {
    let text = |s: &[u8], out: &mut Vec<u8>| {
        header(out, tag, kv_len(k, ld(s.len())));
        string(out, 1, k);
        header(out, 2, ld(s.len()));
        bytes(out, 1, s);
    };
    match v {
        AttrValue::Str(s) => text(s.as_bytes(), out),
        AttrValue::Static(s) => text(s.as_bytes(), out),
        AttrValue::Ip(ip) => {
            let mut buf = [0; 46];
            let n = ip_text(ip, &mut buf);
            text(&buf[..n], out);
        }
        AttrValue::Bool(b) => {
            header(out, tag, kv_len(k, 2));
            string(out, 1, k);
            header(out, 2, 2);
            key(out, 2, WireType::Varint);
            out.push(u8::from(*b));
        }
        AttrValue::Int(i) => {
            let any = 1 + encoded_len_varint(*i as u64);
            header(out, tag, kv_len(k, any));
            string(out, 1, k);
            header(out, 2, any);
            key(out, 3, WireType::Varint);
            varint(out, *i as u64);
        }
    }
}

#[inline]
fn string(out: &mut Vec<u8>, tag: u32, s: &str) {
    bytes(out, tag, s.as_bytes());
}

#[inline]
fn bytes(out: &mut Vec<u8>, tag: u32, b: &[u8]) {
    header(out, tag, b.len());
    out.extend_from_slice(b);
}

#[inline]
fn fixed64(out: &mut Vec<u8>, tag: u32, v: u64) {
    key(out, tag, WireType::SixtyFourBit);
    out.extend_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{SpanId, TraceId};
    use crate::span::{Event, Kind};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use prost::Message as _;

    fn sample(n: usize) -> Span {
        Span {
            trace_id: TraceId([7; 16]),
            span_id: SpanId([(n % 200) as u8 + 1; 8]),
            parent: Some(SpanId([9; 8])),
            remote_parent: true,
            trace_state: Some("congo=t61rcWkgMzE".into()),
            name: "GET www.example.com".into(),
            kind: Kind::Server,
            start: 1_700_000_000_000_000_000,
            end: 1_700_000_000_000_250_000,
            attrs: vec![
                ("http.request.method", "GET".into()),
                ("url.path", AttrValue::Str("/a?b=1".repeat(50).into())),
                ("http.response.status_code", 200u16.into()),
                ("rampart.negative", AttrValue::Int(-5)),
                ("rampart.flag", true.into()),
                ("client.address", AttrValue::Ip([203, 0, 113, 9].into())),
                (
                    "network.peer.address",
                    AttrValue::Ip("2001:db8::1".parse().expect("v6")),
                ),
                ("server.port", AttrValue::Int(1 << 40)),
            ],
            events: vec![Event {
                time: 1_700_000_000_000_100_000,
                name: "lookup",
                attrs: vec![("rampart.cache", "hit".into())],
            }],
            status: Status::Error("origin refused".into()),
        }
    }

    #[test]
    fn what_is_written_decodes_as_opentelemetry_protos_messages() {
        let resource = Resource {
            attrs: vec![
                ("service.name".into(), "rampart".into()),
                ("process.pid".into(), AttrValue::Int(4242)),
            ],
            scope_name: "rampart",
            scope_version: "1.0",
        };
        let spans: Vec<Span> = (0..300).map(sample).collect();
        let refs: Vec<&Span> = spans.iter().collect();
        let mut out = Vec::new();
        encode_request(&resource, &refs, &mut out);
        let req = ExportTraceServiceRequest::decode(&out[..]).expect("decodes");
        assert_eq!(req.resource_spans.len(), 1);
        let rs = &req.resource_spans[0];
        let r = rs.resource.as_ref().expect("resource");
        assert_eq!(r.attributes[0].key, "service.name");
        let scope = &rs.scope_spans[0];
        assert_eq!(
            scope.scope.as_ref().map(|s| s.name.as_str()),
            Some("rampart")
        );
        assert_eq!(scope.spans.len(), 300);
        let s = &scope.spans[299];
        assert_eq!(s.trace_id, vec![7; 16]);
        assert_eq!(s.span_id, vec![100; 8]);
        assert_eq!(s.parent_span_id, vec![9; 8]);
        assert_eq!(s.trace_state, "congo=t61rcWkgMzE");
        assert_eq!(s.name, "GET www.example.com");
        assert_eq!(s.kind, 2);
        assert_eq!(s.start_time_unix_nano, 1_700_000_000_000_000_000);
        assert_eq!(s.end_time_unix_nano, 1_700_000_000_000_250_000);
        assert_eq!(s.flags, FLAG_SAMPLED | FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE);
        let attr = |k: &str| {
            s.attributes
                .iter()
                .find(|a| a.key == k)
                .and_then(|a| a.value.as_ref())
                .and_then(|v| v.value.clone())
        };
        assert_eq!(
            attr("http.request.method"),
            Some(Value::StringValue("GET".into()))
        );
        assert_eq!(
            attr("url.path"),
            Some(Value::StringValue("/a?b=1".repeat(50)))
        );
        assert_eq!(
            attr("http.response.status_code"),
            Some(Value::IntValue(200))
        );
        assert_eq!(attr("rampart.negative"), Some(Value::IntValue(-5)));
        assert_eq!(attr("rampart.flag"), Some(Value::BoolValue(true)));
        assert_eq!(
            attr("client.address"),
            Some(Value::StringValue("203.0.113.9".into()))
        );
        assert_eq!(
            attr("network.peer.address"),
            Some(Value::StringValue("2001:db8::1".into()))
        );
        assert_eq!(attr("server.port"), Some(Value::IntValue(1 << 40)));
        assert_eq!(s.events.len(), 1);
        assert_eq!(s.events[0].name, "lookup");
        assert_eq!(s.events[0].time_unix_nano, 1_700_000_000_000_100_000);
        assert_eq!(s.events[0].attributes[0].key, "rampart.cache");
        let status = s.status.as_ref().expect("status");
        assert_eq!(
            (status.code, status.message.as_str()),
            (2, "origin refused")
        );
    }

    #[test]
    fn a_root_span_has_no_parent_and_no_status() {
        let mut s = sample(0);
        s.parent = None;
        s.trace_state = None;
        s.status = Status::Unset;
        let r = Resource {
            attrs: Vec::new(),
            scope_name: "rampart",
            scope_version: "1",
        };
        let mut out = Vec::new();
        encode_request(&r, &[&s], &mut out);
        let req = ExportTraceServiceRequest::decode(&out[..]).expect("decodes");
        let s = &req.resource_spans[0].scope_spans[0].spans[0];
        assert!(s.parent_span_id.is_empty());
        assert!(s.status.is_none());
        assert_eq!(s.flags, FLAG_SAMPLED);
    }
}
