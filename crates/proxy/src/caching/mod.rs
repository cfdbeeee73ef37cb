//! The shared cache: the store, the table of fetches in flight, and the lookup of a request.
//!
//! [`Cache::lookup`] finds a stored response for a request (following the `Vary` marker to the
//! variant), in memory and then on disk (`cache_disk`), and decides if it may be used. An
//! object read from disk goes back to memory when it is used again (its second read, or a
//! read after it was hit in memory): a working set larger than memory does not push out what
//! memory holds for objects used once. Storing is `writer.rs`,
//! which also offers stored objects to the disk tier; answering from a stored object is
//! `pipeline/hit.rs`.

pub mod coalesce;
pub mod coding;
pub mod freshen;
pub mod shared_tier;
pub mod transform;
pub mod writer;

use rampart_head::Fields;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rampart_cache::cache_control::RequestDirectives;
use rampart_cache::disk::DiskStore;
use rampart_cache::key::{CacheKey, SlotKeyRef};
use rampart_cache::storable::{self, RulePolicy, Usable};
use rampart_cache::store::{MemoryStore, Object, PurgeScope};
use rampart_redis::Shared;

use crate::caching::coalesce::Coalescer;
use crate::caching::transform::Transforms;

/// What lookup found for a request the store could not answer: computed once in lookup, used
/// again when the response is stored or revalidates the stale entry.
#[derive(Debug)]
pub struct Missed {
    pub key: CacheKey,
    pub directives: RequestDirectives,
    pub policy: RulePolicy,
    /// The stored response that could not be used as it is (stale, or the client asked for a
    /// fresher one): revalidated with its validators, served on origin errors when allowed.
    pub stale: Option<Arc<Object>>,
    /// The request forces a trip to the origin (`no-cache`, `Pragma: no-cache`).
    pub forced: bool,
}

/// Outcome of a lookup.
#[derive(Debug)]
pub enum Found {
    Hit(Arc<Object>),
    /// A hit read from the disk tier (and now in memory too).
    DiskHit(Arc<Object>),
    Miss(Missed),
}

/// The shared cache: store plus policy.
#[derive(Debug)]
pub struct Cache {
    store: MemoryStore,
    coalescer: Arc<Coalescer>,
    /// URLs whose whole representation a range miss could not store (see [`Cache::refuse_widening`]).
    unwidenable: std::sync::Mutex<std::collections::HashMap<CacheKey, std::time::Instant>>,
    /// Where purges and invalidations go to reach the other instances (`redis_purge`).
    shared: arc_swap::ArcSwapOption<Shared>,
    /// Where they go to reach the fleet's other members (`cache_peers`).
    peers: arc_swap::ArcSwapOption<PeerPurge>,
    /// The second tier, on disk (`cache_disk`).
    disk: Option<DiskStore>,
}

/// Where a purge made here goes to reach the fleet's other members (`cache_peers`: the
/// origin layer's `fleet::PeerPurges`; never waits).
pub struct PeerPurge(pub Box<SendPurge>);

/// Sends one purge (its scope, and whether it is soft) on.
pub type SendPurge = dyn Fn(&PurgeScope, bool) + Send + Sync;

impl std::fmt::Debug for PeerPurge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerPurge")
    }
}

/// What a purge did: the stored responses it removed (or, soft, marked) in each tier, and the
/// disk tier's ticket for it (tickets grow: the last of several covers them all).
#[derive(Debug, Clone, Copy, Default)]
pub struct Purged {
    /// What the answer's `purged` says: the larger of the two tiers' counts (an object held
    /// in memory and on disk is one object, purged from both).
    pub count: usize,
    pub memory: usize,
    pub disk: DiskTally,
    pub ticket: Option<u64>,
}

/// What a purge counted on the disk tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DiskTally {
    /// No disk tier.
    #[default]
    None,
    /// The objects removed there (a URL, everything).
    Counted(usize),
    /// Applied as a ban (a prefix, a domain, a tag): every match there is out of service, and
    /// not counted (the disk index keeps hashes, not URLs or tags).
    Ban,
}

impl std::ops::AddAssign for Purged {
    fn add_assign(&mut self, o: Purged) {
        self.count += o.count;
        self.memory += o.memory;
        self.disk = match (self.disk, o.disk) {
            (DiskTally::Ban, _) | (_, DiskTally::Ban) => DiskTally::Ban,
            (DiskTally::Counted(a), DiskTally::Counted(b)) => DiskTally::Counted(a + b),
            (DiskTally::None, d) | (d, DiskTally::None) => d,
        };
        self.ticket = self.ticket.max(o.ticket);
    }
}

/// How long a range request for a URL whose whole representation could not be stored goes
/// straight to the origin with its `Range` (Varnish calls such a marker hit-for-pass).
pub const UNWIDENABLE_FOR: Duration = Duration::from_secs(60);
/// At most this many such URLs are remembered: when full, the expired ones are dropped, or all
/// of them if none has expired (forgetting costs one whole-object try per URL).
const UNWIDENABLE_MAX: usize = 4096;

