//! OTLP's `ExportTraceServiceRequest` (opentelemetry-proto's
//! `collector/trace/v1/trace_service.proto` and `trace/v1/trace.proto`) written straight as
//! protobuf bytes: a request's spans are encoded as they are recorded (`lib.rs`), and a batch
//! is the concatenation of its spans' bytes after a head made once per export
//! ([`Resource::request_head`]). No message structs are built, nothing is copied into a `String`
//! per attribute key, and no span is encoded twice. The field numbers are the proto's; the tests
//! decode what is written here with opentelemetry-proto's own messages.
//!
//! Protobuf allows a message's fields in any order, so a span's fields are written as they are
//! known: its ids, kind and start when it starts, its attributes and events as the stages add
//! them, its end, status and flags when it ends.

use std::net::IpAddr;

/// An attribute's value, borrowed from the request for as long as it takes to write it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Str(&'a str),
    /// Text as bytes (a header's value, an address written by [`IpText`]): written when it is
    /// UTF-8, as OTLP's strings must be (ASCII, checked a word at a time, or else checked
    /// whole), and as an empty string when it is not.
    Bytes(&'a [u8]),
    /// An address, written as text.
    Ip(IpAddr),
    Int(i64),
    Bool(bool),
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(s: &'a str) -> Self {
        Value::Str(s)
    }
}

impl<'a> From<&'a String> for Value<'a> {
    fn from(s: &'a String) -> Self {
        Value::Str(s)
    }
}

impl From<i64> for Value<'_> {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<u64> for Value<'_> {
    fn from(v: u64) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<u32> for Value<'_> {
    fn from(v: u32) -> Self {
        Value::Int(i64::from(v))
    }
}

impl From<u16> for Value<'_> {
    fn from(v: u16) -> Self {
        Value::Int(i64::from(v))
    }
}

impl From<IpAddr> for Value<'_> {
    fn from(ip: IpAddr) -> Self {
        Value::Ip(ip)
    }
}

impl From<bool> for Value<'_> {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

/// One attribute (OpenTelemetry's semantic-convention names where one exists).
pub type Attr<'a> = (&'a str, Value<'a>);

/// The longest text value a span keeps (bytes): a path or a user agent a client made long stays
/// this long, so the queue's spans are bounded in bytes as well as in number (as OpenTelemetry's
/// attribute value length limit).
pub const MAX_TEXT: usize = 1024;

