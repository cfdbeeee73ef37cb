//! Hit ratios of rampart's memory store against a plain LRU of the same byte budget, on
//! generated request traces.
//!
//! ```text
//! cargo run --release -p rampart-cache --example traces -- [--keys 1000000] [--requests 10000000]
//!     [--traces zipf-0.8,zipf-0.99,loop-scan,new-hot] [--sizes 1,5,20] [--seed 1]
//!     [--write-trace FILE]   (one trace's key ids, u32 little-endian, then exit)
//! ```
//!
//! Every request goes through the real store (`MemoryStore::find`, then `MemoryStore::insert` on
//! a miss, with objects whose weights are computed as the proxy's are), and through an LRU that
//! charges each object the same weight. Cache sizes are fractions of the trace's distinct bytes.
//! Object sizes are drawn per key, log-uniform between 256 B and 64 KiB; bodies are slices of
//! one buffer, so the replay needs little memory whatever the budget.
//!
//! The traces:
//! - `zipf-A`: Zipf(A) popularity over `--keys` keys;
//! - `loop-scan`: half the requests go to a hot set (1% of the keys, uniform), half to a
//!   sequential scan looping over the other keys (far larger than any cache size);
//! - `new-hot-K`: a stream of one-off keys; beside it, 50 hot keys, each re-requested every K%
//!   of the cache's capacity (in objects) of one-off inserts, 8 times, then replaced by a new
//!   key: every hot key is new when it first appears. K is 1, 5, 10, 20, 35 and 50.

use rampart_head::Fields;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::StatusCode;
use rampart_cache::cache_control::ResponseDirectives;
use rampart_cache::key::{CacheKey, SlotKeyRef};
use rampart_cache::store::{MemoryStore, Object};
use rampart_cache::vary::Vary;

/// xorshift64*: small, fast, reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf(alpha) over `n` ranks by inverse CDF.
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, alpha: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut sum = 0.0;
        for k in 1..=n {
            sum += 1.0 / (k as f64).powf(alpha);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Zipf { cdf }
    }
    pub fn sample(&self, rng: &mut Rng) -> u32 {
        let u = rng.unit();
        self.cdf.partition_point(|&c| c < u) as u32
    }
}

/// The body size of key `k` (log-uniform 256 B – 64 KiB, fixed per key).
pub fn body_size(k: u32) -> usize {
    let mut r = Rng::new(u64::from(k) + 0x5EED);
    r.next_u64();
    (256.0 * 256f64.powf(r.unit())) as usize
}

/// One generated trace: key ids in request order.
pub struct Trace {
    pub name: String,
    pub requests: Vec<u32>,
    /// For `new-hot`: which requests are hot-key requests.
    pub hot: Vec<bool>,
}

pub fn zipf(keys: usize, requests: usize, alpha: f64, seed: u64) -> Trace {
    let z = Zipf::new(keys, alpha);
    let mut rng = Rng::new(seed);
    // Ranks are scattered over ids so that popularity is unrelated to size.
    let scatter = |r: u32| r.wrapping_mul(2_654_435_761) % keys as u32;
    Trace {
        name: format!("zipf-{alpha}"),
        requests: (0..requests).map(|_| scatter(z.sample(&mut rng))).collect(),
        hot: Vec::new(),
    }
}

pub fn loop_scan(keys: usize, requests: usize, seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let hot = (keys / 100).max(1) as u32;
    let mut scan = hot;
    let requests = (0..requests)
        .map(|_| {
            if rng.next_u64() & 1 == 0 {
                (rng.next_u64() % u64::from(hot)) as u32
            } else {
                scan = if scan + 1 >= keys as u32 {
                    hot
                } else {
                    scan + 1
                };
                scan
            }
        })
        .collect();
    Trace {
        name: "loop-scan".into(),
        requests,
        hot: Vec::new(),
    }
}

/// `one_offs` unique keys; 50 hot keys re-requested every `every` one-off inserts, 8 times each,
/// then replaced by new keys.
pub fn new_hot(one_offs: usize, every: usize, name: &str) -> Trace {
    const HOT: usize = 50;
    const USES: usize = 8;
    let every = every.max(1);
    let mut next_id = one_offs as u32;
    // Each slot holds (key, uses so far); slot j is due at one-off j*every/HOT (mod every).
    let mut slots: Vec<(u32, usize)> = (0..HOT)
        .map(|_| {
            next_id += 1;
            (next_id, 0)
        })
        .collect();
    let mut requests = Vec::with_capacity(one_offs * 2);
    let mut hot = Vec::with_capacity(one_offs * 2);
    for i in 0..one_offs {
        requests.push(i as u32);
        hot.push(false);
        for (j, slot) in slots.iter_mut().enumerate() {
            if (i + j * every / HOT).is_multiple_of(every) {
                requests.push(slot.0);
                hot.push(true);
                slot.1 += 1;
                if slot.1 == USES {
                    next_id += 1;
                    *slot = (next_id, 0);
                }
            }
        }
    }
    Trace {
        name: name.into(),
        requests,
        hot,
    }
}

