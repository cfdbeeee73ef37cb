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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use crate::error::ProxyError;

/// Keeps each shard on cache lines of its own (two lines: adjacent-line prefetch).
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct Padded<T>(pub T);

mod histogram;
mod io;
mod labels;
mod recent;

pub use histogram::{HistSnap, Histogram, BOUNDS_US};
pub use io::{Counted, Tally};
pub use labels::{BlockReason, CacheMetric, OriginErrorKind, PpRefusal, Protocol};
pub use recent::{Ranking, Refusal, Watching};

const CLASSES: usize = 5;
const PER_RULE: usize = CLASSES * CacheMetric::ALL.len() * Protocol::ALL.len();

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
    pub fn record(&self, status: u16, cache: CacheMetric, protocol: Protocol, took: Duration) {
        let s = &self.shards[shard_index() % self.shards.len()].0;
        let class = usize::from(status / 100).clamp(1, CLASSES) - 1;
        let i = (class * CacheMetric::ALL.len() + cache.index()) * Protocol::ALL.len()
            + protocol.index();
        s.requests[i].fetch_add(1, Relaxed);
        s.duration.record(took);
    }

    pub(crate) fn requests(&self) -> [u64; PER_RULE] {
        let mut out = [0; PER_RULE];
        for s in self.shards.iter() {
            for (o, c) in out.iter_mut().zip(&s.0.requests) {
                *o += c.load(Relaxed);
            }
        }
        out
    }

    pub(crate) fn duration(&self) -> HistSnap {
        let mut h = HistSnap::default();
        for s in self.shards.iter() {
            s.0.duration.add_to(&mut h);
        }
        h
    }
}

#[derive(Debug, Default)]
pub(crate) struct OriginShard {
    pub(crate) requests: AtomicU64,
    pub(crate) errors: [AtomicU64; OriginErrorKind::ALL.len()],
    pub(crate) head: Histogram,
    pub(crate) opened: AtomicU64,
    pub(crate) closed: AtomicU64,
    pub(crate) received: AtomicU64,
    pub(crate) sent: AtomicU64,
}

