//! A span as rampart records it on the request path: plain fields, attribute keys that are
//! `&'static str`, times as nanoseconds since the Unix epoch. Turned into OTLP's messages only
//! by the exporter, off the request path (`otlp.rs`).

use std::time::{Instant, SystemTime};

use crate::context::{SpanId, TraceId};

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(Box<str>),
    Static(&'static str),
    /// An address, written as text by the exporter.
    Ip(std::net::IpAddr),
    Int(i64),
    Bool(bool),
}

impl From<&'static str> for AttrValue {
    fn from(s: &'static str) -> Self {
        AttrValue::Static(s)
    }
}

impl From<String> for AttrValue {
    fn from(s: String) -> Self {
        AttrValue::Str(bounded(s))
    }
}

/// The longest text value a span keeps (bytes): a path or a user agent a client made long stays
/// this long, so the queue's spans are bounded in bytes as well as in number (as OpenTelemetry's
/// attribute value length limit).
pub const MAX_TEXT: usize = 1024;

/// `s`, cut to [`MAX_TEXT`] bytes at a character boundary.
pub fn bounded(mut s: String) -> Box<str> {
    if s.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s.into_boxed_str()
}

impl From<i64> for AttrValue {
    fn from(v: i64) -> Self {
        AttrValue::Int(v)
    }
}

impl From<u64> for AttrValue {
    fn from(v: u64) -> Self {
        AttrValue::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<u16> for AttrValue {
    fn from(v: u16) -> Self {
        AttrValue::Int(i64::from(v))
    }
}

impl From<std::net::IpAddr> for AttrValue {
    fn from(ip: std::net::IpAddr) -> Self {
        AttrValue::Ip(ip)
    }
}

impl From<bool> for AttrValue {
    fn from(v: bool) -> Self {
        AttrValue::Bool(v)
    }
}

/// One attribute (OpenTelemetry's semantic-convention names where one exists).
pub type Attr = (&'static str, AttrValue);

/// A moment in a span: a stage's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub time: u64,
    pub name: &'static str,
    pub attrs: Vec<Attr>,
}

/// OTLP's span kinds that rampart uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Internal = 1,
    Server = 2,
    Client = 3,
}

/// A span's status: unset, or an error with its description (OTLP's `STATUS_CODE_ERROR`).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Status {
    #[default]
    Unset,
    Error(Box<str>),
}

/// One finished (or finishing) span.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub parent: Option<SpanId>,
    /// The parent is another process's (the client's `traceparent`).
    pub remote_parent: bool,
    /// The `tracestate` of the trace, carried on unchanged.
    pub trace_state: Option<Box<str>>,
    pub name: Box<str>,
    pub kind: Kind,
    pub start: u64,
    pub end: u64,
    pub attrs: Vec<Attr>,
    pub events: Vec<Event>,
    pub status: Status,
}

impl Span {
    pub fn attr(&mut self, key: &'static str, value: impl Into<AttrValue>) {
        self.attrs.push((key, value.into()));
    }
}

/// Wall-clock nanoseconds for an `Instant`, from one reading of both clocks: spans are timed
/// with the monotonic clock and exported with the wall clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    at: Instant,
    unix_nanos: u64,
}

impl Clock {
    /// The clocks read at `at` (the request's start): the wall clock is read now, and moved
    /// back by the time since `at`.
    pub fn since(at: Instant) -> Clock {
        let now = Instant::now();
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let back = now.saturating_duration_since(at).as_nanos() as u64;
        Clock {
            at,
            unix_nanos: wall.saturating_sub(back),
        }
    }

    /// `t` as nanoseconds since the Unix epoch.
    pub fn nanos(&self, t: Instant) -> u64 {
        match t.checked_duration_since(self.at) {
            Some(d) => self.unix_nanos + d.as_nanos() as u64,
            None => self
                .unix_nanos
                .saturating_sub(self.at.duration_since(t).as_nanos() as u64),
        }
    }

    /// Now, as nanoseconds since the Unix epoch.
    pub fn now(&self) -> u64 {
        self.nanos(Instant::now())
    }
}
