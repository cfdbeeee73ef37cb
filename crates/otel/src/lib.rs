//! OpenTelemetry traces for rampart.
//!
//! - [`context`]: W3C Trace Context (`traceparent`, `tracestate`) and span identifiers.
//! - [`Tracer`]: per request, continues the client's trace (when trusted) or starts one,
//!   decides whether it is sampled, and writes the context the origin gets.
//! - [`RequestTrace`]: what a request records as it goes through the stages: one server span,
//!   its stage events, and child spans for the waits and the origin exchange.
//! - [`export`]: finished spans go through a bounded queue to an exporter thread that sends
//!   them in batches over OTLP (gRPC or HTTP/protobuf), off the request path; a full queue
//!   drops and counts.
//! - [`otlp`]: the OTLP protobuf encoding.
//!
//! rampart records spans itself rather than through the `opentelemetry` SDK, and writes OTLP with
//! prost's primitives rather than through opentelemetry-proto's message structs: the SDK's path
//! cost about 5× the CPU per request (docs/benchmarks.md, "Traces").

pub mod context;
pub mod export;
pub mod otlp;
pub mod span;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use http::header::HeaderValue;
use rampart_config::{Sampler, TracingConfig};

pub use context::{SpanId, TraceId};
pub use export::{Exporter, Stats};
pub use span::{Attr, AttrValue, Event, Kind, Span, Status};

pub use context::{TRACEPARENT, TRACESTATE};

use context::Incoming;
use span::Clock;

/// Tracing as configured: the sampling and trust decisions, and the exporter.
#[derive(Debug)]
pub struct Tracer {
    config: TracingConfig,
    /// A trace is sampled by ratio when the top 63 bits of the low half of its id are below
    /// this (OpenTelemetry's `TraceIdRatioBased` reading).
    threshold: u64,
    exporter: Arc<Exporter>,
}

impl Tracer {
    /// A tracer exporting through a new exporter thread, counting in `stats` (a reload
    /// carries the old tracer's on, so the counters do not start again at 0).
    pub fn start(config: &TracingConfig, stats: Option<Arc<Stats>>) -> std::io::Result<Tracer> {
        let exporter = Arc::new(Exporter::start(config, stats)?);
        Ok(Tracer::with_exporter(config, exporter))
    }

    pub fn with_exporter(config: &TracingConfig, exporter: Arc<Exporter>) -> Tracer {
        let threshold = (config.ratio.clamp(0.0, 1.0) * (1u64 << 63) as f64) as u64;
        Tracer {
            config: config.clone(),
            threshold,
            exporter,
        }
    }

    pub fn config(&self) -> &TracingConfig {
        &self.config
    }

    pub fn exporter(&self) -> &Arc<Exporter> {
        &self.exporter
    }

    /// The trace of a request that came from `peer` and started at `start`, from its
    /// `traceparent` and `tracestate` fields: the client's trace when its context parses and
    /// `peer` is trusted, else a new one. The request to the origin carries rampart's context
    /// instead of the client's ([`RequestTrace::outgoing`]).
    pub fn begin<'a>(
        &self,
        traceparent: impl IntoIterator<Item = &'a HeaderValue>,
        tracestate: impl IntoIterator<Item = &'a HeaderValue>,
        peer: IpAddr,
        start: Instant,
    ) -> RequestTrace {
        let mut traceparent = traceparent.into_iter().peekable();
        let incoming = if traceparent.peek().is_some() && self.config.trusts(peer) {
            Incoming::read(traceparent, tracestate)
        } else {
            Incoming::default()
        };
        let trace_id = incoming.parent.map_or_else(TraceId::random, |p| p.trace_id);
        // rampart's own trace ids are random; a continued trace says what its client said.
        let random = incoming.parent.is_none_or(|p| p.random);
        let sampled = self.sampled(incoming.parent.as_ref().map(|p| p.sampled), trace_id);
        let span_id = SpanId::random();
        // The origin exchange's span is the origin's parent when the request is recorded;
        // otherwise the server span (which no one records) is.
        let origin_span = if sampled { SpanId::random() } else { span_id };
        let recording = sampled.then(|| {
            let clock = Clock::since(start);
            Box::new(Recording {
                server: Span {
                    trace_id,
                    span_id,
                    parent: incoming.parent.map(|p| p.span_id),
                    remote_parent: incoming.parent.is_some(),
                    trace_state: incoming
                        .state
                        .as_ref()
                        .and_then(|s| s.to_str().ok())
                        .map(Into::into),
                    name: "".into(),
                    kind: Kind::Server,
                    start: clock.nanos(start),
                    end: 0,
                    attrs: Vec::with_capacity(16),
                    events: Vec::with_capacity(4),
                    status: Status::Unset,
                },
                clock,
                children: Vec::new(),
                sent: 0,
                exporter: self.exporter.clone(),
            })
        });
        RequestTrace {
            trace_id,
            span_id,
            origin_span,
            origin_used: false,
            random,
            state: incoming.state,
            recording,
        }
    }

    /// The head sampling decision: the parent's when the sampler follows it, else by the
    /// sampler's own rule.
    fn sampled(&self, parent: Option<bool>, trace_id: TraceId) -> bool {
        let ratio = || {
            let mut low = [0u8; 8];
            low.copy_from_slice(&trace_id.0[8..]);
            (u64::from_be_bytes(low) >> 1) < self.threshold
        };
        match (self.config.sampler, parent) {
            (Sampler::AlwaysOn, _) => true,
            (Sampler::AlwaysOff, _) => false,
            (Sampler::TraceIdRatio, _) => ratio(),
            (
                Sampler::ParentBasedAlwaysOn
                | Sampler::ParentBasedAlwaysOff
                | Sampler::ParentBasedTraceIdRatio,
                Some(p),
            ) => p,
            (Sampler::ParentBasedAlwaysOn, None) => true,
            (Sampler::ParentBasedAlwaysOff, None) => false,
            (Sampler::ParentBasedTraceIdRatio, None) => ratio(),
        }
    }
}

