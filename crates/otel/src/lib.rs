//! OpenTelemetry traces for rampart.
//!
//! - [`context`]: W3C Trace Context (`traceparent`, `tracestate`) and span identifiers.
//! - [`Tracer`]: per request, continues the client's trace (when trusted) or starts one,
//!   decides whether it is sampled, and writes the context the origin gets.
//! - [`RequestTrace`]: what a request records as it goes through the stages: one server span,
//!   its stage events, and child spans for the waits and the origin exchange. A sampled
//!   request's spans are written as OTLP while they are recorded ([`otlp`]): there is no span
//!   struct to fill and encode later.
//! - [`export`]: a thread's finished spans gather into a batch of its own; full batches (and,
//!   every export interval, whatever has gathered) go through a bounded queue to an exporter
//!   thread that sends them over OTLP (gRPC or HTTP/protobuf), off the request path; a full
//!   queue drops and counts.
//! - `transport`: an export request over HTTP/protobuf or gRPC.
//! - [`clock`]: span times from the monotonic clock, as Unix time.
//!
//! rampart records spans itself rather than through the `opentelemetry` SDK, and writes OTLP's
//! bytes itself rather than through opentelemetry-proto's message structs: the SDK's path cost
//! about 5× the CPU per request, and a span struct encoded by the exporter about 4× what
//! writing the bytes as the request goes costs (docs/benchmarks.md, "Traces").

pub mod clock;
pub mod context;
pub mod export;
pub mod otlp;
mod transport;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use http::header::HeaderValue;
use rampart_config::{Sampler, TracingConfig};

pub use context::{SpanId, TraceId, TraceParent};
pub use export::{Exporter, Stats};
pub use otlp::{Attr, IpText, Kind, Value};

pub use context::{TRACEPARENT, TRACESTATE};

