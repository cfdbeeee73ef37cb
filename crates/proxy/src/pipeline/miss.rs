//! miss: a GET the store may answer later. A range or `If-Match` / `If-Unmodified-Since` miss
//! is widened to a whole-object fetch (`ranges.rs`); then the request joins the coalescer: the first miss on a resource leads (it
//! fetches, and its response is shared), later ones wait for the leader's response head and
//! stream its body, or fetch on their own when the leader's response cannot be shared.

use std::time::Duration;

use http::header::{AUTHORIZATION, RANGE};
use http::{Request, Response};
use rampart_cache::conditional;
use rampart_cache::vary::Vary;

use crate::body::RequestBody;
use crate::caching::coalesce::{Inflight, InflightBody, Role};
use crate::caching::{Cache, Found, Lookup};
use crate::error::ProxyError;
use crate::outcome::{CacheOutcome, Served};
use crate::pipeline::hit::Stored;
use crate::pipeline::lookup::slot_key;
use crate::pipeline::ranges::{self, Widened};
use crate::pipeline::step::Step;
use crate::pipeline::txn::{Mode, Txn};
use crate::pipeline::worker_state::Worker;

/// The miss stage: [`Step::Stream`] when another client's fetch streams the answer,
/// [`Step::Hit`] when an object stored meanwhile answers (by the leader a waiter waited for,
/// or in the Redis tier), [`Step::Fetch`] when this request fetches: as the leader
/// (`txn.leader`) or on its own.
pub async fn join(
    w: &Worker,
    txn: &mut Txn,
    req: &mut Request<RequestBody>,
) -> Result<Step, ProxyError> {
    let (Some(cache), Some(l)) = (&w.cache, &txn.miss) else {
        return Ok(Step::Fetch);
    };
    // A range or precondition miss becomes a shared whole-object fetch (see `ranges.rs`).
    if txn.mode == Mode::Client {
        txn.widened = Widened::new(req, cache, l);
    }
    // A client-forced refresh (no-cache) fetches for itself; so do requests for a range
    // or with preconditions that were not widened, which a shared full 200 would not answer.
    // An authorised request must not get a response fetched for somebody else.
    let shared_answer_fits = !req.headers().contains_key(RANGE)
        && !req.headers().contains_key(AUTHORIZATION)
        && !conditional::client_has_conditionals(req.headers());
    if !l.forced && (shared_answer_fits || txn.mode == Mode::Refresh) {
        match cache.coalescer().join(&l.key) {
            Role::Leader(g) => {
                tracing::debug!("miss, leading the fetch");
                txn.leader = Some(g);
                if txn.mode == Mode::Client && cache.tier().is_some() {
                    let wait = w.upstream.timeout().unwrap_or(Duration::from_secs(45));
                    // Boxed: only with the shared tier, and it would grow every miss's future.
                    if let Some(step) =
                        boxed!(crate::pipeline::redis_tier::lookup(cache, txn, req, wait)).await
                    {
                        return Ok(step);
                    }
                }
            }
            Role::Alone => {
                tracing::debug!("miss, its last answer was not shareable: fetching at once")
            }
            // Somebody is already fetching it: nothing to refresh.
            Role::Waiter(_) if txn.mode == Mode::Refresh => return Err(ProxyError::NotCached),
            Role::Waiter(inflight) => {
                tracing::debug!("miss, waiting for the fetch in flight");
                let wait = w.upstream.timeout().unwrap_or(Duration::from_secs(45));
                if let Some(step) = wait_for_leader(cache, txn, req, &inflight, wait).await {
                    return Ok(step);
                }
                // Released (or another variant): fetch on our own.
            }
        }
    }
    // Only a leader's fetch can go on for the store after the client's range is sent.
    if txn.leader.is_none() {
        if let Some(w) = txn.widened.take() {
            w.restore(req);
        }
    }
    Ok(Step::Fetch)
}

/// A waiter's answer: the leader's response when it is shared and of this request's variant,
/// or the entry the leader refreshed (a 304) when it released the waiters.
async fn wait_for_leader(
    cache: &std::sync::Arc<Cache>,
    txn: &mut Txn,
    req: &Request<RequestBody>,
    inflight: &std::sync::Arc<Inflight>,
    wait: Duration,
) -> Option<Step> {
    let Some(head) = inflight.wait_head(wait).await else {
        // Released: the leader may have refreshed the entry (304) — look again.
        let l: &Lookup = txn.miss.as_ref()?;
        let rule = &txn.route().rule;
        let key = slot_key(txn, req);
        let disk = rule.config.cache_disk.then_some(|| rule.transforms());
        return match cache.lookup(key, req.headers(), l.policy.clone(), false, disk) {
            Found::Hit(obj) => Some(Step::Hit(Stored::new(obj, Served::Fresh))),
            Found::DiskHit(obj) => Some(Step::Hit(Stored::new(obj, Served::Disk))),
            Found::Miss(_) => None,
        };
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
        txn.widened.as_ref().map(|w| &w.headers),
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
