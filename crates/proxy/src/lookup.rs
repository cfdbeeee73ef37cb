//! lookup → hit | miss | pass, and store (the cache side of deliver).
//!
//! [`Cache::lookup`] finds a stored response for a request (following the `Vary` marker to the
//! variant) and decides if it may be used; [`hit`] builds the response from it without touching
//! the origin. On a miss, [`Cache::prepare_store`] decides from the origin's response head whether
//! the body is stored; the body is then teed into the store as it streams to the client
//! (`body.rs`), so nothing waits for the whole body.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::header::{HeaderName, HeaderValue, AGE, CONTENT_LENGTH};
use http::{HeaderMap, Method, Response, StatusCode};
use rampart_cache::control::{RequestDirectives, ResponseDirectives};
use rampart_cache::freshness;
use rampart_cache::key::CacheKey;
use rampart_cache::policy::{self, NotStored, RulePolicy, Usable};
use rampart_cache::store::{header_bytes, MemoryStore, Object};
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
    /// Whether an entry existed (stale) — the response is then labelled `Expired`.
    pub had_stale: bool,
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
}

impl Cache {
    pub fn new(memory: u64, max_object: usize) -> Self {
        Cache {
            store: MemoryStore::new(memory, max_object),
            coalescer: Arc::new(Coalescer::default()),
        }
    }

    pub fn coalescer(&self) -> &Arc<Coalescer> {
        &self.coalescer
    }

    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// lookup: GET/HEAD only (the caller checks). `host` is the routed host, `pq` the request
    /// target.
    pub fn lookup(
        &self,
        host: &str,
        pq: &str,
        ignore_query: bool,
        headers: &HeaderMap,
        policy: RulePolicy,
    ) -> Found {
        let key = CacheKey::new(host, pq, ignore_query);
        let directives = RequestDirectives::parse(headers);
        let forced = directives.no_cache;
        let mut had_stale = false;
        if let Some(obj) = self.find(&key, headers) {
            match policy::usable(&obj, headers, &directives, SystemTime::now()) {
                Usable::Yes => return Found::Hit(obj),
                Usable::No => had_stale = true,
                Usable::NotShareable => {}
            }
        }
        Found::Miss(Lookup {
            key,
            directives,
            policy,
            had_stale,
            forced,
        })
    }

    fn find(&self, key: &CacheKey, headers: &HeaderMap) -> Option<Arc<Object>> {
        self.store.find(key, headers)
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
        let too_big = res_headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n > self.store.max_object() as u64);
        if too_big {
            return Err(NotStored::Status);
        }
        let variant = match &vary {
            Vary::None => None,
            v => Some(v.variant_key(req_headers).ok_or(NotStored::VaryAny)?),
        };
        let mut headers = res_headers.clone();
        headers.remove(AGE);
        Ok(Box::new(StoreTicket {
            cache: self.clone(),
            key: lookup.key.clone(),
            variant,
            status,
            initial_age: freshness::initial_age(res_headers, request_time, response_time),
            header_bytes: header_bytes(&headers),
            headers,
            request_time,
            response_time,
            lifetime,
            directives,
            vary,
        }))
    }
}

/// Everything needed to store a response once its body has been read.
#[derive(Debug)]
pub struct StoreTicket {
    cache: Arc<Cache>,
    key: CacheKey,
    variant: Option<bytes::Bytes>,
    status: StatusCode,
    headers: HeaderMap,
    header_bytes: usize,
    request_time: SystemTime,
    response_time: SystemTime,
    initial_age: Duration,
    lifetime: Duration,
    directives: ResponseDirectives,
    vary: Vary,
}

impl StoreTicket {
    pub fn max_body(&self) -> usize {
        self.cache.store.max_object()
    }

    pub fn vary(&self) -> &Vary {
        &self.vary
    }

    pub fn variant(&self) -> Option<&bytes::Bytes> {
        self.variant.as_ref()
    }

    /// Stores the object with its complete body.
    pub fn complete(self, body: bytes::Bytes) {
        let store = &self.cache.store;
        let obj = Object {
            status: self.status,
            headers: self.headers,
            body,
            request_time: self.request_time,
            response_time: self.response_time,
            initial_age: self.initial_age,
            lifetime: self.lifetime,
            directives: self.directives,
            vary: self.vary.clone(),
            invalidated: Default::default(),
            header_bytes: self.header_bytes,
        };
        store.insert(self.key, self.variant.as_deref(), Arc::new(obj));
    }
}

/// hit: the stored response, with `Age`, `X-Arc2-Cache: Hit`, `X-Arc2-Cache-Age` and
/// `Cache-Status`. HEAD gets the headers only.
pub fn hit(obj: &Object, head: bool) -> Response<ProxyBody> {
    let body = if head {
        ProxyBody::full(bytes::Bytes::new())
    } else {
        ProxyBody::full(obj.body.clone())
    };
    let mut res = Response::new(body);
    *res.status_mut() = obj.status;
    let mut headers = obj.headers.clone();
    let age = HeaderValue::from(obj.age(SystemTime::now()).as_secs());
    headers.insert(AGE, age.clone());
    headers.insert(X_ARC2_CACHE.clone(), CacheLabel::Hit.header());
    headers.insert(X_ARC2_CACHE_AGE.clone(), age);
    headers.insert(
        CACHE_STATUS.clone(),
        HeaderValue::from_static("rampart; hit"),
    );
    *res.headers_mut() = headers;
    res
}

/// Labels a response that went to the origin.
pub fn label(headers: &mut HeaderMap, label: CacheLabel, cache_status: &'static str) {
    headers.insert(X_ARC2_CACHE.clone(), label.header());
    headers.insert(CACHE_STATUS.clone(), HeaderValue::from_static(cache_status));
}
