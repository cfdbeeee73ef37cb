//! Cache policy: may this response be stored (RFC 9111 §3 plus ARC2's rules), for how long, and
//! may this stored response answer this request (§4.2, §5.2.1).
//!
//! ARC2 compatibility (the default, [`Statuses::Arc2`]): only GET responses with status 200, 201
//! or 204 are stored, never one with `Set-Cookie`. (ARC2 also stores 206; rampart stores full
//! responses and answers ranges from them instead, so a partial response is never served for
//! another range.) With [`Statuses::Rfc9111`] (`cache_statuses = "rfc9111"`) every final
//! status RFC 9111 §3 lets a cache store is stored when it has a lifetime: an explicit one, or a
//! heuristic one for the statuses §4.2.2 calls heuristically cacheable.
//! On top of that the origin's `no-store` and `private` always win, a request with
//! `Authorization` is shared only when the response allows it (§3.5), and `Vary: *` is never
//! stored because it can never match.

use rampart_head::Fields;
use std::time::{Duration, SystemTime};

use http::header::{AUTHORIZATION, SET_COOKIE};
use http::{Method, StatusCode};

use crate::cache_control::{RequestDirectives, ResponseDirectives};
use crate::freshness::{self, Lifetime};
use crate::store::Object;
use crate::vary::Vary;

/// Per-rule caching settings.
#[derive(Debug, Clone)]
pub struct RulePolicy {
    /// The rule's `max_age_seconds`: the lifetime when the origin gives none.
    pub default_ttl: Duration,
    /// ARC2 behaviour: the rule's TTL replaces the origin's freshness information.
    pub override_origin: bool,
    /// What a response without an explicit lifetime gets (`cache_heuristic`).
    pub heuristic: Heuristic,
    /// Store responses with `Set-Cookie` when they are explicitly cacheable for a shared cache
    /// (`store_set_cookie`).
    pub store_set_cookie: bool,
    /// Which statuses may be stored (`cache_statuses`).
    pub statuses: Statuses,
    /// Lifetimes by status (`max_age_by_status`): they replace `default_ttl` for their
    /// statuses, and make them storable.
    pub by_status: ByStatus,
    /// The operator's `stale-while-revalidate` / `stale-if-error` windows
    /// (`stale_while_revalidate_seconds`, `stale_if_error_seconds`): what a stored response
    /// gets when its origin sends none ([`with_stale_defaults`]).
    pub stale_while_revalidate: Option<u64>,
    pub stale_if_error: Option<u64>,
}

/// The directives a response is stored with: the origin's, plus the operator's
/// `stale-while-revalidate` / `stale-if-error` windows where the origin gives none of its own
/// (its own, longer or shorter, win). They travel with the object (disk tier, shared tier).
/// `must-revalidate` and `proxy-revalidate` still forbid serving it stale.
pub fn with_stale_defaults(mut d: ResponseDirectives, rule: &RulePolicy) -> ResponseDirectives {
    if d.stale_while_revalidate.is_none() {
        d.stale_while_revalidate = rule.stale_while_revalidate;
    }
    if d.stale_if_error.is_none() {
        d.stale_if_error = rule.stale_if_error;
    }
    d
}

/// Lifetimes by status (`max_age_by_status`, NGINX's `proxy_cache_valid`): `(status,
/// seconds)` pairs, status 0 for `any`, shared with the configuration (no copy per request;
/// `None` when not configured). A zero lifetime: never stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ByStatus(Option<std::sync::Arc<[(u16, u64)]>>);

impl ByStatus {
    /// From the configured pairs; an empty table is none.
    pub fn new(pairs: &std::sync::Arc<[(u16, u64)]>) -> ByStatus {
        ByStatus((!pairs.is_empty()).then(|| pairs.clone()))
    }

    /// The lifetime configured for `status`, if it (or `any`) is listed.
    pub fn get(&self, status: StatusCode) -> Option<Duration> {
        let pairs = self.0.as_deref()?;
        let code = status.as_u16();
        let find = |c: u16| pairs.iter().find(|(s, _)| *s == c).map(|&(_, secs)| secs);
        find(code).or_else(|| find(0)).map(Duration::from_secs)
    }
}

