//! deliver: the origin's response on its way to the client. A 304 to rampart's revalidation
//! refreshes the stale entry and answers from it; an origin error may be covered by the stale
//! entry; otherwise the response head is made ready for the client, the store decides whether
//! to keep the body (`caching/writer.rs`), and the body streams: teed into the store, or pumped for every
//! coalesced reader when this request leads. A successful unsafe request invalidates its target.

use std::time::SystemTime;

use crate::body::origin::OriginBody;
use http::{HeaderMap, Request, Response, StatusCode, Uri, Version};
use rampart_cache::encoding::Coding;
use rampart_cache::key::host_name;
use rampart_cache::policy::NotStored;
use rampart_cache::targeted::CDN_CACHE_CONTROL;
use rampart_transform::compress::StreamEncoder;

use crate::body::{ProxyBody, RequestBody};
use crate::caching::coalesce::{SharedHead, UNCACHEABLE_FOR};
use crate::caching::transform::{self, Compress};
use crate::caching::writer::{self, StoreTicket, Timing};
use crate::caching::Cache;
use crate::error::{Chain, ProxyError};
use crate::headers::{append_via, content_length, strip_hop_by_hop};
use crate::outcome::{CacheLabel, CacheOutcome, Served};
use crate::pipeline::fetch::Fetched;
use crate::pipeline::hit;
use crate::pipeline::hit::Stored;
use crate::pipeline::ranges;
use crate::pipeline::txn::Txn;
use crate::pipeline::worker_state::Worker;

/// What deliver hands back to the dispatcher.
#[derive(Debug)]
pub enum Delivered {
    /// The origin's response, on its way to the client.
    Response(Response<ProxyBody>),
    /// A stored object answers instead: freshened by a `304`, or standing in for a failing
    /// origin (the hit stage answers).
    Hit(Stored),
    /// A widened request whose whole representation is not shareable (not storable, or
    /// of unknown length): the origin is asked again, as the client asked (fetch, then
    /// [`deliver_unstored`]).
    Again(Request<RequestBody>),
}

/// The rule's compression for a response from the origin, and the coding the client's
/// `Accept-Encoding` picks (negotiated only for such responses: a hit picks its stored copy).
pub fn negotiate(
    txn: &Txn,
    req_headers: &HeaderMap,
) -> (Option<std::sync::Arc<Compress>>, Option<Coding>) {
    let compress = txn.route().rule.compress.clone();
    let coding = compress.as_ref().and_then(|c| c.negotiate(req_headers));
    (compress, coding)
}

/// The deliver stage for a response from the origin.
pub fn deliver(w: &Worker, txn: &mut Txn, mut fetched: Fetched) -> Result<Delivered, ProxyError> {
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
        return Ok(Delivered::Hit(stored));
    }
    let Fetched {
        res,
        req_headers,
        request_time,
        downstream_version,
        method,
        ..
    } = fetched;
    let (mut parts, body) = downstream(res, downstream_version);
    let mut ticket = None;
    if let (Some(cache), Some(l), Some(req_headers)) = (&w.cache, &txn.miss, &req_headers) {
        let timing = Timing {
            request: request_time,
            response: response_time,
        };
        let transforms = txn.route().rule.transforms();
        let mut lasting = false;
        ticket = match writer::prepare(cache, l, &method, req_headers, &parts, timing, transforms) {
            Ok(mut t) => {
                t.hold_tier_lock(txn.tier_lock.take());
                t.set_tags(tags);
                Some(t)
            }
            Err(why) => {
                tracing::debug!(reason = why.as_str(), "response not stored");
                lasting = !matches!(why, NotStored::NoRoom | NotStored::Method);
                None
            }
        };
        if ticket.as_ref().is_some_and(|t| t.varies_on_accept()) {
            // The same Vary as every later response of it, WebP copy or not yet.
            transform::vary_on(&mut parts.headers, "Accept");
        }
        match (&ticket, txn.leader.take()) {
            // Not shareable for a reason that lasts: the waiters go at once, and so do the
            // next misses for a while (an origin error or a full store is not remembered: the
            // next answer may be storable).
            (None, Some(leader)) if lasting && !parts.status.is_server_error() => {
                leader.uncacheable(UNCACHEABLE_FOR);
            }
            (Some(_), None) => cache.coalescer().forget_uncacheable(&l.key),
            (_, leader) => txn.leader = leader,
        }
        let o = txn
            .outcome
            .unwrap_or(CacheOutcome::fetched(CacheLabel::Dynamic, false));
        txn.outcome = Some(if ticket.is_some() {
            o.stored()
        } else {
            o.not_stored()
        });
    }
    // rampart is the CDN cache `CDN-Cache-Control` targets (RFC 9213): it stops here.
    if w.cache.is_some() {
        parts.headers.remove(&CDN_CACHE_CONTROL);
    }
    let length = content_length(&parts.headers);
    // A widened request whose whole representation is not shareable: asked again as the
    // client sent it (its range, its preconditions).
    let shared = ticket.is_some() && txn.leader.is_some() && length.is_some();
    let mut widened = txn.widened.take();
    if !shared {
        if let Some(wide) = widened.take().filter(|_| parts.status.is_success()) {
            if let (Some(cache), Some(l)) = (&w.cache, &txn.miss) {
                cache.refuse_widening(&l.key);
            }
            drop((body, ticket, txn.leader.take()));
            return Ok(Delivered::Again(wide.request()));
        }
    }
    let res = respond(w, txn, parts, body, ticket, widened, length);
    Ok(Delivered::Response(res))
}

