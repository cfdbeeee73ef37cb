//! Hit-ratio benchmark: replays a Zipf-distributed request trace through rampart's memory store
//! and through a plain LRU of the same byte budget, and reports both hit ratios and the store's
//! resident memory.
//!
//! ```text
//! cargo run --release -p rampart-cache --example zipf -- [--keys 1000000] [--requests 10000000]
//!     [--alpha 0.99] [--cache-fraction 0.05] [--seed 1] [--trace FILE] [--write-trace FILE]
//!     [--no-lru]   (measure the store's memory alone)
//! ```
//!
//! Object sizes are drawn once per key (log-uniform 1–16 KiB, as web objects are skewed small),
//! so "5% of the keys" means a byte budget of 5% of the total bytes of all keys. The trace is
//! generated on the fly from the seed (or read from / written to a file of little-endian u32
//! key ids), so the generator and the replay tool are the same program.

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use rampart_cache::control::ResponseDirectives;
use rampart_cache::key::{CacheKey, SlotKey, SlotKeyRef};
use rampart_cache::index::METADATA_PER_ENTRY as ENTRY_OVERHEAD;
use rampart_cache::store::{MemoryStore, Object, Slot};
use rampart_cache::vary::Vary;

/// xorshift64*: small, fast, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf(alpha) over `n` ranks by inverse CDF (binary search in the cumulative weights).
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, alpha: f64) -> Self {
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
    fn sample(&self, rng: &mut Rng) -> u32 {
        let u = rng.unit();
        self.cdf.partition_point(|&c| c < u) as u32
    }
}

/// A plain LRU with a byte budget (the baseline): hash map + doubly linked list in a slab.
struct Lru {
    map: HashMap<u32, usize>,
    nodes: Vec<(u32, u64, usize, usize)>, // key, weight, prev, next
    free: Vec<usize>,
    head: usize,
    tail: usize,
    weight: u64,
    budget: u64,
}

const NIL: usize = usize::MAX;

impl Lru {
    fn new(budget: u64) -> Self {
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
    fn get(&mut self, k: u32) -> bool {
        match self.map.get(&k) {
            Some(&i) => {
                self.unlink(i);
                self.push_front(i);
                true
            }
            None => false,
        }
    }
    fn put(&mut self, k: u32, w: u64) {
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

fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let keys: usize = arg(&args, "--keys", 1_000_000);
    let requests: usize = arg(&args, "--requests", 10_000_000);
    let alpha: f64 = arg(&args, "--alpha", 0.99);
    let fraction: f64 = arg(&args, "--cache-fraction", 0.05);
    let seed: u64 = arg(&args, "--seed", 1);
    let trace_in: Option<String> = arg(&args, "--trace", String::new()).into();
    let trace_out: String = arg(&args, "--write-trace", String::new());
    // Without the baseline, the RSS growth is the store's alone.
    let with_lru = !args.iter().any(|a| a == "--no-lru");

    let mut rng = Rng(seed.max(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    // Per-key body sizes, log-uniform 1–16 KiB.
    let sizes: Vec<u32> = (0..keys)
        .map(|_| (1024.0 * 16f64.powf(rng.unit())) as u32)
        .collect();
    let key_bytes = |k: u32| format!("/object/{k}").len() as u64 + "bench.example".len() as u64 + 1;
    let total: u64 = (0..keys as u32)
        .map(|k| sizes[k as usize] as u64 + ENTRY_OVERHEAD + key_bytes(k))
        .sum();
    let budget = (total as f64 * fraction) as u64;
    eprintln!(
        "keys {keys}, requests {requests}, Zipf alpha {alpha}, total {} MiB, budget {} MiB ({:.1}%)",
        total >> 20,
        budget >> 20,
        fraction * 100.0
    );

    let zipf = Zipf::new(keys, alpha);
    let mut source: Box<dyn FnMut() -> Option<u32>> = match trace_in.filter(|s| !s.is_empty()) {
        Some(path) => {
            let mut r = BufReader::new(
                std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}")),
            );
            Box::new(move || {
                let mut b = [0u8; 4];
                r.read_exact(&mut b).ok().map(|_| u32::from_le_bytes(b))
            })
        }
        None => {
            let mut n = 0;
            Box::new(move || {
                n += 1;
                (n <= requests).then(|| zipf.sample(&mut rng))
            })
        }
    };
    let mut writer = (!trace_out.is_empty()).then(|| {
        BufWriter::new(
            std::fs::File::create(&trace_out).unwrap_or_else(|e| panic!("{trace_out}: {e}")),
        )
    });

    let rss_before = rss_kib();
    let store = MemoryStore::new(budget, 1 << 20);
    let mut lru = Lru::new(budget);
    let body_pool = Bytes::from(vec![b'x'; 16 * 1024 + 1]);
    let mut headers = HeaderMap::new();
    headers.insert(
        "content-type",
        http::HeaderValue::from_static("application/octet-stream"),
    );
    let (mut hits, mut lru_hits, mut total_reqs) = (0u64, 0u64, 0u64);
    let now = SystemTime::now();
    let started = Instant::now();
    while let Some(k) = source() {
        if let Some(w) = writer.as_mut() {
            let _ = w.write_all(&k.to_le_bytes());
        }
        total_reqs += 1;
        let url = format!("/object/{k}");
        if store
            .find(&SlotKeyRef::new("bench.example", &url, false), &headers)
            .is_some()
        {
            hits += 1;
        } else {
            // Own allocation per object, as a real response body would have.
            let body = Bytes::copy_from_slice(&body_pool[..sizes[k as usize] as usize]);
            let obj = Object {
                status: StatusCode::OK,
                headers: HeaderMap::new(),
                headers_charge: 0,
                body,
                request_time: now,
                response_time: now,
                initial_age: Duration::ZERO,
                lifetime: Duration::from_secs(86400),
                directives: ResponseDirectives::default(),
                vary: Vary::None,
                invalidated: AtomicBool::new(false),
                refreshing: AtomicBool::new(false),
            };
            store.put(
                SlotKey {
                    primary: CacheKey::new("bench.example", &url, false),
                    variant: None,
                },
                Slot::Object(Arc::new(obj)),
            );
        }
        if with_lru {
            if lru.get(k) {
                lru_hits += 1;
            } else {
                lru.put(k, sizes[k as usize] as u64 + ENTRY_OVERHEAD + key_bytes(k));
            }
        }
    }
    let rss_after = rss_kib();
    let ratio = |h: u64| 100.0 * h as f64 / total_reqs.max(1) as f64;
    println!("requests            {total_reqs}");
    println!("rampart hit ratio   {:.2}%", ratio(hits));
    println!("LRU hit ratio       {:.2}%", ratio(lru_hits));
    println!(
        "difference          {:+.2} points",
        ratio(hits) - ratio(lru_hits)
    );
    println!(
        "store weight        {} MiB of {} MiB budget, {} entries",
        store.weight() >> 20,
        budget >> 20,
        store.len()
    );
    println!(
        "process RSS growth  {} MiB (includes the LRU baseline's index, {} entries)",
        (rss_after.saturating_sub(rss_before)) >> 10,
        lru.map.len()
    );
    println!(
        "peak RSS growth     {} MiB ({:+.1}% of the budget)",
        status_kib("VmHWM:").saturating_sub(rss_before) >> 10,
        100.0
            * ((status_kib("VmHWM:").saturating_sub(rss_before) << 10) as f64 / budget as f64
                - 1.0)
    );
    println!(
        "elapsed             {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