/// Which response statuses may be stored (`cache_statuses`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Statuses {
    /// ARC2's list: 200, 201 and 204.
    #[default]
    Arc2,
    /// Every final status but 206 (ranges are answered from full responses), 304 (it
    /// refreshes a stored response, it is not one) and 412 (the answer to one request's
    /// preconditions, not to the resource: stored, it would answer everyone's plain GET):
    /// when the origin gives a lifetime, and for the heuristically cacheable ones
    /// (RFC 9110 §15.1) also under `cache_heuristic`.
    Rfc9111,
}

/// The lifetime of a response that gives no explicit one (`cache_heuristic`, RFC 9111 §4.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Heuristic {
    /// ARC2: the rule's `max_age_seconds`, validator or not.
    #[default]
    MaxAge,
    /// 10% of the time since `Last-Modified`, at most `max_age_seconds`; without
    /// `Last-Modified`, none (the response is not stored).
    LastModified,
    /// Only explicit freshness (`s-maxage`, `max-age`, `Expires`).
    None,
}

/// Why a response was not stored (for logs and `Cache-Status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStored {
    Method,
    Status,
    SetCookie,
    NoStore,
    /// The client's own request said `no-store` (the response itself was storable so far).
    RequestNoStore,
    Private,
    NoCache,
    Authorization,
    VaryAny,
    /// Nothing says how long it stays fresh (or it is already stale).
    NoLifetime,
    /// The body is larger than `cache_max_object`.
    TooLarge,
    /// No room to collect the body: a quarter of `cache_memory` is already held by bodies
    /// being collected, or the object would not fit its share of the store.
    NoRoom,
}

impl NotStored {
    pub fn as_str(self) -> &'static str {
        match self {
            NotStored::Method => "method",
            NotStored::Status => "status",
            NotStored::SetCookie => "set-cookie",
            NotStored::NoStore => "no-store",
            NotStored::RequestNoStore => "request-no-store",
            NotStored::Private => "private",
            NotStored::NoCache => "no-cache",
            NotStored::Authorization => "authorization",
            NotStored::VaryAny => "vary-star",
            NotStored::NoLifetime => "no-lifetime",
            NotStored::TooLarge => "too-large",
            NotStored::NoRoom => "no-room",
        }
    }
}

fn status_storable(s: StatusCode, statuses: Statuses) -> bool {
    match statuses {
        Statuses::Arc2 => matches!(s.as_u16(), 200 | 201 | 204),
        Statuses::Rfc9111 => {
            (200..=599).contains(&s.as_u16()) && !matches!(s.as_u16(), 206 | 304 | 412)
        }
    }
}

/// Statuses that may get a heuristic (here: configured) lifetime, RFC 9110 §15.1.
fn heuristically_cacheable(s: StatusCode) -> bool {
    freshness::HEURISTICALLY_CACHEABLE.contains(&s.as_u16())
}

/// One request/response exchange, as the storage decision sees it.
#[derive(Debug, Clone, Copy)]
pub struct Exchange<'a> {
    pub method: &'a Method,
    pub req_headers: &'a Fields,
    pub req: &'a RequestDirectives,
    pub status: StatusCode,
    pub res_headers: &'a Fields,
    pub res: &'a ResponseDirectives,
    pub vary: &'a Vary,
    pub response_time: SystemTime,
}

