//! Storage: stored objects and the in-memory store with a hard byte budget.
//!
//! The store is an [`Index`] (S3-FIFO admission and eviction with an adaptive small queue, see
//! [`crate::index`]) of weighted slots. An object's weight is what it makes the allocator hold:
//! its body, its header block, its key, the `Object` itself and the index's own per-entry
//! memory, each rounded up to the allocator's size classes ([`alloc_size`]). So the sum of the
//! weights bounds the memory the store holds, whatever the object sizes.
//!
//! That only holds if a stored object owns exactly what it is charged for: a body or header
//! value that is a slice of a connection's read buffer would keep the whole buffer alive. So
//! objects are built from owned copies ([`owned_body`], [`compact_headers`]): one allocation for
//! the body, one for all header values.
//!
//! Bodies still being collected for the store are charged too: a miss reserves room in the
//! store ([`MemoryStore::reserve`]) before it keeps any bytes, and at most a quarter of the
//! budget can be reserved at once.
//!
//! The store is shared by all workers; values are `Arc`s, so a hit clones a pointer, never a
//! body.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use crate::control::ResponseDirectives;
use crate::encoding::{negotiate, Coding};
use crate::index::{Index, Inserted, METADATA_PER_ENTRY};
use crate::key::{CacheKey, SlotKey, SlotKeyRef};
use crate::vary::Vary;

/// Bytes the allocator holds for a request of `n` bytes: sizes are rounded up to one of four
/// classes per power of two (mimalloc's and jemalloc's spacing; glibc's is finer), so this
/// never undercounts them.
pub fn alloc_size(n: usize) -> u64 {
    if n == 0 {
        return 0;
    }
    if n <= 64 {
        return n.next_multiple_of(8) as u64;
    }
    let b = usize::BITS - 1 - (n - 1).leading_zeros();
    let step = 1usize << (b - 2);
    n.next_multiple_of(step) as u64
}

/// What a shared `Bytes` adds once cloned: its reference-counted header.
const SHARED_BYTES: u64 = 32;
/// `http`'s header map internals: a bucket (hash, links, name, value), an index slot, an extra
/// value (a repeated field's second and later lines).
const MAP_BUCKET: usize = 104;
const MAP_INDEX: usize = 4;
const MAP_EXTRA: usize = 72;

/// The charge of a body of `len` owned bytes.
pub fn body_charge(len: usize) -> u64 {
    if len == 0 {
        0
    } else {
        alloc_size(len) + SHARED_BYTES
    }
}

/// Whether `http` stores this field name without an allocation (a standard name). Names not
/// listed here are charged as custom ones, which can only overcount.
fn is_standard(name: &http::header::HeaderName) -> bool {
    use http::header::*;
    static STANDARD: [HeaderName; 34] = [
        ACCEPT_RANGES,
        ACCESS_CONTROL_ALLOW_ORIGIN,
        AGE,
        ALT_SVC,
        CACHE_CONTROL,
        CONNECTION,
        CONTENT_DISPOSITION,
        CONTENT_ENCODING,
        CONTENT_LANGUAGE,
        CONTENT_LENGTH,
        CONTENT_LOCATION,
        CONTENT_RANGE,
        CONTENT_SECURITY_POLICY,
        CONTENT_TYPE,
        DATE,
        ETAG,
        EXPIRES,
        LAST_MODIFIED,
        LINK,
        LOCATION,
        PRAGMA,
        REFERRER_POLICY,
        RETRY_AFTER,
        SERVER,
        SET_COOKIE,
        STRICT_TRANSPORT_SECURITY,
        TRANSFER_ENCODING,
        VARY,
        VIA,
        WWW_AUTHENTICATE,
        X_CONTENT_TYPE_OPTIONS,
        X_FRAME_OPTIONS,
        X_XSS_PROTECTION,
        ACCESS_CONTROL_MAX_AGE,
    ];
    STANDARD.contains(name)
}