/// One origin (`host:port`), over every rule and worker that uses it.
#[derive(Debug)]
pub struct OriginStats {
    pub(crate) shards: Box<[Padded<OriginShard>]>,
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
                if let Some(kind) = OriginErrorKind::of(e) {
                    s.errors[kind.index()].fetch_add(1, Relaxed);
                }
            }
        }
    }

    /// Response heads received so far and their total time in µs.
    pub fn heads(&self) -> (u64, u64) {
        let mut h = HistSnap::default();
        for s in self.shards.iter() {
            s.0.head.add_to(&mut h);
        }
        (h.count(), h.sum_us)
    }

    /// A new connection; the returned guard counts its bytes and its end.
    pub fn opened(self: &Arc<Self>) -> OriginConnStats {
        self.shard().opened.fetch_add(1, Relaxed);
        OriginConnStats(self.clone())
    }

    pub(crate) fn sum(&self, f: impl Fn(&OriginShard) -> &AtomicU64) -> u64 {
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

/// An open switched connection; counts its end when dropped.
#[derive(Debug)]
pub struct TunnelOpen(&'static WorkerShard);

impl Drop for TunnelOpen {
    fn drop(&mut self) {
        self.0.tunnels[1].fetch_add(1, Relaxed);
    }
}

/// One worker's counts.
#[derive(Debug, Default)]
pub(crate) struct WorkerShard {
    /// Client connections accepted and ended, by scheme (http, https).
    pub(crate) accepted: [AtomicU64; 2],
    pub(crate) ended: [AtomicU64; 2],
    /// Connections closed at once by `max_connections_per_ip`.
    pub(crate) refused_per_ip: AtomicU64,
    /// Switched connections (WebSocket) opened and ended.
    tunnels: [AtomicU64; 2],
    /// Connections closed on a PROXY protocol listener, by [`PP_REFUSALS`].
    pub(crate) pp_refused: [AtomicU64; PpRefusal::ALL.len()],
    /// Connections closed by `client_send_timeout_seconds`.
    pub(crate) send_timeouts: AtomicU64,
    /// Bytes read from and written to clients (on the wire, TLS included).
    pub(crate) received: AtomicU64,
    pub(crate) sent: AtomicU64,
    /// TLS handshakes: completed, failed, timed out.
    pub(crate) tls: [AtomicU64; 3],
    pub(crate) blocked: [AtomicU64; BlockReason::ALL.len()],
    refusals: Mutex<VecDeque<Refusal>>,
    /// (host, path) of requests while a dashboard watches.
    seen: Mutex<VecDeque<(Box<str>, Box<str>)>>,
}

/// The process's metrics.
#[derive(Debug)]
pub struct Metrics {
    workers: Box<[Padded<WorkerShard>]>,
    pub(crate) rules: Mutex<HashMap<String, Arc<RuleStats>>>,
    /// Requests answered before a rule was found (no rule for the host, the API, ACME).
    pub(crate) unrouted: Arc<RuleStats>,
    pub(crate) origins: Mutex<HashMap<String, Arc<OriginStats>>>,
    pub(crate) reloads: [AtomicU64; 2],
    pub(crate) last_reload: AtomicU64,
    pub(crate) started: SystemTime,
    /// The server is stopping: event streams end.
    stopping: std::sync::atomic::AtomicBool,
    /// Dashboards streaming now (requests' hosts and paths are kept only then).
    watchers: AtomicUsize,
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// Idle HTTP/1.1 connections parked outside any task now, all workers (`transport/park.rs`).
pub static PARKED_CONNECTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
pub(crate) static BUILD: OnceLock<(String, String)> = OnceLock::new();

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
    pub(crate) fn new(n: usize) -> Metrics {
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

    /// A switched connection (WebSocket) opened; the guard counts its end.
    pub fn tunnel_opened(&'static self) -> TunnelOpen {
        let shard = self.worker();
        shard.tunnels[0].fetch_add(1, Relaxed);
        TunnelOpen(shard)
    }

    /// Switched connections: (opened so far, open now).
    pub fn tunnels(&self) -> (u64, u64) {
        let [opened, ended] = self.sum_workers(|w| &w.tunnels);
        (opened, opened.saturating_sub(ended))
    }

    /// A connection closed on a PROXY protocol listener for `reason`.
    pub fn proxy_protocol_refused(&self, reason: PpRefusal) {
        self.worker().pp_refused[reason.index()].fetch_add(1, Relaxed);
    }

    /// A connection closed because its client took nothing of a response for
    /// `client_send_timeout_seconds`.
    pub fn send_timeout(&self) {
        self.worker().send_timeouts.fetch_add(1, Relaxed);
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
        if let Some(reason) = BlockReason::of(e) {
            self.worker().blocked[reason.index()].fetch_add(1, Relaxed);
        }
    }

    /// A request head refused by the HTTP/1.1 server (with `status`) before the pipeline saw
    /// it: a request of no rule, and a refusal.
    pub fn malformed(&self, status: u16) {
        self.worker().blocked[BlockReason::BadRequest.index()].fetch_add(1, Relaxed);
        let http1 = Protocol::Http1;
        self.unrouted
            .record(status, CacheMetric::None, http1, Duration::ZERO);
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
                let cache = (i / Protocol::ALL.len()) % CacheMetric::ALL.len();
                let class = i / (Protocol::ALL.len() * CacheMetric::ALL.len());
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

    pub(crate) fn sum_workers<const N: usize>(
        &self,
        f: impl Fn(&WorkerShard) -> &[AtomicU64; N],
    ) -> [u64; N] {
        let mut out = [0; N];
        for w in self.workers.iter() {
            for (o, c) in out.iter_mut().zip(f(&w.0)) {
                *o += c.load(Relaxed);
            }
        }
        out
    }

    pub(crate) fn sum_worker(&self, f: impl Fn(&WorkerShard) -> &AtomicU64) -> u64 {
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
    pub by_cache: [u64; CacheMetric::ALL.len()],
    pub by_class: [u64; CLASSES],
    pub duration: HistSnap,
    pub blocked: [u64; BlockReason::ALL.len()],
}

impl Totals {
    /// Answers from the store and cacheable lookups (see [`hit_ratio`]).
    pub fn hits_and_lookups(&self) -> (u64, u64) {
        let sum = |f: fn(CacheMetric) -> bool| {
            CacheMetric::ALL
                .iter()
                .filter(|c| f(**c))
                .map(|c| self.by_cache[c.index()])
                .sum()
        };
        (sum(CacheMetric::is_hit), sum(CacheMetric::is_lookup))
    }
}

/// Hits over lookups (`None` before the first lookup): hit, stale and revalidated answers
/// over those plus misses, expired entries and collapsed requests. Passes (`dynamic`,
/// `bypass`) are not lookups.
pub fn hit_ratio(hits: u64, lookups: u64) -> Option<f64> {
    (lookups > 0).then(|| hits as f64 / lookups as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Screened;
    use crate::outcome::{CacheOutcome, Served};

    #[test]
    fn rule_counts_land_in_their_labels() {
        let m = Metrics::new(2);
        let r = m.rule("a.test");
        let hit = CacheMetric::of(Some(CacheOutcome::Served(Served::Fresh)));
        assert_eq!(hit, CacheMetric::Hit);
        r.record(200, hit, Protocol::Http1, Duration::from_micros(40));
        set_shard(1);
        let none = CacheMetric::of(None);
        r.record(404, none, Protocol::Http2, Duration::from_micros(40));
        set_shard(0);
        let c = r.requests();
        let (caches, protocols) = (CacheMetric::ALL.len(), Protocol::ALL.len());
        assert_eq!(c.iter().sum::<u64>(), 2);
        assert_eq!(c[(caches + hit.index()) * protocols], 1, "2xx, hit, http1");
        assert_eq!(
            c[((3 * caches) + none.index()) * protocols + 1],
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
        let reason = |e: &ProxyError| BlockReason::of(e).map(BlockReason::label);
        let blocked = ProxyError::Blocked(Screened::UserAgent);
        assert_eq!(reason(&blocked), Some("user_agent"));
        assert_eq!(reason(&ProxyError::BlockedByPathRule), Some("path_rule"));
        assert_eq!(reason(&ProxyError::OriginTimeout), None);
        assert_eq!(
            OriginErrorKind::of(&ProxyError::OriginTimeout).map(OriginErrorKind::label),
            Some("timeout")
        );
    }

    #[test]
    fn labels_follow_their_values() {
        assert_eq!(CacheMetric::LABELS.len(), 14);
        assert_eq!(CacheMetric::Shared.label(), "shared");
        assert_eq!(CacheMetric::PeerHit.label(), "peer_hit");
        assert!(CacheMetric::PeerHit.is_hit() && CacheMetric::PeerMiss.is_lookup());
        assert!(!CacheMetric::PeerMiss.is_hit());
        assert_eq!(BlockReason::NotAPeer.index(), BlockReason::LABELS.len() - 1);
        assert_eq!(PpRefusal::Timeout.label(), "timeout");
        assert_eq!(Protocol::of(http::Version::HTTP_3), Protocol::Http3);
    }
}
