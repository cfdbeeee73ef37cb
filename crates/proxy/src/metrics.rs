//! What `/_rampart/metrics` (Prometheus text, written by the `prometheus-client` crate) and the
//! dashboard report: requests, latency, bytes, origins, the cache, refusals, TLS, connections.
//!
//! Recording is a few relaxed atomic additions in the *shard* of the worker thread that runs
//! the request (one shard per worker, each on cache lines of its own, so two workers never
//! write the same line); nothing is locked, allocated or looked up by name on the way. A
//! scrape sums the shards and reads the figures that already exist elsewhere (the cache's
//! statistics, origin health, certificates). Counts per rule (by its `domain`) and per origin
//! (by `host:port`) are kept by name for the life of the process: a reload that keeps a rule or
//! an origin keeps its counts, and a removed one keeps its last values (counters never go
//! back).
//!
//! The registry is one per process, like the process itself: `init` sizes it for the workers
//! before any rule is built; code outside a worker thread records into shard 0.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use http::Version;

use crate::error::{ProxyError, Screened};
use crate::outcome::{CacheLabel, CacheOutcome, Served};

/// Keeps each shard on cache lines of its own (two lines: adjacent-line prefetch).
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct Padded<T>(pub T);

/// Upper bounds of the latency histograms' buckets in µs (a cached hit takes tens of µs, an
/// origin milliseconds to seconds).
pub const BOUNDS_US: [u64; 18] = [
    25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];
const BUCKETS: usize = BOUNDS_US.len() + 1;

/// A latency histogram: a count per bucket (the last is `+Inf`) and the sum in µs.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS],
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        // The first bucket whose bound is ≥ the value (Prometheus buckets are `le`).
        let i = BOUNDS_US.partition_point(|&b| b < us);
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
    }

    fn add_to(&self, into: &mut HistSnap) {
        for (a, c) in into.counts.iter_mut().zip(&self.counts) {
            *a += c.load(Relaxed);
        }
        into.sum_us += self.sum_us.load(Relaxed);
    }
}

/// A histogram's values at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistSnap {
    pub counts: [u64; BUCKETS],
    pub sum_us: u64,
}

impl HistSnap {
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// What was added since `earlier`.
    pub fn since(&self, earlier: &HistSnap) -> HistSnap {
        let mut d = HistSnap::default();
        for (i, c) in d.counts.iter_mut().enumerate() {
            *c = self.counts[i].saturating_sub(earlier.counts[i]);
        }
        d.sum_us = self.sum_us.saturating_sub(earlier.sum_us);
        d
    }

    /// The `q` quantile in seconds, interpolated inside its bucket as Prometheus's
    /// `histogram_quantile` does; `None` without samples. Past the last bound: that bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut below = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            if c > 0 && (below + c) as f64 >= rank {
                let Some(&upper) = BOUNDS_US.get(i) else {
                    return Some(BOUNDS_US[BOUNDS_US.len() - 1] as f64 / 1e6);
                };
                let lower = if i == 0 { 0 } else { BOUNDS_US[i - 1] };
                let within = ((rank - below as f64) / c as f64).clamp(0.0, 1.0);
                return Some((lower as f64 + (upper - lower) as f64 * within) / 1e6);
            }
            below += c;
        }
        None
    }

    fn buckets(&self) -> Vec<(f64, u64)> {
        self.counts
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                let bound = BOUNDS_US.get(i).map_or(f64::INFINITY, |&b| b as f64 / 1e6);
                (bound, c)
            })
            .collect()
    }
}

/// The `cache` label of `rampart_requests_total`.
pub const CACHE_LABELS: [&str; 11] = [
    "hit",
    "stale",
    "revalidated",
    "miss",
    "expired",
    "collapsed",
    "dynamic",
    "bypass",
    "blocked",
    "error",
    "none",
];
/// Of [`CACHE_LABELS`], the answers from the store and the lookups that went to the origin
/// for something cacheable: the hit ratio's numerator and denominator.
const HITS: [usize; 3] = [0, 1, 2];
const LOOKUPS: [usize; 6] = [0, 1, 2, 3, 4, 5];

