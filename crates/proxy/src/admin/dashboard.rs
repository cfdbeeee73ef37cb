//! The live dashboard: a page (HTML, script and style embedded in the binary, nothing fetched
//! from elsewhere) and the stream of figures it draws, as server-sent events.
//!
//! `GET /_rampart/dashboard` serves the page to anyone when the management API is on: it holds
//! no figures. The page asks for the API key (kept in the tab's session storage) and reads
//! `GET /_rampart/dashboard/events` with it in the `Authorization` header (a `fetch` stream,
//! not `EventSource`, so the key never appears in a URL or a log); a client in
//! `metrics_allow` needs no key for the stream. One event a second: the last second's request
//! rate, hit ratio, latency percentiles, status classes and refusals, plus the cache, origin
//! health, the most requested hosts and paths (kept only while a dashboard watches) and the
//! latest refused requests. The stream ends when the server stops.

use rampart_head::Response;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use http::StatusCode;
use serde_json::{json, Value};

use crate::body::ProxyBody;
use crate::caching::Cache;
use crate::policy::route::Router;
use crate::telemetry::metrics::{self, hit_ratio, BlockReason, CacheMetric, Metrics, Totals};

const PAGE: &str = include_str!("../../assets/dashboard/index.html");
const SCRIPT: &str = include_str!("../../assets/dashboard/app.js");
const STYLE: &str = include_str!("../../assets/dashboard/style.css");

/// How often the stream sends an event.
const TICK: Duration = Duration::from_secs(1);

/// What the stream reads besides the counts: the configuration in service.
#[derive(Debug)]
pub struct Scene {
    pub router: Arc<Router>,
    pub cache: Option<Arc<Cache>>,
    /// The trace exporter's counters, when tracing is on.
    pub traces: Option<Arc<rampart_otel::Stats>>,
    /// Each worker's view of the fleet (empty without `cache_peers`).
    pub fleets: Vec<Arc<crate::origin::fleet::Fleet>>,
}

static SCENE: Mutex<Option<Arc<Scene>>> = Mutex::new(None);

/// Puts a new configuration's view in place (`server/reload.rs`: startup and reloads).
pub fn publish(scene: Scene) {
    *SCENE.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(scene));
}

fn scene() -> Option<Arc<Scene>> {
    SCENE.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The page's files by their name under `/_rampart/`.
pub fn asset(name: &str) -> Option<Response<ProxyBody>> {
    let (body, kind) = match name {
        "dashboard" => (PAGE, "text/html; charset=utf-8"),
        "dashboard.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "dashboard.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return None,
    };
    let mut res = Response::new(ProxyBody::full(Bytes::from_static(body.as_bytes())));
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Only its own files, never framed, no referrer leaves it.
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self' data:; form-action 'none'; base-uri 'none'; frame-ancestors 'none'",
        ),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    Some(res)
}

/// `GET /_rampart/dashboard/events`: one event now, then one a second.
pub fn events() -> Response<ProxyBody> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(2);
    let m = metrics::get();
    tokio::spawn(async move {
        let _watching = m.watch();
        let mut before = (Instant::now(), m.totals());
        let mut origins = OriginWindows::default();
        let mut tick = tokio::time::interval(TICK);
        loop {
            tick.tick().await;
            if m.stopping() {
                break;
            }
            let now = (Instant::now(), m.totals());
            let event = frame(&snapshot(m, &before, &now, &mut origins));
            before = now;
            // The client went away: the body, and with it the receiver, is gone.
            if tx.send(event).await.is_err() {
                break;
            }
        }
    });
    let mut res = Response::new(ProxyBody::channel(rx));
    *res.status_mut() = StatusCode::OK;
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