/// deliver for a response that is never stored, streamed as it comes: the origin's answer to
/// a range asked again ([`Delivered::Again`]), or to a WebSocket handshake it refused.
pub fn deliver_unstored(
    w: &Worker,
    txn: &mut Txn,
    fetched: Result<Fetched, ProxyError>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let mut fetched = fetched.map_err(|e| origin_error(txn, e))?;
    take_tags(fetched.res.headers_mut(), &w.tag_headers);
    let (mut parts, body) = downstream(fetched.res, fetched.downstream_version);
    if w.cache.is_some() {
        parts.headers.remove(&CDN_CACHE_CONTROL);
    }
    let length = content_length(&parts.headers);
    // A range asked again was looked up (and is not stored now); a WebSocket handshake never
    // was, and keeps its label.
    if txn.miss.is_some() {
        txn.outcome = txn.outcome.map(CacheOutcome::not_stored);
    }
    Ok(respond(w, txn, parts, body, None, None, length))
}

/// The response with its body: pumped for every coalesced reader when this request leads and
/// the response is storable with a known length, teed into the store when only storable,
/// streamed otherwise. Labelled with the outcome.
fn respond(
    w: &Worker,
    txn: &mut Txn,
    mut parts: http::response::Parts,
    body: OriginBody,
    ticket: Option<Box<StoreTicket>>,
    widened: Option<Box<ranges::Widened>>,
    length: Option<u64>,
) -> Response<ProxyBody> {
    // The shared buffer of a coalesced fetch is charged to the store too: without room for
    // it, the response is only teed to its own client (and waiters fetch on their own).
    let room = match (&ticket, &txn.leader, length) {
        (Some(t), Some(_), Some(_)) => t.hold_buffer(),
        _ => None,
    };
    let body = match (ticket, txn.leader.take(), length, room) {
        // Storable with a known length: waiters stream the leader's fetch with it.
        (Some(t), Some(leader), Some(length), Some(room)) => {
            // Other clients get what the store keeps: no field a qualified `private` /
            // `no-cache` withholds (the leader's own client gets them all).
            let mut shared = parts.headers.clone();
            for name in t.withheld() {
                shared.remove(name);
            }
            let head = SharedHead {
                status: parts.status,
                headers: shared,
                vary: t.vary().clone(),
                variant: t.variant().cloned(),
                length,
            };
            let reader = writer::publish(leader, head, body, t, room, w.upstream.timeout());
            let (status, body) = ranges::cut_range(
                widened.as_ref().map(|w| &w.headers),
                parts.status,
                &mut parts.headers,
                reader,
                length,
            );
            parts.status = status;
            body
        }
        // Otherwise the leader guard is dropped here, releasing any waiters at once. A widened
        // request's failed precondition is still answered 412 (then nothing is stored: the
        // body would have had to reach the store through this client's answer).
        (ticket, _, _, _) => {
            let client = widened.as_ref().map(|w| &w.headers);
            match ranges::precondition_failed(client, parts.status, &mut parts.headers) {
                Some((status, empty)) => {
                    parts.status = status;
                    txn.outcome = txn.outcome.map(CacheOutcome::not_stored);
                    empty
                }
                None => match ticket {
                    Some(t) => ProxyBody::tee(body, t),
                    None => ProxyBody::stream(body),
                },
            }
        }
    };
    if let Some(o) = txn.outcome {
        o.write(&mut parts.headers);
    }
    tracing::debug!(
        status = parts.status.as_u16(),
        cache = txn.outcome.map_or("", |o| o.label().as_str()),
        "deliver"
    );
    Response::from_parts(parts, body)
}