/// The `protocol` label.
pub const PROTOCOLS: [&str; 3] = ["http1", "http2", "http3"];

const CLASSES: usize = 5;
const PER_RULE: usize = CLASSES * CACHE_LABELS.len() * PROTOCOLS.len();

/// The index of an outcome in [`CACHE_LABELS`].
pub fn cache_index(o: Option<CacheOutcome>) -> usize {
    match o {
        None => 10,
        Some(CacheOutcome::Served(Served::Fresh)) => 0,
        Some(CacheOutcome::Served(Served::StaleWhileRevalidate | Served::StaleIfError)) => 1,
        Some(CacheOutcome::Served(Served::Revalidated)) => 2,
        Some(CacheOutcome::Fetched { label, .. }) => match label {
            CacheLabel::Miss | CacheLabel::Hit => 3,
            CacheLabel::Expired => 4,
            CacheLabel::Dynamic => 6,
            CacheLabel::Bypass => 7,
            CacheLabel::Block => 8,
        },
        Some(CacheOutcome::Collapsed) => 5,
        Some(CacheOutcome::OnlyIfCached) => 3,
        Some(CacheOutcome::OriginError(_)) => 9,
        Some(CacheOutcome::Blocked) => 8,
    }
}

/// The index of a request's HTTP version in [`PROTOCOLS`].
pub fn protocol_index(v: Version) -> u8 {
    match v {
        Version::HTTP_2 => 1,
        Version::HTTP_3 => 2,
        _ => 0,
    }
}

/// One rule's counts on one worker.
#[derive(Debug)]
struct RuleShard {
    requests: [AtomicU64; PER_RULE],
    duration: Histogram,
}

impl Default for RuleShard {
    fn default() -> Self {
        RuleShard {
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
            duration: Histogram::default(),
        }
    }
}

/// One rule's requests: by status class, cache outcome and protocol, and their latency (to
/// the response head).
#[derive(Debug)]
pub struct RuleStats {
    shards: Box<[Padded<RuleShard>]>,
}

impl RuleStats {
    fn new(n: usize) -> Self {
        RuleStats {
            shards: (0..n).map(|_| Padded::default()).collect(),
        }
    }

    /// One request answered with `status` after `took`.
    pub fn record(&self, status: u16, cache: usize, protocol: u8, took: Duration) {
        let s = &self.shards[shard_index() % self.shards.len()].0;
        let class = usize::from(status / 100).clamp(1, CLASSES) - 1;
        let i = (class * CACHE_LABELS.len() + cache) * PROTOCOLS.len() + usize::from(protocol);
        s.requests[i].fetch_add(1, Relaxed);
        s.duration.record(took);
    }

    fn requests(&self) -> [u64; PER_RULE] {
        let mut out = [0; PER_RULE];
        for s in self.shards.iter() {
            for (o, c) in out.iter_mut().zip(&s.0.requests) {
                *o += c.load(Relaxed);
            }
        }
        out
    }

    fn duration(&self) -> HistSnap {
        let mut h = HistSnap::default();
        for s in self.shards.iter() {
            s.0.duration.add_to(&mut h);
        }
        h
    }
}

/// Why a request to an origin failed (`rampart_origin_errors_total{kind}`).
pub const ORIGIN_ERRORS: [&str; 5] = ["connect", "connect_timeout", "timeout", "tls", "protocol"];

/// The [`ORIGIN_ERRORS`] index of an error from an origin.
pub fn origin_error_index(e: &ProxyError) -> Option<usize> {
    Some(match e {
        ProxyError::UpstreamConnect(_) => 0,
        ProxyError::UpstreamConnectTimeout(_) => 1,
        ProxyError::UpstreamTimeout => 2,
        ProxyError::UpstreamTls(_) => 3,
        ProxyError::UpstreamProtocol(_) => 4,
        _ => return None,
    })
}

