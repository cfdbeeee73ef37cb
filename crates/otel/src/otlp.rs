//! Spans as OTLP's `ExportTraceServiceRequest` (opentelemetry-proto's
//! `collector/trace/v1/trace_service.proto` and `trace/v1/trace.proto`), written with prost's
//! wire-format primitives straight from rampart's [`Span`]s: no message structs with a `String`
//! per attribute key are built per span. The field numbers are the proto's; the tests decode
//! what is written here with opentelemetry-proto's own messages.

use prost::encoding::{encode_key, encode_varint, WireType};

use crate::span::{Attr, AttrValue, Event, Span, Status};

/// What describes every span of a process (OTLP's `Resource` and `InstrumentationScope`).
#[derive(Debug, Clone)]
pub struct Resource {
    pub attrs: Vec<(String, String)>,
    pub scope_name: &'static str,
    pub scope_version: &'static str,
}

/// `spans` as one `ExportTraceServiceRequest`, appended to `out`.
pub fn encode_request(resource: &Resource, spans: &[&Span], out: &mut Vec<u8>) {
    // ExportTraceServiceRequest.resource_spans = 1
    nested(out, 1, |out| {
        // ResourceSpans.resource = 1
        nested(out, 1, |out| {
            for (k, v) in &resource.attrs {
                // Resource.attributes = 1
                nested(out, 1, |out| {
                    string(out, 1, k);
                    nested(out, 2, |out| string(out, 1, v));
                });
            }
        });
        // ResourceSpans.scope_spans = 2
        nested(out, 2, |out| {
            // ScopeSpans.scope = 1: InstrumentationScope { name = 1, version = 2 }
            nested(out, 1, |out| {
                string(out, 1, resource.scope_name);
                string(out, 2, resource.scope_version);
            });
            for s in spans {
                // ScopeSpans.spans = 2
                nested(out, 2, |out| span(out, s));
            }
        });
    });
}

/// Span flags (field 16): the W3C trace flags in bits 0–7, and whether the parent is remote
/// (bits 8 and 9: "has is_remote", "is_remote").
pub const FLAG_SAMPLED: u32 = 0x01;
pub const FLAG_HAS_IS_REMOTE: u32 = 0x100;
pub const FLAG_IS_REMOTE: u32 = 0x200;

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
    encode_key(6, WireType::Varint, out);
    encode_varint(s.kind as u64, out);
    fixed64(out, 7, s.start);
    fixed64(out, 8, s.end.max(s.start));
    for a in &s.attrs {
        nested(out, 9, |out| key_value(out, a));
    }
    for e in &s.events {
        nested(out, 11, |out| event(out, e));
    }
    if let Status::Error(msg) = &s.status {
        // Status { message = 2, code = 3 (STATUS_CODE_ERROR = 2) }
        nested(out, 15, |out| {
            string(out, 2, msg);
            encode_key(3, WireType::Varint, out);
            encode_varint(2, out);
        });
    }
    let remote = if s.parent.is_some() {
        FLAG_HAS_IS_REMOTE
    } else {
        0
    };
    encode_key(16, WireType::ThirtyTwoBit, out);
    out.extend_from_slice(&(FLAG_SAMPLED | remote).to_le_bytes());
}

fn event(out: &mut Vec<u8>, e: &Event) {
    fixed64(out, 1, e.time);
    string(out, 2, e.name);
    for a in &e.attrs {
        nested(out, 3, |out| key_value(out, a));
    }
}

/// `KeyValue { key = 1, value = 2: AnyValue { string_value = 1 | bool_value = 2 | int_value = 3 } }`
fn key_value(out: &mut Vec<u8>, (k, v): &Attr) {
    string(out, 1, k);
    nested(out, 2, |out| match v {
        AttrValue::Str(s) => string(out, 1, s),
        AttrValue::Static(s) => string(out, 1, s),
        AttrValue::Bool(b) => {
            encode_key(2, WireType::Varint, out);
            encode_varint(u64::from(*b), out);
        }
        AttrValue::Int(i) => {
            encode_key(3, WireType::Varint, out);
            encode_varint(*i as u64, out);
        }
    });
}

fn string(out: &mut Vec<u8>, tag: u32, s: &str) {
    bytes(out, tag, s.as_bytes());
}

fn bytes(out: &mut Vec<u8>, tag: u32, b: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(b.len() as u64, out);
    out.extend_from_slice(b);
}

fn fixed64(out: &mut Vec<u8>, tag: u32, v: u64) {
    encode_key(tag, WireType::SixtyFourBit, out);
    out.extend_from_slice(&v.to_le_bytes());
}

/// A length-delimited field written by `body` in place: its length is known once it is
/// written, and is then put in front of it (moving the body by the length's 1–5 bytes).
fn nested(out: &mut Vec<u8>, tag: u32, body: impl FnOnce(&mut Vec<u8>)) {
    encode_key(tag, WireType::LengthDelimited, out);
    let at = out.len();
    body(out);
    let len = out.len() - at;
    let mut small = [0u8; 10];
    let mut w = &mut small[..];
    encode_varint(len as u64, &mut w);
    let n = 10 - w.len();
    if n == 1 {
        out.insert(at, small[0]);
    } else {
        out.splice(at..at, small[..n].iter().copied());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{SpanId, TraceId};
    use crate::span::Kind;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use prost::Message as _;

    fn sample(n: usize) -> Span {
        Span {
            trace_id: TraceId([7; 16]),
            span_id: SpanId([(n % 200) as u8 + 1; 8]),
            parent: Some(SpanId([9; 8])),
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
            attrs: vec![("service.name".into(), "rampart".into())],
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
        assert_eq!(s.flags, FLAG_SAMPLED | FLAG_HAS_IS_REMOTE);
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
