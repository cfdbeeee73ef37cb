//! hit: answering from a stored object without the origin — 200, or 304 when the client's
//! validators match, 412 when its preconditions fail, 206/416 for a byte range; HEAD gets the
//! head only. Also the rules for serving a stale object (stale-while-revalidate,
//! stale-if-error and the grace period).

use rampart_head::{Fields, Request, Response};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::header::{HeaderValue, AGE, CONTENT_LENGTH, CONTENT_RANGE};
use http::{Method, StatusCode};
use rampart_cache::conditional::{self, RangeAnswer};
use rampart_cache::store::Object;

use crate::body::ProxyBody;
use crate::caching::Missed;
use crate::outcome::{CacheLabel, CacheOutcome, Served, X_ARC2_CACHE_AGE};
use crate::pipeline::txn::Txn;

/// A fresh, full, unconditional hit: answered with the object's prepared header block as is.
fn plain_hit(obj: &Object, req_headers: &Fields, head: bool, served: Served) -> bool {
    served == Served::Fresh
        && obj.extent.is_none()
        && !head
        && obj.status == StatusCode::OK
        && !conditional::client_has_conditionals(req_headers)
        && !req_headers.contains_key(http::header::RANGE)
}

/// [`respond`] for a response rampart's own writers send (HTTP/1.1 and HTTP/2): a plain hit
/// does not copy the stored header block, the body carries the object and its age, and the
/// writer sends the fields as the store prepared them (HTTP/1.1's lines, or the HPACK block
/// made from them once), then `Age` and `X-Arc2-Cache-Age` ([`ProxyBody::hit`]); the
/// response's own map stays empty.
pub fn respond_prepared(
    obj: &Arc<Object>,
    req_headers: &Fields,
    head: bool,
    served: Served,
) -> Response<ProxyBody> {
    let obj = obj.for_client(req_headers);
    if !plain_hit(obj, req_headers, head, served) {
        return respond(obj, req_headers, head, served);
    }
    let age = obj.age(SystemTime::now()).as_secs();
    Response::new(ProxyBody::hit(obj.clone(), age))
}

/// Answers a request from a stored object (or the encoded copy of it the client accepts): 200, or 304 when the client's validators match, or
/// 206/416 for a byte range of the stored full response. HEAD gets the headers only. Adds
/// `Age`, `X-Arc2-Cache`, `X-Arc2-Cache-Age` and `Cache-Status`.
pub fn respond(
    obj: &Arc<Object>,
    req_headers: &Fields,
    head: bool,
    served: Served,
) -> Response<ProxyBody> {
    // The encoded copy the client accepts, if the object has any (`caching/transform.rs`).
    let obj = obj.for_client(req_headers);
    let outcome = CacheOutcome::Served(served);
    let now = SystemTime::now();
    // The hot path: a fresh, full, unconditional hit sends the prepared header block.
    if plain_hit(obj, req_headers, head, served) {
        let mut res = Response::new(ProxyBody::full(obj.body.clone()));
        let mut headers = obj.headers.clone();
        let age = age_value(obj.age(now).as_secs());
        headers.insert(AGE, age.clone());
        headers.insert(X_ARC2_CACHE_AGE.clone(), age);
        *res.headers_mut() = headers;
        return res;
    }
    // RFC 9110 §13.2.1: preconditions apply to what would otherwise be a 2xx (a stored 404 or
    // 301, under `cache_statuses = "rfc9111"`, ignores them).
    let failed =
        obj.status.is_success() && conditional::precondition_failed(req_headers, &obj.headers);
    let empty = || ProxyBody::full(bytes::Bytes::new());
    let (status, mut headers, body) = if failed {
        let mut h = Fields::new();
        h.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
        (StatusCode::PRECONDITION_FAILED, h, empty())
    } else if obj.status.is_success()
        && conditional::not_modified(req_headers, &obj.headers, obj.stored_date())
    {
        (
            StatusCode::NOT_MODIFIED,
            conditional::not_modified_headers(&obj.headers),
            empty(),
        )
    } else if head || obj.status != StatusCode::OK {
        let mut h = obj.headers.clone();
        if let (true, Some(e)) = (head, &obj.extent) {
            h.insert(CONTENT_LENGTH, HeaderValue::from(e.len()));
        }
        (
            obj.status,
            h,
            if head {
                empty()
            } else {
                body_part(obj, 0, None)
            },
        )
    } else {
        let len = obj
            .extent
            .as_ref()
            .map_or(obj.body.len() as u64, |e| e.len());
        match conditional::range(req_headers, &obj.headers, len) {
            RangeAnswer::Full => (obj.status, obj.headers.clone(), body_part(obj, 0, None)),
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
                    body_part(obj, start, Some(end)),
                )
            }
            RangeAnswer::Unsatisfiable => {
                let mut h = Fields::new();
                h.insert(CONTENT_RANGE, content_range(&format!("bytes */{len}")));
                h.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
                (StatusCode::RANGE_NOT_SATISFIABLE, h, empty())
            }
        }
    };
    let mut res = Response::new(body);
    *res.status_mut() = status;
    let age = age_value(obj.age(now).as_secs());
    if outcome.label() == CacheLabel::Hit {
        headers.insert(X_ARC2_CACHE_AGE.clone(), age.clone());
    }
    headers.insert(AGE, age);
    outcome.write(&mut headers);
    *res.headers_mut() = headers;
    res
}