#[derive(Debug, Default)]
struct OriginShard {
    requests: AtomicU64,
    errors: [AtomicU64; ORIGIN_ERRORS.len()],
    head: Histogram,
    opened: AtomicU64,
    closed: AtomicU64,
    received: AtomicU64,
    sent: AtomicU64,
}

/// One origin (`host:port`), over every rule and worker that uses it.
#[derive(Debug)]
pub struct OriginStats {
    shards: Box<[Padded<OriginShard>]>,
}

impl OriginStats {
    fn new(n: usize) -> Self {
        OriginStats {
            shards: (0..n).map(|_| Padded::default()).collect(),
        }
    }

    fn shard(&self) -> &OriginShard {
        &self.shards[shard_index() % self.shards.len()].0
    }

    /// A request sent; its response head after `took`, or the error.
    pub fn request(&self, result: Result<Duration, &ProxyError>) {
        let s = self.shard();
        s.requests.fetch_add(1, Relaxed);
        match result {
            Ok(took) => s.head.record(took),
            Err(e) => {
                if let Some(i) = origin_error_index(e) {
                    s.errors[i].fetch_add(1, Relaxed);
                }
            }
        }
    }

    /// A new connection; the returned guard counts its bytes and its end.
    pub fn opened(self: &Arc<Self>) -> OriginConnStats {
        self.shard().opened.fetch_add(1, Relaxed);
        OriginConnStats(self.clone())
    }

    fn sum(&self, f: impl Fn(&OriginShard) -> &AtomicU64) -> u64 {
        self.shards.iter().map(|s| f(&s.0).load(Relaxed)).sum()
    }
}

/// Held by a connection to an origin: counts bytes, and its close when dropped.
#[derive(Debug)]
pub struct OriginConnStats(Arc<OriginStats>);

impl Drop for OriginConnStats {
    fn drop(&mut self) {
        self.0.shard().closed.fetch_add(1, Relaxed);
    }
}

/// Why a request was refused (`rampart_blocked_requests_total{reason}`).
pub const BLOCK_REASONS: [&str; 12] = [
    "allow_ips",
    "deny_ips",
    "user_agent",
    "sql_injection",
    "rate_limit",
    "path_rule",
    "body_too_large",
    "body_timeout",
    "bad_request",
    "no_route",
    "busy",
    "encoded_body",
];
const BAD_REQUEST: usize = 8;

/// The [`BLOCK_REASONS`] index of a refusal; `None` for everything else.
pub fn block_index(e: &ProxyError) -> Option<usize> {
    use crate::body::BodyFault;
    Some(match e {
        ProxyError::Blocked(why) => match why {
            Screened::NotInAllowIps => 0,
            Screened::InDenyIps => 1,
            Screened::UserAgent => 2,
            Screened::SqlInjection => 3,
            Screened::EncodedBody => 11,
        },
        ProxyError::RateLimited { .. } => 4,
        ProxyError::BlockedByPathRule => 5,
        ProxyError::ClientBody(BodyFault::TooLarge) => 6,
        ProxyError::ClientBody(BodyFault::Timeout) => 7,
        ProxyError::ClientBody(BodyFault::Broken)
        | ProxyError::BadRequest(_)
        | ProxyError::MissingHost
        | ProxyError::HeadTooLarge
        | ProxyError::VersionNotSupported => BAD_REQUEST,
        ProxyError::NoRoute(_) => 9,
        ProxyError::Busy => 10,
        _ => return None,
    })
}

/// A refused request, for the dashboard.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub time: SystemTime,
    pub client: IpAddr,
    pub host: String,
    pub path: String,
    pub reason: &'static str,
}

/// How many refusals each worker keeps for the dashboard.
const RECENT_REFUSALS: usize = 50;
/// How many (host, path) pairs each worker keeps while a dashboard watches.
const RECENT_REQUESTS: usize = 2048;