/// Decides whether a response may be stored; returns its freshness lifetime if so.
pub fn storable(x: &Exchange<'_>, rule: &RulePolicy) -> Result<Duration, NotStored> {
    let Exchange {
        method,
        req_headers,
        req,
        status,
        res_headers,
        res,
        vary,
        response_time,
    } = *x;
    if method != Method::GET {
        return Err(NotStored::Method);
    }
    // A status `max_age_by_status` lists is storable under either list (as NGINX stores what
    // `proxy_cache_valid` names), except those never stored; 0 there: never stored.
    let listed = rule.by_status.get(status);
    let storable_status = match listed {
        Some(ttl) => {
            !ttl.is_zero()
                && (200..=599).contains(&status.as_u16())
                && !matches!(status.as_u16(), 206 | 304 | 412)
        }
        None => status_storable(status, rule.statuses),
    };
    if !storable_status {
        return Err(NotStored::Status);
    }
    let default_ttl = listed.unwrap_or(rule.default_ttl);
    if res.no_store {
        return Err(NotStored::NoStore);
    }
    if res.private {
        return Err(NotStored::Private);
    }
    // Revalidation on every use needs validators and conditional requests; until then a
    // no-cache response is passed, not stored.
    if res.no_cache {
        return Err(NotStored::NoCache);
    }
    if req_headers.contains_key(AUTHORIZATION)
        && !(res.public || res.s_maxage.is_some() || res.must_revalidate)
    {
        return Err(NotStored::Authorization);
    }
    if *vary == Vary::Any {
        return Err(NotStored::VaryAny);
    }
    let origin = freshness::lifetime(status, res_headers, res, response_time);
    // Set-Cookie is per user: stored only when the operator allows it and the origin says the
    // response is meant for shared caches (an explicit lifetime or `public`), unless a
    // qualified `private` / `no-cache` withholds the field itself from the stored copy.
    if res_headers.contains_key(SET_COOKIE) && !withholds(res, &SET_COOKIE) {
        let explicit = matches!(origin, Lifetime::Explicit(d) if !d.is_zero()) || res.public;
        if !(rule.store_set_cookie && explicit) {
            return Err(NotStored::SetCookie);
        }
    }
    // Last: what the response says of itself comes first (a client's own `no-store` does
    // not speak for the next clients).
    if req.no_store {
        return Err(NotStored::RequestNoStore);
    }
    let lifetime = if rule.override_origin {
        // Under RFC 9111's statuses, the rule's TTL replaces only what the origin could have
        // had heuristically: a 500 or a 302 without a lifetime of its own is not kept for it.
        let explicit = matches!(origin, Lifetime::Explicit(_));
        if rule.statuses == Statuses::Rfc9111
            && listed.is_none()
            && !(explicit || heuristically_cacheable(status) || res.public)
        {
            Duration::ZERO
        } else {
            default_ttl
        }
    } else {
        match (origin, rule.heuristic) {
            (Lifetime::Explicit(d), _) => d,
            // The rule's TTL is rampart's heuristic (RFC 9111 §4.2.2 lets a cache choose one),
            // applied only where a heuristic is allowed, or where the operator listed the status.
            (Lifetime::Heuristic(_) | Lifetime::Unknown, Heuristic::MaxAge)
                if heuristically_cacheable(status) || res.public || listed.is_some() =>
            {
                default_ttl
            }
            // §4.2.2's typical heuristic, bounded by the rule's TTL.
            (Lifetime::Heuristic(d), Heuristic::LastModified) => d.min(default_ttl),
            _ => Duration::ZERO,
        }
    };
    if lifetime.is_zero() {
        return Err(NotStored::NoLifetime);
    }
    Ok(lifetime)
}

/// Whether a qualified `private` / `no-cache` lists `field`.
fn withholds(res: &ResponseDirectives, field: &http::HeaderName) -> bool {
    res.withheld().contains(field)
}

/// Whether a stored object may answer a request without contacting the origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usable {
    /// Fresh (or stale within the client's `max-stale`): serve it.
    Yes,
    /// Stale, or the request asks for fresher / revalidated content.
    No,
    /// The request carries `Authorization` and the object does not allow sharing it.
    NotShareable,
}

