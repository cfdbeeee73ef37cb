//! miss: a GET the store may answer later. A range or `If-Match` / `If-Unmodified-Since` miss
//! is widened to a whole-object fetch (`ranges.rs`); then the request joins the coalescer: the
//! first miss on a resource leads (it asks the shared tier, then fetches, and its response is
//! shared), later ones wait for the leader's response head and stream its body, or fetch on
//! their own when the leader's response cannot be shared.

use rampart_head::{Request, Response};
use std::time::Duration;

use http::header::{AUTHORIZATION, RANGE};

use rampart_cache::conditional;
use rampart_cache::vary::Vary;

use crate::body::RequestBody;
use crate::caching::coalesce::{Inflight, InflightBody, Role};
use crate::caching::shared_tier::FromShared;
use crate::caching::{Cache, Found};
use crate::error::ProxyError;
use crate::outcome::{CacheOutcome, Served};
use crate::pipeline::hit::Stored;
use crate::pipeline::lookup::slot_key;
use crate::pipeline::ranges::{self, Widened};
use crate::pipeline::step::Step;
use crate::pipeline::txn::{Lead, Mode, Txn};
use crate::pipeline::worker_state::Worker;
use rampart_otel::Kind;

/// The miss stage: [`Step::Stream`] when another client's fetch streams the answer,
/// [`Step::Hit`] when an object stored meanwhile answers (by the leader a waiter waited for,
/// or in the shared tier), [`Step::Fetch`] when this request fetches: as the leader (the miss
/// gets its [`Lead`]) or on its own.
pub async fn join(
    w: &Worker,
    txn: &mut Txn,
    req: &mut Request<RequestBody>,
) -> Result<Step, ProxyError> {
    let (Some(cache), Some(found)) = (&w.cache, txn.missed()) else {
        return Ok(Step::Fetch);
    };
    // A range or precondition miss becomes a shared whole-object fetch (see `ranges.rs`).
    let mut widened = match txn.mode {
        Mode::Client => Widened::new(req, cache, found),
        Mode::Refresh => None,
    };
    // Unless the key's owner in the fleet is asked and this instance keeps no copy of what it
    // sends: the request goes to the owner as the client sent it, and the owner widens it and
    // answers the range from what it holds (a whole answer here would be the origin's to cut).
    let mut as_sent_to_owner = None;
    if widened.is_some() && w.fleet.as_ref().is_some_and(|f| f.local_ttl.is_zero()) {
        if let Some(peer) = owner(w, txn) {
            if let Some(wide) = widened.take() {
                wide.restore(req);
            }
            as_sent_to_owner = Some(peer);
        }
    }
    // A client-forced refresh (no-cache) fetches for itself; so do requests for a range
    // or with preconditions that were not widened, which a shared full 200 would not answer.
    // An authorised request must not get a response fetched for somebody else.
    let shared_answer_fits = !req.headers().contains_key(RANGE)
        && !req.headers().contains_key(AUTHORIZATION)
        && !conditional::client_has_conditionals(req.headers());
    let coalescable = !found.forced && (shared_answer_fits || txn.mode == Mode::Refresh);
    // The key's last answer here was not shareable: the owner would not keep it either.
    let mut passes = false;
    if coalescable {
        match cache.coalescer().join(&found.key) {
            Role::Leader(leader) => {
                tracing::debug!("miss, leading the fetch");
                // The key's owner in the fleet answers for every instance (never for a peer's
                // request: that one is answered here, so a request crosses one hop at most).
                if let Some(peer) = owner(w, txn) {
                    if let Some(miss) = txn.miss.as_mut() {
                        miss.lead = Some(Lead {
                            leader,
                            widened,
                            shared_lock: None,
                        });
                    }
                    return Ok(Step::Peer(peer));
                }
                let mut shared_lock = None;
                if txn.mode == Mode::Client && cache.shared_tier().is_some() {
                    let wait = w.origin_client.timeout().unwrap_or(Duration::from_secs(45));
                    let transforms = txn.route().rule.transforms();
                    let Some(miss) = txn.miss.as_mut() else {
                        return Ok(Step::Fetch);
                    };
                    let found = &mut miss.found;
                    // Boxed: only with the shared tier, and it would grow every miss's future.
                    let shared = cache.lookup_shared(found, req.headers(), transforms, wait);
                    let span = child_span(&mut txn.trace, "shared tier", Kind::Client);
                    let shared = boxed!(shared).await;
                    if let Some(t) = txn.traced() {
                        let found = match &shared {
                            FromShared::Hit(_) => "hit",
                            FromShared::Fetch(Some(_)) => "miss, fetching for every instance",
                            FromShared::Fetch(None) => "miss",
                        };
                        t.child_attr(span, "rampart.cache.lookup", found);
                        t.child_attr(span, "db.system.name", "redis");
                        t.end_child(span);
                    }
                    match shared {
                        // Stored here now: the local waiters find it when `leader` is dropped.
                        FromShared::Hit(obj) => {
                            return Ok(Step::Hit(for_client(obj, Served::Shared, widened)));
                        }
                        FromShared::Fetch(lock) => shared_lock = lock,
                    }
                }
                if let Some(miss) = txn.miss.as_mut() {
                    miss.lead = Some(Lead {
                        leader,
                        widened,
                        shared_lock,
                    });
                }
                return Ok(Step::Fetch);
            }
            Role::Alone => {
                tracing::debug!("miss, its last answer was not shareable: fetching at once");
                passes = true;
            }
            // Somebody is already fetching it: nothing to refresh.
            Role::Waiter(_) if txn.mode == Mode::Refresh => return Err(ProxyError::NotCached),
            Role::Waiter(inflight) => {
                tracing::debug!("miss, waiting for the fetch in flight");
                let wait = w.origin_client.timeout().unwrap_or(Duration::from_secs(45));
                let span = child_span(&mut txn.trace, "wait for fetch", Kind::Internal);
                let waited = wait_for_leader(cache, txn, req, &inflight, wait, &mut widened).await;
                if let Some(t) = txn.traced() {
                    let how = match &waited {
                        Some(Step::Stream(_)) => "streamed from the fetch in flight",
                        Some(_) => "stored meanwhile",
                        None => "released: fetching on its own",
                    };
                    t.child_attr(span, "rampart.wait", how);
                    t.end_child(span);
                }
                if let Some(step) = waited {
                    return Ok(step);
                }
                // Released (or another variant): fetch on our own.
            }
        }
    }
    // Only a leader's fetch can go on for the store after the client's range is sent: the
    // request goes on as the client sent it.
    if let Some(w) = widened {
        w.restore(req);
    }
    // A miss the coalescer let go (released) still asks the key's owner, which fetches for
    // the whole fleet; one whose last answer was not shareable, and requests the coalescer does
    // not take (a forced refresh, `Authorization`, a range, preconditions), go to the origin:
    // a page that is never stored costs no second hop.
    if coalescable {
        if let Some(peer) = owner(w, txn) {
            if !passes {
                return Ok(Step::Peer(peer));
            }
            txn.not_owner = true;
        }
    }
    if let Some(peer) = as_sent_to_owner {
        return Ok(Step::Peer(peer));
    }
    Ok(Step::Fetch)
}