/// The charge of a header map built by [`compact_headers`]: its index, its entries (exactly
/// one per field name), its repeated lines, its value buffer and its custom field names.
pub fn headers_charge(h: &HeaderMap) -> u64 {
    // `capacity()` is three quarters of the index's length (a power of two).
    let indices = h.capacity() * 4 / 3;
    let entries = h.keys_len();
    let extra = h.len() - h.keys_len();
    let values: usize = h.values().map(HeaderValue::len).sum();
    let names: u64 = h
        .keys()
        .filter(|n| !is_standard(n))
        .map(|n| alloc_size(n.as_str().len()) + SHARED_BYTES)
        .sum();
    alloc_size(indices * MAP_INDEX)
        + alloc_size(entries * MAP_BUCKET)
        + alloc_size(extra * MAP_EXTRA)
        + alloc_size(values)
        + SHARED_BYTES
        + names
}
/// A stored response.
#[derive(Debug)]
pub struct Object {
    pub status: StatusCode,
    /// The header block a fresh, full hit sends: the stored fields (hop-by-hop removed, no
    /// `Age`) plus the proxy's fixed cache labels, built once at store time (with
    /// [`compact_headers`]) so a hit clones one map. Other answers replace the labels.
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
    /// What the header block holds ([`headers_charge`]), computed once for the weight.
    pub headers_charge: u64,
    /// The same response in other content codings (compressed once, when stored), each a full
    /// object with its own header block (`Content-Encoding`, `Vary`, a weak `ETag`). Empty
    /// unless the rule compresses. Freshness and invalidation are this object's.
    pub encoded: Box<[(Coding, Arc<Object>)]>,
    /// The picture as WebP (made once, when stored), for clients whose `Accept` names
    /// `image/webp`; `None` unless the rule converts.
    pub webp: Option<Arc<Object>>,
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

    /// Bytes this object makes the allocator hold, with the index's entry under a key of
    /// `key_len` bytes.
    pub fn weight(&self, key_len: usize) -> u64 {
        let vary = match &self.vary {
            Vary::Fields(f) => alloc_size(f.len() * std::mem::size_of::<http::HeaderName>()),
            _ => 0,
        };
        let encoded: u64 = self
            .encoded
            .iter()
            .map(|(_, o)| {
                alloc_size(std::mem::size_of::<Object>() + 16)
                    + o.headers_charge
                    + body_charge(o.body.len())
            })
            .sum();
        let webp = self.webp.as_ref().map_or(0, |o| {
            alloc_size(std::mem::size_of::<Object>() + 16)
                + o.headers_charge
                + body_charge(o.body.len())
        });
        entry_charge(key_len)
            + alloc_size(std::mem::size_of::<Object>() + 16)
            + self.headers_charge
            + body_charge(self.body.len())
            + vary
            + encoded
            + webp
            + alloc_size(self.encoded.len() * std::mem::size_of::<(Coding, Arc<Object>)>())
    }

    /// The copy to send a client whose `Accept-Encoding` is `accept`: an encoded one it
    /// accepts, or this one.
    pub fn for_client<'a>(self: &'a Arc<Self>, req: &HeaderMap) -> &'a Arc<Object> {
        if let Some(webp) = &self.webp {
            if accepts_webp(req) {
                return webp;
            }
        }
        if self.encoded.is_empty() {
            return self;
        }
        let mut codings = [Coding::Br; 3];
        let n = self.encoded.len().min(3);
        for (slot, (c, _)) in codings.iter_mut().zip(self.encoded.iter()) {
            *slot = *c;
        }
        match negotiate(
            req.get_all(http::header::ACCEPT_ENCODING).iter(),
            &codings[..n],
        ) {
            Some(c) => self
                .encoded
                .iter()
                .find(|(x, _)| *x == c)
                .map_or(self, |(_, o)| o),
            None => self,
        }
    }
}

/// Whether the request's `Accept` names `image/webp` (with a q-value above 0). Only an explicit
/// mention counts: `*/*` and `image/*` come from clients that may not decode WebP.
pub fn accepts_webp(req: &HeaderMap) -> bool {
    req.get_all(http::header::ACCEPT).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',').any(|range| {
                let mut parts = range.split(';');
                let media = parts.next().unwrap_or("").trim();
                media.eq_ignore_ascii_case("image/webp")
                    && !parts.any(|p| {
                        p.split_once('=').is_some_and(|(k, v)| {
                            k.trim().eq_ignore_ascii_case("q")
                                && v.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)
                        })
                    })
            })
        })
    })
}

/// The index entry and key of a slot with a `key_len`-byte key.
fn entry_charge(key_len: usize) -> u64 {
    METADATA_PER_ENTRY + alloc_size(key_len) + SHARED_BYTES
}

