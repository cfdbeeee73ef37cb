//! store: the origin's response meets the cache, before anything goes to the client (Varnish's
//! backend-response step). A successful unsafe request invalidates its target (RFC 9111 §4.4);
//! a 304 to rampart's revalidation freshens the stale entry and a failing origin may be covered
//! by it (both answer through the hit stage); otherwise the store decides whether to keep the
//! response (`caching/writer.rs`), the coalesced fetch learns whether its waiters can share it,
//! and a widened range whose whole representation cannot be shared is asked again. When fetch
//! failed, [`fetch_failed`] decides between a stale entry and the error.

use rampart_head::{Fields, Request};
use std::time::SystemTime;

use http::{StatusCode, Uri};

use crate::body::RequestBody;
use rampart_cache::key::host_name;
use rampart_cache::storable::NotStored;
use rampart_cache::targeted::CDN_CACHE_CONTROL;

use crate::caching::coalesce::UNCACHEABLE_FOR;
use crate::caching::writer::{self, Timing};
use crate::caching::Cache;
use crate::caching::{coding, freshen};
use crate::error::{Chain, ProxyError};
use crate::headers::content_length;
use crate::outcome::{CacheLabel, CacheOutcome, Served};
use crate::pipeline::deliver::{self, Delivery};
use crate::pipeline::fetch::Fetched;
use crate::pipeline::hit::{self, Stored};
use crate::pipeline::step::Step;
use crate::pipeline::txn::{Lead, Txn};
use crate::pipeline::worker_state::Worker;

/// The store stage for a response from the origin: [`Step::Hit`] when the stale entry answers,
/// [`Step::Refetch`] for a widened range whose whole representation cannot be shared, else
/// [`Step::Deliver`] with what the store decided.
pub fn store(w: &Worker, txn: &mut Txn, mut fetched: Fetched) -> Result<Step, ProxyError> {
    let response_time = SystemTime::now();
    // The origin's tags stop here: kept with the object, never sent on.
    let tags = take_tags(fetched.res.headers_mut(), &w.tag_headers);
    let status = fetched.res.status();
    if let (Some(cache), Some(pq)) = (&w.cache, &fetched.unsafe_target) {
        if status.is_success() || status.is_redirection() {
            invalidate_after_unsafe(cache, txn, pq, fetched.res.headers());
        }
    }
    if let Some(stored) = from_stale_entry(w, txn, &mut fetched, response_time) {
        return Ok(Step::Hit(stored));
    }
    let Fetched {
        res,
        req_headers,
        request_time,
        downstream_version,
        method,
        ..
    } = fetched;
    let from_owner = fetched.from_owner;
    if !from_owner && matches!(txn.outcome, Some(CacheOutcome::Peer { .. })) {
        // The origin's answer after the owner's (a widened range asked again as the client
        // sent it): labelled as any miss the store does not keep.
        txn.outcome = Some(CacheOutcome::fetched(CacheLabel::Miss, true).not_stored());
    }
    // The owner's answer has rampart's `Via` already (the fleet is one cache), unless the
    // owner made it itself (an error).
    let via = !from_owner || !res.headers().contains_key(http::header::VIA);
    let (parts, body) = deliver::downstream(res, downstream_version, via);
    let length = content_length(&parts.headers);
    let mut d = Delivery {
        parts,
        body,
        ticket: None,
        leader: None,
        widened: None,
        length,
    };
    let lead = txn.take_lead();
    if let (Some(cache), Some(req_headers)) = (&w.cache, &req_headers) {
        let timing = Timing {
            request: request_time,
            response: response_time,
        };
        // A copy of what the key's owner in the fleet holds: kept a short while at most.
        let peer_ttl = (txn.not_owner || from_owner).then(|| {
            w.fleet
                .as_ref()
                .map_or(std::time::Duration::ZERO, |f| f.local_ttl)
        });
        let asked = Asked {
            method: &method,
            headers: req_headers,
            timing,
            peer_ttl,
        };
        if let Some(again) = admit(cache, txn, &mut d, lead, asked, tags) {
            return Ok(Step::Refetch(again));
        }
    }
    // rampart is the CDN cache `CDN-Cache-Control` targets (RFC 9213): it stops here (the
    // store has read it).
    if w.cache.is_some() {
        d.parts.headers.remove(&CDN_CACHE_CONTROL);
    }
    Ok(Step::Deliver(Box::new(d)))
}

/// The request a response answers, as the store needs it.
struct Asked<'a> {
    method: &'a http::Method,
    headers: &'a Fields,
    timing: Timing,
    /// The answer is the fleet's owner's: kept this long at most (zero: not kept).
    peer_ttl: Option<std::time::Duration>,
}