pub fn usable(
    obj: &Object,
    req_headers: &Fields,
    req: &RequestDirectives,
    now: SystemTime,
) -> Usable {
    let d = &obj.directives;
    if req_headers.contains_key(AUTHORIZATION)
        && !(d.public || d.s_maxage.is_some() || d.must_revalidate)
    {
        return Usable::NotShareable;
    }
    if req.no_cache {
        return Usable::No;
    }
    let age = obj.age(now);
    let fresh = obj.is_fresh_at_age(age);
    if let Some(max_age) = req.max_age {
        // RFC 8246 §2.1: a fresh `immutable` response is not revalidated because a browser
        // reloads (it sends `max-age=0`); `no-cache` above still asks for that. A stale one is
        // treated as any other.
        if age > Duration::from_secs(max_age) && !(d.immutable && fresh) {
            return Usable::No;
        }
    }
    if fresh {
        let left = obj.lifetime.saturating_sub(age);
        if let Some(min_fresh) = req.min_fresh {
            if left < Duration::from_secs(min_fresh) {
                return Usable::No;
            }
        }
        return Usable::Yes;
    }
    // Stale: only with the client's consent, and never when the origin forbids it.
    let forbidden = d.must_revalidate || d.proxy_revalidate || d.s_maxage.is_some() || d.no_cache;
    match req.max_stale {
        Some(max_stale)
            if !forbidden && !obj.invalidated.load(std::sync::atomic::Ordering::Relaxed) =>
        {
            let staleness = age.saturating_sub(obj.lifetime);
            if staleness <= Duration::from_secs(max_stale) {
                Usable::Yes
            } else {
                Usable::No
            }
        }
        _ => Usable::No,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_412_is_never_stored_for_everyone() {
        let stored = |code: u16, statuses| {
            StatusCode::from_u16(code).is_ok_and(|s| status_storable(s, statuses))
        };
        for code in [200, 203, 301, 404, 410, 500, 599] {
            assert!(stored(code, Statuses::Rfc9111), "{code}");
        }
        for code in [100, 103, 206, 304, 412, 600, 999] {
            assert!(!stored(code, Statuses::Rfc9111), "{code}");
        }
        for code in [200, 201, 204] {
            assert!(stored(code, Statuses::Arc2), "{code}");
        }
        assert!(!stored(412, Statuses::Arc2));
    }

    fn policy(by_status: &[(u16, u64)]) -> RulePolicy {
        RulePolicy {
            default_ttl: Duration::from_secs(600),
            override_origin: false,
            heuristic: Heuristic::MaxAge,
            store_set_cookie: false,
            statuses: Statuses::Arc2,
            by_status: ByStatus::new(&by_status.to_vec().into()),
            stale_while_revalidate: None,
            stale_if_error: None,
        }
    }

    fn lifetime(status: u16, cache_control: &str, rule: &RulePolicy) -> Result<u64, NotStored> {
        let mut h = Fields::new();
        if !cache_control.is_empty() {
            h.insert(
                http::header::CACHE_CONTROL,
                http::HeaderValue::from_str(cache_control).unwrap_or_else(|_| unreachable!()),
            );
        }
        let res = ResponseDirectives::parse(&h);
        let req = RequestDirectives::default();
        let x = Exchange {
            method: &Method::GET,
            req_headers: &Fields::new(),
            req: &req,
            status: StatusCode::from_u16(status).unwrap_or_else(|_| unreachable!()),
            res_headers: &h,
            res: &res,
            vary: &Vary::None,
            response_time: SystemTime::now(),
        };
        storable(&x, rule).map(|d| d.as_secs())
    }

    #[test]
    fn max_age_by_status_replaces_the_rules_ttl_and_the_origins_wins() {
        let rule = policy(&[(200, 60), (404, 30), (500, 10), (204, 0), (0, 5)]);
        assert_eq!(lifetime(200, "", &rule), Ok(60));
        // Listed: stored under ARC2's list, also without heuristic cacheability.
        assert_eq!(lifetime(404, "", &rule), Ok(30));
        assert_eq!(lifetime(500, "", &rule), Ok(10));
        // `any`, and 0: never stored.
        assert_eq!(lifetime(410, "", &rule), Ok(5));
        assert_eq!(lifetime(204, "max-age=100", &rule), Err(NotStored::Status));
        // The origin's own lifetime wins unless the rule overrides it.
        assert_eq!(lifetime(404, "max-age=100", &rule), Ok(100));
        let overriding = RulePolicy {
            override_origin: true,
            ..rule.clone()
        };
        assert_eq!(lifetime(404, "max-age=100", &overriding), Ok(30));
        // Never stored whatever the table says.
        assert_eq!(lifetime(206, "max-age=100", &rule), Err(NotStored::Status));
        // A status the table does not list, and no `any`: as without a table.
        let rule = policy(&[(404, 30)]);
        assert_eq!(lifetime(200, "", &rule), Ok(600));
        assert_eq!(lifetime(500, "max-age=100", &rule), Err(NotStored::Status));
    }

    #[test]
    fn stale_defaults_fill_only_what_the_origin_left_out() {
        let rule = RulePolicy {
            stale_while_revalidate: Some(30),
            stale_if_error: Some(600),
            ..policy(&[])
        };
        let mut h = Fields::new();
        h.insert(
            http::header::CACHE_CONTROL,
            http::HeaderValue::from_static("max-age=60, stale-if-error=5"),
        );
        let d = with_stale_defaults(ResponseDirectives::parse(&h), &rule);
        assert_eq!(d.stale_while_revalidate, Some(30));
        assert_eq!(d.stale_if_error, Some(5));
    }
}