/// A copy of `h` that owns its memory, with the fields of `set` inserted (replacing any of the
/// same name): every value in one shared buffer, so the map never keeps a connection's read
/// buffer alive, and a table of exactly its length (a cloned map's entries are not over-allocated
/// as a growing one's are).
pub fn compact_headers(h: &HeaderMap, set: &[(&HeaderName, &HeaderValue)]) -> HeaderMap {
    let total: usize = h.values().map(HeaderValue::len).sum();
    let mut buf = Vec::with_capacity(total);
    for v in h.values() {
        buf.extend_from_slice(v.as_bytes());
    }
    let buf = Bytes::from(buf);
    let mut out = HeaderMap::with_capacity(h.keys_len() + set.len());
    let mut at = 0;
    for (name, value) in h {
        let len = value.len();
        let owned = match HeaderValue::from_maybe_shared(buf.slice(at..at + len)) {
            Ok(mut v) => {
                v.set_sensitive(value.is_sensitive());
                v
            }
            // A value `http` accepted is always valid again; copy it alone if not.
            Err(_) => HeaderValue::from_bytes(value.as_bytes())
                .unwrap_or_else(|_| HeaderValue::from_static("")),
        };
        at += len;
        out.append(name.clone(), owned);
    }
    for (name, value) in set {
        out.insert((*name).clone(), (*value).clone());
    }
    out.clone()
}

/// The body as one owned allocation of exactly its length (the chunks it arrived in may be
/// slices of a connection's read buffer).
pub fn owned_body(chunks: &[Bytes]) -> Bytes {
    let len = chunks.iter().map(Bytes::len).sum();
    if len == 0 {
        return Bytes::new();
    }
    let mut v = Vec::with_capacity(len);
    for c in chunks {
        v.extend_from_slice(c);
    }
    Bytes::from(v)
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

fn slot_weight(key: &SlotKey, val: &Slot) -> u64 {
    let key_len = key.primary.len() + key.variant.as_ref().map_or(0, Bytes::len);
    match val {
        Slot::Object(o) => o.weight(key_len),
        Slot::Vary(_) => entry_charge(key_len) + alloc_size(std::mem::size_of::<VaryMarker>() + 16),
    }
}

/// The in-memory store.
pub struct MemoryStore {
    index: Index<SlotKey, Slot>,
    max_object: usize,
    /// Bytes reserved for bodies being collected, all shards.
    reserved: AtomicU64,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("stats", &self.index.stats())
            .field("capacity", &self.index.capacity())
            .finish()
    }
}

/// Room held in the store for a body being collected; give it back with
/// [`MemoryStore::release`].
#[derive(Debug)]
pub struct Reservation {
    key: CacheKey,
    bytes: u64,
}

impl Reservation {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

pub use crate::index::IndexStats as StoreStats;

impl MemoryStore {
    /// A store holding at most `budget` bytes; objects larger than `max_object` bytes of body
    /// are never stored.
    pub fn new(budget: u64, max_object: usize) -> Self {
        // Each shard has its share of the budget and refuses an item heavier than 90% of it,
        // so keep shards large enough for the biggest object allowed: at most one `max_object`
        // per half shard, and no more than 4 shards per CPU.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let biggest = body_charge(max_object) + 64 * 1024;
        let fit = (budget / (2 * biggest).max(1)).max(1);
        let shards = (fit.min(4 * cpus as u64) as usize).max(1);
        let shards = 1usize << (usize::BITS - 1 - shards.leading_zeros());
        MemoryStore {
            index: Index::new(budget.max(1), shards),
            max_object,
            reserved: AtomicU64::new(0),
        }
    }

    pub fn max_object(&self) -> usize {
        self.max_object
    }

    /// The slot stored under `key`, counting the access.
    pub fn get(&self, key: &SlotKey) -> Option<Slot> {
        self.index.get(key)
    }