/// One worker's counts.
#[derive(Debug, Default)]
struct WorkerShard {
    /// Client connections accepted and ended, by scheme (http, https).
    accepted: [AtomicU64; 2],
    ended: [AtomicU64; 2],
    /// Connections closed at once by `max_connections_per_ip`.
    refused_per_ip: AtomicU64,
    /// Bytes read from and written to clients (on the wire, TLS included).
    received: AtomicU64,
    sent: AtomicU64,
    /// TLS handshakes: completed, failed, timed out.
    tls: [AtomicU64; 3],
    blocked: [AtomicU64; BLOCK_REASONS.len()],
    refusals: Mutex<VecDeque<Refusal>>,
    /// (host, path) of requests while a dashboard watches.
    seen: Mutex<VecDeque<(Box<str>, Box<str>)>>,
}

/// The process's metrics.
#[derive(Debug)]
pub struct Metrics {
    workers: Box<[Padded<WorkerShard>]>,
    rules: Mutex<HashMap<String, Arc<RuleStats>>>,
    /// Requests answered before a rule was found (no rule for the host, the API, ACME).
    unrouted: Arc<RuleStats>,
    origins: Mutex<HashMap<String, Arc<OriginStats>>>,
    reloads: [AtomicU64; 2],
    last_reload: AtomicU64,
    started: SystemTime,
    /// The server is stopping: event streams end.
    stopping: std::sync::atomic::AtomicBool,
    /// Dashboards streaming now (requests' hosts and paths are kept only then).
    watchers: AtomicUsize,
}

static METRICS: OnceLock<Metrics> = OnceLock::new();
static BUILD: OnceLock<(String, String)> = OnceLock::new();

/// The version and commit `rampart_build_info` shows (set once, by the binary).
pub fn set_build(version: &str, commit: &str) {
    let _ = BUILD.set((version.to_owned(), commit.to_owned()));
}

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(0) };
}

/// Sizes the registry for `workers` worker threads (before any rule is built); later calls
/// change nothing.
pub fn init(workers: usize) -> &'static Metrics {
    METRICS.get_or_init(|| Metrics::new(workers.max(1)))
}

/// The process's registry.
pub fn get() -> &'static Metrics {
    METRICS.get_or_init(|| Metrics::new(1))
}

/// Marks the calling thread as worker `i`: what it records goes to shard `i`.
pub fn set_shard(i: usize) {
    SHARD.with(|s| s.set(i));
}

fn shard_index() -> usize {
    SHARD.with(Cell::get)
}

impl Metrics {
    fn new(n: usize) -> Metrics {
        Metrics {
            workers: (0..n).map(|_| Padded::default()).collect(),
            rules: Mutex::default(),
            unrouted: Arc::new(RuleStats::new(n)),
            origins: Mutex::default(),
            reloads: Default::default(),
            last_reload: AtomicU64::new(0),
            started: SystemTime::now(),
            stopping: std::sync::atomic::AtomicBool::new(false),
            watchers: AtomicUsize::new(0),
        }
    }

    fn worker(&self) -> &WorkerShard {
        &self.workers[shard_index() % self.workers.len()].0
    }

    /// The counts of the rule for `domain` (made on first use, kept for the process's life).
    pub fn rule(&self, domain: &str) -> Arc<RuleStats> {
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        rules
            .entry(domain.to_owned())
            .or_insert_with(|| Arc::new(RuleStats::new(self.workers.len())))
            .clone()
    }

    /// Requests answered before routing.
    pub fn unrouted(&self) -> &RuleStats {
        &self.unrouted
    }

    /// The counts of the origin `host:port` (made on first use).
    pub fn origin(&self, authority: &str) -> Arc<OriginStats> {
        let mut origins = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        origins
            .entry(authority.to_owned())
            .or_insert_with(|| Arc::new(OriginStats::new(self.workers.len())))
            .clone()
    }

    /// A client connection accepted (`tls`: on an HTTPS listener); the guard counts its end
    /// and its bytes.
    pub fn accepted(&'static self, tls: bool) -> ConnStats {
        let shard = self.worker();
        shard.accepted[usize::from(tls)].fetch_add(1, Relaxed);
        ConnStats { shard, tls }
    }

    /// A connection closed at once by `max_connections_per_ip`.
    pub fn refused_per_ip(&self) {
        self.worker().refused_per_ip.fetch_add(1, Relaxed);
    }