/// The store's part for a GET miss: whether it keeps the response (`d.ticket`), whether the
/// coalesced waiters share it (`d.leader`), the label; `Some` is the client's own request to
/// send again (a widened range whose whole representation cannot be shared).
fn admit(
    cache: &std::sync::Arc<Cache>,
    txn: &mut Txn,
    d: &mut Delivery,
    lead: Option<Lead>,
    a: Asked<'_>,
    tags: Box<[u64]>,
) -> Option<Box<Request<RequestBody>>> {
    let miss = txn.miss.as_ref()?;
    let (leader, widened, shared_lock) = match lead {
        Some(l) => (Some(l.leader), l.widened, l.shared_lock),
        None => (None, None, None),
    };
    let found = &miss.found;
    let mut lasting = false;
    // Not kept: the owner holds it. Only whether it could be kept is decided: when not, for a
    // reason that lasts, the key's next misses here go to the origin themselves for a while
    // (a ticket's copy of the head and its room in the store would go unused). Its waiters
    // are released either way (nothing is published without a ticket) and ask the owner.
    let prepared = if a.peer_ttl.is_some_and(|t| t.is_zero()) {
        let off_disk = !txn.route().rule.config.cache_disk;
        let at = (a.timing.response, off_disk);
        writer::shareable(cache, found, a.method, a.headers, &d.parts, at).map(|()| None)
    } else {
        let transforms = txn.route().rule.transforms();
        writer::prepare(
            cache, found, a.method, a.headers, &d.parts, a.timing, transforms,
        )
        .map(Some)
    };
    d.ticket = match prepared {
        Ok(None) => {
            if txn.not_owner {
                // Shareable after all: the owner is asked for it again.
                cache.coalescer().forget_uncacheable(&found.key);
            }
            None
        }
        Ok(Some(mut t)) => {
            if let Some(ttl) = a.peer_ttl {
                t.cap_freshness(ttl);
            }
            t.hold_shared_lock(shared_lock);
            t.set_tags(tags);
            Some(t)
        }
        Err(why) => {
            tracing::debug!(reason = why.as_str(), "response not stored");
            // A client's own `no-store` says nothing of the next clients' answers.
            lasting = !matches!(
                why,
                NotStored::NoRoom | NotStored::Method | NotStored::RequestNoStore
            );
            None
        }
    };
    if d.ticket.as_ref().is_some_and(|t| t.varies_on_accept()) {
        // The same Vary as every later response of it, WebP copy or not yet.
        coding::vary_on(&mut d.parts.headers, "Accept");
    }
    d.leader = match (&d.ticket, leader) {
        // Not shareable for a reason that lasts: the waiters go at once, and so do the next
        // misses for a while (an origin error or a full store is not remembered: the next
        // answer may be storable).
        (None, Some(leader)) if lasting && !d.parts.status.is_server_error() => {
            leader.uncacheable(UNCACHEABLE_FOR);
            None
        }
        (Some(_), None) => {
            cache.coalescer().forget_uncacheable(&found.key);
            None
        }
        (_, leader) => leader,
    };
    let o = txn
        .outcome
        .unwrap_or(CacheOutcome::fetched(CacheLabel::Dynamic, false));
    txn.outcome = Some(if d.ticket.is_some() {
        o.stored()
    } else {
        o.not_stored()
    });
    // The client's range is cut from the shared fetch only when the whole representation
    // is stored and shared with a known length; otherwise a widened request is asked again
    // as the client sent it (its range, its preconditions), and nothing is stored.
    let shared = d.ticket.is_some() && d.leader.is_some() && d.length.is_some();
    match widened {
        Some(wide) if !shared && d.parts.status.is_success() => {
            cache.refuse_widening(&found.key);
            txn.miss = None;
            txn.outcome = txn.outcome.map(CacheOutcome::not_stored);
            return Some(Box::new(wide.request()));
        }
        widened if shared => d.widened = widened,
        _ => {}
    }
    None
}

