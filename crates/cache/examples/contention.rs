//! What sharing the cache between workers costs: T threads (one per worker) look up cached
//! objects in one `MemoryStore` as the hit path does (`find`: shard read lock, access counter,
//! `Arc` clone, then drop), either all the same hot key or each its own keys, and report
//! nanoseconds per look-up. The difference between 1 and T threads on the same key is the
//! price of the cache lines every hit writes (lock word, entry counter, object refcount)
//! moving between cores.
//!
//! `cargo run --release -p rampart-cache --example contention -- [--threads 2] [--millis 2000]`
//! Pin it (`taskset -c 0-1`) and run nothing else on those CPUs.

#[allow(dead_code)]
#[path = "traces.rs"]
mod traces;

use rampart_head::Fields;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rampart_cache::key::{CacheKey, SlotKeyRef};
use rampart_cache::store::MemoryStore;
use traces::{arg, object, pool, url, HOST};

/// Nanoseconds per look-up, averaged over `threads` threads running for `run`, thread `t`
/// cycling through `keys(t)` in `store(t)`.
fn measure(
    store: impl Fn(usize) -> Arc<MemoryStore> + Sync,
    threads: usize,
    run: Duration,
    keys: impl Fn(usize) -> Vec<String> + Sync,
) -> f64 {
    let request = Fields::new();
    let per_thread: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (store, request, keys) = (store(t), &request, &keys);
                s.spawn(move || {
                    let urls = keys(t);
                    let start = Instant::now();
                    let mut n = 0u64;
                    while start.elapsed() < run {
                        for u in &urls {
                            let hit = store.find(&SlotKeyRef::new(HOST, u, false), request);
                            assert!(hit.is_some());
                            n += 1;
                        }
                    }
                    start.elapsed().as_nanos() as f64 / n as f64
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(f64::NAN))
            .collect()
    });
    per_thread.iter().sum::<f64>() / per_thread.len() as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let max_threads: usize = arg(&args, "--threads", 2);
    let run = Duration::from_millis(arg(&args, "--millis", 2000));
    let pool = pool();
    let now = SystemTime::now();
    let spread = 1024u32;
    let filled = || {
        let store = Arc::new(MemoryStore::new(256 << 20, 1 << 20));
        for k in 0..spread * max_threads as u32 {
            store.insert(
                CacheKey::new(HOST, &url(k), false),
                None,
                Arc::new(object(k % 64, &pool, now)),
            );
        }
        store
    };
    let shared = filled();
    let private: Vec<Arc<MemoryStore>> = (0..max_threads).map(|_| filled()).collect();
    let own =
        |t: usize| -> Vec<String> { (0..spread).map(|k| url(t as u32 * spread + k)).collect() };
    println!(
        "threads | one shared store, one hot key | one shared store, own keys | a store per thread, own keys (no sharing)"
    );
    println!("---|---|---|---");
    for threads in 1..=max_threads {
        let hot = measure(|_| shared.clone(), threads, run, |_| vec![url(0)]);
        let spread_out = measure(|_| shared.clone(), threads, run, own);
        let alone = measure(|t| private[t].clone(), threads, run, own);
        println!("{threads} | {hot:.0} ns | {spread_out:.0} ns | {alone:.0} ns");
    }
}