/// A plain LRU with a byte budget: hash map + doubly linked list in a slab.
pub struct Lru {
    map: HashMap<u32, usize>,
    nodes: Vec<(u32, u64, usize, usize)>,
    free: Vec<usize>,
    head: usize,
    tail: usize,
    weight: u64,
    budget: u64,
}

const NIL: usize = usize::MAX;

impl Lru {
    pub fn new(budget: u64) -> Self {
        Lru {
            map: HashMap::new(),
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            weight: 0,
            budget,
        }
    }
    fn unlink(&mut self, i: usize) {
        let (_, _, p, n) = self.nodes[i];
        if p != NIL {
            self.nodes[p].3 = n;
        } else {
            self.head = n;
        }
        if n != NIL {
            self.nodes[n].2 = p;
        } else {
            self.tail = p;
        }
    }
    fn push_front(&mut self, i: usize) {
        self.nodes[i].2 = NIL;
        self.nodes[i].3 = self.head;
        if self.head != NIL {
            self.nodes[self.head].2 = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }
    pub fn get(&mut self, k: u32) -> bool {
        match self.map.get(&k) {
            Some(&i) => {
                self.unlink(i);
                self.push_front(i);
                true
            }
            None => false,
        }
    }
    pub fn put(&mut self, k: u32, w: u64) {
        if w > self.budget {
            return;
        }
        while self.weight + w > self.budget && self.tail != NIL {
            let t = self.tail;
            self.unlink(t);
            let (key, tw, _, _) = self.nodes[t];
            self.map.remove(&key);
            self.weight -= tw;
            self.free.push(t);
        }
        let node = (k, w, NIL, NIL);
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.push_front(i);
        self.map.insert(k, i);
        self.weight += w;
    }
}

pub const HOST: &str = "trace.example";

pub fn url(k: u32) -> String {
    format!("/o/{k}")
}

/// The object stored for key `k`, built like the proxy's (its body a slice of `pool`).
pub fn object(k: u32, pool: &Bytes, now: SystemTime) -> Object {
    let mut headers = Fields::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("max-age=86400"),
    );
    let f = rampart_cache::store::fields(&headers, &[]);
    Object {
        status: StatusCode::OK,
        headers_charge: f.charge,
        wire: f.wire,
        headers: f.headers,
        body: pool.slice(..body_size(k)),
        request_time: now,
        response_time: now,
        initial_age: Duration::ZERO,
        lifetime: Duration::from_secs(86400),
        directives: ResponseDirectives::default(),
        vary: Vary::None,
        invalidated: AtomicBool::new(false),
        refreshing: AtomicBool::new(false),
        encoded: Box::default(),
        webp: None,
        residency: None,
        disk: Default::default(),
        extent: None,
        tags: Box::default(),
    }
}

/// The weight the store charges for key `k` (and the LRU too).
pub fn weight(k: u32, pool: &Bytes, now: SystemTime) -> u64 {
    let key_len = CacheKey::new(HOST, &url(k), false).len();
    object(k, pool, now).weight(key_len)
}

/// Hit ratios of one replay.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ratios {
    pub objects: f64,
    pub bytes: f64,
    /// Among hot-key requests (`new-hot` traces).
    pub hot: f64,
}

#[derive(Default)]
struct Counts {
    hits: u64,
    reqs: u64,
    hit_bytes: u64,
    bytes: u64,
    hot_hits: u64,
    hot_reqs: u64,
}

impl Counts {
    fn add(&mut self, hit: bool, size: u64, hot: bool) {
        self.reqs += 1;
        self.bytes += size;
        if hit {
            self.hits += 1;
            self.hit_bytes += size;
        }
        if hot {
            self.hot_reqs += 1;
            self.hot_hits += u64::from(hit);
        }
    }
    fn ratios(&self) -> Ratios {
        let r = |a: u64, b: u64| 100.0 * a as f64 / b.max(1) as f64;
        Ratios {
            objects: r(self.hits, self.reqs),
            bytes: r(self.hit_bytes, self.bytes),
            hot: r(self.hot_hits, self.hot_reqs),
        }
    }
}

/// The distinct keys of a trace and the sum of their weights.
pub fn distinct_bytes(t: &Trace, pool: &Bytes) -> (usize, u64) {
    let now = SystemTime::now();
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    for &k in &t.requests {
        if seen.insert(k) {
            total += weight(k, pool, now);
        }
    }
    (seen.len(), total)
}