/// `s`, cut to [`MAX_TEXT`] bytes at a character boundary.
#[inline]
pub fn cut(s: &str) -> &str {
    if s.len() <= MAX_TEXT {
        return s;
    }
    let mut end = MAX_TEXT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `b` as text to write: cut at [`MAX_TEXT`] bytes (on a character's boundary), nothing when
/// it is not UTF-8.
#[inline]
fn text(b: &[u8]) -> &[u8] {
    if b.len() <= MAX_TEXT && b.is_ascii() {
        return b;
    }
    let long = b.len() > MAX_TEXT;
    let b = &b[..b.len().min(MAX_TEXT)];
    match std::str::from_utf8(b) {
        Ok(_) => b,
        // Cut inside a character by the bound: up to that character.
        Err(e) if long && e.error_len().is_none() => &b[..e.valid_up_to()],
        Err(_) => b"",
    }
}

/// OTLP's span kinds that rampart uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Internal = 1,
    Server = 2,
    Client = 3,
}

// `Span`'s fields.
pub(crate) const SPAN_TRACE_ID: u8 = 1;
pub(crate) const SPAN_SPAN_ID: u8 = 2;
pub(crate) const SPAN_TRACE_STATE: u8 = 3;
pub(crate) const SPAN_PARENT: u8 = 4;
pub(crate) const SPAN_NAME: u8 = 5;
pub(crate) const SPAN_KIND: u8 = 6;
pub(crate) const SPAN_START: u8 = 7;
pub(crate) const SPAN_END: u8 = 8;
pub(crate) const SPAN_ATTRIBUTE: u8 = 9;
pub(crate) const SPAN_EVENT: u8 = 11;
pub(crate) const SPAN_STATUS: u8 = 15;
/// `ScopeSpans.spans`.
pub(crate) const SCOPE_SPAN: u8 = 2;

/// Span flags (field 16): the W3C trace flags in bits 0–7, and whether the parent is remote
/// (bits 8 and 9: "has is_remote", "is_remote").
pub const FLAG_SAMPLED: u32 = 0x01;
pub const FLAG_HAS_IS_REMOTE: u32 = 0x100;
pub const FLAG_IS_REMOTE: u32 = 0x200;

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// The bytes of a varint.
#[inline]
pub(crate) fn varint_len(v: u64) -> usize {
    if v < 1 << 7 {
        1
    } else if v < 1 << 14 {
        2
    } else {
        // 1 byte per 7 bits.
        (64 - v.leading_zeros() as usize).div_ceil(7)
    }
}

/// The bytes of a length-delimited field of `len` bytes (every field number here is below 16:
/// a one-byte key).
#[inline]
pub(crate) fn ld(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

#[inline]
pub(crate) fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The key of field `tag` (< 16) with wire type `wire`.
#[inline]
fn key(out: &mut Vec<u8>, tag: u8, wire: u8) {
    debug_assert!(tag < 16);
    out.push((tag << 3) | wire);
}

/// A length-delimited field's key and length (its `len` bytes follow).
#[inline]
pub(crate) fn header(out: &mut Vec<u8>, tag: u8, len: usize) {
    key(out, tag, LEN);
    varint(out, len as u64);
}

#[inline]
pub(crate) fn bytes(out: &mut Vec<u8>, tag: u8, b: &[u8]) {
    if b.len() < 0x80 {
        // Most fields: the key and a one-byte length in one store.
        out.extend_from_slice(&[(tag << 3) | LEN, b.len() as u8]);
    } else {
        header(out, tag, b.len());
    }
    out.extend_from_slice(b);
}

#[inline]
pub(crate) fn fixed64(out: &mut Vec<u8>, tag: u8, v: u64) {
    let b = v.to_le_bytes();
    out.extend_from_slice(&[
        (tag << 3) | FIXED64,
        b[0],
        b[1],
        b[2],
        b[3],
        b[4],
        b[5],
        b[6],
        b[7],
    ]);
}

#[inline]
pub(crate) fn uint(out: &mut Vec<u8>, tag: u8, v: u64) {
    key(out, tag, VARINT);
    varint(out, v);
}

/// Span flags (field 16: a two-byte key).
#[inline]
pub(crate) fn flags(out: &mut Vec<u8>, remote_parent: Option<bool>) {
    let remote = match remote_parent {
        Some(true) => FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE,
        Some(false) => FLAG_HAS_IS_REMOTE,
        None => 0,
    };
    out.extend_from_slice(&[(16 << 3) | FIXED32, 1]);
    out.extend_from_slice(&(FLAG_SAMPLED | remote).to_le_bytes());
}

/// A span's error status: `Status { message = 2, code = 3 (STATUS_CODE_ERROR = 2) }`.
pub(crate) fn error_status(out: &mut Vec<u8>, message: &str) {
    let message = cut(message);
    header(out, SPAN_STATUS, ld(message.len()) + 2);
    bytes(out, 2, message.as_bytes());
    out.extend_from_slice(&[(3 << 3) | VARINT, 2]);
}

/// An address as text, on the stack (to write one address as two attributes with one
/// formatting).
#[derive(Clone, Copy)]
pub struct IpText {
    buf: [u8; 46],
    len: u8,
}

impl IpText {
    pub fn new(ip: &IpAddr) -> IpText {
        let mut buf = [0; 46];
        let len = ip_text(ip, &mut buf) as u8;
        IpText { buf, len }
    }

    /// The address as a value (digits, dots, colons and hex digits: ASCII).
    pub fn value(&self) -> Value<'_> {
        Value::Bytes(&self.buf[..usize::from(self.len)])
    }
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

/// The length of `KeyValue { key = 1, value = 2 }` of `k` and a value of `any` bytes.
#[inline]
fn kv_len(k: &str, any: usize) -> usize {
    ld(k.len()) + ld(any)
}

/// The bytes of the `KeyValue` of `(k, v)` as a field of its message.
#[inline]
pub(crate) fn attr_len(k: &str, v: &Value<'_>) -> usize {
    let any = match v {
        Value::Str(s) => ld(cut(s).len()),
        Value::Bytes(b) => ld(text(b).len()),
        Value::Ip(ip) => ld(ip_text(ip, &mut [0; 46])),
        Value::Int(i) => 1 + varint_len(*i as u64),
        Value::Bool(_) => 2,
    };
    ld(kv_len(k, any))
}

/// A `KeyValue` as field `tag` of its message (inlined in the loops that write attributes: a
/// call per attribute was ~40 instructions of the ~120 each took, callgrind).
#[inline(always)]
pub(crate) fn attr(out: &mut Vec<u8>, tag: u8, k: &str, v: &Value<'_>) {
    match v {
        Value::Str(s) => text_attr(out, tag, k, cut(s).as_bytes()),
        Value::Bytes(b) => text_attr(out, tag, k, text(b)),
        Value::Ip(ip) => ip_attr(out, tag, k, ip),
        Value::Int(i) => {
            let any = 1 + varint_len(*i as u64);
            key_value_head(out, tag, k, any);
            out.push((3 << 3) | VARINT);
            varint(out, *i as u64);
        }
        Value::Bool(b) => {
            key_value_head(out, tag, k, 2);
            out.extend_from_slice(&[(2 << 3) | VARINT, u8::from(*b)]);
        }
    }
}

/// An address as a `KeyValue` of text (out of line: its buffer kept off the common path).
#[inline(never)]
fn ip_attr(out: &mut Vec<u8>, tag: u8, k: &str, ip: &IpAddr) {
    let mut buf = [0; 46];
    let n = ip_text(ip, &mut buf);
    text_attr(out, tag, k, &buf[..n]);
}

/// A `KeyValue` of text. Short (most: every length fits a byte), it is two stores of four
/// bytes and two copies.
#[inline(always)]
fn text_attr(out: &mut Vec<u8>, tag: u8, k: &str, t: &[u8]) {
    let (kl, tl) = (k.len(), t.len());
    if kl + tl < 120 {
        // KeyValue = key (2 + kl) + value (2 + AnyValue (2 + tl)) < 128.
        let any = 2 + tl;
        let kv = 2 + kl + 2 + any;
        out.reserve(2 + kv);
        out.extend_from_slice(&[(tag << 3) | LEN, kv as u8, (1 << 3) | LEN, kl as u8]);
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(&[(2 << 3) | LEN, any as u8, (1 << 3) | LEN, tl as u8]);
        out.extend_from_slice(t);
        return;
    }
    key_value_head(out, tag, k, ld(tl));
    header(out, 1, tl);
    out.extend_from_slice(t);
}

/// A `KeyValue`'s head up to its `AnyValue`'s first field: the field's key and length, the
/// key, and `value = 2` with its length `any`.
#[inline(always)]
fn key_value_head(out: &mut Vec<u8>, tag: u8, k: &str, any: usize) {
    let kv = kv_len(k, any);
    if kv < 0x80 {
        out.extend_from_slice(&[(tag << 3) | LEN, kv as u8, (1 << 3) | LEN, k.len() as u8]);
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(&[(2 << 3) | LEN, any as u8]);
    } else {
        header(out, tag, kv);
        bytes(out, 1, k.as_bytes());
        header(out, 2, any);
    }
}

/// An event (`Span.events = 11`: `Event { time_unix_nano = 1, name = 2, attributes = 3 }`).
pub(crate) fn event(out: &mut Vec<u8>, time: u64, name: &str, attrs: &[Attr<'_>]) {
    let len = 9 + ld(name.len()) + attrs.iter().map(|(k, v)| attr_len(k, v)).sum::<usize>();
    header(out, SPAN_EVENT, len);
    fixed64(out, 1, time);
    bytes(out, 2, name.as_bytes());
    for (k, v) in attrs {
        attr(out, 3, k, v);
    }
}

/// What describes every span of a process (OTLP's `Resource` and `InstrumentationScope`),
/// encoded once.
#[derive(Debug, Clone)]
pub struct Resource {
    /// `Resource`'s fields: its attributes.
    resource: Vec<u8>,
    /// `InstrumentationScope`'s fields: name and version.
    scope: Vec<u8>,
}

impl Resource {
    pub fn new(attrs: &[Attr<'_>], scope_name: &str, scope_version: &str) -> Resource {
        let mut resource = Vec::new();
        for (k, v) in attrs {
            // Resource.attributes = 1
            attr(&mut resource, 1, k, v);
        }
        let mut scope = Vec::new();
        bytes(&mut scope, 1, scope_name.as_bytes());
        bytes(&mut scope, 2, scope_version.as_bytes());
        Resource { resource, scope }
    }

    /// The bytes of the resource and scope.
    pub fn encoded_len(&self) -> usize {
        self.resource.len() + self.scope.len()
    }

    /// The head of an `ExportTraceServiceRequest` whose spans (`ScopeSpans.spans` entries,
    /// `spans_len` bytes) follow it: `resource_spans = 1 { resource = 1, scope_spans = 2 {
    /// scope = 1, spans = 2… } }`.
    pub fn request_head(&self, spans_len: usize, out: &mut Vec<u8>) {
        let scope_spans_len = ld(self.scope.len()) + spans_len;
        let resource_spans_len = ld(self.resource.len()) + ld(scope_spans_len);
        header(out, 1, resource_spans_len);
        header(out, 1, self.resource.len());
        out.extend_from_slice(&self.resource);
        header(out, 2, scope_spans_len);
        header(out, 1, self.scope.len());
        out.extend_from_slice(&self.scope);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message as _;

    /// A span written field by field as `lib.rs` does, as a `ScopeSpans.spans` entry.
    fn sample(n: usize, out: &mut Vec<u8>) {
        let mut s = Vec::new();
        bytes(&mut s, SPAN_TRACE_ID, &[7; 16]);
        bytes(&mut s, SPAN_SPAN_ID, &[(n % 200) as u8 + 1; 8]);
        bytes(&mut s, SPAN_TRACE_STATE, b"congo=t61rcWkgMzE");
        bytes(&mut s, SPAN_PARENT, &[9; 8]);
        uint(&mut s, SPAN_KIND, Kind::Server as u64);
        fixed64(&mut s, SPAN_START, 1_700_000_000_000_000_000);
        attr(&mut s, SPAN_ATTRIBUTE, "http.request.method", &"GET".into());
        let long = "/a?b=1".repeat(50);
        attr(&mut s, SPAN_ATTRIBUTE, "url.path", &long.as_str().into());
        attr(
            &mut s,
            SPAN_ATTRIBUTE,
            "user_agent.original",
            &"é".repeat(600).as_str().into(),
        );
        attr(
            &mut s,
            SPAN_ATTRIBUTE,
            "http.response.status_code",
            &200u16.into(),
        );
        attr(&mut s, SPAN_ATTRIBUTE, "rampart.negative", &Value::Int(-5));
        attr(&mut s, SPAN_ATTRIBUTE, "rampart.flag", &true.into());
        let v4: IpAddr = [203, 0, 113, 9].into();
        attr(&mut s, SPAN_ATTRIBUTE, "client.address", &v4.into());
        let v6: IpAddr = "2001:db8::1".parse().expect("v6");
        attr(&mut s, SPAN_ATTRIBUTE, "network.peer.address", &v6.into());
        attr(&mut s, SPAN_ATTRIBUTE, "server.port", &Value::Int(1 << 40));
        event(
            &mut s,
            1_700_000_000_000_100_000,
            "lookup",
            &[("rampart.cache", "hit".into())],
        );
        event(&mut s, 1_700_000_000_000_200_000, "deliver", &[]);
        // The name comes late (any order is a message's).
        bytes(&mut s, SPAN_NAME, b"GET www.example.com");
        fixed64(&mut s, SPAN_END, 1_700_000_000_000_250_000);
        error_status(&mut s, "origin refused");
        flags(&mut s, Some(true));
        bytes(out, SCOPE_SPAN, &s);
    }

    #[test]
    fn what_is_written_decodes_as_opentelemetry_protos_messages() {
        let resource = Resource::new(
            &[
                ("service.name", "rampart".into()),
                ("process.pid", Value::Int(4242)),
            ],
            "rampart",
            "1.0",
        );
        let mut spans = Vec::new();
        for n in 0..300 {
            sample(n, &mut spans);
        }
        let mut out = Vec::new();
        resource.request_head(spans.len(), &mut out);
        out.extend_from_slice(&spans);
        let req = ExportTraceServiceRequest::decode(&out[..]).expect("decodes");
        assert_eq!(req.resource_spans.len(), 1);
        let rs = &req.resource_spans[0];
        let r = rs.resource.as_ref().expect("resource");
        assert_eq!(r.attributes[0].key, "service.name");
        assert_eq!(
            r.attributes[1].value.as_ref().and_then(|v| v.value.clone()),
            Some(Any::IntValue(4242))
        );
        let scope = &rs.scope_spans[0];
        assert_eq!(
            scope
                .scope
                .as_ref()
                .map(|s| (s.name.as_str(), s.version.as_str())),
            Some(("rampart", "1.0"))
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
            Some(Any::StringValue("GET".into()))
        );
        assert_eq!(
            attr("url.path"),
            Some(Any::StringValue("/a?b=1".repeat(50)))
        );
        // Cut at 1 KiB, on a character's boundary.
        assert_eq!(
            attr("user_agent.original"),
            Some(Any::StringValue("é".repeat(512)))
        );
        assert_eq!(attr("http.response.status_code"), Some(Any::IntValue(200)));
        assert_eq!(attr("rampart.negative"), Some(Any::IntValue(-5)));
        assert_eq!(attr("rampart.flag"), Some(Any::BoolValue(true)));
        assert_eq!(
            attr("client.address"),
            Some(Any::StringValue("203.0.113.9".into()))
        );
        assert_eq!(
            attr("network.peer.address"),
            Some(Any::StringValue("2001:db8::1".into()))
        );
        assert_eq!(attr("server.port"), Some(Any::IntValue(1 << 40)));
        assert_eq!(s.events.len(), 2);
        assert_eq!(s.events[0].name, "lookup");
        assert_eq!(s.events[0].time_unix_nano, 1_700_000_000_000_100_000);
        assert_eq!(s.events[0].attributes[0].key, "rampart.cache");
        assert!(s.events[1].attributes.is_empty());
        let status = s.status.as_ref().expect("status");
        assert_eq!(
            (status.code, status.message.as_str()),
            (2, "origin refused")
        );
    }

    #[test]
    fn text_as_bytes_is_written_only_as_utf8_and_cut() {
        assert_eq!(text(b"curl/8.5"), b"curl/8.5");
        assert_eq!(text(&[b'a'; 2000]).len(), MAX_TEXT);
        // Two-byte characters: 1,024 bytes is 512 of them; 1,023 + 1 would cut one.
        let two = "é".repeat(600);
        assert_eq!(text(two.as_bytes()), "é".repeat(512).as_bytes());
        let odd = format!("a{two}");
        assert_eq!(
            text(odd.as_bytes()),
            format!("a{}", "é".repeat(511)).as_bytes()
        );
        // obs-text that is not UTF-8 is not written as a string (a collector would refuse it).
        assert_eq!(text(b"caf\xe9"), b"");
        let mut out = Vec::new();
        attr(
            &mut out,
            1,
            "user_agent.original",
            &Value::Bytes(b"caf\xe9"),
        );
        let kv =
            opentelemetry_proto::tonic::common::v1::KeyValue::decode(&out[2..]).expect("decodes");
        assert_eq!(
            kv.value.and_then(|v| v.value),
            Some(Any::StringValue(String::new()))
        );
    }

    #[test]
    fn varint_lengths_are_protobufs() {
        for v in [
            0u64,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = Vec::new();
            varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "{v}");
            assert_eq!(prost::encoding::decode_varint(&mut &out[..]).ok(), Some(v));
        }
    }
}
