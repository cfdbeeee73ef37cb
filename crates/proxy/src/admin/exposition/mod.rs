//! The scrape: every figure gathered into metric families, written as Prometheus text (0.0.4)
//! or OpenMetrics by `prometheus-client`. The list of names is docs/metrics.md.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::SystemTime;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

mod origins;
mod process;

pub use process::process_memory;

use crate::admin::state::Api;
use crate::telemetry::metrics::{
    self as m, hit_ratio, BlockReason, CacheMetric, HistSnap, Metrics, PpRefusal, Protocol,
};

/// The `Content-Type` of each format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(&'static str, String)>;

#[derive(Debug)]
enum Value {
    Counter(u64),
    /// A counter of a measure with fractions (CPU seconds).
    FloatCounter(f64),
    Gauge(f64),
    Histogram(HistSnap),
}

#[derive(Debug)]
struct Family {
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    samples: Vec<(Labels, Value)>,
}

#[derive(Debug, Default)]
struct Families(Vec<Family>);

impl Families {
    fn add(&mut self, name: &'static str, help: &'static str, unit: Option<Unit>) -> &mut Family {
        self.0.push(Family {
            name,
            help,
            unit,
            samples: Vec::new(),
        });
        let last = self.0.len() - 1;
        &mut self.0[last]
    }
}

impl Family {
    fn counter(&mut self, labels: Labels, v: u64) -> &mut Self {
        self.samples.push((labels, Value::Counter(v)));
        self
    }

    fn gauge(&mut self, labels: Labels, v: f64) -> &mut Self {
        self.samples.push((labels, Value::Gauge(v)));
        self
    }

    fn histogram(&mut self, labels: Labels, h: HistSnap) -> &mut Self {
        self.samples.push((labels, Value::Histogram(h)));
        self
    }

    fn kind(&self) -> MetricType {
        match self.samples.first().map(|s| &s.1) {
            Some(Value::Counter(_) | Value::FloatCounter(_)) => MetricType::Counter,
            Some(Value::Histogram(_)) => MetricType::Histogram,
            _ => MetricType::Gauge,
        }
    }
}