fn frame(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How many events back an origin's response time reaches: the average over the last 10
/// seconds' requests, steady enough to read, recent enough to move.
const ORIGIN_WINDOW: usize = 10;

/// Each origin's response-head count and time at the last [`ORIGIN_WINDOW`] events, oldest
/// first, by rule and origin.
#[derive(Debug, Default)]
pub struct OriginWindows {
    past: std::collections::VecDeque<std::collections::HashMap<(String, String), (u64, u64)>>,
}

impl OriginWindows {
    /// Takes this event's counts; the average head time in ms since the oldest kept event
    /// (`None` without a request to it in that time), and the requests per second sent to it.
    fn observe(
        &mut self,
        now: std::collections::HashMap<(String, String), (u64, u64)>,
    ) -> impl Fn(&(String, String)) -> (Option<f64>, f64) + '_ {
        self.past.push_back(now);
        if self.past.len() > ORIGIN_WINDOW + 1 {
            self.past.pop_front();
        }
        let (oldest, newest) = (&self.past[0], &self.past[self.past.len() - 1]);
        let span = (self.past.len() - 1).max(1) as f64;
        move |k| {
            let (c1, s1) = newest.get(k).copied().unwrap_or_default();
            let (c0, s0) = oldest.get(k).copied().unwrap_or_default();
            let (c, s) = (c1.saturating_sub(c0), s1.saturating_sub(s0));
            // µs per head, in ms to the µs.
            let mean = (c > 0).then(|| (s as f64 / c as f64).round() / 1e3);
            (mean, c as f64 / span)
        }
    }
}

/// The figures of one event: the window between `before` and `now`, and the state now.
/// `origins` keeps each origin's recent response times from one event to the next.
pub fn snapshot(
    m: &Metrics,
    before: &(Instant, Totals),
    now: &(Instant, Totals),
    origins: &mut OriginWindows,
) -> Value {
    let (t0, a) = before;
    let (t1, b) = now;
    // The first event comes at once: its window counts as a second, not a spike.
    let secs = t1.duration_since(*t0).as_secs_f64().max(1.0);
    let window = |i: usize| b.by_cache[i].saturating_sub(a.by_cache[i]);
    let requests = b.requests.saturating_sub(a.requests);
    let (hits_a, lookups_a) = a.hits_and_lookups();
    let (hits_b, lookups_b) = b.hits_and_lookups();
    let latency = b.duration.since(&a.duration);
    let q = |p: f64| latency.quantile(p).map(|s| (s * 1e6).round() / 1e3);
    let blocked_now: u64 = b.blocked.iter().sum();
    let blocked_before: u64 = a.blocked.iter().sum();
    let scene = scene();
    let cache = scene.as_ref().and_then(|s| s.cache.as_ref()).map(|c| {
        let s = c.store().stats();
        json!({
            "entries": s.entries,
            "size_bytes": s.weight,
            "capacity_bytes": c.store().capacity(),
            "evictions": s.evictions,
            "disk": c.disk().map(crate::admin::figures::disk),
        })
    });
    let traces = scene.as_ref().and_then(|s| s.traces.as_ref()).map(|t| {
        use std::sync::atomic::Ordering::Relaxed;
        json!({
            "exported": t.exported.load(Relaxed),
            "dropped": t.dropped.load(Relaxed),
            "failed": t.failed.load(Relaxed),
            "queued": t.queued.load(Relaxed),
        })
    });
    let upstreams = origin_rows(scene.as_ref(), origins);
    let peers = scene
        .as_ref()
        .map_or_else(Vec::new, |s| peer_rows(&s.fleets));
    let (hosts, paths) = m.top(10);
    let refusals: Vec<Value> = m
        .refusals(20)
        .into_iter()
        .map(|r| {
            json!({
                "time": unix_ms(r.time),
                "client": r.client.to_string(),
                "host": r.host,
                "path": r.path,
                "reason": r.reason,
            })
        })
        .collect();
    let classes: serde_json::Map<String, Value> = (0..5)
        .map(|i| {
            (
                format!("{}xx", i + 1),
                json!(b.by_class[i].saturating_sub(a.by_class[i])),
            )
        })
        .collect();
    let outcomes: serde_json::Map<String, Value> = CacheMetric::LABELS
        .iter()
        .enumerate()
        .map(|(i, l)| ((*l).to_owned(), json!(window(i))))
        .collect();
    let by_reason: serde_json::Map<String, Value> = BlockReason::LABELS
        .iter()
        .enumerate()
        .filter(|(i, _)| b.blocked[*i] > 0)
        .map(|(i, r)| ((*r).to_owned(), json!(b.blocked[i])))
        .collect();
    json!({
        "time": unix_ms(SystemTime::now()),
        "window_seconds": secs,
        "requests_per_second": requests as f64 / secs,
        "hit_ratio": hit_ratio(hits_b.saturating_sub(hits_a), lookups_b.saturating_sub(lookups_a)),
        "hit_ratio_since_start": hit_ratio(hits_b, lookups_b),
        "latency_ms": { "p50": q(0.5), "p90": q(0.9), "p99": q(0.99) },
        "status": classes,
        "cache_outcomes": outcomes,
        "blocked_per_second": blocked_now.saturating_sub(blocked_before) as f64 / secs,
        "totals": {
            "requests": b.requests,
            "blocked": blocked_now,
            "blocked_by_reason": by_reason,
        },
        "connections_open": m.connections_open(),
        "cache": cache,
        "traces": traces,
        "upstreams": upstreams,
        "peers": peers,
        "top_hosts": hosts,
        "top_paths": paths,
        "recent_blocked": refusals,
    })
}

