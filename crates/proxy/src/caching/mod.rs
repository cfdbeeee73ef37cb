//! The shared cache: the store, the table of fetches in flight, and the lookup of a request.
//!
//! [`Cache::lookup`] finds a stored response for a request (following the `Vary` marker to the
//! variant) and decides if it may be used. Storing is `writer.rs`; answering from a stored
//! object is `pipeline/hit.rs`.

pub mod coalesce;
pub mod transform;
pub mod writer;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::HeaderMap;
use rampart_cache::cache_control::RequestDirectives;
use rampart_cache::key::{CacheKey, SlotKeyRef};
use rampart_cache::policy::{self, RulePolicy, Usable};
use rampart_cache::store::{MemoryStore, Object, PurgeScope};
use rampart_redis::Shared;

use crate::caching::coalesce::Coalescer;

/// A request the cache may answer or store: computed once in lookup, used again in store.
#[derive(Debug)]
pub struct Lookup {
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
    Miss(Lookup),
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
        }
    }

    /// Sends this cache's purges and invalidations to the other instances through `shared`
    /// from now on, and applies theirs (see `rampart_redis::purge`).
    pub fn share(&self, shared: Option<&Shared>) {
        self.shared.store(shared.map(|s| Arc::new(s.clone())));
    }

    /// What the purge follower applies: another instance's purge, to this store only. Holds
    /// the cache weakly (the follower must not keep a replaced configuration's cache alive).
    pub fn remote_purges(self: &Arc<Self>) -> rampart_redis::purge::Apply {
        let cache = Arc::downgrade(self);
        Arc::new(move |r: &rampart_redis::purge::Remote| {
            cache
                .upgrade()
                .map_or(0, |c| c.store.purge(&r.scope, r.soft))
        })
    }

    /// Purges `scope` here and, with Redis, on every other instance; returns how many entries
    /// it hit here.
    pub fn purge(&self, scope: &PurgeScope, soft: bool) -> usize {
        let n = self.store.purge(scope, soft);
        if let Some(shared) = &*self.shared.load() {
            shared.publish_purge(scope, soft);
        }
        n
    }

    /// The shared cache tier (`redis_cache`), when there is one.
    pub fn tier(&self) -> Option<Arc<Shared>> {
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
    /// revalidation).
    pub fn lookup(
        &self,
        key: SlotKeyRef<'_>,
        headers: &HeaderMap,
        policy: RulePolicy,
        refresh: bool,
    ) -> Found {
        let directives = RequestDirectives::parse(headers);
        let forced = directives.no_cache;
        let mut stale = None;
        if let Some(obj) = self.store.find(&key, headers) {
            match policy::usable(&obj, headers, &directives, SystemTime::now()) {
                Usable::Yes if !refresh => return Found::Hit(obj),
                Usable::Yes | Usable::No => stale = Some(obj),
                Usable::NotShareable => {}
            }
        }
        Found::Miss(Lookup {
            key: key.to_key(),
            directives,
            policy,
            stale,
            forced,
        })
    }

    /// Invalidates a URL on a host after an unsafe request succeeded (RFC 9111 §4.4).
    /// With Redis, the other instances remove it too.
    pub fn invalidate(&self, host: &str, pq: &str, ignore_query: bool) -> bool {
        let key = CacheKey::new(host, pq, ignore_query);
        let removed = self.store.invalidate(&key);
        if let Some(shared) = &*self.shared.load() {
            shared.publish_purge(&PurgeScope::Exact(key), false);
        }
        removed
    }
}

/// This instance fetches `key` for every instance (it holds the shared tier's fetch lock):
/// storing the response lifts the lock ([`TierLock::stored`]); anything else, dropping this
/// included, turns it into a pass marker so the others stop waiting and fetch on their own.
#[derive(Debug)]
pub struct TierLock {
    shared: Arc<Shared>,
    key: CacheKey,
    held: bool,
}

impl TierLock {
    pub fn new(shared: Arc<Shared>, key: CacheKey) -> TierLock {
        TierLock {
            shared,
            key,
            held: true,
        }
    }

    /// The object went to the shared tier, whose write lifted the lock.
    pub fn stored(mut self) {
        self.held = false;
    }
}

impl Drop for TierLock {
    fn drop(&mut self) {
        if self.held {
            self.shared.cache_unlock(&self.key);
        }
    }
}
