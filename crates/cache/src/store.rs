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
//! objects are built from owned copies ([`owned_body`], [`fields`]): one allocation for
//! the body, one for all header values.
//!
//! Bodies still being collected for the store are charged too: a miss reserves room in the
//! store ([`MemoryStore::reserve`]) before it keeps any bytes, and at most a quarter of the
//! budget can be reserved at once. And bodies made with [`MemoryStore::charged_body`] stay
//! charged for as long as they live, wherever they are: while an entry holds them, in its
//! weight; while none does (being stored, or evicted while a slow client still reads them), in
//! the store's pinned gauge, which takes room from the entries (see
//! [`crate::object::Residency`]).
//!
//! The store is shared by all workers; values are `Arc`s, so a hit clones a pointer, never a
//! body.

pub use crate::purge::PurgeScope;
use crate::purge::RecentPurges;
use rampart_head::Fields;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::index::{Index, Inserted};
use crate::key::{CacheKey, SlotKey, SlotKeyRef};
use crate::object::entry_charge;
use crate::tags::{TagState, TagVerdict, RECLAIM_SLICE};
use crate::vary::Vary;

// Objects and their charges live in `object.rs`; their paths under `store` stay.
pub use crate::object::{
    alloc_size, body_charge, fields, owned_body, Object, Residency, StoredFields, WireFields,
};

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

fn slot_weight(key: &SlotKey, val: &Slot) -> u64 {
    let key_len = key.primary.len() + key.variant.as_ref().map_or(0, Bytes::len);
    match val {
        Slot::Object(o) => o.weight(key_len),
        Slot::Vary(_) => entry_charge(key_len) + alloc_size(std::mem::size_of::<VaryMarker>() + 16),
    }
}