/// A request's part in a trace. Unsampled, it is only the ids (for the access log); sampled,
/// it records the spans, which are queued for export when [`RequestTrace::end`] is called.
#[derive(Debug)]
pub struct RequestTrace {
    pub trace_id: TraceId,
    /// The server span's id (the access log's `span_id`).
    pub span_id: SpanId,
    /// The parent the origin is told of: the origin exchange's span (sampled), else the
    /// server span.
    origin_span: SpanId,
    /// An origin exchange's span has taken `origin_span`: a second exchange (a refetch) gets
    /// an id of its own.
    origin_used: bool,
    /// The trace id is random (the `random` flag sent on).
    random: bool,
    /// The client's `tracestate`, carried on with its trace.
    state: Option<HeaderValue>,
    recording: Option<Box<Recording>>,
}

#[derive(Debug)]
struct Recording {
    clock: Clock,
    server: Span,
    children: Vec<Span>,
    /// Body bytes sent (`http.response.body.size`).
    sent: u64,
    exporter: Arc<Exporter>,
}

/// A child span started with [`RequestTrace::child`], ended with [`RequestTrace::end_child`].
#[derive(Debug, Clone, Copy)]
pub struct ChildRef(usize);

impl RequestTrace {
    /// Whether spans are recorded (the trace is sampled).
    pub fn sampled(&self) -> bool {
        self.recording.is_some()
    }

    /// The `traceparent` and `tracestate` the next request to the origin gets (`None`: the
    /// client's `tracestate`, of a context not continued, is not sent on). Each exchange has a
    /// span id of its own: the first the one made with the trace, later ones new.
    pub fn outgoing(&mut self) -> (HeaderValue, Option<&HeaderValue>) {
        if self.origin_used && self.sampled() {
            self.origin_span = SpanId::random();
            self.origin_used = false;
        }
        let mut flags = if self.sampled() {
            context::FLAG_SAMPLED
        } else {
            0
        };
        if self.random {
            flags |= context::FLAG_RANDOM;
        }
        (
            context::traceparent_with(self.trace_id, self.origin_span, flags),
            self.state.as_ref(),
        )
    }

    /// Whether the server span has the attribute `key`.
    pub fn has_attr(&self, key: &str) -> bool {
        self.recording
            .as_ref()
            .is_some_and(|r| r.server.attrs.iter().any(|(k, _)| *k == key))
    }

    /// Names the server span (`{method} {route}`, as HTTP's semantic conventions say).
    pub fn name(&mut self, name: String) {
        if let Some(r) = &mut self.recording {
            r.server.name = span::bounded(name);
        }
    }

    /// Adds an attribute to the server span.
    pub fn attr(&mut self, key: &'static str, value: impl Into<AttrValue>) {
        if let Some(r) = &mut self.recording {
            r.server.attrs.push((key, value.into()));
        }
    }

    /// Counts body bytes sent.
    pub fn sent(&mut self, n: u64) {
        if let Some(r) = &mut self.recording {
            r.sent += n;
        }
    }

