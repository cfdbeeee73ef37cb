//! lookup: decides whether the cache takes part in a request and, for a GET or HEAD the path
//! policy lets it store, looks the request up. The outcome is a hit, a stale hit that is
//! refreshed in the background (stale-while-revalidate), a miss (a GET the store may answer
//! later: it goes on to `miss` with the request's [`Miss`] state), or a pass (straight to
//! `fetch`).

use rampart_head::Request;
use std::time::{Duration, SystemTime};

use http::Method;
use rampart_cache::key::SlotKeyRef;
use rampart_cache::storable::{ByStatus, Heuristic, RulePolicy, Statuses};
use rampart_config::{CacheHeuristic, CacheStatuses, RuleConfig};

use crate::caching::Found;
use crate::error::ProxyError;
use crate::outcome::{CacheLabel, CacheOutcome, Served};
use crate::pipeline::conn_info::Scheme;
use crate::pipeline::hit;
use crate::pipeline::hit::Stored;
use crate::pipeline::step::Step;
use crate::pipeline::txn::{target, Miss, Mode, Txn};
use crate::pipeline::worker_state::Worker;
use crate::policy::route::PathDecision;

/// The lookup stage: a hit (a fresh object, or a stale one that answers while a background
/// request refreshes it), a miss (`Txn::miss` is set), or a pass (the cache takes no part:
/// method, path policy, caching off, a HEAD miss). Labels the request (`txn.outcome`);
/// `only-if-cached` with nothing usable stored ends here (504).
pub fn lookup<B>(w: &Worker, txn: &mut Txn, req: &Request<B>) -> Result<Step, ProxyError> {
    // Not recorded, the answer goes straight back (kept in a local to be read first, it is copied
    // once more: ~40 instructions per request, callgrind).
    if !txn.trace.as_ref().is_some_and(|t| t.sampled()) {
        return find(w, txn, req);
    }
    traced(w, txn, req)
}

/// [`lookup`] with its event in the request's trace.
#[inline(never)]
fn traced<B>(w: &Worker, txn: &mut Txn, req: &Request<B>) -> Result<Step, ProxyError> {
    let step = find(w, txn, req);
    if let Some(t) = txn.traced() {
        let found = match &step {
            Ok(Step::Hit(s)) => match s.served {
                Served::Disk => "hit-disk",
                Served::StaleWhileRevalidate => "stale-while-revalidate",
                _ => "hit",
            },
            Ok(Step::Miss) => "miss",
            Ok(_) => "pass",
            Err(_) => "only-if-cached",
        };
        t.event("lookup", &[("rampart.cache.lookup", found.into())]);
    }
    step
}

/// What [`lookup`] finds.
fn find<B>(w: &Worker, txn: &mut Txn, req: &Request<B>) -> Result<Step, ProxyError> {
    let decision = txn.route().decision;
    let label = match decision {
        PathDecision::Bypass => CacheLabel::Bypass,
        _ => CacheLabel::Dynamic,
    };
    txn.outcome = Some(CacheOutcome::fetched(label, false));
    let (Some(cache), PathDecision::Cacheable { max_age_seconds }) = (&w.cache, decision) else {
        return Ok(Step::Pass);
    };
    let head = req.method() == Method::HEAD;
    if max_age_seconds == 0 || !(req.method() == Method::GET || head) {
        return Ok(Step::Pass);
    }
    let rule_config = &txn.route().rule.config;
    let mut policy = rule_policy(rule_config, max_age_seconds);
    // A path rule's `max_age_by_status` replaces the rule's for its paths.
    let by_status = match txn.route().path_rule() {
        Some(i) => rule_config.path_rules[i].max_age_by_status.as_ref(),
        None => None,
    };
    policy.by_status = ByStatus::new(by_status.unwrap_or(&rule_config.max_age_by_status));
    let refresh = txn.mode == Mode::Refresh;
    let rule = &txn.route().rule;
    let disk = rule.config.cache_disk.then_some(|| rule.transforms());
    let found = cache.lookup(slot_key(txn, req), req.headers(), policy, refresh, disk);
    let l = match found {
        Found::Hit(obj) => return Ok(Step::Hit(Stored::new(obj, Served::Fresh))),
        Found::DiskHit(obj) => return Ok(Step::Hit(Stored::new(obj, Served::Disk))),
        Found::Miss(l) => l,
    };
    if l.directives.only_if_cached {
        txn.outcome = Some(CacheOutcome::OnlyIfCached);
        return Err(ProxyError::NotCached);
    }
    if let Some(stale) = l.stale.as_ref().filter(|_| txn.mode == Mode::Client) {
        if hit::stale_while_revalidate_allows(stale, &l, SystemTime::now()) {
            let served = Served::StaleWhileRevalidate;
            return Ok(Step::Hit(Stored::new(stale.clone(), served)));
        }
    }
    let label = if l.forced {
        CacheLabel::Bypass
    } else if l.stale.is_some() {
        CacheLabel::Expired
    } else {
        CacheLabel::Miss
    };
    txn.outcome = Some(CacheOutcome::fetched(label, true));
    tracing::debug!(label = label.as_str(), "miss");
    // HEAD misses are passed; only a GET response can be stored.
    if head {
        return Ok(Step::Pass);
    }
    txn.miss = Some(Miss::new(l));
    Ok(Step::Miss)
}

/// The request's key in the store: routed host, target, the rule's `ignore_query_string`, and
/// the scheme unless the rule shares entries between schemes (`cache_by_scheme = false` with
/// the same origins for both; see `CacheKey::for_https`).
pub fn slot_key<'a, B>(txn: &'a Txn, req: &'a Request<B>) -> SlotKeyRef<'a> {
    let rule = &txn.route().rule.config;
    let https = txn.scheme() == Scheme::Https && rule.keys_by_scheme();
    SlotKeyRef::of_name(txn.host_name(), target(req), rule.ignore_query_string).for_https(https)
}

/// How the rule stores responses: its TTL (`max_age_seconds` of the matching path), whether it
/// overrides the origin's, its heuristic and `store_set_cookie`.
fn rule_policy(rule: &RuleConfig, max_age_seconds: u64) -> RulePolicy {
    RulePolicy {
        default_ttl: Duration::from_secs(max_age_seconds),
        override_origin: rule.max_age_overrides_origin,
        heuristic: match rule.cache_heuristic {
            CacheHeuristic::MaxAge => Heuristic::MaxAge,
            CacheHeuristic::LastModified => Heuristic::LastModified,
            CacheHeuristic::None => Heuristic::None,
        },
        store_set_cookie: rule.store_set_cookie,
        statuses: match rule.cache_statuses {
            CacheStatuses::Arc2 => Statuses::Arc2,
            CacheStatuses::Rfc9111 => Statuses::Rfc9111,
        },
        by_status: ByStatus::default(),
        stale_while_revalidate: rule.stale_while_revalidate,
        stale_if_error: rule.stale_if_error,
    }
}