    /// A TLS handshake: completed (`Some(true)`), failed (`Some(false)`) or timed out.
    pub fn handshake(&self, done: Option<bool>) {
        let i = match done {
            Some(true) => 0,
            Some(false) => 1,
            None => 2,
        };
        self.worker().tls[i].fetch_add(1, Relaxed);
    }

    /// A request refused for `e` (nothing happens for other errors).
    pub fn refused(&self, e: &ProxyError) {
        if let Some(i) = block_index(e) {
            self.worker().blocked[i].fetch_add(1, Relaxed);
        }
    }

    /// A request head refused by the HTTP/1.1 server (with `status`) before the pipeline saw
    /// it: a request of no rule, and a refusal.
    pub fn malformed(&self, status: u16) {
        self.worker().blocked[BAD_REQUEST].fetch_add(1, Relaxed);
        self.unrouted
            .record(status, cache_index(None), 0, Duration::ZERO);
    }

    /// Keeps a refused request for the dashboard's list.
    pub fn remember_refusal(&self, r: Refusal) {
        let mut q = self
            .worker()
            .refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if q.len() == RECENT_REFUSALS {
            q.pop_front();
        }
        q.push_back(r);
    }

    /// The latest refusals, newest first.
    pub fn refusals(&self, n: usize) -> Vec<Refusal> {
        let mut all: Vec<Refusal> = self
            .workers
            .iter()
            .flat_map(|w| {
                w.0.refusals
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect();
        all.sort_by_key(|r| std::cmp::Reverse(r.time));
        all.truncate(n);
        all
    }

    /// Whether a dashboard is watching (then requests' hosts and paths are kept).
    pub fn watched(&self) -> bool {
        self.watchers.load(Relaxed) > 0
    }

    /// A dashboard starts watching; it stops when the guard is dropped.
    pub fn watch(&'static self) -> Watching {
        self.watchers.fetch_add(1, Relaxed);
        Watching(self)
    }

    /// A request's host and path, kept while a dashboard watches.
    pub fn seen(&self, host: &str, path: &str) {
        let mut q = self.worker().seen.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == RECENT_REQUESTS {
            q.pop_front();
        }
        q.push_back((host.into(), path.into()));
    }

    /// The most frequent hosts and paths among the requests kept while watching.
    pub fn top(&self, n: usize) -> (Ranking, Ranking) {
        let mut hosts: HashMap<&str, u64> = HashMap::new();
        let mut paths: HashMap<String, u64> = HashMap::new();
        let guards: Vec<_> = self
            .workers
            .iter()
            .map(|w| w.0.seen.lock().unwrap_or_else(|p| p.into_inner()))
            .collect();
        for q in &guards {
            for (h, p) in q.iter() {
                *hosts.entry(h).or_default() += 1;
                *paths.entry(format!("{h}{p}")).or_default() += 1;
            }
        }
        let top = |m: Vec<(String, u64)>| {
            let mut v = m;
            v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            v.truncate(n);
            v
        };
        (
            top(hosts.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()),
            top(paths.into_iter().collect()),
        )
    }

    /// A configuration reload put in service (`true`) or refused.
    pub fn reloaded(&self, ok: bool) {
        self.reloads[usize::from(!ok)].fetch_add(1, Relaxed);
        if ok {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            self.last_reload.store(now, Relaxed);
        }
    }

    /// Every request so far, summed over rules: (by cache label, by status class), and the
    /// latency histogram of all of them.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        let rules: Vec<Arc<RuleStats>> = {
            let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
            rules.values().cloned().collect()
        };
        for r in rules.iter().map(|r| &**r).chain([&*self.unrouted]) {
            let counts = r.requests();
            for (i, &c) in counts.iter().enumerate() {
                let cache = (i / PROTOCOLS.len()) % CACHE_LABELS.len();
                let class = i / (PROTOCOLS.len() * CACHE_LABELS.len());
                t.by_cache[cache] += c;
                t.by_class[class] += c;
                t.requests += c;
            }
            let d = r.duration();
            for (a, c) in t.duration.counts.iter_mut().zip(d.counts) {
                *a += c;
            }
            t.duration.sum_us += d.sum_us;
        }
        t.blocked = self.sum_workers(|w| &w.blocked);
        t
    }

