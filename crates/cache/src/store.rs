//! Storage: stored objects and the in-memory store with a hard byte budget.
//!
//! The index is a `quick_cache` (S3-FIFO-style admission and eviction: one-hit wonders are
//! evicted early, frequently used objects survive scans) weighted in bytes. An object's weight
//! counts its body, its headers, its key and a fixed per-entry overhead for the index and the
//! allocations around it, so the sum of weights bounds the memory the store holds. The store is
//! shared by all workers; values are `Arc`s, so a hit clones a pointer, never a body.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use crate::control::ResponseDirectives;
use crate::key::{CacheKey, SlotKey, SlotKeyRef};
use crate::vary::Vary;

/// Bytes charged per entry on top of key, headers and body: the index slot, the `Arc`s, the
/// `Object` itself and allocator rounding. Measured with `examples/zipf.rs` (1M keys, 1–16 KiB
/// objects): at 512 the process's resident growth stays within 6% of the budget.
pub const ENTRY_OVERHEAD: u64 = 512;

/// A stored response.
#[derive(Debug)]
pub struct Object {
    pub status: StatusCode,
    /// Stored header fields (hop-by-hop removed; `Age` not included).
    pub headers: HeaderMap,
    pub body: Bytes,
    /// When the request that produced it was sent and its response received (RFC 9111 §4.2.3).
    pub request_time: SystemTime,
    pub response_time: SystemTime,
    /// `corrected_initial_age`.
    pub initial_age: Duration,
    /// Freshness lifetime in effect.
    pub lifetime: Duration,
    pub directives: ResponseDirectives,
    pub vary: Vary,
    /// Set by a soft purge: the object is stale from then on, kept for stale-if-error.
    pub invalidated: AtomicBool,
    /// A background refresh (stale-while-revalidate) is running: start only one.
    pub refreshing: AtomicBool,
    /// The header block a fresh, full hit sends (the stored fields plus the proxy's fixed
    /// cache labels), prepared once at store time so a hit clones one map.
    pub hit_headers: HeaderMap,
    /// Sum of header name and value lengths of both maps, computed once for the weight.
    pub header_bytes: usize,
}

impl Object {
    /// The current age (RFC 9111 §4.2.3) at `now`.
    pub fn age(&self, now: SystemTime) -> Duration {
        let resident = now.duration_since(self.response_time).unwrap_or_default();
        self.initial_age + resident
    }

    /// Whether the object is fresh at `now`.
    pub fn is_fresh(&self, now: SystemTime) -> bool {
        !self.invalidated.load(Ordering::Relaxed) && self.age(now) < self.lifetime
    }

    pub fn invalidate(&self) {
        self.invalidated.store(true, Ordering::Relaxed);
    }

    /// The stored `Date`, or when the response was received (for If-Modified-Since).
    pub fn stored_date(&self) -> SystemTime {
        self.headers
            .get(http::header::DATE)
            .and_then(crate::freshness::http_date)
            .unwrap_or(self.response_time)
    }

    pub fn weight(&self, key_len: usize) -> u64 {
        ENTRY_OVERHEAD + key_len as u64 + self.header_bytes as u64 + self.body.len() as u64
    }
}

/// Sum of the byte lengths of all header names and values.
pub fn header_bytes(h: &HeaderMap) -> usize {
    h.iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum()
}

/// What one slot holds.
#[derive(Debug, Clone)]
pub enum Slot {
    Object(Arc<Object>),
    /// The resource varies: look up the variant computed with this `Vary`.
    Vary(Arc<VaryMarker>),
}

/// Marks a varying resource. Variant slots are keyed by `generation` + variant key, so removing
/// the marker (invalidation, purge) makes every old variant unreachable at once, even if the
/// resource is stored again with the same `Vary` later; the orphans age out of the store.
#[derive(Debug)]
pub struct VaryMarker {
    pub vary: Vary,
    pub generation: u64,
}

static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn variant_slot(generation: u64, variant: &[u8]) -> Bytes {
    let mut b = Vec::with_capacity(8 + variant.len());
    b.extend_from_slice(&generation.to_be_bytes());
    b.extend_from_slice(variant);
    Bytes::from(b)
}

