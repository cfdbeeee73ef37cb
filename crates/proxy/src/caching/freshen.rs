//! A stored response updated by a 304 to rampart's revalidation (RFC 9111 §4.3.4): the stale
//! object's body with the merged fields and a new freshness, stored in its place (and in the
//! shared tier), its encoded and WebP copies kept with the new fields.

use rampart_head::Fields;
use std::sync::Arc;
use std::time::Duration;

use http::header::ETAG;
use http::Method;
use rampart_cache::cache_control::ResponseDirectives;
use rampart_cache::conditional;
use rampart_cache::freshness;
use rampart_cache::object::DiskMark;
use rampart_cache::storable;
use rampart_cache::store::{fields, Object};
use rampart_cache::targeted::CDN_CACHE_CONTROL;
use rampart_cache::vary::Vary;

use crate::caching::shared_tier::share;
use crate::caching::writer::{hit_headers, stored_headers, Timing};
use crate::caching::{Cache, Missed};

/// Updates a stored response with a 304 (RFC 9111 §4.3.4) and stores the result; returns
/// the object to answer with (its old body, its new headers and freshness).
pub fn freshen(
    cache: &Cache,
    missed: &Missed,
    stale: &Object,
    req_headers: &Fields,
    not_modified: &Fields,
    timing: Timing,
) -> Arc<Object> {
    let (request_time, response_time) = (timing.request, timing.response);
    let (headers, directives) = merged(stale, not_modified);
    let exchange = storable::Exchange {
        method: &Method::GET,
        req_headers,
        req: &missed.directives,
        status: stale.status,
        res_headers: &headers,
        res: &directives,
        vary: &stale.vary,
        response_time,
    };
    let lifetime = storable::storable(&exchange, &missed.policy).unwrap_or(Duration::ZERO);
    let directives = storable::with_stale_defaults(directives, &missed.policy);
    let mut headers = hit_headers(&headers);
    let initial_age = freshness::initial_age(not_modified, request_time, response_time);
    let make = |headers: Fields, body: bytes::Bytes| {
        let f = fields(&headers, &[]);
        Object {
            status: stale.status,
            headers_charge: f.charge,
            wire: f.wire,
            initial_age,
            headers: f.headers,
            body,
            request_time,
            response_time,
            lifetime,
            directives: directives.clone(),
            vary: stale.vary.clone(),
            invalidated: Default::default(),
            refreshing: Default::default(),
            encoded: Box::default(),
            webp: None,
            residency: None,
            disk: Default::default(),
            extent: None,
            tags: stale.tags.clone(),
        }
    };
    // The encoded and WebP copies keep their bodies and take the refreshed fields.
    if !stale.encoded.is_empty() {
        crate::caching::coding::vary_on_accept_encoding(&mut headers);
    }
    if stale.webp.is_some() {
        crate::caching::coding::vary_on(&mut headers, "Accept");
    }
    let encoded = crate::caching::transform::reheaded_copies(stale, &headers, make);
    let webp = crate::caching::transform::reheaded_webp(stale, &headers, make);
    // The same body, charged where the stale object's was (see `Residency`).
    let obj = Arc::new(Object {
        encoded,
        webp,
        residency: stale.residency.clone(),
        disk: if stale.disk.allowed() {
            DiskMark::default()
        } else {
            DiskMark::never()
        },
        ..make(headers, stale.body.clone())
    });
    keep(cache, missed, stale, req_headers, &obj, lifetime);
    obj
}

/// The stored fields and directives of `stale` updated by the 304's (RFC 9111 §3.2).
fn merged(stale: &Object, not_modified: &Fields) -> (Fields, ResponseDirectives) {
    let mut merged = conditional::freshen(&stale.headers, not_modified);
    // A stored body rampart rewrote (minified) carries the origin's validator made weak; the
    // origin's 304 names the strong one again, which must not come back for these bytes.
    if let (Some(old), Some(new)) = (stale.headers.get(ETAG), merged.get(ETAG)) {
        if old.as_bytes().strip_prefix(b"W/") == Some(new.as_bytes()) {
            merged.insert(ETAG, old.clone());
        }
    }
    // The stored copy has no CDN-Cache-Control any more: unless the 304 brings one, the
    // directives it was stored under still hold.
    let directives = if stale.directives.targeted && !not_modified.contains_key(&CDN_CACHE_CONTROL)
    {
        stale.directives.clone()
    } else {
        ResponseDirectives::parse(&merged)
    };
    (stored_headers(&merged, &directives), directives)
}

/// The freshened object replaces the stale one (here and in the shared tier), or the entry
/// goes when the 304 leaves it no lifetime.
fn keep(
    cache: &Cache,
    missed: &Missed,
    stale: &Object,
    req_headers: &Fields,
    obj: &Arc<Object>,
    lifetime: Duration,
) {
    if lifetime.is_zero() {
        cache.store().invalidate(&missed.key);
    } else if cache.store().outdated(&missed.key, obj) {
        // Purged while it was being revalidated: the purge stands.
        tracing::debug!("not refreshed: purged since its revalidation began");
    } else {
        let variant = match &obj.vary {
            Vary::None => None,
            v => v.variant_key(req_headers),
        };
        share(cache, &missed.key, variant.as_deref(), obj, None);
        let stored = cache
            .store()
            .insert(missed.key.clone(), variant.as_deref(), obj.clone());
        if stored {
            cache.refreshed(&missed.key, variant.as_deref(), stale, obj);
        }
    }
}