    fn sum_workers<const N: usize>(&self, f: impl Fn(&WorkerShard) -> &[AtomicU64; N]) -> [u64; N] {
        let mut out = [0; N];
        for w in self.workers.iter() {
            for (o, c) in out.iter_mut().zip(f(&w.0)) {
                *o += c.load(Relaxed);
            }
        }
        out
    }

    fn sum_worker(&self, f: impl Fn(&WorkerShard) -> &AtomicU64) -> u64 {
        self.workers.iter().map(|w| f(&w.0).load(Relaxed)).sum()
    }

    /// Client connections open now.
    pub fn connections_open(&self) -> u64 {
        let a = self.sum_workers(|w| &w.accepted);
        let e = self.sum_workers(|w| &w.ended);
        a.iter().sum::<u64>().saturating_sub(e.iter().sum())
    }

    /// The server stops: long-lived event streams end so the drain is not held up.
    pub fn stop_streams(&self) {
        self.stopping.store(true, Relaxed);
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Relaxed)
    }
}

/// Names with their counts, most frequent first.
pub type Ranking = Vec<(String, u64)>;

/// Ends a dashboard's watch when dropped.
#[derive(Debug)]
pub struct Watching(&'static Metrics);

impl Drop for Watching {
    fn drop(&mut self) {
        if self.0.watchers.fetch_sub(1, Relaxed) == 1 {
            for w in self.0.workers.iter() {
                w.0.seen.lock().unwrap_or_else(|p| p.into_inner()).clear();
            }
        }
    }
}

/// Held by a client connection: counts its bytes, and its end when dropped.
#[derive(Debug)]
pub struct ConnStats {
    shard: &'static WorkerShard,
    tls: bool,
}

impl Drop for ConnStats {
    fn drop(&mut self) {
        self.shard.ended[usize::from(self.tls)].fetch_add(1, Relaxed);
    }
}

/// Requests summed over every rule.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    pub requests: u64,
    pub by_cache: [u64; CACHE_LABELS.len()],
    pub by_class: [u64; CLASSES],
    pub duration: HistSnap,
    pub blocked: [u64; BLOCK_REASONS.len()],
}

impl Totals {
    /// Answers from the store and cacheable lookups (see [`hit_ratio`]).
    pub fn hits_and_lookups(&self) -> (u64, u64) {
        (
            HITS.iter().map(|&i| self.by_cache[i]).sum(),
            LOOKUPS.iter().map(|&i| self.by_cache[i]).sum(),
        )
    }
}

/// Hits over lookups (`None` before the first lookup): hit, stale and revalidated answers
/// over those plus misses, expired entries and collapsed requests. Passes (`dynamic`,
/// `bypass`) are not lookups.
pub fn hit_ratio(hits: u64, lookups: u64) -> Option<f64> {
    (lookups > 0).then(|| hits as f64 / lookups as f64)
}

pub mod expose;

/// What counts a connection's bytes.
pub trait Tally {
    fn received(&self, n: usize);
    fn sent(&self, n: usize);
}

impl Tally for ConnStats {
    fn received(&self, n: usize) {
        self.shard.received.fetch_add(n as u64, Relaxed);
    }

    fn sent(&self, n: usize) {
        self.shard.sent.fetch_add(n as u64, Relaxed);
    }
}

impl Tally for OriginConnStats {
    fn received(&self, n: usize) {
        self.0.shard().received.fetch_add(n as u64, Relaxed);
    }

    fn sent(&self, n: usize) {
        self.0.shard().sent.fetch_add(n as u64, Relaxed);
    }
}

/// A connection (client or origin) whose bytes are counted as they pass.
#[derive(Debug)]
pub struct Counted<S, T> {
    io: S,
    stats: T,
}

impl<S, T> Counted<S, T> {
    pub fn new(io: S, stats: T) -> Self {
        Counted { io, stats }
    }