/// The member of the fleet that owns the miss's key, when it is another instance.
fn owner(w: &Worker, txn: &Txn) -> Option<std::sync::Arc<crate::origin::fleet::Member>> {
    let fleet = w.fleet.as_deref()?;
    if txn.from_peer {
        return None;
    }
    fleet.owner(&txn.missed()?.key)
}

/// A child span of the request's server span, when it is recorded.
fn child_span(
    trace: &mut Option<rampart_otel::RequestTrace>,
    name: &'static str,
    kind: Kind,
) -> Option<rampart_otel::ChildRef> {
    trace.as_mut()?.child(name, kind)
}

/// A stored object that answers a miss: for the client's own fields when the request was
/// widened (its range and preconditions), else for the request at hand.
fn for_client(
    obj: std::sync::Arc<rampart_cache::store::Object>,
    served: Served,
    widened: Option<Box<Widened>>,
) -> Stored {
    Stored {
        obj,
        served,
        client: widened.map(|w| Box::new(w.headers)),
    }
}

/// A waiter's answer: the leader's response when it is shared and of this request's variant,
/// or the entry the leader refreshed (a 304) when it released the waiters.
async fn wait_for_leader(
    cache: &std::sync::Arc<Cache>,
    txn: &mut Txn,
    req: &Request<RequestBody>,
    inflight: &std::sync::Arc<Inflight>,
    wait: Duration,
    widened: &mut Option<Box<Widened>>,
) -> Option<Step> {
    let Some(head) = inflight.wait_head(wait).await else {
        // Released: the leader may have refreshed the entry (304) — look again.
        let found = txn.missed()?;
        let rule = &txn.route().rule;
        let key = slot_key(txn, req);
        let disk = rule.config.cache_disk.then_some(|| rule.transforms());
        let (obj, served) =
            match cache.lookup(key, req.headers(), found.policy.clone(), false, disk) {
                Found::Hit(obj) => (obj, Served::Fresh),
                Found::DiskHit(obj) => (obj, Served::Disk),
                Found::Miss(_) => return None,
            };
        return Some(Step::Hit(for_client(obj, served, widened.take())));
    };
    let same_variant = match &head.vary {
        Vary::None => true,
        v => v
            .variant_key(req.headers())
            .is_some_and(|k| Some(&k) == head.variant.as_ref()),
    };
    if !same_variant {
        return None;
    }
    let mut headers = head.headers.clone();
    let (status, body) = ranges::cut_range(
        widened.as_ref().map(|w| &w.headers),
        head.status,
        &mut headers,
        InflightBody::new(inflight.clone(), head.length),
        head.length,
    );
    let mut res = Response::new(body);
    *res.status_mut() = status;
    *res.headers_mut() = headers;
    let outcome = CacheOutcome::Collapsed;
    outcome.write(res.headers_mut());
    txn.outcome = Some(outcome);
    Some(Step::Stream(Box::new(res)))
}