use clock::Clock;
use context::Incoming;
use export::Slot;
use otlp::{
    SCOPE_SPAN, SPAN_ATTRIBUTE, SPAN_END, SPAN_KIND, SPAN_NAME, SPAN_PARENT, SPAN_SPAN_ID,
    SPAN_START, SPAN_TRACE_ID, SPAN_TRACE_STATE,
};

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
    /// instead of the client's ([`RequestTrace::outgoing`]). `tracestate` is looked up only
    /// when there is a `traceparent` to go with it.
    pub fn begin<'a, S: IntoIterator<Item = &'a HeaderValue>>(
        &self,
        traceparent: impl IntoIterator<Item = &'a HeaderValue>,
        tracestate: impl FnOnce() -> S,
        peer: IpAddr,
        start: Instant,
    ) -> RequestTrace {
        let mut traceparent = traceparent.into_iter().peekable();
        let incoming = if traceparent.peek().is_some() && self.config.trusts(peer) {
            Incoming::read(traceparent, tracestate())
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
        let mut trace = RequestTrace {
            trace_id,
            span_id,
            origin_span,
            origin_used: false,
            random,
            state: incoming.state,
            recording: None,
        };
        if sampled {
            let parent = incoming.parent.map(|p| p.span_id);
            trace.recording = Some(self.record(&trace, parent, start));
        }
        trace
    }

    /// The server span's recording, its first fields written.
    fn record(&self, t: &RequestTrace, parent: Option<SpanId>, start: Instant) -> Box<Recording> {
        let shared = self.exporter.shared();
        let clock = shared.wall.clock();
        let mut span = Vec::with_capacity(SPAN_CAPACITY);
        t.span_head(&mut span, t.span_id, parent);
        otlp::uint(&mut span, SPAN_KIND, Kind::Server as u64);
        otlp::fixed64(&mut span, SPAN_START, clock.nanos(start));
        Box::new(Recording {
            clock,
            span,
            remote_parent: parent.is_some(),
            children: Vec::new(),
            status: None,
            sent: 0,
            slot: self.exporter.slot(),
        })
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

/// The room a server span's bytes start with: a hit's or a pass's span with a user agent fits.
const SPAN_CAPACITY: usize = 1024;
/// The room a child span's bytes start with: an origin exchange of one attempt fits.
const CHILD_CAPACITY: usize = 512;

/// A request's part in a trace. Unsampled, it is only the ids (for the access log); sampled,
/// it records the spans, which are queued for export when it ends ([`RequestTrace::end`], or
/// its drop).
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

/// A sampled request's spans, written as OTLP as they are recorded (`otlp.rs`): the server
/// span's fields so far, and its children.
#[derive(Debug)]
struct Recording {
    clock: Clock,
    /// The server span's fields (an OTLP `Span`'s, without its length).
    span: Vec<u8>,
    /// The server span's parent is the client's.
    remote_parent: bool,
    children: Vec<Child>,
    /// The server span's error (written when it ends).
    status: Option<String>,
    /// Body bytes sent (`http.response.body.size`).
    sent: u64,
    /// Where this thread's spans gather into a batch.
    slot: Arc<Slot>,
}

/// A child span of the server span (a wait, the origin exchange).
#[derive(Debug)]
struct Child {
    span_id: SpanId,
    /// Its fields (an OTLP `Span`'s, without its length).
    span: Vec<u8>,
    /// Attributes written when it ends unless replaced before ([`RequestTrace::child_attrs_at_end`]).
    deferred: Vec<u8>,
    status: Option<String>,
    ended: bool,
}

/// A child span started with [`RequestTrace::child`], ended with [`RequestTrace::end_child`].
#[derive(Debug, Clone, Copy)]
pub struct ChildRef(usize);

impl RequestTrace {
    /// Whether spans are recorded (the trace is sampled).
    #[inline]
    pub fn sampled(&self) -> bool {
        self.recording.is_some()
    }

    /// The fields every span of the request starts with: the trace, the span, its trace state
    /// and its parent.
    fn span_head(&self, out: &mut Vec<u8>, span: SpanId, parent: Option<SpanId>) {
        otlp::bytes(out, SPAN_TRACE_ID, &self.trace_id.0);
        otlp::bytes(out, SPAN_SPAN_ID, &span.0);
        if let Some(state) = &self.state {
            otlp::bytes(out, SPAN_TRACE_STATE, state.as_bytes());
        }
        if let Some(p) = parent {
            otlp::bytes(out, SPAN_PARENT, &p.0);
        }
    }

    /// The `traceparent` and `tracestate` the next request to the origin gets (`None`: the
    /// client's `tracestate`, of a context not continued, is not sent on). Each exchange has a
    /// span id of its own: the first the one made with the trace, later ones new.
    pub fn outgoing(&mut self) -> (TraceParent, Option<&HeaderValue>) {
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
            TraceParent::new(self.trace_id, self.origin_span, flags),
            self.state.as_ref(),
        )
    }

    /// Names the server span `{method} {route}`, as HTTP's semantic conventions say.
    pub fn name(&mut self, method: &str, route: &str) {
        if let Some(r) = &mut self.recording {
            let route = otlp::cut(route);
            otlp::header(&mut r.span, SPAN_NAME, method.len() + 1 + route.len());
            r.span.extend_from_slice(method.as_bytes());
            r.span.push(b' ');
            r.span.extend_from_slice(route.as_bytes());
        }
    }

    /// Adds an attribute to the server span (text is cut at [`otlp::MAX_TEXT`] bytes).
    #[inline]
    pub fn attr<'v>(&mut self, key: &str, value: impl Into<Value<'v>>) {
        if let Some(r) = &mut self.recording {
            otlp::attr(&mut r.span, SPAN_ATTRIBUTE, key, &value.into());
        }
    }

    /// Adds attributes to the server span.
    pub fn attrs(&mut self, attrs: &[Attr<'_>]) {
        if let Some(r) = &mut self.recording {
            for (k, v) in attrs {
                otlp::attr(&mut r.span, SPAN_ATTRIBUTE, k, v);
            }
        }
    }

    /// Counts body bytes sent.
    #[inline]
    pub fn sent(&mut self, n: u64) {
        if let Some(r) = &mut self.recording {
            r.sent += n;
        }
    }

    /// Adds an event (a stage's outcome) to the server span, at this moment.
    pub fn event(&mut self, name: &str, attrs: &[Attr<'_>]) {
        if let Some(r) = &mut self.recording {
            let time = r.clock.now();
            otlp::event(&mut r.span, time, name, attrs);
        }
    }

    /// Marks the server span as failed (a 5xx answer, or a body cut short).
    pub fn error(&mut self, description: impl Into<String>) {
        if let Some(r) = &mut self.recording {
            r.status = Some(description.into());
        }
    }

    /// Starts a child span of the server span, now. The origin exchange (`Kind::Client`,
    /// named "origin") takes the id already sent to the origin in `traceparent`.
    pub fn child(&mut self, name: &'static str, kind: Kind) -> Option<ChildRef> {
        self.recording.as_ref()?;
        self.child_at(name, kind, Instant::now())
    }

    /// [`RequestTrace::child`] started at `at` (an instant the caller read anyway: a clock
    /// reading is ~25 ns).
    pub fn child_at(&mut self, name: &'static str, kind: Kind, at: Instant) -> Option<ChildRef> {
        self.recording.as_ref()?;
        let span_id = if kind == Kind::Client && name == ORIGIN_SPAN && !self.origin_used {
            self.origin_used = true;
            self.origin_span
        } else {
            SpanId::random()
        };
        let mut span = Vec::with_capacity(CHILD_CAPACITY);
        self.span_head(&mut span, span_id, Some(self.span_id));
        let r = self.recording.as_mut()?;
        otlp::bytes(&mut span, SPAN_NAME, name.as_bytes());
        otlp::uint(&mut span, SPAN_KIND, kind as u64);
        otlp::fixed64(&mut span, SPAN_START, r.clock.nanos(at));
        if r.children.capacity() == 0 {
            // The origin exchange, and room for a wait before it.
            r.children.reserve_exact(2);
        }
        r.children.push(Child {
            span_id,
            span,
            deferred: Vec::new(),
            status: None,
            ended: false,
        });
        Some(ChildRef(r.children.len() - 1))
    }

    fn child_mut(&mut self, c: Option<ChildRef>) -> Option<(&Clock, &mut Child)> {
        let (r, c) = (self.recording.as_mut()?, c?);
        let child = r.children.get_mut(c.0)?;
        (!child.ended).then_some((&r.clock, child))
    }

    /// The span id of a child span (the origin's parent, for the origin exchange).
    pub fn child_span_id(&self, c: Option<ChildRef>) -> Option<SpanId> {
        let (r, c) = (self.recording.as_ref()?, c?);
        r.children.get(c.0).map(|s| s.span_id)
    }

    /// Adds an attribute to a child span.
    pub fn child_attr<'v>(&mut self, c: Option<ChildRef>, key: &str, value: impl Into<Value<'v>>) {
        if let Some((_, s)) = self.child_mut(c) {
            otlp::attr(&mut s.span, SPAN_ATTRIBUTE, key, &value.into());
        }
    }

    /// Adds attributes to a child span.
    pub fn child_attrs(&mut self, c: Option<ChildRef>, attrs: &[Attr<'_>]) {
        if let Some((_, s)) = self.child_mut(c) {
            for (k, v) in attrs {
                otlp::attr(&mut s.span, SPAN_ATTRIBUTE, k, v);
            }
        }
    }

    /// Attributes for a child span that it gets when it ends, in place of any given before
    /// (the origin tried last, when none answers).
    pub fn child_attrs_at_end(&mut self, c: Option<ChildRef>, attrs: &[Attr<'_>]) {
        if let Some((_, s)) = self.child_mut(c) {
            s.deferred.clear();
            for (k, v) in attrs {
                otlp::attr(&mut s.deferred, SPAN_ATTRIBUTE, k, v);
            }
        }
    }

    /// Adds an event to a child span, at this moment.
    pub fn child_event(&mut self, c: Option<ChildRef>, name: &str, attrs: &[Attr<'_>]) {
        if let Some((clock, s)) = self.child_mut(c) {
            let time = clock.now();
            otlp::event(&mut s.span, time, name, attrs);
        }
    }

    /// Marks a child span as failed.
    pub fn child_error(&mut self, c: Option<ChildRef>, description: impl Into<String>) {
        if let Some((_, s)) = self.child_mut(c) {
            s.status = Some(description.into());
        }
    }

    /// Ends a child span now.
    pub fn end_child(&mut self, c: Option<ChildRef>) {
        if let Some((clock, s)) = self.child_mut(c) {
            let end = clock.now();
            s.end(end);
        }
    }

    /// Ends a child span at `at` (an instant the caller read anyway).
    pub fn end_child_at(&mut self, c: Option<ChildRef>, at: Instant) {
        if let Some((clock, s)) = self.child_mut(c) {
            let end = clock.nanos(at);
            s.end(end);
        }
    }

    /// Ends the server span (and any child still open) now, and queues the spans for export.
    /// Dropping the trace does the same (a request whose client went away is still traced).
    pub fn end(self) {}
}

impl Child {
    fn end(&mut self, at: u64) {
        self.span.extend_from_slice(&self.deferred);
        otlp::fixed64(&mut self.span, SPAN_END, at);
        if let Some(e) = &self.status {
            otlp::error_status(&mut self.span, e);
        }
        // A local parent: "has is_remote", not remote.
        otlp::flags(&mut self.span, Some(false));
        self.ended = true;
    }
}

impl Drop for RequestTrace {
    fn drop(&mut self) {
        let Some(r) = self.recording.take() else {
            return;
        };
        let Recording {
            clock,
            mut span,
            remote_parent,
            mut children,
            status,
            sent,
            slot,
        } = *r;
        let end = clock.now();
        otlp::attr(
            &mut span,
            SPAN_ATTRIBUTE,
            "http.response.body.size",
            &sent.into(),
        );
        otlp::fixed64(&mut span, SPAN_END, end);
        if let Some(e) = &status {
            otlp::error_status(&mut span, e);
        }
        // The server span's parent, when it has one, is the client's.
        otlp::flags(&mut span, remote_parent.then_some(true));
        for c in &mut children {
            if !c.ended {
                c.end(end);
            }
        }
        slot.write(|out| {
            for s in children.iter().map(|c| &c.span).chain([&span]) {
                otlp::bytes(out, SCOPE_SPAN, s);
            }
            children.len() as u32 + 1
        });
    }
}

/// The name of the origin exchange's span.
pub const ORIGIN_SPAN: &str = "origin";

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> TracingConfig {
        let endpoint = if extra.contains("tracing_endpoint") {
            ""
        } else {
            "tracing_endpoint = \"http://127.0.0.1:9\"\n"
        };
        let src = format!(
            "{endpoint}{extra}\n[[proxy_rules]]\ndomain = \"a\"\nforward_ipv4 = \"127.0.0.1\"\n"
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
        t.begin(&tp, || &ts, peer.parse().expect("ip"), Instant::now())
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
        let id = |v: &TraceParent| {
            context::parse_traceparent(v.as_bytes())
                .expect("valid")
                .span_id
        };
        assert_ne!(id(&first), id(&second));
        assert_eq!(r.child_span_id(c1), Some(id(&first)));
        assert_eq!(r.child_span_id(c2), Some(id(&second)));
        // The client's random flag goes on; rampart's own trace ids are random.
        assert!(first.as_bytes().ends_with(b"-01"));
        let mut own = begin(&t, None, "127.0.0.1");
        assert!(own.outgoing().0.as_bytes().ends_with(b"-03"));
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        // A collector that takes connections and never answers: the first batch waits in the
        // exporter for the timeout, the next fills the queue, the rest are dropped.
        let hung = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let t = tracer(&format!(
            "tracing_endpoint = \"http://{}\"\ntracing_queue_size = 16\n\
             tracing_export_interval_ms = 3600000\ntracing_timeout_ms = 60000",
            hung.local_addr().expect("addr")
        ));
        let s = t.exporter().stats().clone();
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        for _ in 0..100 {
            let mut r = begin(&t, None, "127.0.0.1");
            let c = r.child("origin", Kind::Client);
            r.end_child(c);
            r.end();
            if load(&s.batches) == 0 {
                // Until the exporter has taken the first batch (and waits on the collector).
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        // Two spans a request, batches of 16 (the queue's size): the first is being sent (and
        // counts in the queue until it is); the next 11 batches were dropped; the last 4
        // requests' spans gather in this thread's batch.
        assert_eq!(load(&s.batches), 1, "{s:?}");
        assert_eq!(load(&s.queued), 16, "{s:?}");
        assert_eq!(load(&s.dropped), 176, "{s:?}");
        assert_eq!(load(&s.exported) + load(&s.failed), 0, "{s:?}");
    }

    #[test]
    fn a_requests_spans_are_exported_as_recorded() {
        // A collector of one request: the exported body, decoded with opentelemetry-proto.
        use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
        use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
        use prost::Message as _;
        use std::io::{BufRead as _, BufReader, Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let t = tracer(&format!(
            "tracing_endpoint = \"http://{}/v1/traces\"\ntracing_export_interval_ms = 50",
            listener.local_addr().expect("addr")
        ));
        let mut r = begin(&t, Some(PARENT), "127.0.0.1");
        r.name("GET", "www.example.com");
        r.attr("url.path", "/x");
        r.attr("client.address", Value::Ip([192, 0, 2, 1].into()));
        r.event("recv", &[("rampart.screening", "passed".into())]);
        let _ = r.outgoing();
        let c = r.child(ORIGIN_SPAN, Kind::Client);
        r.child_event(c, "attempt", &[("server.address", "origin.test".into())]);
        r.child_attr(c, "http.response.status_code", 503u16);
        r.child_error(c, "the origin answered 503");
        r.end_child(c);
        let w = r.child("wait for fetch", Kind::Internal);
        r.child_attrs_at_end(w, &[("server.address", "first.test".into())]);
        r.child_attrs_at_end(w, &[("server.address", "second.test".into())]);
        r.sent(12);
        r.error("x".repeat(5000));
        r.end();
        // The child still open when the request ended is ended with it.
        let _ = w;

        let (mut conn, _) = listener.accept().expect("accept");
        let mut reader = BufReader::new(conn.try_clone().expect("clone"));
        let mut len = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("head");
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().expect("length");
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; len];
        reader.read_exact(&mut body).expect("body");
        conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .expect("answer");
        let req = ExportTraceServiceRequest::decode(&body[..]).expect("decodes");
        let spans = &req.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans.len(), 3);
        let server = spans.iter().find(|s| s.kind == 2).expect("server span");
        let origin = spans
            .iter()
            .find(|s| s.name == "origin")
            .expect("origin span");
        let wait = spans
            .iter()
            .find(|s| s.name == "wait for fetch")
            .expect("wait");
        assert_eq!(server.name, "GET www.example.com");
        assert_eq!(server.parent_span_id, hex("00f067aa0ba902b7"));
        assert_eq!(server.trace_state, "congo=t61rcWkgMzE");
        assert_eq!(
            server.flags,
            otlp::FLAG_SAMPLED | otlp::FLAG_HAS_IS_REMOTE | otlp::FLAG_IS_REMOTE
        );
        assert!(server.start_time_unix_nano <= origin.start_time_unix_nano);
        assert!(origin.end_time_unix_nano <= server.end_time_unix_nano);
        assert_eq!(wait.end_time_unix_nano, server.end_time_unix_nano);
        // Attributes for the end: the last given, once.
        assert_eq!(wait.attributes.len(), 1);
        assert_eq!(
            wait.attributes[0]
                .value
                .as_ref()
                .and_then(|v| v.value.clone()),
            Some(Any::StringValue("second.test".into()))
        );
        let attr = |s: &opentelemetry_proto::tonic::trace::v1::Span, k: &str| {
            s.attributes
                .iter()
                .find(|a| a.key == k)
                .and_then(|a| a.value.as_ref()?.value.clone())
        };
        assert_eq!(
            attr(server, "url.path"),
            Some(Any::StringValue("/x".into()))
        );
        assert_eq!(
            attr(server, "client.address"),
            Some(Any::StringValue("192.0.2.1".into()))
        );
        assert_eq!(
            attr(server, "http.response.body.size"),
            Some(Any::IntValue(12))
        );
        assert_eq!(server.events[0].name, "recv");
        let status = server.status.as_ref().expect("status");
        assert_eq!((status.code, status.message.len()), (2, otlp::MAX_TEXT));
        for child in [origin, wait] {
            assert_eq!(child.trace_id, server.trace_id);
            assert_eq!(child.parent_span_id, server.span_id);
            assert_eq!(child.trace_state, "congo=t61rcWkgMzE");
            assert_eq!(child.flags, otlp::FLAG_SAMPLED | otlp::FLAG_HAS_IS_REMOTE);
        }
        assert_eq!(origin.kind, 3);
        assert_eq!(
            attr(origin, "http.response.status_code"),
            Some(Any::IntValue(503))
        );
        assert_eq!(origin.events[0].name, "attempt");
        assert_eq!(
            origin.status.as_ref().map(|s| s.message.as_str()),
            Some("the origin answered 503")
        );
        let s = t.exporter().stats();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while s.exported.load(std::sync::atomic::Ordering::Relaxed) < 3 {
            assert!(std::time::Instant::now() < deadline, "{s:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }
}
