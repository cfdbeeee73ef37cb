//! The store's weights against what the allocator really holds: a counting global allocator
//! (rounding each request as `alloc_size` says the allocator does) measures the bytes live after
//! filling a store, and the store's weight must cover them. The objects are built as the proxy
//! builds them: header values that are slices of a large read buffer, compacted; a body copied
//! out of the chunks it arrived in.
#![allow(unsafe_code, clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use rampart_cache::cache_control::ResponseDirectives;
use rampart_cache::key::CacheKey;
use rampart_cache::store::{alloc_size, fields, owned_body, MemoryStore, Object};
use rampart_cache::vary::Vary;
use rampart_head::Fields;

struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(alloc_size(layout.size()) as i64, Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(alloc_size(layout.size()) as i64, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            alloc_size(new_size) as i64 - alloc_size(layout.size()) as i64,
            Ordering::Relaxed,
        );
        // SAFETY: as for `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A response head as hyper parses it: values are slices of the connection's read buffer.
fn parsed_head(read_buffer: &Bytes, i: usize, extra_custom: usize) -> Fields {
    let mut h = Fields::new();
    let mut field = |name: &str, value: &str| {
        let at = read_buffer.len() / 2;
        let mut line = read_buffer.slice(at..at + value.len()).to_vec();
        line.copy_from_slice(value.as_bytes());
        h.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_bytes(&line).unwrap(),
        );
    };
    field("content-type", "text/plain; charset=utf-8");
    field("cache-control", "public, max-age=3600");
    field("date", "Mon, 23 Nov 2026 10:00:00 GMT");
    field("etag", &format!("\"{i:016x}\""));
    field("content-length", "12");
    field("via", "1.1 rampart");
    for c in 0..extra_custom {
        field(&format!("x-custom-{c}"), "some value of moderate length");
    }
    field("set-cookie", "a=1");
    field("set-cookie", "b=2");
    h
}

fn object(headers: &Fields, body: Bytes) -> Arc<Object> {
    let label = HeaderValue::from_static("Hit");
    let name = HeaderName::from_static("x-arc2-cache");
    let f = fields(headers, &[(&name, &label)]);
    let now = SystemTime::now();
    Arc::new(Object {
        status: StatusCode::OK,
        headers_charge: f.charge,
        wire: f.wire,
        headers: f.headers,
        body,
        request_time: now,
        response_time: now,
        initial_age: Duration::ZERO,
        lifetime: Duration::from_secs(3600),
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
    })
}

/// Fills a store far below its budget with `n` objects of `body_len` bytes; returns (bytes the
/// allocator holds for them, the store's weight).
fn fill(n: usize, body_len: usize, extra_custom: usize) -> (i64, u64) {
    let store = MemoryStore::new(1 << 32, 1 << 20);
    let read_buffer = Bytes::from(vec![b' '; 64 * 1024]);
    let chunk = Bytes::from(vec![b'x'; body_len]);
    // Warm the allocator's and the index's first allocations out of the measurement.
    let before = LIVE.load(Ordering::Relaxed);
    for i in 0..n {
        let head = parsed_head(&read_buffer, i, extra_custom);
        let body = owned_body(&[chunk.slice(..body_len / 2), chunk.slice(body_len / 2..)]);
        let obj = object(&head, body);
        // A hit clones the body and the header block once: the clones promote shared bytes.
        let (b, h) = (obj.body.clone(), obj.headers.clone());
        drop((b, h, head));
        store.insert(
            CacheKey::new("www.example.com", &format!("/objects/{i}?v=1"), false),
            None,
            obj,
        );
    }
    let held = LIVE.load(Ordering::Relaxed) - before;
    let weight = store.weight();
    drop(store);
    (held, weight)
}

#[test]
fn weights_cover_what_the_allocator_holds() {
    for (n, body_len, custom) in [
        (20_000, 12, 0),
        (20_000, 12, 4),
        (5_000, 3_000, 1),
        (2_000, 100_000, 0),
    ] {
        let (held, weight) = fill(n, body_len, custom);
        let per_held = held as f64 / n as f64;
        let per_charged = weight as f64 / n as f64;
        eprintln!(
            "{n} objects of {body_len} B (+{custom} custom fields): held {per_held:.0} B each, charged {per_charged:.0} B"
        );
        assert!(
            weight as i64 >= held,
            "charged {per_charged:.0} B per object but the allocator holds {per_held:.0}"
        );
        assert!(
            per_charged <= per_held * 1.35 + 64.0,
            "the charge should stay close to the truth: {per_charged:.0} vs {per_held:.0}"
        );
    }
}