    /// Stores a slot. Objects bigger than `max_object`, or heavier than most of a shard, are
    /// refused (returns false).
    pub fn put(&self, key: SlotKey, slot: Slot) -> bool {
        if let Slot::Object(o) = &slot {
            if o.body.len() > self.max_object {
                return false;
            }
        }
        let w = slot_weight(&key, &slot);
        self.index.insert(key, slot, w) != Inserted::TooHeavy
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
        let generation = match self.index.peek(&primary) {
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

    /// Replaces the object stored for `key` (and `variant`) with `new`, if it still is `old`
    /// and `old` was not invalidated: a purge, an invalidation or a newer response stored
    /// meanwhile wins. The check and the write happen under the shard's lock. Used to add the
    /// copies made after `old` was stored (the new weight is charged).
    pub fn replace(
        &self,
        key: &CacheKey,
        variant: Option<&[u8]>,
        old: &Arc<Object>,
        new: Arc<Object>,
    ) -> bool {
        let primary = SlotKey {
            primary: key.clone(),
            variant: None,
        };
        let slot = match variant {
            None => primary,
            Some(v) => match self.index.peek(&primary) {
                Some(Slot::Vary(m)) => SlotKey {
                    primary: key.clone(),
                    variant: Some(variant_slot(m.generation, v)),
                },
                _ => return false,
            },
        };
        if new.body.len() > self.max_object {
            return false;
        }
        let value = Slot::Object(new);
        let weight = slot_weight(&slot, &value);
        self.index.replace_if(slot, value, weight, |current| {
            matches!(current, Slot::Object(o) if Arc::ptr_eq(o, old)
                && !o.invalidated.load(Ordering::Relaxed))
        })
    }

    /// Holds `bytes` of the budget for a body of `key` being collected, evicting to make room.
    /// `None` when they cannot be held: more than a quarter of the budget would be reserved,
    /// or the object would not fit its shard. Give it back with [`MemoryStore::release`]
    /// (before storing the object, whose own weight then takes the room).
    pub fn reserve(&self, key: &CacheKey, bytes: u64) -> Option<Reservation> {
        let limit = self.index.capacity() / 4;
        let before = self.reserved.fetch_add(bytes, Ordering::Relaxed);
        if before + bytes > limit || !self.index.reserve(key, bytes) {
            self.reserved.fetch_sub(bytes, Ordering::Relaxed);
            return None;
        }
        Some(Reservation {
            key: key.clone(),
            bytes,
        })
    }

    /// Grows a reservation by `more` bytes; false (and the reservation unchanged) if they
    /// cannot be held.
    pub fn grow(&self, r: &mut Reservation, more: u64) -> bool {
        match self.reserve(&r.key, more) {
            Some(extra) => {
                r.bytes += extra.bytes;
                true
            }
            None => false,
        }
    }

    /// Gives back a reservation's bytes.
    pub fn release(&self, r: Reservation) {
        self.index.release(&r.key, r.bytes);
        self.reserved.fetch_sub(r.bytes, Ordering::Relaxed);
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
                match self.index.peek(&primary) {
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
            self.index.for_each(|k, v| {
                if scope.matches(&k.primary) {
                    if let Slot::Object(o) = v {
                        o.invalidate();
                        n += 1;
                    }
                }
            });
        } else {
            let removed = self.index.remove_if(|k, _| scope.matches(&k.primary));
            n = removed
                .iter()
                .filter(|s| matches!(s, Slot::Object(_)))
                .count();
        }
        n
    }

    /// Entries, weights, reservations and evictions now.
    pub fn stats(&self) -> StoreStats {
        self.index.stats()
    }

    /// Bytes charged to the budget now (stored objects; reservations not included).
    pub fn weight(&self) -> u64 {
        self.index.weight()
    }

    /// Bytes reserved for bodies being collected.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
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
            headers_charge: headers_charge(&headers),
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
            encoded: Box::default(),
            webp: None,
        })
    }

    fn key(host: &str, url: &str) -> SlotKey {
        SlotKey {
            primary: CacheKey::new(host, url, false),
            variant: None,
        }
    }

    #[test]
    fn replace_only_swaps_the_same_live_object() {
        let store = MemoryStore::new(1 << 20, 64 << 10);
        let k = CacheKey::new("h", "/a", false);
        let old = object(100);
        assert!(store.insert(k.clone(), None, old.clone()));
        // Replaced while it is still the stored object, and charged its new weight.
        let bigger = object(5000);
        assert!(store.replace(&k, None, &old, bigger.clone()));
        assert!(store.weight() >= 5000);
        // Not once it is not the stored object any more, nor after a soft purge, nor once it
        // is gone (a hard purge): nothing comes back.
        assert!(!store.replace(&k, None, &old, object(10)));
        bigger.invalidate();
        assert!(!store.replace(&k, None, &bigger, object(10)));
        store.remove(&key("h", "/a"));
        assert!(!store.replace(&k, None, &bigger, object(10)));
        assert!(store.get(&key("h", "/a")).is_none());
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