/// When fetch failed: a body that broke while it streamed to the origin (too large, too slow,
/// malformed) is the client's failure (`Block`); otherwise the error is logged and a stale
/// entry may stand in (stale-if-error, grace) before the error goes to synth.
pub fn fetch_failed(w: &Worker, txn: &mut Txn, e: ProxyError) -> Result<Step, ProxyError> {
    if let ProxyError::ClientBody(_) = e {
        txn.outcome = Some(CacheOutcome::Blocked);
        return Err(e);
    }
    tracing::error!(
        domain = txn.domain(),
        side = e.side().as_str(),
        status = e.status().as_u16(),
        error = %Chain(&e),
        "upstream request failed"
    );
    let stale = txn.missed().and_then(|l| l.stale.as_ref());
    if let Some(stale) = stale.filter(|s| hit::stale_if_error_allows(s, SystemTime::now(), w.grace))
    {
        let obj = stale.clone();
        // The request was sent on: only a widened range request's headers remain.
        let client = take_widened(txn).map_or_else(Default::default, |w| w.headers);
        return Ok(Step::Hit(Stored {
            obj,
            served: Served::StaleIfError,
            client: Some(Box::new(client)),
        }));
    }
    Err(origin_error(txn, e))
}

/// Labels an origin failure with what lookup decided for the request.
pub fn origin_error(txn: &mut Txn, e: ProxyError) -> ProxyError {
    let label = txn.outcome.map_or(CacheLabel::Dynamic, CacheOutcome::label);
    txn.outcome = Some(CacheOutcome::OriginError(label));
    e
}

/// The client's own range and preconditions, when the request leads a widened fetch.
fn take_widened(txn: &mut Txn) -> Option<Box<crate::pipeline::ranges::Widened>> {
    txn.miss.as_mut()?.lead.as_mut()?.widened.take()
}

/// The stale entry answers: the origin confirmed it (304 to rampart's validators: it is
/// freshened), or the origin failed with 500/502/503/504 and the entry may stand in.
fn from_stale_entry(
    w: &Worker,
    txn: &mut Txn,
    fetched: &mut Fetched,
    response_time: SystemTime,
) -> Option<Stored> {
    let (Some(cache), Some(l), Some(req_headers)) = (&w.cache, txn.missed(), &fetched.req_headers)
    else {
        return None;
    };
    let stale = l.stale.as_ref()?;
    let status = fetched.res.status();
    let (obj, served) = if status == StatusCode::NOT_MODIFIED && fetched.revalidating {
        let timing = Timing {
            request: fetched.request_time,
            response: response_time,
        };
        let obj = freshen::freshen(cache, l, stale, req_headers, fetched.res.headers(), timing);
        (obj, Served::Revalidated)
    } else if matches!(status.as_u16(), 500 | 502 | 503 | 504)
        && hit::stale_if_error_allows(stale, response_time, w.grace)
    {
        tracing::warn!(
            status = status.as_u16(),
            domain = txn.domain(),
            "origin error; serving stale"
        );
        (stale.clone(), Served::StaleIfError)
    } else {
        return None;
    };
    // The answer is for the client's own fields (its widened range's, when it has one).
    let client = match take_widened(txn) {
        Some(w) => w.headers,
        None => fetched.req_headers.take()?,
    };
    Some(Stored {
        obj,
        served,
        client: Some(Box::new(client)),
    })
}

/// Takes the tag fields (`cache_tag_headers`) out of an origin's response: the tags, as
/// objects carry them.
fn take_tags(h: &mut Fields, names: &[http::HeaderName]) -> Box<[u64]> {
    // One walk over the response's names (a few, compared by kind and length first) is
    // cheaper than a hashed look-up per tag field.
    if names.is_empty() || !h.iter().any(|(k, _)| names.contains(k)) {
        return Box::default();
    }
    let mut tags = Vec::new();
    for name in names {
        if !h.contains_key(name) {
            continue;
        }
        let values = h.get_all(name).iter().map(|v| v.as_bytes());
        tags.extend(rampart_cache::object::tags_in(values).map(rampart_cache::object::tag_hash));
        h.remove(name);
    }
    tags.sort_unstable();
    tags.dedup();
    tags.into_boxed_slice()
}

/// RFC 9111 §4.4: a successful unsafe request invalidates its target and the `Location` and
/// `Content-Location` URIs on the same host.
fn invalidate_after_unsafe(cache: &Cache, txn: &Txn, pq: &str, res_headers: &Fields) {
    let host = txn.host();
    let ignore_query = txn.route().rule.config.ignore_query_string;
    cache.invalidate(host, pq, ignore_query);
    for name in [http::header::LOCATION, http::header::CONTENT_LOCATION] {
        let Some(value) = res_headers.get(&name).and_then(|v| v.to_str().ok()) else {
            continue;
        };
        let Ok(uri) = value.parse::<Uri>() else {
            continue;
        };
        let same_host = match uri.authority() {
            None => true,
            Some(a) => host_name(a.as_str()).eq_ignore_ascii_case(host_name(host)),
        };
        if same_host {
            if let Some(p) = uri.path_and_query() {
                cache.invalidate(host, p.as_str(), ignore_query);
            }
        }
    }
}
