//! The shared cache tier (`redis_cache`), between a local miss and the origin: the request
//! that leads the local fetch of a resource asks Redis first ([`Cache::lookup_shared`], over
//! `rampart_redis::cache_tier`). The memory and disk tiers are looked up by [`Cache::lookup`].
//! - An object stored there that may answer the request is stored here too and answers it
//!   (`Cache-Status: rampart; hit; detail=shared`); the local waiters then find it here.
//! - Nothing there: this request takes the fetch lock for every instance and fetches
//!   (storing the response writes it there and lifts the lock, [`SharedLock`]; see `writer.rs`), or another
//!   instance holds the lock and this one polls until its object is there, the lock becomes a
//!   pass marker (the response was not storable) or it expires.
//! - Redis slow, down or backing off: the request goes on as without the tier (counted as a
//!   fallback of the `cache` feature).
//!
//! A stale object from the tier is not used as it is, but stands in for a missing local copy
//! in revalidation and stale-if-error.

use rampart_head::Fields;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{HeaderName, HeaderValue};
use rampart_cache::storable::{self, Usable};
use rampart_cache::vary::Vary;
use rampart_redis::cache_tier::{SharedAnswer, LOCK_FOR};
use rampart_redis::{Feature, STATS};

use rampart_cache::store::Object;

use rampart_cache::key::CacheKey;
use rampart_redis::Shared;

use crate::caching::transform::Transforms;
use crate::caching::{Cache, Missed};

/// First pause between looks while another instance fetches; it doubles up to [`POLL_MAX`].
const POLL_FIRST: Duration = Duration::from_millis(5);
const POLL_MAX: Duration = Duration::from_millis(50);

/// What the shared tier brings a request that leads the local fetch of its resource.
#[derive(Debug)]
pub enum FromShared {
    /// An object stored there answers the request (and is stored here now).
    Hit(Arc<Object>),
    /// The request fetches from the origin: for every instance when it holds the tier's
    /// fetch lock.
    Fetch(Option<Box<SharedLock>>),
}

impl Cache {
    /// Asks the shared tier for a missed request's resource (see the module notes), waiting at most
    /// `wait` for another instance's fetch. `transforms`: the copies to make of an object stored
    /// here from the tier.
    pub async fn lookup_shared(
        self: &Arc<Self>,
        missed: &mut Missed,
        req_headers: &Fields,
        transforms: Transforms,
        wait: Duration,
    ) -> FromShared {
        let Some(shared) = self.shared_tier() else {
            return FromShared::Fetch(None);
        };
        let key = missed.key.clone();
        let mut variant: Option<bytes::Bytes> = None;
        let mut vary_asked = false;
        let (mut pause, mut waited, mut counted) = (POLL_FIRST, Duration::ZERO, false);
        let wait = wait.min(LOCK_FOR);
        loop {
            let found = match shared.cache_lookup(&key, variant.as_deref(), true).await {
                Ok(f) => f,
                Err(e) => {
                    tracing::debug!(error = %e, "shared cache tier not asked");
                    STATS.fallback(Feature::Cache);
                    return FromShared::Fetch(None);
                }
            };
            STATS.used(Feature::Cache);
            match found {
                SharedAnswer::Object(bytes) => {
                    return match use_object(self, missed, req_headers, transforms, &bytes) {
                        Some(obj) => FromShared::Hit(obj),
                        None => FromShared::Fetch(None),
                    };
                }
                SharedAnswer::Vary(names) if !vary_asked => {
                    vary_asked = true;
                    let mut h = Fields::new();
                    let Ok(names) = HeaderValue::from_str(&names) else {
                        return FromShared::Fetch(None);
                    };
                    h.insert(http::header::VARY, names);
                    match Vary::parse(&h).variant_key(req_headers) {
                        Some(v) => variant = Some(v),
                        None => return FromShared::Fetch(None),
                    }
                }
                SharedAnswer::Vary(_) => return FromShared::Fetch(None),
                SharedAnswer::Locked if waited < wait => {
                    if !counted {
                        counted = true;
                        STATS
                            .cache_waits
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tracing::debug!("another instance is fetching it; waiting for its object");
                    }
                    tokio::time::sleep(pause).await;
                    waited += pause;
                    pause = (pause * 2).min(POLL_MAX);
                }
                SharedAnswer::Lead => {
                    return FromShared::Fetch(Some(Box::new(SharedLock::new(shared, key))));
                }
                SharedAnswer::Locked | SharedAnswer::Nothing => return FromShared::Fetch(None),
            }
        }
    }
}