impl Cache {
    pub fn new(memory: u64, max_object: usize) -> Self {
        Cache {
            store: MemoryStore::new(memory, max_object),
            coalescer: Arc::new(Coalescer::default()),
            unwidenable: Default::default(),
            shared: Default::default(),
            peers: Default::default(),
            disk: None,
        }
    }

    /// With the disk tier as the second one.
    pub fn with_disk(mut self, disk: DiskStore) -> Self {
        self.disk = Some(disk);
        self
    }

    pub fn disk(&self) -> Option<&DiskStore> {
        self.disk.as_ref()
    }

    /// Writes out what the disk tier has queued and lets its directory go (shutdown, or a new
    /// binary taking over).
    pub fn close_disk(&self) {
        if let Some(d) = &self.disk {
            d.close();
        }
    }

    /// An object was stored in memory after a fetch: one use for the disk tier's admission.
    pub fn stored(&self, key: &CacheKey, variant: Option<&[u8]>, obj: &Arc<Object>) {
        if let Some(d) = &self.disk {
            d.offer(key, variant, obj);
        }
    }

    /// A 304 refreshed `old` into `new`: the disk gets the new headers when it held the old
    /// ones; otherwise it is one more use.
    pub fn refreshed(
        &self,
        key: &CacheKey,
        variant: Option<&[u8]>,
        old: &Object,
        new: &Arc<Object>,
    ) {
        if let Some(d) = &self.disk {
            if !old.disk.pending() {
                d.rewrite(key, variant, new);
            } else {
                d.offer(key, variant, new);
            }
        }
    }

    /// Sends this cache's purges and invalidations to the other instances through `shared`
    /// from now on, and applies theirs (see `rampart_redis::purge`).
    pub fn share(&self, shared: Option<&Shared>) {
        self.shared.store(shared.map(|s| Arc::new(s.clone())));
    }

    /// Sends this cache's purges and invalidations to the fleet's other members from now on.
    pub fn share_with_peers(&self, peers: Option<PeerPurge>) {
        self.peers.store(peers.map(Arc::new));
    }

    /// Another instance's purge, applied here only (in each tier; not sent on).
    pub fn apply_remote(&self, scope: &PurgeScope, soft: bool) -> usize {
        if let Some(d) = &self.disk {
            d.purge(scope, soft);
        }
        self.store.purge(scope, soft)
    }

    /// What the purge follower applies: another instance's purge, to this store only. Holds
    /// the cache weakly (the follower must not keep a replaced configuration's cache alive).
    pub fn remote_purges(self: &Arc<Self>) -> rampart_redis::purge::Apply {
        let cache = Arc::downgrade(self);
        Arc::new(move |r: &rampart_redis::purge::Remote| {
            cache
                .upgrade()
                .map_or(0, |c| c.apply_remote(&r.scope, r.soft))
        })
    }

    /// Purges `scope` here and, with Redis, on every other instance: what it hit in each tier
    /// here, and the disk tier's ticket for it (see [`Cache::durable`]).
    pub fn purge(&self, scope: &PurgeScope, soft: bool) -> Purged {
        let on_disk = self.disk.as_ref().map(|d| d.purge(scope, soft));
        let memory = self.store.purge(scope, soft);
        if let Some(shared) = &*self.shared.load() {
            shared.publish_purge(scope, soft);
        }
        if let Some(peers) = &*self.peers.load() {
            (peers.0)(scope, soft);
        }
        let disk = match on_disk {
            None => DiskTally::None,
            Some(d) => d.counted.map_or(DiskTally::Ban, DiskTally::Counted),
        };
        let count = match disk {
            DiskTally::Counted(n) => memory.max(n),
            _ => memory,
        };
        Purged {
            count,
            memory,
            disk,
            ticket: on_disk.and_then(|d| d.ticket),
        }
    }