/// The in-memory store.
pub struct MemoryStore {
    index: Arc<Index<SlotKey, Slot>>,
    max_object: usize,
    /// Bytes reserved for bodies being collected, all shards.
    reserved: AtomicU64,
    /// Tags: how many stored objects carry each, and the tag purges in force.
    tags: Arc<TagState>,
    /// Where tag purges go to be reclaimed (the reclaimer thread, started at the first one).
    reclaim: std::sync::Mutex<Option<std::sync::mpsc::Sender<u64>>>,
    /// The purges and invalidations of the last minute, for the fetches under way meanwhile.
    recent: RecentPurges,
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

/// The reclaimer: takes the tags purged since its last walk, and walks the store once for all
/// of them, a page at a time, removing (or marking stale) what their purges reach. Ends when
/// the store is dropped.
fn reclaim_tags(
    index: &Index<SlotKey, Slot>,
    tags: &TagState,
    rx: &std::sync::mpsc::Receiver<u64>,
) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        batch.sort_unstable();
        batch.dedup();
        let started = std::time::SystemTime::now();
        // Paced: at most a fifth of a core, in slices of a fraction of a millisecond, so the
        // workers sharing the machine (or the one core) keep their latency.
        let mut slice = std::time::Instant::now();
        let pace = || {
            if slice.elapsed() >= RECLAIM_SLICE {
                std::thread::sleep(RECLAIM_SLICE * 4);
                slice = std::time::Instant::now();
            }
        };
        let removed = index.remove_if_paced(
            |_, v| match v {
                Slot::Object(o) if o.tags.iter().any(|t| batch.contains(t)) => {
                    match tags.verdict(o) {
                        TagVerdict::Gone => true,
                        TagVerdict::Stale => {
                            o.invalidate();
                            false
                        }
                        TagVerdict::Keep => false,
                    }
                }
                _ => false,
            },
            pace,
        );
        tags.walked(&batch, started);
        tracing::debug!(tags = batch.len(), removed, "tag purges reclaimed");
    }
}

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
        let tags = Arc::new(TagState::default());
        let state = tags.clone();
        MemoryStore {
            index: Arc::new(
                Index::new(budget.max(1), shards).with_on_leave(move |slot| {
                    if let Slot::Object(o) = slot {
                        o.left_store();
                        state.left(o);
                    }
                }),
            ),
            max_object,
            reserved: AtomicU64::new(0),
            tags,
            reclaim: std::sync::Mutex::new(None),
            recent: RecentPurges::default(),
        }
    }

    /// `o` enters the store (its body's charge, its tags' counts).
    fn entered(&self, o: &Object) {
        o.entered_store();
        self.tags.entered(o);
    }

    /// `o` did not enter after all.
    fn not_entered(&self, o: &Object) {
        o.left_store();
        self.tags.left(o);
    }

    /// `data` as a stored body, charged to this store's budget for as long as it lives (see
    /// [`crate::object::Residency`]); put its residency in the object made with it.
    pub fn charged_body(&self, data: Vec<u8>) -> (Bytes, Option<Arc<Residency>>) {
        crate::object::charged_body(data, self.index.pinned())
    }

    /// Bytes of stored bodies alive outside the store's entries (being stored, or evicted
    /// while clients still read them), counted against the budget.
    pub fn pinned(&self) -> u64 {
        self.index.pinned().load(Ordering::Relaxed)
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
        if let Slot::Object(o) = &slot {
            self.entered(o);
        }
        let object = match &slot {
            Slot::Object(o) => Some(o.clone()),
            Slot::Vary(_) => None,
        };
        let stored = self.index.insert(key, slot, w) != Inserted::TooHeavy;
        if !stored {
            if let Some(o) = object {
                self.not_entered(&o);
            }
        }
        stored
    }

    pub fn remove(&self, key: &SlotKey) {
        self.index.remove(key);
    }

    /// The stored response for `key` that matches the request (following a Vary marker).
    /// The primary lookup borrows the request's parts; only a varying resource builds a key.
    pub fn find(&self, key: &SlotKeyRef<'_>, request: &Fields) -> Option<Arc<Object>> {
        let o = match self.index.get(key)? {
            Slot::Object(o) => o,
            Slot::Vary(m) => {
                let variant = m.vary.variant_key(request)?;
                match self.get(&SlotKey {
                    primary: key.to_key(),
                    variant: Some(variant_slot(m.generation, &variant)),
                })? {
                    Slot::Object(o) => o,
                    Slot::Vary(_) => return None,
                }
            }
        };
        // A tag purge not yet reclaimed: the object is gone (a miss) or stale already.
        match self.tags.verdict(&o) {
            TagVerdict::Keep => Some(o),
            TagVerdict::Stale => {
                o.invalidate();
                Some(o)
            }
            TagVerdict::Gone => None,
        }
    }

    /// Whether a purge or invalidation that takes `obj`, just fetched to be stored under `key`,
    /// was made after its fetch began: it is the version that purge was made to remove, for no
    /// tier to keep (see [`crate::purge::RECENT_FOR`]). Only for what this instance fetched:
    /// objects from the disk or shared tier were purged there.
    pub fn outdated(&self, key: &CacheKey, obj: &Object) -> bool {
        self.recent.outdates(key, obj)
    }

    /// Stores `obj` for `key`; `variant` is its variant key when it varies. An object just
    /// fetched is first checked with [`MemoryStore::outdated`].
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
        self.entered(&new);
        let value = Slot::Object(new.clone());
        let weight = slot_weight(&slot, &value);
        let replaced = self.index.replace_if(slot, value, weight, |current| {
            matches!(current, Slot::Object(o) if Arc::ptr_eq(o, old)
                && !o.invalidated.load(Ordering::Relaxed))
        });
        if !replaced {
            self.not_entered(&new);
        }
        replaced
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
        self.recent.record(&PurgeScope::Exact(key.clone()));
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
        self.recent.record(scope);
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
        if let PurgeScope::Tag(t) = scope {
            return self.purge_tag(*t, soft);
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

    /// A tag purge: every object (every variant) the tag is on, counted from the store's own
    /// tally; in force at once (lookups judge tagged objects by the purges in force), and
    /// reclaimed by the store's reclaimer thread, which walks the store a page at a time: the
    /// request that purges, and those served meanwhile, wait for none of it.
    fn purge_tag(&self, tag: u64, soft: bool) -> usize {
        let n = self
            .tags
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&tag)
            .copied()
            .unwrap_or(0) as usize;
        self.tags.ban(tag, soft);
        let mut reclaim = self.reclaim.lock().unwrap_or_else(|p| p.into_inner());
        let sender = reclaim.get_or_insert_with(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            let (index, tags) = (self.index.clone(), self.tags.clone());
            let started = std::thread::Builder::new()
                .name("rampart-tag-reclaim".into())
                .spawn(move || reclaim_tags(&index, &tags, &rx));
            if let Err(e) = started {
                tracing::warn!(error = %e, "cannot start the tag reclaimer; purged objects leave as they are looked up");
            }
            tx
        });
        let _ = sender.send(tag);
        n
    }

    /// Waits until every tag purge so far is reclaimed (tests).
    #[cfg(test)]
    fn reclaimed(&self) {
        for _ in 0..1000 {
            let pending = self
                .tags
                .bans
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .any(|b| b.until.is_none());
            if !pending {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
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
    use crate::cache_control::ResponseDirectives;
    use http::StatusCode;
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, SystemTime};

    #[test]
    fn purge_scopes_survive_the_trip_to_other_instances() {
        let scopes = [
            PurgeScope::Exact(CacheKey::new("Example.COM:8080", "/a?b=1", false)),
            PurgeScope::Prefix {
                host: b"example.com".to_vec(),
                prefix: b"/img/".to_vec(),
            },
            PurgeScope::Contains {
                host: b"example.com".to_vec(),
                needle: vec![],
            },
            PurgeScope::Domain(b"example.com".to_vec()),
            PurgeScope::Everything,
        ];
        for s in scopes {
            assert_eq!(PurgeScope::decode(&s.encode()), Some(s));
        }
        for bad in [&b""[..], b"e", b"x\0/", b"eHOST\0/", b"*x", b"dh\0/"] {
            assert_eq!(PurgeScope::decode(bad), None, "{bad:?}");
        }
    }

    fn object(body_len: usize) -> Arc<Object> {
        let now = SystemTime::now();
        let mut headers = Fields::new();
        headers.insert("content-type", http::HeaderValue::from_static("text/plain"));
        let f = fields(&headers, &[]);
        Arc::new(Object {
            status: StatusCode::OK,
            headers_charge: f.charge,
            wire: f.wire,
            headers: f.headers,
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
            residency: None,
            disk: Default::default(),
            extent: None,
            tags: Box::default(),
        })
    }

    fn key(host: &str, url: &str) -> SlotKey {
        SlotKey {
            primary: CacheKey::new(host, url, false),
            variant: None,
        }
    }

    /// An object whose body is charged to `store` for as long as it lives.
    fn charged(store: &MemoryStore, body_len: usize) -> Arc<Object> {
        let (body, residency) = store.charged_body(vec![b'x'; body_len]);
        let o = object(0);
        let o = Arc::into_inner(o).unwrap_or_else(|| unreachable!());
        Arc::new(Object {
            body,
            residency,
            disk: Default::default(),
            extent: None,
            ..o
        })
    }

    /// `object(0)`, fetched `ago` before now.
    fn fetched_ago(ago: Duration) -> Arc<Object> {
        let o = Arc::into_inner(object(0)).unwrap_or_else(|| unreachable!());
        let at = SystemTime::now() - ago;
        Arc::new(Object {
            request_time: at,
            response_time: at,
            ..o
        })
    }

    #[test]
    fn a_fetch_under_way_when_its_purge_is_made_is_not_stored() {
        let store = MemoryStore::new(1 << 20, 64 << 10);
        let k = CacheKey::new("h", "/a", false);
        let other = CacheKey::new("h", "/b", false);
        // Nothing purged yet: an old fetch is stored.
        assert!(!store.outdated(&k, &fetched_ago(Duration::from_secs(5))));
        let before = fetched_ago(Duration::ZERO);
        store.purge(&PurgeScope::Exact(k.clone()), false);
        // Began before the purge: the version it was made to remove (either scheme's key).
        assert!(store.outdated(&k, &before));
        assert!(store.outdated(&k.clone().for_https(true), &before));
        // Another URL, and a fetch begun after the purge, are stored.
        assert!(!store.outdated(&other, &before));
        assert!(!store.outdated(&k, &fetched_ago(Duration::ZERO)));
        // An invalidation (RFC 9111 §4.4) counts as a purge of its URL; soft purges and
        // wider scopes too.
        let before = fetched_ago(Duration::ZERO);
        store.invalidate(&other);
        assert!(store.outdated(&other, &before));
        let before = fetched_ago(Duration::ZERO);
        store.purge(
            &PurgeScope::Prefix {
                host: b"h".to_vec(),
                prefix: b"/p/".to_vec(),
            },
            true,
        );
        assert!(store.outdated(&CacheKey::new("h", "/p/1", false), &before));
        assert!(!store.outdated(&CacheKey::new("h", "/q/1", false), &before));
        // By tag: only objects carrying the tag.
        let tagged = |t: u64| {
            let o = Arc::into_inner(fetched_ago(Duration::ZERO)).unwrap_or_else(|| unreachable!());
            Arc::new(Object {
                tags: vec![t].into_boxed_slice(),
                ..o
            })
        };
        let (seven, eight) = (tagged(7), tagged(8));
        store.purge(&PurgeScope::Tag(7), false);
        assert!(store.outdated(&CacheKey::new("x", "/t", false), &seven));
        assert!(!store.outdated(&CacheKey::new("x", "/u", false), &eight));
    }

    #[test]
    fn a_fetch_older_than_a_forgotten_purge_is_not_stored() {
        let store = MemoryStore::new(1 << 20, 64 << 10);
        let before = fetched_ago(Duration::ZERO);
        // More wide purges than are remembered, none of this URL: the first ones are
        // forgotten, and a fetch begun before them cannot be told apart from one they took.
        for i in 0..=crate::purge::RECENT_WIDE_MAX {
            store.purge(
                &PurgeScope::Domain(format!("other-{i}").into_bytes()),
                false,
            );
        }
        assert!(store.outdated(&CacheKey::new("h", "/a", false), &before));
        // Purges of single URLs, by the thousand, forget nothing of the sort.
        let store = MemoryStore::new(1 << 20, 64 << 10);
        let before = fetched_ago(Duration::ZERO);
        for i in 0..5000 {
            store.invalidate(&CacheKey::new("h", &format!("/other/{i}"), false));
        }
        assert!(!store.outdated(&CacheKey::new("h", "/a", false), &before));
        assert!(store.outdated(&CacheKey::new("h", "/other/4999", true), &before));
    }

    #[test]
    fn a_body_clients_still_read_after_eviction_stays_charged_until_they_let_go() {
        let store = MemoryStore::new(1 << 20, 64 << 10);
        let charge = body_charge(50_000);
        let k = CacheKey::new("h", "/big", false);
        let obj = charged(&store, 50_000);
        // Being stored: charged to the pinned gauge; stored: to the entry.
        assert_eq!(store.pinned(), charge);
        assert!(store.insert(k.clone(), None, obj.clone()));
        assert_eq!(store.pinned(), 0);
        // A newer object with the same body (a 304's refresh) replaces it: nothing moves.
        let refreshed = Arc::new(Object {
            body: obj.body.clone(),
            residency: obj.residency.clone(),
            ..Arc::into_inner(object(0)).unwrap_or_else(|| unreachable!())
        });
        assert!(store.insert(k.clone(), None, refreshed));
        assert_eq!(store.pinned(), 0);
        // A client holds the body (a response being sent) when the entry goes.
        let reading = obj.body.clone();
        drop(obj);
        store.remove(&key("h", "/big"));
        assert_eq!(store.pinned(), charge);
        // The last reader lets go: nothing is charged any more.
        drop(reading);
        assert_eq!(store.pinned(), 0);
        // Gone with nobody reading: never pinned.
        let obj = charged(&store, 50_000);
        assert!(store.insert(k, None, obj));
        store.remove(&key("h", "/big"));
        assert_eq!(store.pinned(), 0);
    }

    #[test]
    fn pinned_bodies_take_room_from_the_entries() {
        // 1 MiB: with 700 KB pinned by readers, at most ~300 KB of entries fit.
        let store = MemoryStore::new(1 << 20, 64 << 10);
        let mut readers = Vec::new();
        for i in 0..14 {
            let o = charged(&store, 50_000);
            readers.push(o.body.clone());
            assert!(store.insert(CacheKey::new("h", &format!("/r{i}"), false), None, o));
        }
        for i in 0..14 {
            store.remove(&key("h", &format!("/r{i}")));
        }
        assert!(store.pinned() >= 14 * 50_000);
        for i in 0..40 {
            let o = charged(&store, 50_000);
            store.insert(CacheKey::new("h", &format!("/n{i}"), false), None, o);
        }
        let total = store.weight() + store.pinned() + store.reserved();
        assert!(total <= store.capacity(), "{total} > {}", store.capacity());
        drop(readers);
        assert_eq!(store.pinned(), 0);
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
    fn tag_purges_take_every_tagged_object_a_page_at_a_time() {
        let store = MemoryStore::new(64 << 20, 1 << 20);
        let tag = crate::object::tag_hash(b"product-1");
        let other = crate::object::tag_hash(b"product-2");
        // Enough objects for many pages of every shard.
        for i in 0..3000 {
            let o = object(10);
            let mut o = Arc::into_inner(o).unwrap_or_else(|| unreachable!());
            o.tags = match i % 3 {
                0 => vec![tag].into(),
                1 => vec![other, tag].into(),
                _ => Box::default(),
            };
            store.put(key("h", &format!("/o/{i}")), Slot::Object(Arc::new(o)));
        }
        let none = Fields::new();
        let find =
            |path: &str| store.find(&SlotKeyRef::new("h", path, false).for_https(false), &none);
        assert!(find("/o/0").is_some());
        // Soft: stale at once, kept.
        assert_eq!(store.purge(&PurgeScope::Tag(other), true), 1000);
        let o = find("/o/1").expect("soft-purged objects stay");
        assert!(!o.is_fresh(SystemTime::now()));
        store.reclaimed();
        match store.get(&key("h", "/o/4")) {
            Some(Slot::Object(o)) => assert!(!o.is_fresh(SystemTime::now()), "marked by the walk"),
            other => panic!("{other:?}"),
        }
        // Hard: the count is the store's tally; gone for lookups at once, reclaimed after.
        assert_eq!(store.purge(&PurgeScope::Tag(tag), false), 2000);
        assert!(find("/o/0").is_none() && find("/o/1").is_none());
        assert!(find("/o/2").is_some());
        store.reclaimed();
        assert_eq!(store.index.len(), 1000);
        assert!(store.get(&key("h", "/o/0")).is_none());
        assert_eq!(store.purge(&PurgeScope::Tag(tag), false), 0);
        // A soft purge after a hard one does not bring back what the hard one took.
        let mut late = Arc::into_inner(object(10)).unwrap_or_else(|| unreachable!());
        late.tags = vec![other].into();
        late.response_time -= Duration::from_secs(5);
        store.put(key("h", "/late"), Slot::Object(Arc::new(late)));
        store.purge(&PurgeScope::Tag(other), false);
        store.purge(&PurgeScope::Tag(other), true);
        assert!(find("/late").is_none(), "still gone after the soft purge");
        // An object received after the purge carries the tag again and is kept.
        let mut fresh = Arc::into_inner(object(10)).unwrap_or_else(|| unreachable!());
        fresh.response_time = SystemTime::now() + Duration::from_secs(1);
        fresh.tags = vec![tag].into();
        store.put(key("h", "/o/0"), Slot::Object(Arc::new(fresh)));
        assert!(find("/o/0").is_some());
        assert_eq!(
            PurgeScope::decode(&PurgeScope::Tag(tag).encode()),
            Some(PurgeScope::Tag(tag))
        );
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