/// Which entries a purge addresses (the four ARC2 scopes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PurgeScope {
    /// One URL on one host (all its variants).
    Exact(CacheKey),
    /// Every URL on `host` that starts with `prefix`.
    Prefix { host: Vec<u8>, prefix: Vec<u8> },
    /// Every URL on `host` that contains `needle`.
    Contains { host: Vec<u8>, needle: Vec<u8> },
    /// Everything stored for `host`.
    Domain(Vec<u8>),
}

impl PurgeScope {
    fn matches(&self, key: &CacheKey) -> bool {
        match self {
            PurgeScope::Exact(k) => k.same_resource(key),
            PurgeScope::Prefix { host, prefix } => {
                key.host() == host.as_slice() && key.url().starts_with(prefix)
            }
            PurgeScope::Contains { host, needle } => {
                key.host() == host.as_slice()
                    && (needle.is_empty()
                        || key
                            .url()
                            .windows(needle.len())
                            .any(|w| w == needle.as_slice()))
            }
            PurgeScope::Domain(host) => key.host() == host.as_slice(),
        }
    }
}

#[derive(Clone)]
struct Weigher;

impl quick_cache::Weighter<SlotKey, Slot> for Weigher {
    fn weight(&self, key: &SlotKey, val: &Slot) -> u64 {
        let key_len = key.primary.len() + key.variant.as_ref().map_or(0, Bytes::len);
        match val {
            Slot::Object(o) => o.weight(key_len),
            Slot::Vary(_) => ENTRY_OVERHEAD + key_len as u64,
        }
    }
}

/// The in-memory store.
pub struct MemoryStore {
    index: quick_cache::sync::Cache<SlotKey, Slot, Weigher>,
    max_object: usize,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("weight", &self.index.weight())
            .field("capacity", &self.index.capacity())
            .field("entries", &self.index.len())
            .finish()
    }
}

impl MemoryStore {
    /// A store holding at most `budget` bytes; objects larger than `max_object` bytes of body
    /// are never stored.
    pub fn new(budget: u64, max_object: usize) -> Self {
        // The estimate only sizes the index up front; assume ~4 KiB objects.
        let estimated = (budget / 4096).clamp(16, 1 << 22) as usize;
        // Each shard has its share of the budget and refuses an item heavier than (most of) its
        // share, so keep shards large enough for the biggest object allowed: at most one
        // `max_object` per half shard, and no more than the library's default of 4 per CPU.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let fit = (budget / (2 * (max_object as u64 + ENTRY_OVERHEAD + 4096)).max(1)).max(1);
        let shards = (fit.min(4 * cpus as u64) as usize).max(1);
        let shards = 1usize << (usize::BITS - 1 - shards.leading_zeros());
        let options = quick_cache::OptionsBuilder::new()
            .estimated_items_capacity(estimated)
            .weight_capacity(budget.max(1))
            .shards(shards)
            .build();
        let index = match options {
            Ok(o) => quick_cache::sync::Cache::with_options(
                o,
                Weigher,
                Default::default(),
                Default::default(),
            ),
            Err(_) => quick_cache::sync::Cache::with_weighter(estimated, budget.max(1), Weigher),
        };
        MemoryStore { index, max_object }
    }

    pub fn max_object(&self) -> usize {
        self.max_object
    }

    pub fn get(&self, key: &SlotKey) -> Option<Slot> {
        self.index.get(key)
    }

    /// Stores a slot. Objects bigger than `max_object`, or heavier than the whole budget, are
    /// refused (returns false).
    pub fn put(&self, key: SlotKey, slot: Slot) -> bool {
        if let Slot::Object(o) = &slot {
            if o.body.len() > self.max_object {
                return false;
            }
        }
        let w = quick_cache::Weighter::weight(&Weigher, &key, &slot);
        // Heavier than most of a shard: the index would drop it silently; say so instead.
        if w > self.index.shard_capacity() / 10 * 9 {
            return false;
        }
        self.index.insert(key, slot);
        true
    }

    pub fn remove(&self, key: &SlotKey) {
        self.index.remove(key);
    }

    /// The stored response for `key` that matches the request (following a Vary marker).
    /// The primary lookup borrows the request's parts; only a varying resource builds a key.
    pub fn find(&self, key: &SlotKeyRef<'_>, request: &HeaderMap) -> Option<Arc<Object>> {
        match self.index.get(key)? {
            Slot::Object(o) => Some(o),
            Slot::Vary(m) => {
                let variant = m.vary.variant_key(request)?;
                match self.get(&SlotKey {
                    primary: key.to_key(),
                    variant: Some(variant_slot(m.generation, &variant)),
                })? {
                    Slot::Object(o) => Some(o),
                    Slot::Vary(_) => None,
                }
            }
        }
    }

