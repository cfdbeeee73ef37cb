//! The per-request context every stage reads and fills in: the connection's facts
//! ([`ConnInfo`]), [`Route`] (what recv decided), the access-log record, the [`CacheOutcome`]
//! and the miss state.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use http::header::HeaderValue;
use http::Request;

use crate::caching::coalesce::Leader;
use crate::caching::Lookup;
use crate::outcome::CacheOutcome;
use crate::pipeline::conn_info::{ConnInfo, Scheme};
use crate::pipeline::ranges::Widened;
use crate::policy::route::{PathDecision, Rule};
use crate::telemetry::access_log::AccessRecord;
use crate::telemetry::metrics::Protocol;

/// Who a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A client's request.
    Client,
    /// A background refresh (stale-while-revalidate): revalidate and store, never log.
    Refresh,
}

/// What recv decided: the rule, the host the request was routed by, the path policy.
#[derive(Debug)]
pub struct Route {
    pub rule: Arc<Rule>,
    /// The routed host as the client sent it (with its port, if any), checked by
    /// `rampart_cache::key::is_valid_host`. The origin gets [`crate::headers::origin_host`]
    /// of it: the name the cache key uses.
    pub host: HeaderValue,
    pub decision: PathDecision,
    /// The path rule that decided, by its index in the rule's `path_rules`.
    pub path_rule: Option<u32>,
    /// What the rule's message rules decided for this request (a rule without any: `None`,
    /// and the request carries one pointer more).
    pub extras: Option<Box<RouteExtras>>,
}

/// What a rule's redirects and response field rules need of a request ([`Route::extras`]).
#[derive(Debug, Default)]
pub struct RouteExtras {
    /// A redirect rule matched: its status and target (answered after screening).
    pub redirect: Option<(http::StatusCode, String)>,
    /// What the response field rules need and the response no longer says (only when the
    /// rule or its path rule has some).
    pub answer_vars: Option<AnswerVars>,
}

/// The request's facts a response field rule may name ([`Route::answer_vars`]).
#[derive(Debug)]
pub struct AnswerVars {
    pub request_id: Option<HeaderValue>,
    pub path: Box<str>,
    pub query: Box<str>,
}

impl Route {
    /// Whether responses of this request get field rules (the rule's or its path rule's).
    pub fn has_answer_rules(&self) -> bool {
        self.answer_vars().is_some()
    }

    pub fn answer_vars(&self) -> Option<&AnswerVars> {
        self.extras.as_ref()?.answer_vars.as_ref()
    }

    /// The matched path rule's index.
    pub fn path_rule(&self) -> Option<usize> {
        self.path_rule.map(|i| i as usize)
    }

    /// `expires` for this request: its path rule's, else the rule's (seconds).
    pub fn expires(&self) -> Option<u64> {
        if !self.rule.extras.expires {
            return None;
        }
        let c = &self.rule.config;
        match self.path_rule().and_then(|i| c.path_rules.get(i)) {
            Some(p) => p.expires.unwrap_or(c.expires),
            None => c.expires,
        }
    }
}

/// One request on its way through the stages.
#[derive(Debug)]
pub struct Txn {
    pub conn: Arc<ConnInfo>,
    pub mode: Mode,
    pub start: Instant,
    /// The client address screening resolved (the peer, or `X-Forwarded-For` from a trusted
    /// proxy); the peer until recv has run.
    pub client: IpAddr,
    /// Set by recv; `None` for requests answered before routing (ACME, admin API, no rule).
    pub route: Option<Route>,
    /// The access-log record, when logging is on for the rule; written when the body ends.
    pub log: Option<Box<AccessRecord>>,
    /// What the cache did; `None` leaves a response unlabelled (answers before routing,
    /// `PURGE`, redirects).
    pub outcome: Option<CacheOutcome>,
    /// The miss lookup found (GET only): what store and revalidation need.
    pub miss: Option<Lookup>,
    /// This request fetches for every coalesced waiter of its resource.
    pub leader: Option<Leader>,
    /// This request fetches for every instance (the shared tier's fetch lock).
    pub tier_lock: Option<Box<crate::caching::TierLock>>,
    /// A range miss fetched as the whole representation (see `ranges.rs`).
    pub widened: Option<Box<Widened>>,
    /// The request's HTTP version.
    pub protocol: Protocol,
}

impl Txn {
    pub fn new(conn: &Arc<ConnInfo>, mode: Mode) -> Self {
        Txn {
            conn: conn.clone(),
            mode,
            start: Instant::now(),
            client: conn.client_ip,
            route: None,
            log: None,
            outcome: None,
            miss: None,
            leader: None,
            tier_lock: None,
            widened: None,
            protocol: Protocol::Http1,
        }
    }

    /// The route recv found. Only called by stages after recv.
    pub fn route(&self) -> &Route {
        match &self.route {
            Some(r) => r,
            // invariant: the dispatcher runs no stage after recv without a route.
            None => unreachable!("stage ran before recv"),
        }
    }

    /// The routed host (recv checked it is visible ASCII).
    pub fn host(&self) -> &str {
        self.route().host.to_str().unwrap_or_default()
    }

    pub fn scheme(&self) -> Scheme {
        self.conn.scheme
    }

    /// The domain text of the rule, for diagnostics.
    pub fn domain(&self) -> &str {
        self.route
            .as_ref()
            .map_or("", |r| r.rule.config.domain_text.as_str())
    }
}

/// The request target in origin form (`/path?query`); `/` when the URI has none.
pub fn target<B>(req: &Request<B>) -> &str {
    req.uri().path_and_query().map_or("/", |p| p.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn target_and_scheme() {
        let req = Request::get("http://a.example/x?y=1")
            .body(())
            .unwrap_or_default();
        assert_eq!(target(&req), "/x?y=1");
        assert_eq!(Scheme::Https.as_str(), "https");
        let conn = Arc::new(ConnInfo::new(
            SocketAddr::from(([127, 0, 0, 1], 40000)),
            SocketAddr::from(([127, 0, 0, 1], 80)),
            Scheme::Http,
        ));
        assert_eq!(conn.client_ip_header, "127.0.0.1");
        let txn = Txn::new(&conn, Mode::Client);
        assert_eq!(txn.client, conn.client_ip);
        assert_eq!(txn.domain(), "");
    }
}
