//! lookup → hit | miss | pass, and store (the cache side of deliver).
//!
//! [`Cache::lookup`] finds a stored response for a request (following the `Vary` marker to the
//! variant) and decides if it may be used; [`hit`] builds the response from it without touching
//! the origin. On a miss, [`Cache::prepare_store`] decides from the origin's response head whether
//! the body is stored; the body is then teed into the store as it streams to the client
//! (`body.rs`), so nothing waits for the whole body.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use std::sync::atomic::Ordering;

use http::header::{HeaderName, HeaderValue, AGE, CONTENT_LENGTH, CONTENT_RANGE};
use http::{HeaderMap, Method, Response, StatusCode};
use rampart_cache::conditional::{self, RangeAnswer};
use rampart_cache::control::{RequestDirectives, ResponseDirectives};
use rampart_cache::freshness;
use rampart_cache::key::{CacheKey, SlotKeyRef};
use rampart_cache::policy::{self, NotStored, RulePolicy, Usable};
use rampart_cache::store::{
    body_charge, compact_headers, headers_charge, MemoryStore, Object, Reservation,
};
use rampart_cache::targeted::CDN_CACHE_CONTROL;
use rampart_cache::vary::Vary;

use crate::body::ProxyBody;
use crate::coalesce::Coalescer;

pub static X_ARC2_CACHE: HeaderName = HeaderName::from_static("x-arc2-cache");
pub static X_ARC2_CACHE_AGE: HeaderName = HeaderName::from_static("x-arc2-cache-age");
pub static CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// The `X-Arc2-Cache` vocabulary (ARC2-COMPAT §7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheLabel {
    Miss,
    Expired,
    Hit,
    Dynamic,
    Bypass,
    Block,
}