fn encode_value(
    v: &Value,
    enc: prometheus_client::encoding::MetricEncoder<'_>,
) -> std::fmt::Result {
    match v {
        Value::Counter(c) => ConstCounter::new(*c).encode(enc),
        Value::FloatCounter(c) => ConstCounter::new(*c).encode(enc),
        Value::Gauge(g) => ConstGauge::new(*g).encode(enc),
        Value::Histogram(h) => {
            let mut enc = enc;
            enc.encode_histogram::<NoLabelSet>(h.sum_us as f64 / 1e6, h.count(), &h.buckets(), None)
        }
    }
}

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        for f in self.0.iter().filter(|f| !f.samples.is_empty()) {
            let mut metric =
                encoder.encode_descriptor(f.name, f.help, f.unit.as_ref(), f.kind())?;
            // A family without labels has its one value written as it is.
            if let [(labels, value)] = f.samples.as_slice() {
                if labels.is_empty() {
                    encode_value(value, metric)?;
                    continue;
                }
            }
            for (labels, value) in &f.samples {
                encode_value(value, metric.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The metrics as text: OpenMetrics when `openmetrics`, else Prometheus text 0.0.4.
pub fn render(m: &Metrics, view: &Api<'_>, openmetrics: bool) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(gather(m, view)));
    let mut out = String::with_capacity(16 * 1024);
    let written = if openmetrics {
        prometheus_client::encoding::text::encode(&mut out, &registry)
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
    };
    if written.is_err() {
        out.clear();
        out.push_str("# the metrics could not be written\n");
    }
    out
}

fn gather(m: &Metrics, view: &Api<'_>) -> Families {
    let mut f = Families::default();
    let (version, commit) = m::BUILD
        .get()
        .cloned()
        .unwrap_or_else(|| (env!("CARGO_PKG_VERSION").to_owned(), "unknown".to_owned()));
    f.add("rampart_build_info", "rampart's version and commit.", None)
        .gauge(vec![("version", version), ("commit", commit)], 1.0);
    f.add(
        "rampart_start_time",
        "When this process started (Unix time).",
        Some(Unit::Seconds),
    )
    .gauge(vec![], unix(m.started));
    requests(m, &mut f);
    cache(m, view, &mut f);
    connections(m, view, &mut f);
    origins::origins(m, view, &mut f);
    let blocked = f.add(
        "rampart_blocked_requests",
        "Requests refused before reaching an origin, by reason (screening, path rules, limits, malformed requests).",
        None,
    );
    let counts = m.sum_workers(|w| &w.blocked);
    for (reason, c) in BlockReason::LABELS.iter().zip(counts) {
        blocked.counter(vec![("reason", (*reason).to_owned())], c);
    }
    let reloads = f.add(
        "rampart_config_reloads",
        "Configuration reloads put in service (ok) or refused (failed).",
        None,
    );
    for (i, result) in ["ok", "failed"].iter().enumerate() {
        reloads.counter(
            vec![("result", (*result).to_owned())],
            m.reloads[i].load(Relaxed),
        );
    }
    let last = m.last_reload.load(Relaxed);
    if last > 0 {
        f.add(
            "rampart_config_last_reload_success_timestamp",
            "When the configuration in service was loaded by a reload (Unix time).",
            Some(Unit::Seconds),
        )
        .gauge(vec![], last as f64);
    }
    if let Some(r) = view.redis {
        redis(r, &mut f);
    }
    if let Some(t) = view.traces {
        traces(t, &mut f);
    }
    process::process(m, &mut f);
    f
}

/// The trace exporter: spans sent, dropped (queue full), failed (the collector refused them
/// or did not answer), and waiting.
fn traces(s: &rampart_otel::Stats, f: &mut Families) {
    for (name, help, v) in [
        ("rampart_trace_spans_exported", "Spans the OpenTelemetry collector accepted.", &s.exported),
        ("rampart_trace_spans_dropped", "Spans dropped because the export queue was full (a slow or stopped collector).", &s.dropped),
        ("rampart_trace_spans_failed", "Spans in exports that failed: refused by the collector, unreachable, or no answer within tracing_timeout_ms.", &s.failed),
        ("rampart_trace_exports", "Exports sent to the collector (batches of spans), whatever their result.", &s.batches),
    ] {
        f.add(name, help, None).counter(vec![], v.load(Relaxed));
    }
    f.add(
        "rampart_trace_spans_queued",
        "Spans waiting for export now.",
        None,
    )
    .gauge(vec![], s.queued.load(Relaxed) as f64);
}

/// What went through Redis, and the local decisions taken while it did not answer.
fn redis(r: &rampart_redis::Shared, f: &mut Families) {
    use rampart_redis::FEATURES;
    let s = r.stats();
    f.add(
        "rampart_redis_up",
        "Whether Redis answered the last command or the once-a-second PING (1) or not (0).",
        None,
    )
    .gauge(vec![], if r.is_up() { 1.0 } else { 0.0 });
    let used = f.add(
        "rampart_redis_requests",
        "Decisions and purges that went through Redis, by feature.",
        None,
    );
    for (i, name) in FEATURES.iter().enumerate() {
        used.counter(
            vec![("feature", (*name).to_owned())],
            s.used[i].load(Relaxed),
        );
    }
    let fallbacks = f.add(
        "rampart_redis_fallbacks",
        "Local decisions taken because Redis was slow, away or backing off (rate_limit, cache), and purges that could not wait for Redis (purge), by feature.",
        None,
    );
    for (i, name) in FEATURES.iter().enumerate() {
        fallbacks.counter(
            vec![("feature", (*name).to_owned())],
            s.fallbacks[i].load(Relaxed),
        );
    }
    for (name, help, v) in [
        ("rampart_redis_errors", "Redis commands on the request path that failed or timed out (each starts a one-second back-off).", &s.errors),
        ("rampart_redis_purges_received", "Purges and invalidations other instances made, applied here.", &s.purges_received),
        ("rampart_redis_purge_resyncs", "Times the cache was emptied because purges may have been missed while Redis was away.", &s.purge_resyncs),
        ("rampart_redis_cache_hits", "Local misses answered from the shared cache tier.", &s.cache_hits),
        ("rampart_redis_cache_writes", "Objects written to the shared cache tier.", &s.cache_writes),
        ("rampart_redis_cache_waits", "Misses that waited for another instance's fetch instead of fetching.", &s.cache_waits),
    ] {
        f.add(name, help, None).counter(vec![], v.load(Relaxed));
    }
}

fn requests(m: &Metrics, f: &mut Families) {
    let rules: Vec<(String, Arc<m::RuleStats>)> = {
        let rules = m.rules.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = rules.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let all = || {
        rules
            .iter()
            .map(|(name, s)| (name.as_str(), &**s))
            .chain([("-", &*m.unrouted)])
    };
    let fam = f.add(
        "rampart_requests",
        "Client requests answered, by rule (its domain; - before a rule was found), status class, cache outcome and protocol.",
        None,
    );
    for (name, stats) in all() {
        for (i, c) in stats.requests().into_iter().enumerate() {
            if c == 0 {
                continue;
            }
            let (protocols, caches) = (Protocol::LABELS, CacheMetric::LABELS);
            let proto = i % protocols.len();
            let cache = (i / protocols.len()) % caches.len();
            let class = i / (protocols.len() * caches.len()) + 1;
            fam.counter(
                vec![
                    ("rule", name.to_owned()),
                    ("code", format!("{class}xx")),
                    ("cache", caches[cache].to_owned()),
                    ("protocol", protocols[proto].to_owned()),
                ],
                c,
            );
        }
    }
    let fam = f.add(
        "rampart_request_duration",
        "Time from a request's arrival to its response head, by rule.",
        Some(Unit::Seconds),
    );
    for (name, stats) in all() {
        let h = stats.duration();
        if h.count() > 0 {
            fam.histogram(vec![("rule", name.to_owned())], h);
        }
    }
}

fn cache(m: &Metrics, view: &Api<'_>, f: &mut Families) {
    let Some(c) = view.cache else {
        return;
    };
    let s = c.store().stats();
    let figures: [(&'static str, &'static str, Option<Unit>, f64); 6] = [
        ("rampart_cache_entries", "Responses stored (each variant counts).", None, s.entries as f64),
        ("rampart_cache_size", "Memory the stored responses take (the budget's measure).", Some(Unit::Bytes), s.weight as f64),
        ("rampart_cache_reserved", "Memory reserved for responses being stored now.", Some(Unit::Bytes), s.reserved as f64),
        ("rampart_cache_pinned", "Memory of stored bodies no entry holds that clients still read (evicted or replaced while being sent, or being stored), counted in the budget.", Some(Unit::Bytes), s.pinned as f64),
        ("rampart_cache_capacity", "The cache's memory budget (cache_memory).", Some(Unit::Bytes), c.store().capacity() as f64),
        ("rampart_cache_fetches_in_flight", "Origin fetches that other requests for the same resource wait on (request coalescing).", None, c.coalescer().len() as f64),
    ];
    for (name, help, unit, v) in figures {
        f.add(name, help, unit).gauge(vec![], v);
    }
    f.add(
        "rampart_cache_evictions",
        "Stored responses evicted to stay within the budget.",
        None,
    )
    .counter(vec![], s.evictions);
    if let Some(d) = c.disk() {
        disk(&d.stats(), f);
    }
    let (hits, lookups) = m.totals().hits_and_lookups();
    if let Some(r) = hit_ratio(hits, lookups) {
        f.add(
            "rampart_cache_hit_ratio",
            "Answers from the cache (hit, stale, revalidated) over cache lookups (those plus miss, expired, collapsed) since start; for a window use rampart_requests_total.",
            None,
        )
        .gauge(vec![], r);
    }
}

/// The disk tier (`cache_disk`).
fn disk(d: &rampart_cache::disk::DiskStats, f: &mut Families) {
    #[rustfmt::skip]
    let gauges: [(&'static str, &'static str, Option<Unit>, f64); 6] = [
        ("rampart_cache_disk_used", "Bytes of the disk tier's files (segments, summaries, purge log), within cache_disk_size.", Some(Unit::Bytes), d.used as f64),
        ("rampart_cache_disk_capacity", "The disk tier's size (cache_disk_size).", Some(Unit::Bytes), d.capacity as f64),
        ("rampart_cache_disk_objects", "Records the disk tier's index points at (objects and Vary markers).", None, d.objects as f64),
        ("rampart_cache_disk_state", "0 waiting for the directory's lock (another process has it), 1 warming the index, 2 ready, 3 closed.", None, f64::from(d.state)),
        ("rampart_cache_disk_warm_segments", "Segments whose records are in the index (of rampart_cache_disk_segments_at_start).", None, d.warm_segments as f64),
        ("rampart_cache_disk_segments_at_start", "Segments the directory held when the disk tier opened.", None, d.warm_total as f64),
    ];
    for (name, help, unit, v) in gauges {
        f.add(name, help, unit).gauge(vec![], v);
    }
    if d.warm_micros > 0 {
        f.add(
            "rampart_cache_disk_warmup",
            "How long filling the index from the directory took.",
            Some(Unit::Seconds),
        )
        .gauge(vec![], d.warm_micros as f64 / 1e6);
    }
    #[rustfmt::skip]
    let counters: [(&'static str, &'static str, u64); 11] = [
        ("rampart_cache_disk_hits", "Memory misses answered from the disk tier.", d.hits),
        ("rampart_cache_disk_misses", "Memory misses the disk tier could not answer.", d.misses),
        ("rampart_cache_disk_read_bytes", "Bytes read from the disk tier for answers.", d.read_bytes),
        ("rampart_cache_disk_writes", "Records written to the disk tier.", d.writes),
        ("rampart_cache_disk_written_bytes", "Bytes written to the disk tier.", d.write_bytes),
        ("rampart_cache_disk_reused_bytes", "Bytes of records used again after they were written, each record counted once (write amplification: rampart_cache_disk_written_bytes over this).", d.reused_bytes),
        ("rampart_cache_disk_not_admitted", "Offers of objects used fewer than cache_disk_min_uses times (not written).", d.not_admitted),
        ("rampart_cache_disk_dropped", "Objects not written: the write queue was full, writing was paused after an error, or the object was larger than half a segment.", d.dropped),
        ("rampart_cache_disk_errors", "Disk faults: failed reads and writes, records failing their checksums, disk full (each kind is logged once).", d.errors),
        ("rampart_cache_disk_corrupt", "Objects dropped from the disk tier because their bytes were not whole (a record or a large object's chunk failing its checksum, or unreadable): each is fetched again.", d.corrupt),
        ("rampart_cache_disk_reclaimed_segments", "Segments reclaimed (oldest first) to stay within cache_disk_size.", d.reclaimed_segments),
    ];
    for (name, help, v) in counters {
        f.add(name, help, None).counter(vec![], v);
    }
}

fn connections(m: &Metrics, view: &Api<'_>, f: &mut Families) {
    let accepted = m.sum_workers(|w| &w.accepted);
    let ended = m.sum_workers(|w| &w.ended);
    let open = f.add(
        "rampart_connections_open",
        "Client connections open now, by scheme.",
        None,
    );
    for (i, scheme) in ["http", "https"].iter().enumerate() {
        open.gauge(
            vec![("scheme", (*scheme).to_owned())],
            accepted[i].saturating_sub(ended[i]) as f64,
        );
    }
    f.add(
        "rampart_connections_parked",
        "Idle HTTP/1.1 keep-alive connections parked outside any task (in the worker's epoll set), included in rampart_connections_open.",
        None,
    )
    .gauge(
        vec![],
        crate::telemetry::metrics::PARKED_CONNECTIONS.load(std::sync::atomic::Ordering::Relaxed)
            as f64,
    );
    let acc = f.add(
        "rampart_connections_accepted",
        "Client connections accepted, by scheme.",
        None,
    );
    for (i, scheme) in ["http", "https"].iter().enumerate() {
        acc.counter(vec![("scheme", (*scheme).to_owned())], accepted[i]);
    }
    f.add(
        "rampart_connections_limit",
        "max_connections: connections beyond it wait in the listen backlog.",
        None,
    )
    .gauge(vec![], view.max_connections as f64);
    f.add(
        "rampart_connections_refused_per_ip",
        "Connections closed at once by max_connections_per_ip.",
        None,
    )
    .counter(vec![], m.sum_worker(|w| &w.refused_per_ip));
    let (opened, open) = m.tunnels();
    f.add(
        "rampart_websockets_opened",
        "WebSocket connections switched to (HTTP/1.1 Upgrade or HTTP/2 extended CONNECT).",
        None,
    )
    .counter(vec![], opened);
    f.add(
        "rampart_websockets_open",
        "WebSocket connections open now.",
        None,
    )
    .gauge(vec![], open as f64);
    let pp = m.sum_workers(|w| &w.pp_refused);
    let fam = f.add(
        "rampart_proxy_protocol_refused",
        "Connections to a proxy_protocol listener closed before HTTP: a peer outside proxy_protocol_from, a malformed header, or none in time.",
        None,
    );
    for (reason, n) in PpRefusal::LABELS.iter().zip(pp) {
        fam.counter(vec![("reason", (*reason).to_owned())], n);
    }
    f.add(
        "rampart_client_send_timeouts",
        "Client connections closed because the client took nothing of a response for client_send_timeout_seconds.",
        None,
    )
    .counter(vec![], m.sum_worker(|w| &w.send_timeouts));
    f.add(
        "rampart_client_received",
        "Bytes read from clients (on the wire: TLS records included).",
        Some(Unit::Bytes),
    )
    .counter(vec![], m.sum_worker(|w| &w.received));
    f.add(
        "rampart_client_sent",
        "Bytes written to clients (on the wire: TLS records included).",
        Some(Unit::Bytes),
    )
    .counter(vec![], m.sum_worker(|w| &w.sent));
    if let Some(certs) = view.certs {
        tls(m, certs, f);
    }
}

/// TLS handshakes, and when each certificate in service expires.
fn tls(m: &Metrics, certs: &rampart_tls::cert_store::CertStore, f: &mut Families) {
    let tls = m.sum_workers(|w| &w.tls);
    let fam = f.add(
        "rampart_tls_handshakes",
        "TLS handshakes with clients: completed, failed or timed out.",
        None,
    );
    for (i, result) in ["ok", "failed", "timeout"].iter().enumerate() {
        fam.counter(vec![("result", (*result).to_owned())], tls[i]);
    }
    let fam = f.add(
        "rampart_tls_certificate_expiry_timestamp",
        "When each certificate in service expires (its notAfter, Unix time), by the name it serves.",
        Some(Unit::Seconds),
    );
    for (name, key) in certs.certificates() {
        let expiry = key
            .cert
            .first()
            .and_then(|c| rampart_tls::der::validity(c))
            .map(|v| unix(v.not_after));
        if let Some(t) = expiry {
            fam.gauge(vec![("name", name)], t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caching::Cache;
    use crate::outcome::{CacheOutcome, Served};
    use crate::policy::route::Router;
    use std::time::Duration;

    #[test]
    fn both_formats_carry_the_families() {
        let m = Metrics::new(1);
        let r = m.rule("a.test");
        r.record(
            200,
            CacheMetric::of(Some(CacheOutcome::Served(Served::Fresh))),
            Protocol::Http1,
            Duration::from_micros(80),
        );
        let src = "[[proxy_rules]]\ndomain = \"a.test\"\nforward_ipv4 = \"127.0.0.1\"\n";
        let config = rampart_config::validate(src, 1)
            .config
            .unwrap_or_else(|| panic!("config"));
        let router = Router::new(&config);
        let cache = Cache::new(1 << 20, 1 << 16);
        let admin = rampart_config::AdminConfig {
            api_key: None,
            purge_allow: vec![],
            metrics_allow: vec![],
        };
        let view = Api {
            config: &admin,
            control: None,
            cache: Some(&cache),
            router: &router,
            certs: None,
            max_connections: 100,
            redis: None,
            traces: None,
            fleet: None,
        };
        let text = render(&m, &view, false);
        for line in [
            "# TYPE rampart_requests_total counter",
            "rampart_requests_total{rule=\"a.test\",code=\"2xx\",cache=\"hit\",protocol=\"http1\"} 1",
            "rampart_request_duration_seconds_bucket{rule=\"a.test\",le=\"0.0001\"} 1",
            "rampart_cache_capacity_bytes 1048576",
            "rampart_cache_hit_ratio 1",
            "rampart_origin_up{rule=\"a.test\",origin=\"127.0.0.1:80\"} 1",
            "rampart_blocked_requests_total{reason=\"rate_limit\"} 0",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
        let om = render(&m, &view, true);
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(
            om.contains("# UNIT rampart_cache_capacity_bytes bytes"),
            "{om}"
        );
    }
}