/// The object's body from `start` to `end` (inclusive; the end when `None`): a slice of the
/// body in memory, or a large object's read from disk as it is sent.
fn body_part(obj: &Object, start: u64, end: Option<u64>) -> ProxyBody {
    match &obj.extent {
        Some(e) => ProxyBody::disk(e.clone(), start, end.map_or(e.len(), |e| e + 1)),
        None => {
            let end = end.map_or(obj.body.len(), |e| e as usize + 1);
            ProxyBody::full(obj.body.slice(start as usize..end))
        }
    }
}

fn content_range(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("bytes */0"))
}

/// RFC 5861 stale-while-revalidate: may this stale object be served while it is refreshed?
pub fn stale_while_revalidate_allows(obj: &Object, lookup: &Missed, now: SystemTime) -> bool {
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

/// A stored object that answers a request: found fresh by lookup, stale while it is refreshed,
/// stored by the leader a waiter waited for, taken from the Redis tier, freshened by a `304`,
/// or standing in for a failing origin.
#[derive(Debug)]
pub struct Stored {
    pub obj: Arc<Object>,
    pub served: Served,
    /// The fields the answer is made for when they are not the request at hand's: the request
    /// has gone to the origin (what was kept of it), or was widened (the client's own range and
    /// preconditions). `None`: the request's own.
    pub client: Option<Box<Fields>>,
}

impl Stored {
    /// An answer for the request still at hand.
    pub fn new(obj: Arc<Object>, served: Served) -> Stored {
        Stored {
            obj,
            served,
            client: None,
        }
    }
}

/// The hit stage, for the request at hand: the answer from a stored object (for the fields in
/// `stored.client` when it has them: the client's widened range), labelled with how it was
/// served.
pub fn hit<B>(txn: &mut Txn, stored: &Stored, req: &Request<B>) -> Response<ProxyBody> {
    // Labelled first: the response is then built where it is returned, not moved.
    served(txn, stored.served);
    let client = stored.client.as_deref().unwrap_or(req.headers());
    let head = stored.client.is_none() && req.method() == Method::HEAD;
    // Field rules and `expires` change the answer's fields: not the stored block as it is.
    if txn.route().has_answer_rules() || txn.route().expires().is_some() {
        return respond(&stored.obj, client, head, stored.served);
    }
    answer(&stored.obj, client, req.version(), head, stored.served)
}

fn served(txn: &mut Txn, served: Served) {
    let outcome = CacheOutcome::Served(served);
    txn.outcome = Some(outcome);
    tracing::debug!(cache = outcome.label().as_str(), "hit");
}

/// The answer to a request from `obj`. Over HTTP/1 and HTTP/2 a plain fresh hit sends the
/// stored header block as it is ([`respond_prepared`]); HTTP/3 gets a response of its own.
pub fn answer(
    obj: &Arc<Object>,
    req_headers: &Fields,
    version: http::Version,
    head: bool,
    served: Served,
) -> Response<ProxyBody> {
    if version == http::Version::HTTP_3 {
        respond(obj, req_headers, head, served)
    } else {
        respond_prepared(obj, req_headers, head, served)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{CACHE_STATUS, X_ARC2_CACHE};
    use http::header::{ETAG, IF_NONE_MATCH, RANGE};

    fn object(body: &'static str, max_age: u64) -> Arc<Object> {
        let mut headers = Fields::new();
        headers.insert(ETAG, HeaderValue::from_static("\"v1\""));
        headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        let now = SystemTime::now();
        let f = rampart_cache::store::fields(&headers, &[]);
        Arc::new(Object {
            status: StatusCode::OK,
            headers_charge: f.charge,
            wire: f.wire,
            headers: f.headers,
            body: bytes::Bytes::from_static(body.as_bytes()),
            request_time: now,
            response_time: now,
            initial_age: Duration::ZERO,
            lifetime: Duration::from_secs(max_age),
            directives: Default::default(),
            vary: Default::default(),
            invalidated: Default::default(),
            refreshing: Default::default(),
            encoded: Box::default(),
            webp: None,
            residency: None,
            disk: Default::default(),
            extent: None,
            tags: Box::default(),
        })
    }

    fn req(pairs: &[(http::header::HeaderName, &'static str)]) -> Fields {
        let mut h = Fields::new();
        for (n, v) in pairs {
            h.insert(n.clone(), HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn plain_hit_over_h1_and_h2_carries_the_object_its_wire_block_and_its_age() {
        let obj = object("hello", 60);
        let res = answer(
            &obj,
            &Fields::new(),
            http::Version::HTTP_11,
            false,
            Served::Fresh,
        );
        assert_eq!(res.status(), 200);
        let stored = res
            .body()
            .stored_head()
            .unwrap_or_else(|| panic!("a plain hit over HTTP/1.1 carries its stored head"));
        assert_eq!(stored.age, 0);
        assert!(stored.wire.block.starts_with(b"etag: \"v1\"\r\n"));
        assert!(res.headers().is_empty());
        // So does HTTP/2 (its writer encodes the block once per object); HTTP/3 gets a header
        // block of its own.
        let res = answer(
            &obj,
            &Fields::new(),
            http::Version::HTTP_2,
            false,
            Served::Fresh,
        );
        assert!(res.body().stored_head().is_some());
        let res = answer(
            &obj,
            &Fields::new(),
            http::Version::HTTP_3,
            false,
            Served::Fresh,
        );
        assert!(res.body().stored_head().is_none());
        assert_eq!(res.headers()[ETAG], "\"v1\"");
    }

    #[test]
    fn validators_ranges_and_labels() {
        let obj = object("hello world", 60);
        let res = respond(
            &obj,
            &req(&[(IF_NONE_MATCH, "\"v1\"")]),
            false,
            Served::Fresh,
        );
        assert_eq!(res.status(), 304);
        assert_eq!(res.headers()[&X_ARC2_CACHE], "Hit");
        assert_eq!(res.headers()[&CACHE_STATUS], "rampart; hit");
        let res = respond(&obj, &req(&[(RANGE, "bytes=0-4")]), false, Served::Fresh);
        assert_eq!(res.status(), 206);
        assert_eq!(res.headers()[CONTENT_RANGE], "bytes 0-4/11");
        assert_eq!(res.headers()[CONTENT_LENGTH], "5");
        let res = respond(&obj, &req(&[(RANGE, "bytes=50-")]), false, Served::Fresh);
        assert_eq!(res.status(), 416);
        assert_eq!(res.headers()[CONTENT_RANGE], "bytes */11");
        let res = respond(&obj, &Fields::new(), false, Served::Revalidated);
        assert_eq!(res.headers()[&X_ARC2_CACHE], "Expired");
        assert!(res.headers().get(&X_ARC2_CACHE_AGE).is_none());
        let res = respond(&obj, &Fields::new(), true, Served::StaleIfError);
        assert_eq!(
            res.headers()[&CACHE_STATUS],
            "rampart; hit; detail=stale-if-error"
        );
        assert!(http_body::Body::is_end_stream(res.body()));
    }

    #[test]
    fn stale_if_error_within_grace_unless_the_origin_forbids() {
        let obj = object("x", 0);
        let now = SystemTime::now() + Duration::from_secs(5);
        assert!(stale_if_error_allows(&obj, now, Duration::from_secs(10)));
        assert!(!stale_if_error_allows(&obj, now, Duration::from_secs(1)));
    }
}