impl CacheLabel {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheLabel::Miss => "Miss",
            CacheLabel::Expired => "Expired",
            CacheLabel::Hit => "Hit",
            CacheLabel::Dynamic => "Dynamic",
            CacheLabel::Bypass => "Bypass",
            CacheLabel::Block => "Block",
        }
    }

    pub fn header(self) -> HeaderValue {
        HeaderValue::from_static(self.as_str())
    }
}

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
        }
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

    /// lookup: GET/HEAD only (the caller checks). `host` is the routed host, `pq` the request
    /// target; `https_key` for HTTPS requests to a rule whose schemes reach different origins
    /// (see `CacheKey::for_https`).
    /// With `refresh`, a usable entry is treated as stale (background revalidation).
    #[allow(clippy::too_many_arguments)]
    pub fn lookup(
        &self,
        host: &str,
        pq: &str,
        ignore_query: bool,
        https_key: bool,
        headers: &HeaderMap,
        policy: RulePolicy,
        refresh: bool,
    ) -> Found {
        let key = SlotKeyRef::new(host, pq, ignore_query).for_https(https_key);
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

    /// Updates a stored response with a 304 (RFC 9111 §4.3.4) and stores the result; returns
    /// the object to answer with (its old body, its new headers and freshness).
    pub fn freshen(
        &self,
        lookup: &Lookup,
        stale: &Object,
        req_headers: &HeaderMap,
        not_modified: &HeaderMap,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Arc<Object> {
        let merged = conditional::freshen(&stale.headers, not_modified);
        // The stored copy has no CDN-Cache-Control any more: unless the 304 brings one, the
        // directives it was stored under still hold.
        let directives =
            if stale.directives.targeted && !not_modified.contains_key(&CDN_CACHE_CONTROL) {
                stale.directives.clone()
            } else {
                ResponseDirectives::parse(&merged)
            };
        let headers = stored_headers(&merged, &directives);
        let exchange = policy::Exchange {
            method: &Method::GET,
            req_headers,
            req: &lookup.directives,
            status: stale.status,
            res_headers: &headers,
            res: &directives,
            vary: &stale.vary,
            response_time,
        };
        let lifetime = policy::storable(&exchange, lookup.policy).unwrap_or(Duration::ZERO);
        let headers = hit_headers(&headers);
        let obj = Arc::new(Object {
            status: stale.status,
            headers_charge: headers_charge(&headers),
            initial_age: freshness::initial_age(not_modified, request_time, response_time),
            headers,
            body: stale.body.clone(),
            request_time,
            response_time,
            lifetime,
            directives,
            vary: stale.vary.clone(),
            invalidated: Default::default(),
            refreshing: Default::default(),
        });
        if lifetime.is_zero() {
            self.store.invalidate(&lookup.key);
        } else {
            let variant = match &obj.vary {
                Vary::None => None,
                v => v.variant_key(req_headers),
            };
            self.store
                .insert(lookup.key.clone(), variant.as_deref(), obj.clone());
        }
        obj
    }

    /// Invalidates a URL on a host after an unsafe request succeeded (RFC 9111 §4.4).
    pub fn invalidate(&self, host: &str, pq: &str, ignore_query: bool) -> bool {
        self.store
            .invalidate(&CacheKey::new(host, pq, ignore_query))
    }

    /// Decides, from the origin's response head, whether to store the body; returns what the
    /// body tee needs, or why not.
    #[allow(clippy::too_many_arguments)]
    pub fn prepare_store(
        self: &Arc<Self>,
        lookup: &Lookup,
        method: &Method,
        req_headers: &HeaderMap,
        status: StatusCode,
        res_headers: &HeaderMap,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Result<Box<StoreTicket>, NotStored> {
        let directives = ResponseDirectives::parse(res_headers);
        let vary = Vary::parse(res_headers);
        let exchange = policy::Exchange {
            method,
            req_headers,
            req: &lookup.directives,
            status,
            res_headers,
            res: &directives,
            vary: &vary,
            response_time,
        };
        let lifetime = policy::storable(&exchange, lookup.policy)?;
        let too_big = crate::headers::content_length(res_headers)
            .is_some_and(|n| n > self.store.max_object() as u64);
        if too_big {
            return Err(NotStored::TooLarge);
        }
        let variant = match &vary {
            Vary::None => None,
            v => Some(v.variant_key(req_headers).ok_or(NotStored::VaryAny)?),
        };
        // The body is collected in memory charged to the store: hold room for it first (all of
        // it when its length is known, else as it arrives).
        let expected = crate::headers::content_length(res_headers).map(|n| n as usize);
        let reservation = self
            .store
            .reserve(&lookup.key, body_charge(expected.unwrap_or(0)))
            .ok_or(NotStored::NoRoom)?;
        let headers = hit_headers(&stored_headers(res_headers, &directives));
        Ok(Box::new(StoreTicket {
            cache: self.clone(),
            key: lookup.key.clone(),
            variant,
            status,
            initial_age: freshness::initial_age(res_headers, request_time, response_time),
            headers,
            request_time,
            response_time,
            lifetime,
            directives,
            vary,
            body: Vec::with_capacity(expected.unwrap_or(0)),
            expected,
            reservation: Some(reservation),
        }))
    }
}

/// Everything needed to store a response, and its body as it is collected. The body is
/// copied into one buffer this ticket owns (the chunks it arrives in are slices of the origin
/// connection's read buffer, which a stored object must not keep alive), in room reserved in the
/// store; dropping the ticket gives the room back.
#[derive(Debug)]
pub struct StoreTicket {
    cache: Arc<Cache>,
    key: CacheKey,
    variant: Option<bytes::Bytes>,
    status: StatusCode,
    /// The header block of a hit (see [`Object::headers`]), compacted at store time.
    headers: HeaderMap,
    request_time: SystemTime,
    response_time: SystemTime,
    initial_age: Duration,
    lifetime: Duration,
    directives: ResponseDirectives,
    vary: Vary,
    body: Vec<u8>,
    /// The origin's Content-Length.
    expected: Option<usize>,
    reservation: Option<Reservation>,
}

/// Reservations for bodies of unknown length grow by at least this much at a time.
const RESERVE_STEP: usize = 64 * 1024;

impl StoreTicket {
    pub fn vary(&self) -> &Vary {
        &self.vary
    }

    pub fn variant(&self) -> Option<&bytes::Bytes> {
        self.variant.as_ref()
    }

    /// The fields a qualified `private` / `no-cache` withholds from other clients.
    pub fn withheld(&self) -> &[HeaderName] {
        self.directives.withheld()
    }

    /// Adds the next chunk of the body. False when the body will not be stored (larger than
    /// `cache_max_object`, or no room for it in the store): drop the ticket then.
    pub fn push(&mut self, chunk: &[u8]) -> bool {
        let store = &self.cache.store;
        let len = self.body.len() + chunk.len();
        if len > store.max_object() {
            return false;
        }
        if len > self.body.capacity() {
            // The buffer grows to the announced length, or doubles (never past the limit);
            // the store is charged for what the buffer will hold before it grows.
            let want = match self.expected {
                Some(n) if n >= len => n,
                _ => len
                    .max(2 * self.body.capacity())
                    .max(RESERVE_STEP)
                    .min(store.max_object()),
            };
            let Some(r) = self.reservation.as_mut() else {
                return false;
            };
            let need = body_charge(want);
            if need > r.bytes() && !store.grow(r, need - r.bytes()) {
                return false;
            }
            self.body.reserve_exact(want - self.body.len());
        }
        self.body.extend_from_slice(chunk);
        true
    }

    /// The body is complete: store the object.
    pub fn finish(mut self: Box<Self>) {
        let mut body = std::mem::take(&mut self.body);
        if body.capacity() != body.len() {
            // Exactly its length, so the object holds what it is charged for.
            body = body.as_slice().to_vec();
        }
        if let Some(r) = self.reservation.take() {
            self.cache.store.release(r);
        }
        let headers = std::mem::take(&mut self.headers);
        let obj = Object {
            status: self.status,
            headers_charge: headers_charge(&headers),
            headers,
            body: bytes::Bytes::from(body),
            request_time: self.request_time,
            response_time: self.response_time,
            initial_age: self.initial_age,
            lifetime: self.lifetime,
            directives: std::mem::take(&mut self.directives),
            vary: std::mem::take(&mut self.vary),
            invalidated: Default::default(),
            refreshing: Default::default(),
        };
        let variant = self.variant.take();
        self.cache
            .store
            .insert(self.key.clone(), variant.as_deref(), Arc::new(obj));
    }
}

impl Drop for StoreTicket {
    fn drop(&mut self) {
        if let Some(r) = self.reservation.take() {
            self.cache.store.release(r);
        }
    }
}

/// Why a stored response is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// Fresh (or within the client's max-stale).
    Fresh,
    /// Stale while a background fetch refreshes it (RFC 5861).
    StaleWhileRevalidate,
    /// Stale because the origin failed (RFC 5861 stale-if-error, or the grace period).
    StaleIfError,
    /// Revalidated with the origin just now (304).
    Revalidated,
}

impl Served {
    fn label(self) -> (CacheLabel, &'static str) {
        match self {
            Served::Fresh => (CacheLabel::Hit, "rampart; hit"),
            Served::StaleWhileRevalidate => (
                CacheLabel::Hit,
                "rampart; hit; detail=stale-while-revalidate",
            ),
            Served::StaleIfError => (CacheLabel::Hit, "rampart; hit; detail=stale-if-error"),
            Served::Revalidated => (
                CacheLabel::Expired,
                "rampart; fwd=stale; fwd-status=304; stored",
            ),
        }
    }
}

/// A fresh, full, unconditional hit: answered with the object's prepared header block as is.
fn plain_hit(obj: &Object, req_headers: &HeaderMap, head: bool, served: Served) -> bool {
    served == Served::Fresh
        && !head
        && obj.status == StatusCode::OK
        && !conditional::client_has_conditionals(req_headers)
        && !req_headers.contains_key(http::header::RANGE)
}

/// [`respond`] for a response rampart's HTTP/1 writer sends: a plain hit does not copy the
/// stored header block, the body carries the object and the writer sends its fields from the
/// store ([`ProxyBody::hit`]); the response's own map holds `Age` and `X-Arc2-Cache-Age`.
pub fn respond_h1(
    obj: &Arc<Object>,
    req_headers: &HeaderMap,
    head: bool,
    served: Served,
) -> (Response<ProxyBody>, CacheLabel) {
    if !plain_hit(obj, req_headers, head, served) {
        return respond(obj, req_headers, head, served);
    }
    let mut res = Response::new(ProxyBody::hit(obj.clone()));
    let age = age_value(obj.age(SystemTime::now()).as_secs());
    let h = res.headers_mut();
    h.reserve(2);
    h.insert(AGE, age.clone());
    h.insert(X_ARC2_CACHE_AGE.clone(), age);
    (res, served.label().0)
}

/// Answers a request from a stored object: 200, or 304 when the client's validators match, or
/// 206/416 for a byte range of the stored full response. HEAD gets the headers only. Adds
/// `Age`, `X-Arc2-Cache`, `X-Arc2-Cache-Age` and `Cache-Status`.
pub fn respond(
    obj: &Object,
    req_headers: &HeaderMap,
    head: bool,
    served: Served,
) -> (Response<ProxyBody>, CacheLabel) {
    let (label, cache_status) = served.label();
    let now = SystemTime::now();
    // The hot path: a fresh, full, unconditional hit sends the prepared header block.
    if plain_hit(obj, req_headers, head, served) {
        let mut res = Response::new(ProxyBody::full(obj.body.clone()));
        let mut headers = obj.headers.clone();
        let age = age_value(obj.age(now).as_secs());
        headers.insert(AGE, age.clone());
        headers.insert(X_ARC2_CACHE_AGE.clone(), age);
        *res.headers_mut() = headers;
        return (res, label);
    }
    // RFC 9110 §13.2.1: preconditions apply to what would otherwise be a 2xx.
    let failed =
        obj.status.is_success() && conditional::precondition_failed(req_headers, &obj.headers);
    let (status, mut headers, body) = if failed {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
        (StatusCode::PRECONDITION_FAILED, h, bytes::Bytes::new())
    } else if conditional::not_modified(req_headers, &obj.headers, obj.stored_date()) {
        (
            StatusCode::NOT_MODIFIED,
            conditional::not_modified_headers(&obj.headers),
            bytes::Bytes::new(),
        )
    } else if head || obj.status != StatusCode::OK {
        (
            obj.status,
            obj.headers.clone(),
            if head {
                bytes::Bytes::new()
            } else {
                obj.body.clone()
            },
        )
    } else {
        let len = obj.body.len() as u64;
        match conditional::range(req_headers, &obj.headers, len) {
            RangeAnswer::Full => (obj.status, obj.headers.clone(), obj.body.clone()),
            RangeAnswer::Partial { start, end } => {
                let mut h = obj.headers.clone();
                h.insert(
                    CONTENT_RANGE,
                    content_range(&format!("bytes {start}-{end}/{len}")),
                );
                h.insert(CONTENT_LENGTH, HeaderValue::from(end - start + 1));
                (
                    StatusCode::PARTIAL_CONTENT,
                    h,
                    obj.body.slice(start as usize..=end as usize),
                )
            }
            RangeAnswer::Unsatisfiable => {
                let mut h = HeaderMap::new();
                h.insert(CONTENT_RANGE, content_range(&format!("bytes */{len}")));
                h.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
                (StatusCode::RANGE_NOT_SATISFIABLE, h, bytes::Bytes::new())
            }
        }
    };
    let mut res = Response::new(ProxyBody::full(body));
    *res.status_mut() = status;
    let age = age_value(obj.age(now).as_secs());
    if label == CacheLabel::Hit {
        headers.insert(X_ARC2_CACHE_AGE.clone(), age.clone());
    }
    headers.insert(AGE, age);
    headers.insert(X_ARC2_CACHE.clone(), label.header());
    headers.insert(CACHE_STATUS.clone(), HeaderValue::from_static(cache_status));
    *res.headers_mut() = headers;
    (res, label)
}

fn content_range(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("bytes */0"))
}

