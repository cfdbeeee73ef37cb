//! What a request carries to its origin: the client's request head as it came, with rampart's
//! changes beside it ([`OriginFields`]) instead of made in the client's field map.
//!
//! The client's map stays whole: a response that may be stored needs the client's fields
//! (Vary, negotiation), and a body-less request that fails over to the next origin is sent
//! again from the same head; neither needs a copy. The HTTP/1.1 client writes the two side by
//! side into its request head ([`OriginFields::skips`] says which of the client's fields are
//! left out); HTTP/2 builds its request with [`OriginFields::apply`]. Changing the client's map
//! instead would cost every pass six insertions (X-Forwarded-*, Host, the request id), a `Via`
//! append, and a copy of the map first when the response might be stored: ~2,500 instructions.

use http::header::{HeaderName, HeaderValue, CONNECTION, EXPECT, VIA};
use rampart_head::request::Parts;
use rampart_head::Fields;

use crate::body::RequestBody;
use crate::headers::is_hop_by_hop;

/// One request on its way to an origin: the client's head, rampart's changes to its fields,
/// and the body.
#[derive(Debug)]
pub struct Outgoing<'a> {
    pub head: &'a Parts,
    pub fields: &'a OriginFields,
    pub body: RequestBody,
}

/// rampart's changes to the fields of a request bound for the origin.
#[derive(Debug, Default)]
pub struct OriginFields {
    /// Fields rampart sets, each in place of the client's fields of that name, except `Via`,
    /// which follows the client's (RFC 9110 §7.6.3).
    set: Vec<(HeaderName, HeaderValue)>,
    /// Fields the client's `Connection` names: hop-by-hop, left out (RFC 9110 §7.6.1); and
    /// those a rule's `request_headers` removes.
    named: Vec<HeaderName>,
    /// Fields a rule's `request_headers` adds, after the client's.
    added: Vec<(HeaderName, HeaderValue)>,
    /// rampart's `traceparent` (see [`OriginFields::set_traceparent`]).
    traceparent: Option<rampart_otel::TraceParent>,
    /// See [`OriginFields::add_room`].
    room: usize,
}

impl OriginFields {
    /// Bytes to add to the room a head is written in, for fields larger than most (the trace
    /// context): asked for by whoever sets them, so a request without them keeps its size.
    pub fn add_room(&mut self, bytes: usize) {
        self.room += bytes;
    }

    /// See [`OriginFields::add_room`].
    pub fn room(&self) -> usize {
        self.room
    }

    /// Room for what fetch sets on every request (Host, five forwarding fields, Via, the
    /// request id, the trace context) and a little more, made once.
    pub fn for_client(client: &Fields) -> Self {
        let mut named = Vec::new();
        for v in client.get_all(CONNECTION) {
            let Ok(v) = v.to_str() else { continue };
            for t in v.split(',') {
                if let Ok(n) = HeaderName::from_bytes(t.trim().as_bytes()) {
                    named.push(n);
                }
            }
        }
        OriginFields {
            set: Vec::with_capacity(12),
            named,
            added: Vec::new(),
            traceparent: None,
            room: 0,
        }
    }

    /// A rule removes `name`: neither the client's fields of that name nor rampart's go.
    pub fn remove(&mut self, name: &HeaderName) {
        if *name == rampart_otel::TRACEPARENT {
            self.traceparent = None;
        }
        self.set.retain(|(n, _)| n != name);
        self.added.retain(|(n, _)| n != name);
        self.named.push(name.clone());
    }

    /// A rule sets `name`: in place of the client's fields and of what rampart would set.
    pub fn replace(&mut self, name: HeaderName, value: HeaderValue) {
        if name == rampart_otel::TRACEPARENT {
            self.traceparent = None;
        }
        self.set.retain(|(n, _)| *n != name);
        self.set.push((name, value));
    }

    /// A rule adds `name` after the fields of that name there are.
    pub fn add(&mut self, name: HeaderName, value: HeaderValue) {
        self.added.push((name, value));
    }