    /// Stores `obj` for `key`; `variant` is its variant key when it varies.
    pub fn insert(&self, key: CacheKey, variant: Option<&[u8]>, obj: Arc<Object>) -> bool {
        let primary = SlotKey {
            primary: key,
            variant: None,
        };
        let Some(variant) = variant else {
            return self.put(primary, Slot::Object(obj));
        };
        // Reuse the current generation when the resource varies the same way.
        let generation = match self.get(&primary) {
            Some(Slot::Vary(m)) if m.vary == obj.vary => m.generation,
            _ => {
                let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
                let marker = Slot::Vary(Arc::new(VaryMarker {
                    vary: obj.vary.clone(),
                    generation,
                }));
                if !self.put(primary.clone(), marker) {
                    return false;
                }
                generation
            }
        };
        self.put(
            SlotKey {
                primary: primary.primary,
                variant: Some(variant_slot(generation, variant)),
            },
            Slot::Object(obj),
        )
    }

    /// Invalidates `key` (RFC 9111 §4.4): the object, or every variant of it, on both schemes
    /// (see [`CacheKey::for_https`]). Returns whether anything was stored.
    pub fn invalidate(&self, key: &CacheKey) -> bool {
        let mut slot = SlotKey {
            primary: key.clone(),
            variant: None,
        };
        let one = self.index.remove(&slot).is_some();
        slot.primary = slot.primary.for_https(!key.is_https());
        let other = self.index.remove(&slot).is_some();
        one || other
    }

    /// Removes (or with `soft`, marks stale) every entry in `scope`; returns how many objects
    /// were affected.
    /// An exact purge is a direct lookup (a CMS purging on every publish must not scan the
    /// index); the wider scopes scan it.
    pub fn purge(&self, scope: &PurgeScope, soft: bool) -> usize {
        if let PurgeScope::Exact(key) = scope {
            // Both schemes' keys (see `CacheKey::for_https`).
            let mut n = 0;
            let mut varies = false;
            for https in [false, true] {
                let primary = SlotKey {
                    primary: key.clone().for_https(https),
                    variant: None,
                };
                if !soft {
                    // Removing the primary slot removes the object, or makes every variant
                    // unreachable.
                    n += usize::from(self.index.remove(&primary).is_some());
                    continue;
                }
                match self.get(&primary) {
                    Some(Slot::Object(o)) => {
                        o.invalidate();
                        n += 1;
                    }
                    None => {}
                    // Soft-purging a varying resource marks each variant: scan below.
                    Some(Slot::Vary(_)) => varies = true,
                }
            }
            if !varies {
                return n;
            }
        }
        let mut n = 0;
        if soft {
            for (k, v) in self.index.iter() {
                if scope.matches(&k.primary) {
                    if let Slot::Object(o) = v {
                        o.invalidate();
                        n += 1;
                    }
                }
            }
        } else {
            let doomed: Vec<SlotKey> = self
                .index
                .iter()
                .filter(|(k, _)| scope.matches(&k.primary))
                .map(|(k, _)| k)
                .collect();
            for k in doomed {
                if let Some((_, Slot::Object(_))) = self.index.remove(&k) {
                    n += 1;
                }
            }
        }
        n
    }

    /// Bytes charged to the budget now.
    pub fn weight(&self) -> u64 {
        self.index.weight()
    }