/// One row per member of the fleet: this instance or a peer, whether every worker asks it (a
/// peer that failed is skipped for a few seconds), and what it answered this instance (its
/// answers' count and mean time to the head, since start).
pub fn peer_rows(fleets: &[Arc<crate::origin::fleet::Fleet>]) -> Vec<Value> {
    let Some(first) = fleets.first() else {
        return Vec::new();
    };
    let view = first.view();
    let views: Vec<_> = fleets.iter().map(|f| f.view()).collect();
    view.members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let me = i == view.me;
            // Each worker's own view (a member it does not list yet counts as up).
            let up = views.iter().all(|v| {
                v.members
                    .iter()
                    .find(|o| o.addr == m.addr)
                    .is_none_or(|o| o.origins.any_up())
            });
            let (answers, sum_us) = m
                .origins
                .members()
                .first()
                .map_or((0, 0), |o| o.stats(false).heads());
            json!({
                "address": m.addr.to_string(),
                "self": me,
                "up": me || up,
                "answers": if me { 0 } else { answers },
                "latency_ms": (answers > 0 && !me)
                    .then(|| (sum_us as f64 / answers as f64).round() / 1e3),
            })
        })
        .collect()
}

/// One row per origin of every rule: whether it is in rotation, its recent response time (from
/// the requests sent to it, plain and TLS, else `Performance` routing's average) and rate.
fn origin_rows(scene: Option<&Arc<Scene>>, origins: &mut OriginWindows) -> Vec<Value> {
    // Each origin's response time comes from the requests sent to it (plain and TLS), not
    // only from health probes or `Performance` routing's average.
    let mut heads = std::collections::HashMap::new();
    if let Some(scene) = scene {
        for rule in scene.router.rules() {
            for member in rule.origins.members() {
                let (c, s) = member.stats(false).heads();
                let (ct, st) = member.stats(true).heads();
                let both = if std::ptr::eq(member.stats(false), member.stats(true)) {
                    (c, s)
                } else {
                    (c + ct, s + st)
                };
                let key = (
                    rule.config.domain_text.clone(),
                    member.target.authority.as_str().to_owned(),
                );
                heads.insert(key, both);
            }
        }
    }
    let recent = origins.observe(heads);
    let mut upstreams = Vec::new();
    if let Some(scene) = scene {
        for rule in scene.router.rules() {
            let set = &rule.origins;
            for member in set.members() {
                let key = (
                    rule.config.domain_text.clone(),
                    member.target.authority.as_str().to_owned(),
                );
                let (mean, rate) = recent(&key);
                let average = member
                    .latency()
                    .map(|d| (d.as_secs_f64() * 1e6).round() / 1e3);
                upstreams.push(json!({
                    "rule": rule.config.domain_text,
                    "origin": member.target.authority.as_str(),
                    "up": set.in_rotation(member),
                    "latency_ms": mean.or(average),
                    "requests_per_second": (rate * 10.0).round() / 10.0,
                }));
            }
        }
    }
    upstreams
}