/// Replays `t` through a `MemoryStore` of `budget` bytes and an LRU of the same budget.
pub fn replay(t: &Trace, budget: u64, pool: &Bytes) -> (Ratios, Ratios) {
    let store = MemoryStore::new(budget, 1 << 20);
    let mut lru = Lru::new(budget);
    let now = SystemTime::now();
    let request = Fields::new();
    let (mut ours, mut theirs) = (Counts::default(), Counts::default());
    for (i, &k) in t.requests.iter().enumerate() {
        let hot = t.hot.get(i).copied().unwrap_or(false);
        let size = body_size(k) as u64;
        let u = url(k);
        let hit = store
            .find(&SlotKeyRef::new(HOST, &u, false), &request)
            .is_some();
        if !hit {
            store.insert(
                CacheKey::new(HOST, &u, false),
                None,
                Arc::new(object(k, pool, now)),
            );
        }
        ours.add(hit, size, hot);
        let hit = lru.get(k);
        if !hit {
            lru.put(k, weight(k, pool, now));
        }
        theirs.add(hit, size, hot);
    }
    (ours.ratios(), theirs.ratios())
}

/// A body pool large enough for every object.
pub fn pool() -> Bytes {
    Bytes::from(vec![b'x'; 64 * 1024 + 1])
}

/// The average weight of the keys of a trace (for sizing `new-hot`'s period in objects).
pub fn mean_weight(keys: u32, pool: &Bytes) -> u64 {
    let now = SystemTime::now();
    let n = keys.min(100_000);
    (0..n).map(|k| weight(k, pool, now)).sum::<u64>() / u64::from(n.max(1))
}

pub fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[allow(dead_code)]
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let keys: usize = arg(&args, "--keys", 1_000_000);
    let requests: usize = arg(&args, "--requests", 10_000_000);
    let seed: u64 = arg(&args, "--seed", 1);
    let traces: String = arg(
        &args,
        "--traces",
        "zipf-0.8,zipf-0.99,loop-scan,new-hot".to_string(),
    );
    let sizes: String = arg(&args, "--sizes", "1,5,20".to_string());
    let write: String = arg(&args, "--write-trace", String::new());
    let sizes: Vec<f64> = sizes.split(',').filter_map(|s| s.parse().ok()).collect();
    let pool = pool();

    println!("| trace | cache | LRU objects | rampart objects | Δ | LRU bytes | rampart bytes | Δ | hot keys LRU / rampart |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for name in traces.split(',') {
        let mut generated: Vec<(Trace, f64)> = Vec::new();
        if let Some(alpha) = name.strip_prefix("zipf-").and_then(|a| a.parse().ok()) {
            let t = zipf(keys, requests, alpha, seed);
            generated.extend(sizes.iter().map(|&s| (zipf_clone(&t), s)));
        } else if name == "loop-scan" {
            let t = loop_scan(keys, requests, seed);
            generated.extend(sizes.iter().map(|&s| (zipf_clone(&t), s)));
        } else if name == "new-hot" {
            // The period is a fraction of the cache's capacity in objects, so each cache size
            // gets its own traces.
            let mean = mean_weight(keys as u32, &pool);
            let total = mean * keys as u64;
            for &s in &sizes {
                let capacity_objects = (total as f64 * s / 100.0) as u64 / mean;
                for k in [1u64, 5, 10, 20, 35, 50] {
                    let every = (capacity_objects * k / 100) as usize;
                    generated.push((new_hot(keys, every, &format!("new-hot-{k}%")), s));
                }
            }
        } else {
            eprintln!("unknown trace {name}");
            continue;
        }
        for (t, size) in generated {
            if !write.is_empty() {
                let bytes: Vec<u8> = t.requests.iter().flat_map(|k| k.to_le_bytes()).collect();
                if let Err(e) = std::fs::write(&write, bytes) {
                    eprintln!("{write}: {e}");
                }
                return;
            }
            let (_, total) = distinct_bytes(&t, &pool);
            let budget = (total as f64 * size / 100.0) as u64;
            let (ours, lru) = replay(&t, budget, &pool);
            let hot = if t.hot.is_empty() {
                String::from("–")
            } else {
                format!("{:.1} / {:.1}", lru.hot, ours.hot)
            };
            println!(
                "| {} | {size}% ({} MiB) | {:.2} | {:.2} | {:+.2} | {:.2} | {:.2} | {:+.2} | {hot} |",
                t.name,
                budget >> 20,
                lru.objects,
                ours.objects,
                ours.objects - lru.objects,
                lru.bytes,
                ours.bytes,
                ours.bytes - lru.bytes,
            );
        }
    }
}

fn zipf_clone(t: &Trace) -> Trace {
    Trace {
        name: t.name.clone(),
        requests: t.requests.clone(),
        hot: t.hot.clone(),
    }
}