/// When fetch failed: a body that broke while it streamed to the origin (too large, too slow,
/// malformed) is the client's failure (`Block`); otherwise the error is logged and a stale entry
/// may stand in (stale-if-error, grace) before the error goes to synth.
pub fn fetch_failed(w: &Worker, txn: &mut Txn, e: ProxyError) -> Result<Delivered, ProxyError> {
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
    let stale = txn.miss.as_ref().and_then(|l| l.stale.as_ref());
    if let Some(stale) = stale.filter(|s| hit::stale_if_error_allows(s, SystemTime::now(), w.grace))
    {
        // The request was sent on: only a widened range request's headers remain.
        let client = txn.widened.take().map(|w| Box::new(w.headers));
        return Ok(Delivered::Hit(Stored {
            obj: stale.clone(),
            served: Served::StaleIfError,
            client,
        }));
    }
    Err(origin_error(txn, e))
}

/// Labels an origin failure with what lookup decided for the request.
fn origin_error(txn: &mut Txn, e: ProxyError) -> ProxyError {
    let label = txn.outcome.map_or(CacheLabel::Dynamic, CacheOutcome::label);
    txn.outcome = Some(CacheOutcome::OriginError(label));
    e
}

/// The stale entry answers: the origin confirmed it (304 to rampart's validators: it is
/// freshened), or the origin failed with 500/502/503/504 and the entry may stand in.
fn from_stale_entry(
    w: &Worker,
    txn: &mut Txn,
    fetched: &mut Fetched,
    response_time: SystemTime,
) -> Option<Stored> {
    let (Some(cache), Some(l), Some(req_headers)) = (&w.cache, &txn.miss, &fetched.req_headers)
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
        let obj = writer::freshen(cache, l, stale, req_headers, fetched.res.headers(), timing);
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
    let client = match txn.widened.take() {
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
fn take_tags(h: &mut HeaderMap, names: &[http::HeaderName]) -> Box<[u64]> {
    // One walk over the response's names (a few, compared by kind and length first) is
    // cheaper than a hashed look-up per tag field.
    if names.is_empty() || !h.keys().any(|k| names.contains(k)) {
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

/// An origin response's head made ready for the client: hop-by-hop fields out, `Via` in, the
/// client's HTTP version.
fn downstream(res: Response<OriginBody>, version: Version) -> (http::response::Parts, OriginBody) {
    let (mut parts, body) = res.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    append_via(&mut parts.headers, parts.version);
    parts.version = version;
    (parts, body)
}

/// RFC 9111 §4.4: a successful unsafe request invalidates its target and the `Location` and
/// `Content-Location` URIs on the same host.
fn invalidate_after_unsafe(cache: &Cache, txn: &Txn, pq: &str, res_headers: &HeaderMap) {
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

/// A response from the origin on its way to the client: compressed as it streams when the rule
/// compresses, the type is compressible and the client accepts a coding; `Vary:
/// Accept-Encoding` on every compressible response of such a rule.
pub fn compress(
    compress: Option<&Compress>,
    coding: Option<Coding>,
    head: bool,
    mut res: Response<ProxyBody>,
) -> Response<ProxyBody> {
    let Some(c) = compress else { return res };
    if !transform::compressible(res.status(), res.headers(), c) {
        return res;
    }
    transform::vary_on_accept_encoding(res.headers_mut());
    let Some(coding) = coding.filter(|_| !head) else {
        return res;
    };
    let encoder = match StreamEncoder::new(coding, c.stream_levels()) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(error = %e, coding = coding.as_str(), "cannot start an encoder; sending identity");
            return res;
        }
    };
    let (mut parts, body) = res.into_parts();
    transform::encoded_headers(&mut parts.headers, coding, None);
    Response::from_parts(parts, ProxyBody::encoded(body, encoder))
}