    pub fn get_ref(&self) -> &S {
        &self.io
    }
}

mod counted {
    use std::io;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    use super::{Counted, Tally};

    impl<S: AsyncRead + Unpin, T: Tally + Unpin> AsyncRead for Counted<S, T> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let before = buf.filled().len();
            let r = Pin::new(&mut self.io).poll_read(cx, buf);
            if let Poll::Ready(Ok(())) = r {
                self.stats.received(buf.filled().len() - before);
            }
            r
        }
    }

    impl<S: AsyncWrite + Unpin, T: Tally + Unpin> AsyncWrite for Counted<S, T> {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let r = Pin::new(&mut self.io).poll_write(cx, buf);
            if let Poll::Ready(Ok(n)) = r {
                self.stats.sent(n);
            }
            r
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
            if let Poll::Ready(Ok(n)) = r {
                self.stats.sent(n);
            }
            r
        }

        fn is_write_vectored(&self) -> bool {
            self.io.is_write_vectored()
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_shutdown(cx)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_le_and_quantiles_interpolate() {
        let h = Histogram::default();
        h.record(Duration::from_micros(25));
        h.record(Duration::from_micros(26));
        h.record(Duration::from_secs(60));
        let mut s = HistSnap::default();
        h.add_to(&mut s);
        assert_eq!(s.counts[0], 1, "25 µs is in le=25µs");
        assert_eq!(s.counts[1], 1);
        assert_eq!(s.counts[BUCKETS - 1], 1, "+Inf");
        assert_eq!(s.count(), 3);
        assert_eq!(s.sum_us, 25 + 26 + 60_000_000);
        // The median's rank (1.5 of 3) is half-way into the 25–50 µs bucket's one sample.
        assert_eq!(s.quantile(0.5), Some(37.5e-6));
        assert_eq!(
            s.quantile(1.0),
            Some(10.0),
            "past the last bound: that bound"
        );
        assert_eq!(HistSnap::default().quantile(0.5), None);
        let later = {
            h.record(Duration::from_micros(300));
            let mut t = HistSnap::default();
            h.add_to(&mut t);
            t
        };
        let d = later.since(&s);
        assert_eq!(d.count(), 1);
        let p99 = d.quantile(0.99).unwrap_or_default() * 1e6;
        assert!((497.0..498.0).contains(&p99), "{p99}");
    }

    #[test]
    fn rule_counts_land_in_their_labels() {
        let m = Metrics::new(2);
        let r = m.rule("a.test");
        let hit = cache_index(Some(CacheOutcome::Served(Served::Fresh)));
        r.record(200, hit, 0, Duration::from_micros(40));
        set_shard(1);
        r.record(404, cache_index(None), 1, Duration::from_micros(40));
        set_shard(0);
        let c = r.requests();
        assert_eq!(c.iter().sum::<u64>(), 2);
        assert_eq!(c[(CACHE_LABELS.len() + hit) * 3], 1, "2xx, hit, http1");
        assert_eq!(
            c[((3 * CACHE_LABELS.len()) + 10) * 3 + 1],
            1,
            "4xx, none, http2"
        );
        assert!(Arc::ptr_eq(&r, &m.rule("a.test")), "kept by name");
        let t = m.totals();
        assert_eq!(t.requests, 2);
        assert_eq!(t.hits_and_lookups(), (1, 1));
        assert_eq!(t.duration.count(), 2);
    }

    #[test]
    fn refusals_are_classified() {
        assert_eq!(
            block_index(&ProxyError::Blocked(Screened::UserAgent)).map(|i| BLOCK_REASONS[i]),
            Some("user_agent")
        );
        assert_eq!(
            block_index(&ProxyError::BlockedByPathRule).map(|i| BLOCK_REASONS[i]),
            Some("path_rule")
        );
        assert_eq!(block_index(&ProxyError::UpstreamTimeout), None);
        assert_eq!(
            origin_error_index(&ProxyError::UpstreamTimeout).map(|i| ORIGIN_ERRORS[i]),
            Some("timeout")
        );
    }
}