    /// Waits, up to `limit`, until the disk tier has its purges up to `ticket` in its purge
    /// log, flushed (they outlive a restart); whether it has. Without a ticket (no disk tier,
    /// or nothing on disk for the purge to outlive) at once.
    pub async fn durable(&self, ticket: Option<u64>, limit: std::time::Duration) -> bool {
        let (Some(ticket), Some(disk)) = (ticket, &self.disk) else {
            return true;
        };
        let until = std::time::Instant::now() + limit;
        loop {
            if disk.purge_logged(ticket) {
                return true;
            }
            if std::time::Instant::now() >= until {
                return false;
            }
            // A flush of the log is a few milliseconds; an admin purge may wait for it.
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// The shared cache tier (`redis_cache`), when there is one (looked up through
    /// [`Cache::lookup_shared`], `shared_tier.rs`).
    pub fn shared_tier(&self) -> Option<Arc<Shared>> {
        self.shared.load_full().filter(|s| s.caches())
    }

    /// Whether a range miss on `key` may fetch the whole representation to store it: not while
    /// an earlier try found it unstorable (no-store, too large, no length, …).
    pub fn may_widen(&self, key: &CacheKey) -> bool {
        let mut map = match self.unwidenable.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        match map.get(key) {
            Some(at) if at.elapsed() < UNWIDENABLE_FOR => false,
            Some(_) => {
                map.remove(key);
                true
            }
            None => true,
        }
    }

    /// Remembers that `key`'s whole representation could not be shared and stored, so range
    /// requests for it go to the origin with their range for [`UNWIDENABLE_FOR`].
    pub fn refuse_widening(&self, key: &CacheKey) {
        let mut map = match self.unwidenable.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        if map.len() >= UNWIDENABLE_MAX {
            map.retain(|_, at| at.elapsed() < UNWIDENABLE_FOR);
            if map.len() >= UNWIDENABLE_MAX {
                map.clear();
            }
        }
        map.insert(key.clone(), std::time::Instant::now());
    }

    pub fn coalescer(&self) -> &Arc<Coalescer> {
        &self.coalescer
    }

    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// lookup: GET/HEAD only (the caller checks). `key` is the routed host and request target
    /// (see [`SlotKeyRef`]); with `refresh`, a usable entry is treated as stale (background
    /// revalidation). `disk`: when the rule uses the disk tier (not `cache_disk = false`), what
    /// makes its copies of an object read from there (the rule's transforms); `None` leaves the
    /// disk alone, for reading as for writing.
    pub fn lookup(
        self: &Arc<Self>,
        key: SlotKeyRef<'_>,
        headers: &Fields,
        policy: RulePolicy,
        refresh: bool,
        disk: Option<impl FnOnce() -> Transforms>,
    ) -> Found {
        let directives = RequestDirectives::parse(headers);
        let forced = directives.no_cache;
        let mut stale = None;
        let (found, from_disk) = match (self.store.find(&key, headers), disk) {
            (Some(obj), _) => (Some(obj), false),
            (None, Some(transforms)) => (self.from_disk(&key, headers, transforms), true),
            (None, None) => (None, false),
        };
        if let Some(obj) = found {
            match storable::usable(&obj, headers, &directives, SystemTime::now()) {
                Usable::Yes if !refresh => {
                    if from_disk {
                        return Found::DiskHit(obj);
                    }
                    if obj.disk.hit_matters() {
                        self.used(&key, headers, &obj);
                    }
                    return Found::Hit(obj);
                }
                // A large object on disk is only ever served whole and fresh: revalidating it,
                // or serving it stale, is left to a new fetch.
                _ if obj.extent.is_some() => {}
                Usable::Yes | Usable::No => stale = Some(obj),
                Usable::NotShareable => {}
            }
        }
        Found::Miss(Missed {
            key: key.to_key(),
            directives,
            policy,
            stale,
            forced,
        })
    }

    /// The object the disk tier holds for the request, put in memory (with its copies made
    /// again, as for an object from the Redis tier).
    fn from_disk(
        self: &Arc<Self>,
        key: &SlotKeyRef<'_>,
        headers: &Fields,
        transforms: impl FnOnce() -> Transforms,
    ) -> Option<Arc<Object>> {
        let disk = self.disk.as_ref()?;
        let key = key.to_key();
        let found = disk.lookup(&key, headers, |b| self.store.charged_body(b))?;
        let obj = Arc::new(found.object);
        let variant = found.variant;
        // A large object stays on disk; its body is read as it is sent. Another goes back to
        // memory when it is used again (see `Found::promote`).
        if obj.extent.is_none()
            && found.promote
            && self
                .store
                .insert(key.clone(), variant.as_deref(), obj.clone())
        {
            let transforms = transforms();
            if transforms.any() {
                let cache = self.clone();
                transform::transform_stored(transforms, &obj, move |old, new| {
                    cache.store.replace(&key, variant.as_deref(), old, new);
                });
            }
        }
        Some(obj)
    }

    /// A memory hit the disk tier hears of: one more use of an object it has not taken yet,
    /// or the first use of one it wrote.
    fn used(&self, key: &SlotKeyRef<'_>, headers: &Fields, obj: &Arc<Object>) {
        let Some(disk) = &self.disk else {
            return;
        };
        let variant = match &obj.vary {
            rampart_cache::vary::Vary::None => None,
            v => match v.variant_key(headers) {
                Some(v) => Some(v),
                None => return,
            },
        };
        if obj.disk.pending() {
            disk.offer(&key.to_key(), variant.as_deref(), obj);
        } else {
            disk.reused(&key.to_key(), variant.as_deref(), obj);
        }
    }

    /// Invalidates a URL on a host after an unsafe request succeeded (RFC 9111 §4.4).
    /// With Redis, the other instances remove it too.
    pub fn invalidate(&self, host: &str, pq: &str, ignore_query: bool) -> bool {
        let key = CacheKey::new(host, pq, ignore_query);
        if let Some(d) = &self.disk {
            d.purge(&PurgeScope::Exact(key.clone()), false);
        }
        let removed = self.store.invalidate(&key);
        if let Some(peers) = &*self.peers.load() {
            (peers.0)(&PurgeScope::Exact(key.clone()), false);
        }
        if let Some(shared) = &*self.shared.load() {
            shared.publish_purge(&PurgeScope::Exact(key), false);
        }
        removed
    }
}