    /// The value rampart sends for `name` in place of the client's, if it sets one (not
    /// rampart's `traceparent`, which is [`OriginFields::traceparent`]).
    pub fn get(&self, name: &HeaderName) -> Option<&HeaderValue> {
        self.set.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Sets `name` to `value` in place of the client's fields of that name (`Via`: after
    /// them). Each name is set once (fetch's names are distinct): no search.
    pub fn set(&mut self, name: HeaderName, value: HeaderValue) {
        debug_assert!(self.set.iter().all(|(n, _)| *n != name), "{name} set twice");
        self.set.push((name, value));
    }

    /// Sets rampart's `traceparent` in place of the client's. It is kept as text beside the
    /// other fields: the HTTP/1.1 client writes it as it is (a `HeaderValue` made for every
    /// traced request would cost an allocation and a check of each byte). A rule's
    /// `request_headers` that set or remove `traceparent` replace it.
    pub fn set_traceparent(&mut self, tp: rampart_otel::TraceParent) {
        self.traceparent = Some(tp);
    }

    /// rampart's `traceparent`, when it sends one.
    pub fn traceparent(&self) -> Option<&rampart_otel::TraceParent> {
        self.traceparent.as_ref()
    }

    /// Whether the client's field `name` stops here whatever fetch sets: a hop-by-hop field
    /// (fixed, or named by the client's `Connection`), or `Expect` (rampart answers
    /// `100-continue` itself). What fetch derives from the client's fields (the
    /// `X-Forwarded-For` list, the request id) must not read these.
    pub fn drops(&self, name: &HeaderName) -> bool {
        is_hop_by_hop(name) || name == EXPECT || self.named.iter().any(|n| n == name)
    }

    /// Whether the client's field `name` is left out of the request to the origin: dropped,
    /// or replaced by one fetch sets.
    #[inline]
    pub fn skips(&self, name: &HeaderName) -> bool {
        self.drops(name)
            || self.set.iter().any(|(n, _)| n == name && n != VIA)
            || (self.traceparent.is_some() && *name == rampart_otel::TRACEPARENT)
    }

    /// The fields rampart sets that go before the client's (all but `Via`: `Host` first, as
    /// RFC 9112 §3.2 asks), in the order they were set. Not rampart's `traceparent`: a writer
    /// of a request head writes [`OriginFields::traceparent`] after these (`skips` leaves the
    /// client's out when it is set).
    pub fn before(&self) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
        self.set
            .iter()
            .filter(|(n, _)| n != VIA)
            .map(|(n, v)| (n, v))
    }

    /// The fields rampart sets that go after the client's: `Via`, which extends the client's,
    /// and what a rule adds.
    pub fn after(&self) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
        self.set
            .iter()
            .filter(|(n, _)| n == VIA)
            .chain(&self.added)
            .map(|(n, v)| (n, v))
    }

    /// The client's fields with these changes made, as one map (HTTP/2 origins).
    pub fn apply(&self, client: &Fields) -> Fields {
        let mut h = Fields::with_capacity(client.len() + self.set.len() + 1);
        for (name, value) in self.before() {
            h.append(name.clone(), value.clone());
        }
        if let Some(tp) = self.traceparent {
            h.append(rampart_otel::TRACEPARENT.clone(), tp.to_header_value());
        }
        let kept = client.iter().filter(|(n, _)| !self.skips(n));
        for (name, value) in kept.chain(self.after()) {
            h.append(name.clone(), value.clone());
        }
        h
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn map(fields: &[(&'static str, &'static str)]) -> Fields {
        let mut h = Fields::new();
        for (n, v) in fields {
            h.append(*n, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn hop_by_hop_and_named_fields_stay_behind_and_set_ones_replace_the_clients() {
        let client = map(&[
            ("host", "client.test"),
            ("connection", "keep-alive, X-Secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "gzip"),
            ("expect", "100-continue"),
            ("x-forwarded-proto", "forged"),
            ("via", "1.1 other"),
            ("accept", "a"),
            ("accept", "b"),
        ]);
        let mut f = OriginFields::for_client(&client);
        f.set(http::header::HOST, HeaderValue::from_static("origin.test"));
        f.set(
            HeaderName::from_static("x-forwarded-proto"),
            HeaderValue::from_static("http"),
        );
        f.set(VIA, HeaderValue::from_static("1.1 rampart"));
        let out = f.apply(&client);
        let all = |n: &str| {
            out.get_all(n)
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(all("host"), ["origin.test"]);
        assert_eq!(all("x-forwarded-proto"), ["http"]);
        assert_eq!(all("via"), ["1.1 other", "1.1 rampart"]);
        assert_eq!(all("accept"), ["a", "b"]);
        for gone in ["connection", "x-secret", "keep-alive", "te", "expect"] {
            assert!(!out.contains_key(gone), "{gone} passed on");
        }
        assert_eq!(out.keys().count(), 4);
    }

    #[test]
    fn rampart_s_traceparent_replaces_the_clients_until_a_rule_says_otherwise() {
        let client = map(&[("traceparent", "00-client"), ("accept", "a")]);
        let tp = rampart_otel::TraceParent::new(
            rampart_otel::TraceId([0xab; 16]),
            rampart_otel::SpanId([0xcd; 8]),
            1,
        );
        let want = format!("00-{}-{}-01", "ab".repeat(16), "cd".repeat(8));
        let mut f = OriginFields::for_client(&client);
        f.set_traceparent(tp);
        assert!(f.skips(&rampart_otel::TRACEPARENT));
        let out = f.apply(&client);
        let all: Vec<_> = out.get_all("traceparent").iter().collect();
        assert_eq!(all, [want.as_str()]);
        assert_eq!(out.get("accept").unwrap(), "a");
        // A rule that sets it has the last word; one that removes it sends none.
        f.replace(
            rampart_otel::TRACEPARENT.clone(),
            HeaderValue::from_static("00-rule"),
        );
        assert!(f.traceparent().is_none());
        let all: Vec<_> = f
            .apply(&client)
            .get_all("traceparent")
            .iter()
            .cloned()
            .collect();
        assert_eq!(all, ["00-rule"]);
        let mut f = OriginFields::for_client(&client);
        f.set_traceparent(tp);
        f.remove(&rampart_otel::TRACEPARENT);
        assert!(!f.apply(&client).contains_key("traceparent"));
    }
}