/// RFC 5861 stale-while-revalidate: may this stale object be served while it is refreshed?
pub fn stale_while_revalidate_allows(obj: &Object, lookup: &Lookup, now: SystemTime) -> bool {
    let d = &obj.directives;
    let Some(window) = d.stale_while_revalidate else {
        return false;
    };
    if d.must_revalidate
        || d.proxy_revalidate
        || lookup.forced
        || obj.invalidated.load(Ordering::Relaxed)
    {
        return false;
    }
    // A client that limits the age it accepts asked for something fresher than stale.
    if lookup.directives.max_age.is_some() || lookup.directives.min_fresh.is_some() {
        return false;
    }
    obj.age(now).saturating_sub(obj.lifetime) <= Duration::from_secs(window)
}

/// May this stale object be served because the origin failed? With the origin's
/// `stale-if-error` window, or within rampart's grace period unless the origin forbids serving
/// stale (`must-revalidate`, `proxy-revalidate`, `s-maxage`; RFC 9111 §4.2.4).
pub fn stale_if_error_allows(obj: &Object, now: SystemTime, grace: Duration) -> bool {
    let d = &obj.directives;
    if d.must_revalidate || d.proxy_revalidate {
        return false;
    }
    let staleness = obj.age(now).saturating_sub(obj.lifetime);
    if let Some(window) = d.stale_if_error {
        if staleness <= Duration::from_secs(window) {
            return true;
        }
    }
    d.s_maxage.is_none() && staleness <= grace
}