/// An object from the tier: answers the request when it may (and is stored here for the
/// next ones), or stands in for the missing stale copy.
fn use_object(
    cache: &Arc<Cache>,
    l: &mut Missed,
    req_headers: &Fields,
    transforms: Transforms,
    bytes: &[u8],
) -> Option<Arc<Object>> {
    // Its body charged to the budget for as long as it lives, as a fetched one is.
    let Some(obj) =
        rampart_cache::portable::decode_with(bytes, |b| cache.store().charged_body(b.to_vec()))
    else {
        tracing::warn!("the shared cache tier holds an object this version cannot read");
        return None;
    };
    let variant = match &obj.vary {
        Vary::None => None,
        v => Some(v.variant_key(req_headers)?),
    };
    let obj = Arc::new(obj);
    match storable::usable(&obj, req_headers, &l.directives, SystemTime::now()) {
        Usable::Yes => {}
        Usable::No => {
            if l.stale.is_none() {
                l.stale = Some(obj);
            }
            return None;
        }
        Usable::NotShareable => return None,
    }
    STATS
        .cache_hits
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let key = l.key.clone();
    let stored = cache
        .store()
        .insert(key.clone(), variant.as_deref(), obj.clone());
    if stored && transforms.any() {
        let cache = cache.clone();
        crate::caching::transform::transform_stored(transforms, &obj, move |old, new| {
            cache.store().replace(&key, variant.as_deref(), old, new);
        });
    }
    Some(obj)
}

/// Writes an object just stored here to the cache tier the instances share, when there is
/// one and the object is within `redis_cache_max_object` and of use for a while yet; the
/// write lifts `lock`. In the background: the request never waits for it.
pub fn share(
    cache: &Cache,
    key: &CacheKey,
    variant: Option<&[u8]>,
    obj: &Object,
    lock: Option<SharedLock>,
) {
    let Some(shared) = cache.shared_tier() else {
        return;
    };
    if obj.body.len() > shared.cache_max_object() {
        return;
    }
    let ttl = rampart_cache::portable::shared_ttl(obj, SystemTime::now());
    if ttl.is_zero() {
        return;
    }
    let vary = match &obj.vary {
        Vary::Fields(f) => f
            .iter()
            .map(HeaderName::as_str)
            .collect::<Vec<_>>()
            .join(","),
        _ => String::new(),
    };
    shared.cache_store(
        key,
        vary,
        variant,
        rampart_cache::portable::encode(obj),
        ttl,
        &obj.tags,
        obj.request_time,
    );
    if let Some(lock) = lock {
        lock.stored();
    }
}

/// This instance fetches `key` for every instance (it holds the shared tier's fetch lock):
/// storing the response lifts the lock ([`SharedLock::stored`]); anything else, dropping this
/// included, turns it into a pass marker so the others stop waiting and fetch on their own.
#[derive(Debug)]
pub struct SharedLock {
    shared: Arc<Shared>,
    key: CacheKey,
    held: bool,
}

impl SharedLock {
    pub fn new(shared: Arc<Shared>, key: CacheKey) -> SharedLock {
        SharedLock {
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

impl Drop for SharedLock {
    fn drop(&mut self) {
        if self.held {
            self.shared.cache_unlock(&self.key);
        }
    }
}