    /// Adds an event (a stage's outcome) to the server span, at this moment.
    pub fn event(&mut self, name: &'static str, attrs: Vec<Attr>) {
        if let Some(r) = &mut self.recording {
            let time = r.clock.now();
            r.server.events.push(Event { time, name, attrs });
        }
    }

    /// Marks the server span as failed (a 5xx answer, or a body cut short).
    pub fn error(&mut self, description: impl Into<String>) {
        if let Some(r) = &mut self.recording {
            r.server.status = Status::Error(span::bounded(description.into()));
        }
    }

    /// Starts a child span of the server span, now. The origin exchange (`Kind::Client`,
    /// named "origin") takes the id already sent to the origin in `traceparent`.
    pub fn child(&mut self, name: &'static str, kind: Kind) -> Option<ChildRef> {
        let r = self.recording.as_mut()?;
        let span_id = if kind == Kind::Client && name == ORIGIN_SPAN && !self.origin_used {
            self.origin_used = true;
            self.origin_span
        } else {
            SpanId::random()
        };
        let start = r.clock.now();
        r.children.push(Span {
            trace_id: self.trace_id,
            span_id,
            parent: Some(self.span_id),
            remote_parent: false,
            trace_state: r.server.trace_state.clone(),
            name: name.into(),
            kind,
            start,
            end: 0,
            attrs: Vec::new(),
            events: Vec::new(),
            status: Status::Unset,
        });
        Some(ChildRef(r.children.len() - 1))
    }

    /// A child span started with [`RequestTrace::child`], to add attributes or events to.
    pub fn child_mut(&mut self, c: Option<ChildRef>) -> Option<&mut Span> {
        let (r, c) = (self.recording.as_mut()?, c?);
        r.children.get_mut(c.0)
    }

    /// Adds an event to a child span, at this moment.
    pub fn child_event(&mut self, c: Option<ChildRef>, name: &'static str, attrs: Vec<Attr>) {
        if let (Some(r), Some(c)) = (self.recording.as_mut(), c) {
            let time = r.clock.now();
            if let Some(s) = r.children.get_mut(c.0) {
                s.events.push(Event { time, name, attrs });
            }
        }
    }

    /// Ends a child span now.
    pub fn end_child(&mut self, c: Option<ChildRef>) {
        if let (Some(r), Some(c)) = (self.recording.as_mut(), c) {
            let end = r.clock.now();
            if let Some(s) = r.children.get_mut(c.0) {
                s.end = end;
            }
        }
    }

    /// Ends the server span (and any child still open) now, and queues the spans for export.
    /// Dropping the trace does the same (a request whose client went away is still traced).
    pub fn end(self) {}
}

impl Drop for RequestTrace {
    fn drop(&mut self) {
        let Some(r) = self.recording.take() else {
            return;
        };
        let Recording {
            clock,
            mut server,
            mut children,
            sent,
            exporter,
        } = *r;
        let end = clock.now();
        server.end = end;
        server.attr("http.response.body.size", sent);
        for c in &mut children {
            if c.end == 0 {
                c.end = end;
            }
        }
        let spans = if children.is_empty() {
            vec![server]
        } else {
            children.push(server);
            children
        };
        exporter.submit(spans);
    }
}