/// The fields a stored copy keeps: not `Age` (recomputed per answer), not `CDN-Cache-Control`
/// (rampart is its target; it is not forwarded), and none that a qualified `private="…"` /
/// `no-cache="…"` withholds from shared reuse.
fn stored_headers(res_headers: &HeaderMap, directives: &ResponseDirectives) -> HeaderMap {
    let mut stored = res_headers.clone();
    for name in directives.withheld() {
        stored.remove(name);
    }
    stored.remove(AGE);
    stored.remove(&CDN_CACHE_CONTROL);
    stored
}

/// The header block of a fresh full hit, minus `Age`/`X-Arc2-Cache-Age`: an owned copy of
/// the stored fields (see [`compact_headers`]) with the hit labels.
fn hit_headers(stored: &HeaderMap) -> HeaderMap {
    static HIT: HeaderValue = HeaderValue::from_static("rampart; hit");
    let label = CacheLabel::Hit.header();
    compact_headers(stored, &[(&X_ARC2_CACHE, &label), (&CACHE_STATUS, &HIT)])
}

/// `Age` values for 0..4096 s, rendered once; later ages are formatted per response.
fn age_value(secs: u64) -> HeaderValue {
    static AGES: std::sync::OnceLock<Vec<HeaderValue>> = std::sync::OnceLock::new();
    let table = AGES.get_or_init(|| {
        (0..4096u64)
            .map(|n| HeaderValue::from_static(Box::leak(n.to_string().into_boxed_str())))
            .collect()
    });
    table
        .get(secs as usize)
        .cloned()
        .unwrap_or_else(|| HeaderValue::from(secs))
}

/// Labels a response that went to the origin.
pub fn label(headers: &mut HeaderMap, label: CacheLabel, cache_status: &'static str) {
    headers.insert(X_ARC2_CACHE.clone(), label.header());
    headers.insert(CACHE_STATUS.clone(), HeaderValue::from_static(cache_status));
}
