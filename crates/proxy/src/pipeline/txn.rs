//! The per-request context every stage reads and fills in: the connection's facts
//! ([`ConnInfo`]), [`Route`] (what recv decided), the access-log record, the [`CacheOutcome`]
//! (the label), and the cache state of a miss ([`Miss`], with its [`Lead`] when the request
//! fetches for others).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use http::header::HeaderValue;
use rampart_head::Request;

use rampart_cache::encoding::Coding;

use crate::caching::coalesce::Leader;
use crate::caching::coding::Compress;
use crate::caching::shared_tier::SharedLock;
use crate::caching::Missed;
use crate::interim::Interim;
use crate::outcome::CacheOutcome;
use crate::pipeline::conn_info::{ConnInfo, Scheme};
use crate::pipeline::ranges::Widened;
use crate::policy::route::{PathDecision, Rule};
use crate::telemetry::access_log::AccessRecord;
use crate::telemetry::metrics::Protocol;
use rampart_otel::RequestTrace;

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
    /// `rampart_cache::key::valid_host_name`. The origin gets [`crate::headers::origin_host`]
    /// of it: the name the cache key uses.
    pub host: HeaderValue,
    /// The length of the host's name, `host` without its port (the name routing and the cache
    /// key use).
    pub name_len: u8,
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
    /// What the cache did, as `Cache-Status`, the log and the metrics say it; `None` leaves a
    /// response unlabelled (answers before routing, `PURGE`, redirects).
    pub outcome: Option<CacheOutcome>,
    /// The cache's state for a GET miss the store may answer later (set by lookup); `None`
    /// for every other request. Boxed: most requests are hits or passes.
    pub miss: Option<Box<Miss>>,
    /// The request's HTTP version.
    pub protocol: Protocol,
    /// The rule's compression and the coding the client accepts (none for a HEAD, whose answer
    /// has no body), for a response from the origin: negotiated when the request leaves for the
    /// origin or joins another client's fetch, applied by the respond stage (a hit picks a
    /// stored copy instead).
    pub compress: Option<(Arc<Compress>, Option<Coding>)>,
    /// Where the origin's interim (1xx) answers go when the request came on an HTTP/2
    /// stream (each stream has its own); HTTP/1.1 keeps its connection's in `conn`.
    pub interim: Option<Arc<Interim>>,
    /// The request's trace, when tracing is on (set by recv once the request is routed). In
    /// place: most requests are not sampled and need no more than its ids.
    pub trace: Option<RequestTrace>,
    /// The request comes from a peer of the fleet (`origin/fleet/`): screened there, and
    /// answered here without asking another peer.
    pub from_peer: bool,
    /// Another member of the fleet owns the key, and this instance fetched it itself (its
    /// last answer was not shareable): what it gets is kept as a peer's copy is.
    pub not_owner: bool,
    /// One of rampart's own requests from a peer (a probe, a purge), answered before routing.
    pub peer_control: bool,
}

/// What fetch reads and writes of a routed request ([`Txn::routed`]).
#[derive(Debug)]
pub struct Routed<'a> {
    pub route: &'a Route,
    pub log: Option<&'a mut AccessRecord>,
    pub conn: &'a ConnInfo,
    /// Where the origin's interim answers go (an HTTP/2 stream's own place, else the
    /// connection's).
    pub interim: Option<&'a Interim>,
    pub trace: Option<&'a mut RequestTrace>,
}

/// A GET miss: what lookup found, and this request's part in the fetch of its resource.
#[derive(Debug)]
pub struct Miss {
    /// The key, the client's directives, the rule's policy, the stale entry.
    pub found: Missed,
    /// This request leads the coalesced fetch of its resource (`None`: it fetches for itself,
    /// or has handed its lead over to the store).
    pub lead: Option<Lead>,
}

/// What a request that fetches for others holds until its response is stored or refused.
#[derive(Debug)]
pub struct Lead {
    /// The coalescer's guard: waiters are released when it is dropped.
    pub leader: Leader,
    /// The client's own range and preconditions, while the whole representation is fetched
    /// for the store (see `ranges.rs`).
    pub widened: Option<Box<Widened>>,
    /// This instance fetches for every instance (the shared tier's fetch lock).
    pub shared_lock: Option<Box<SharedLock>>,
}

impl Miss {
    pub fn new(found: Missed) -> Box<Miss> {
        Box::new(Miss { found, lead: None })
    }
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
            protocol: Protocol::Http1,
            compress: None,
            interim: None,
            trace: None,
            from_peer: false,
            not_owner: false,
            peer_control: false,
        }
    }

    /// The request's trace when it records spans (tracing is on and the trace is sampled).
    pub fn traced(&mut self) -> Option<&mut RequestTrace> {
        self.trace.as_mut().filter(|t| t.sampled())
    }

    /// The route recv found. Only called by stages after recv.
    pub fn route(&self) -> &Route {
        match &self.route {
            Some(r) => r,
            // invariant: the dispatcher runs no stage after recv without a route.
            None => unreachable!("stage ran before recv"),
        }
    }

    /// The route with the parts of the request fetch writes to while it reads the route: the
    /// access-log record, the connection's facts, where the origin's interim answers go, and
    /// the trace.
    pub fn routed(&mut self) -> Routed<'_> {
        match &self.route {
            Some(route) => Routed {
                route,
                log: self.log.as_deref_mut(),
                conn: &self.conn,
                interim: self.interim.as_deref().or(self.conn.interim.as_deref()),
                trace: self.trace.as_mut().filter(|t| t.sampled()),
            },
            // invariant: the dispatcher runs no stage after recv without a route.
            None => unreachable!("stage ran before recv"),
        }
    }

    /// The routed host (recv checked it is visible ASCII).
    pub fn host(&self) -> &str {
        self.route().host.to_str().unwrap_or_default()
    }

    /// The routed host's name: [`Txn::host`] without its port.
    pub fn host_name(&self) -> &str {
        let host = self.host();
        let name = host.get(..usize::from(self.route().name_len));
        debug_assert!(name.is_some(), "a name longer than its host");
        name.unwrap_or(host)
    }

    pub fn scheme(&self) -> Scheme {
        self.conn.scheme
    }

    /// What lookup found for a miss.
    pub fn missed(&self) -> Option<&Missed> {
        self.miss.as_ref().map(|m| &m.found)
    }

    /// The lead of a coalesced fetch, taken out of the miss (the store's decision is made).
    pub fn take_lead(&mut self) -> Option<Lead> {
        self.miss.as_mut().and_then(|m| m.lead.take())
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