/// The name of the origin exchange's span.
pub const ORIGIN_SPAN: &str = "origin";

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> TracingConfig {
        let src = format!(
            "tracing_endpoint = \"http://127.0.0.1:9\"\n{extra}\n[[proxy_rules]]\ndomain = \"a\"\nforward_ipv4 = \"127.0.0.1\"\n"
        );
        let v = rampart_config::validate(&src, 1);
        v.config
            .and_then(|c| c.tracing)
            .unwrap_or_else(|| panic!("{:?}", v.diagnostics))
    }

    fn tracer(extra: &str) -> Tracer {
        Tracer::start(&config(extra), None).expect("exporter thread")
    }

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const UNSAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";

    fn begin(t: &Tracer, parent: Option<&'static str>, peer: &str) -> RequestTrace {
        let tp: Vec<HeaderValue> = parent.into_iter().map(HeaderValue::from_static).collect();
        let ts = [HeaderValue::from_static("congo=t61rcWkgMzE")];
        t.begin(&tp, &ts, peer.parse().expect("ip"), Instant::now())
    }

    #[test]
    fn a_trusted_parent_is_continued_with_its_sampling_decision() {
        let t = tracer("");
        let mut r = begin(&t, Some(PARENT), "127.0.0.1");
        assert_eq!(r.trace_id.to_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(r.sampled());
        let (tp, ts) = r.outgoing();
        let ts = ts.cloned();
        let sent = context::parse_traceparent(tp.as_bytes()).expect("valid");
        assert_eq!(sent.trace_id, r.trace_id);
        assert_ne!(sent.span_id.to_hex(), "00f067aa0ba902b7");
        assert_ne!(
            sent.span_id, r.span_id,
            "the origin's parent is the exchange's span"
        );
        assert_eq!(
            ts.as_ref().map(|v| v.to_str().unwrap_or("")),
            Some("congo=t61rcWkgMzE")
        );
        // The client's "not sampled" is followed too.
        let mut r = begin(&t, Some(UNSAMPLED), "127.0.0.1");
        assert!(!r.sampled());
        let (tp, _) = r.outgoing();
        let sent = context::parse_traceparent(tp.as_bytes()).expect("valid");
        assert!(!sent.sampled);
        assert_eq!(sent.span_id, r.span_id);
    }

    #[test]
    fn an_untrusted_or_unlisted_client_starts_a_new_trace() {
        for (extra, peer) in [
            ("trust_trace_context = false", "127.0.0.1"),
            ("trust_trace_context_from = [\"10.0.0.0/8\"]", "127.0.0.1"),
        ] {
            let t = tracer(extra);
            let mut r = begin(&t, Some(UNSAMPLED), peer);
            assert_ne!(
                r.trace_id.to_hex(),
                "4bf92f3577b34da6a3ce929d0e0e4736",
                "{extra}"
            );
            assert!(
                r.sampled(),
                "a new trace under parentbased_always_on: {extra}"
            );
            assert!(r.outgoing().1.is_none(), "no tracestate: {extra}");
        }
        let t = tracer("trust_trace_context_from = [\"10.0.0.0/8\"]");
        let r = begin(&t, Some(UNSAMPLED), "10.1.1.1");
        assert_eq!(r.trace_id.to_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
    }

    #[test]
    fn the_ratio_sampler_keeps_about_its_share() {
        let t = tracer("tracing_sampler = \"traceidratio\"\ntracing_sample_ratio = 0.25");
        let kept = (0..20_000)
            .filter(|_| begin(&t, None, "127.0.0.1").sampled())
            .count();
        assert!((4_400..5_600).contains(&kept), "{kept} of 20,000 at 25 %");
        // traceidratio ignores a parent's decision; parentbased_always_off samples no new trace.
        assert!(!(0..200).all(|_| begin(&t, Some(PARENT), "127.0.0.1").sampled()));
        let off = tracer("tracing_sampler = \"parentbased_always_off\"");
        assert!(!begin(&off, None, "127.0.0.1").sampled());
        assert!(begin(&off, Some(PARENT), "127.0.0.1").sampled());
    }

    #[test]
    fn each_origin_exchange_has_a_span_of_its_own() {
        let t = tracer("");
        let mut r = begin(&t, Some(PARENT), "127.0.0.1");
        let first = r.outgoing().0;
        let c1 = r.child(ORIGIN_SPAN, Kind::Client);
        r.end_child(c1);
        // A refetch: a second exchange in the same request.
        let second = r.outgoing().0;
        let c2 = r.child(ORIGIN_SPAN, Kind::Client);
        let id = |v: &HeaderValue| {
            context::parse_traceparent(v.as_bytes())
                .expect("valid")
                .span_id
        };
        assert_ne!(id(&first), id(&second));
        assert_eq!(r.child_mut(c1).map(|s| s.span_id), Some(id(&first)));
        assert_eq!(r.child_mut(c2).map(|s| s.span_id), Some(id(&second)));
        // The client's random flag goes on; rampart's own trace ids are random.
        assert!(first.to_str().unwrap_or("").ends_with("-01"));
        let mut own = begin(&t, None, "127.0.0.1");
        assert!(own.outgoing().0.to_str().unwrap_or("").ends_with("-03"));
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let t = tracer("tracing_queue_size = 16\ntracing_export_interval_ms = 3600000");
        for _ in 0..100 {
            let mut r = begin(&t, None, "127.0.0.1");
            let c = r.child("origin", Kind::Client);
            r.end_child(c);
            r.end();
        }
        let s = t.exporter().stats();
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        // Two spans a request; the queue takes 16 at a time (the exporter may drain it once it
        // is full, and its exports to a port nobody listens on fail).
        assert!(load(&s.queued) <= 16);
        assert!(load(&s.dropped) > 0, "{s:?}");
        assert_eq!(
            load(&s.dropped) % 2,
            0,
            "a request's spans go or stay together"
        );
    }
}