    pub fn capacity(&self) -> u64 {
        self.index.capacity()
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(body_len: usize) -> Arc<Object> {
        let now = SystemTime::now();
        let mut headers = HeaderMap::new();
        headers.insert("content-type", http::HeaderValue::from_static("text/plain"));
        Arc::new(Object {
            status: StatusCode::OK,
            header_bytes: header_bytes(&headers),
            hit_headers: headers.clone(),
            headers,
            body: Bytes::from(vec![b'x'; body_len]),
            request_time: now,
            response_time: now,
            initial_age: Duration::ZERO,
            lifetime: Duration::from_secs(60),
            directives: ResponseDirectives::default(),
            vary: Vary::None,
            invalidated: AtomicBool::new(false),
            refreshing: AtomicBool::new(false),
        })
    }

    fn key(host: &str, url: &str) -> SlotKey {
        SlotKey {
            primary: CacheKey::new(host, url, false),
            variant: None,
        }
    }

    #[test]
    fn budget_holds_while_inserting_ten_times_its_size() {
        let budget = 1 << 20;
        let store = MemoryStore::new(budget, 64 << 10);
        let mut inserted = 0u64;
        let mut i = 0;
        while inserted < 10 * budget {
            let o = object(1000 + (i % 7) * 1000);
            inserted += o.body.len() as u64;
            store.put(key("h", &format!("/{i}")), Slot::Object(o));
            assert!(
                store.weight() <= store.capacity(),
                "weight {} over budget",
                store.weight()
            );
            i += 1;
        }
        assert!(
            store.len() > 100,
            "the store still holds many objects: {}",
            store.len()
        );
        assert!(
            store.weight() > budget / 2,
            "and uses its budget: {}",
            store.weight()
        );
    }

    #[test]
    fn oversized_objects_are_refused() {
        let store = MemoryStore::new(1 << 20, 1000);
        assert!(!store.put(key("h", "/big"), Slot::Object(object(1001))));
        assert!(store.put(key("h", "/ok"), Slot::Object(object(1000))));
        let tiny = MemoryStore::new(4096, 1 << 20);
        assert!(!tiny.put(key("h", "/heavier-than-budget"), Slot::Object(object(5000))));
        // The largest allowed object always fits its shard, whatever the CPU count.
        let store = MemoryStore::new(16 << 20, 8 << 20);
        assert!(store.put(key("h", "/max"), Slot::Object(object(8 << 20))));
        assert!(store.get(&key("h", "/max")).is_some());
    }

    #[test]
    fn purge_scopes() {
        let store = MemoryStore::new(1 << 20, 1 << 20);
        for (h, u) in [
            ("a", "/blog/1"),
            ("a", "/blog/2"),
            ("a", "/shop/blog"),
            ("b", "/blog/1"),
        ] {
            store.put(key(h, u), Slot::Object(object(10)));
        }
        let prefix = PurgeScope::Prefix {
            host: b"a".to_vec(),
            prefix: b"/blog/".to_vec(),
        };
        assert_eq!(store.purge(&prefix, false), 2);
        assert!(
            store.get(&key("b", "/blog/1")).is_some(),
            "other hosts untouched"
        );
        let contains = PurgeScope::Contains {
            host: b"a".to_vec(),
            needle: b"blog".to_vec(),
        };
        // Soft purge keeps the object but marks it stale.
        assert_eq!(store.purge(&contains, true), 1);
        match store.get(&key("a", "/shop/blog")) {
            Some(Slot::Object(o)) => assert!(!o.is_fresh(SystemTime::now())),
            other => panic!("soft-purged object should stay: {other:?}"),
        }
        assert_eq!(store.purge(&PurgeScope::Domain(b"b".to_vec()), false), 1);
        assert_eq!(
            store.purge(
                &PurgeScope::Exact(CacheKey::new("a", "/shop/blog", false)),
                false
            ),
            1
        );
        assert!(store.is_empty());
    }

    #[test]
    fn purges_and_invalidations_reach_both_schemes() {
        let store = MemoryStore::new(1 << 20, 1 << 20);
        let https = |h: &str, u: &str| SlotKey {
            primary: CacheKey::new(h, u, false).for_https(true),
            variant: None,
        };
        let both = |store: &MemoryStore| {
            store.put(key("a", "/x"), Slot::Object(object(10)));
            store.put(https("a", "/x"), Slot::Object(object(10)));
        };
        both(&store);
        assert_eq!(store.len(), 2, "the schemes' entries are apart");
        let exact = PurgeScope::Exact(CacheKey::new("a", "/x", false));
        assert_eq!(store.purge(&exact, true), 2);
        assert_eq!(store.purge(&exact, false), 2);
        assert!(store.is_empty());
        both(&store);
        assert!(store.invalidate(&CacheKey::new("a", "/x", false)));
        assert!(store.is_empty());
        both(&store);
        assert!(store.invalidate(&CacheKey::new("a", "/x", false).for_https(true)));
        assert!(store.is_empty());
        both(&store);
        assert_eq!(store.purge(&PurgeScope::Domain(b"a".to_vec()), false), 2);
    }
}
