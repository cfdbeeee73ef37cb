//! The request pipeline: recv → lookup → hit | miss | pass → fetch → deliver (+ store) | synth.
//!
//! [`Pipeline::handle`] is the outer handler: it runs the stages, turns any [`ProxyError`] into
//! its synthetic response (the map lives in `synth`), and attaches the access-log record. Stages
//! never build error responses themselves.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use std::sync::atomic::Ordering;

use crate::body::ClientBody;
use http::header::{
    HeaderValue, EXPECT, HOST, IF_MODIFIED_SINCE, IF_NONE_MATCH, STRICT_TRANSPORT_SECURITY,
};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use rampart_cache::conditional;
use rampart_cache::store::Object;

use crate::admin;
use crate::body::{BodyFault, BodyLimits, ProxyBody, RequestBody};
use crate::coalesce::{InflightBody, Role, SharedHead};
use crate::fetch::{Upstream, UpstreamSet};
use crate::headers::{add_forwarded, append_via, strip_hop_by_hop};
use crate::log::AccessRecord;
use crate::lookup::{self, Cache, CacheLabel, Found, Served};
use crate::ranges::{self, Widened};
use crate::recv::{PathDecision, Router, Rule};
use crate::screen::Screen;
use crate::synth::{self, ProxyError};
use rampart_cache::policy::{Heuristic, RulePolicy};
use rampart_cache::targeted::CDN_CACHE_CONTROL;
use rampart_cache::vary::Vary;
use rampart_config::{AdminConfig, CacheHeuristic};
use rampart_tls::store::CertStore;

/// Per-connection facts the pipeline needs, computed once at accept.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub client_ip: IpAddr,
    /// `client_ip` pre-rendered for `X-Forwarded-For`.
    pub client_ip_header: HeaderValue,
    /// `"http"` or `"https"`.
    pub proto: &'static str,
}

impl ConnInfo {
    pub fn new(client_ip: IpAddr, proto: &'static str) -> Self {
        // invariant: an IP address renders as ASCII digits, dots, colons and hex letters.
        #[allow(clippy::unwrap_used)]
        let client_ip_header = HeaderValue::from_str(&client_ip.to_string()).unwrap();
        ConnInfo {
            client_ip,
            client_ip_header,
            proto,
        }
    }
}

/// One worker's pipeline: shared routing table, worker-local upstream pool.
#[derive(Debug)]
pub struct Pipeline {
    router: Arc<Router>,
    upstream: Upstream,
    cache: Option<Arc<Cache>>,
    access_log: bool,
    /// How long past its freshness a stored response may stand in for a failing origin.
    grace: Duration,
    admin: Arc<AdminConfig>,
    screen: Arc<Screen>,
    /// Idle and total timeouts for client request bodies (the size limit is per rule).
    body_limits: BodyLimits,
    /// Where ACME http-01 answers are (`None` without automatic certificates).
    acme: Option<Arc<CertStore>>,
    /// The HTTPS port named in redirects (`None` = no HTTPS listener).
    https_port: Option<u16>,
}

/// Where ACME http-01 challenges are fetched (RFC 8555 §8.3).
const ACME_CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";

/// How much of a refused body is read and dropped before answering 413, and for how long.
const LINGER_BYTES: u64 = 32 << 20;
const LINGER_TIME: Duration = Duration::from_secs(2);

/// Who a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A client's request.
    Client,
    /// A background refresh (stale-while-revalidate): revalidate and store, never log.
    Refresh,
}

/// What recv decided about a request.
struct Recv {
    rule: Arc<Rule>,
    host: HeaderValue,
    decision: PathDecision,
}

impl Pipeline {
    pub fn new(
        router: Arc<Router>,
        upstream: Upstream,
        cache: Option<Arc<Cache>>,
        screen: Arc<Screen>,
        config: &rampart_config::Config,
        acme: Option<Arc<CertStore>>,
        https_port: Option<u16>,
    ) -> Self {
        Pipeline {
            router,
            upstream,
            cache,
            access_log: config.add_logging,
            grace: config.cache.grace,
            admin: Arc::new(config.admin.clone()),
            screen,
            body_limits: BodyLimits {
                // The size limit is the rule's, set once routing has found it.
                max: None,
                idle: config.downstream.body_idle_timeout,
                total: config.downstream.body_total_timeout,
            },
            acme,
            https_port,
        }
    }

    /// `redirect_to_https`: 308 to the same host and target on the HTTPS listener.
    fn redirect_to_https(&self, recv: &Recv, req: &Request<RequestBody>) -> Response<ProxyBody> {
        let host = recv.host.to_str().unwrap_or_default();
        // Drop the port (keeping IPv6 brackets).
        let name = match host.rfind(':') {
            Some(i) if !host[i..].contains(']') => &host[..i],
            _ => host,
        };
        let port = match self.https_port {
            Some(443) | None => String::new(),
            Some(p) => format!(":{p}"),
        };
        let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
        synth::redirect(
            StatusCode::PERMANENT_REDIRECT,
            &format!("https://{name}{port}{pq}"),
        )
    }

    /// Handles one request end to end. Never fails: errors become synthetic responses.
    pub async fn handle(
        self: &Arc<Self>,
        conn: &Arc<ConnInfo>,
        req: Request<ClientBody>,
    ) -> Response<ProxyBody> {
        let limits = self.body_limits;
        self.run(
            conn,
            req.map(|b| RequestBody::from_client(b, limits)),
            Mode::Client,
        )
        .await
    }

    async fn run(
        self: &Arc<Self>,
        conn: &Arc<ConnInfo>,
        req: Request<RequestBody>,
        mode: Mode,
    ) -> Response<ProxyBody> {
        let start = Instant::now();
        if let Some(store) = &self.acme {
            if let Some(token) = req.uri().path().strip_prefix(ACME_CHALLENGE_PREFIX) {
                if let Some(answer) = store.http_challenge(token) {
                    tracing::info!(client = %conn.client_ip, "answered an ACME http-01 challenge");
                    return synth::text(StatusCode::OK, answer);
                }
            }
        }
        if mode == Mode::Client
            && self.admin.api_key.is_some()
            && req.uri().path().starts_with(admin::ADMIN_PREFIX)
        {
            let (path, query) = (req.uri().path(), req.uri().query());
            if let Some(res) = admin::admin_request(
                &self.admin,
                self.cache.as_deref(),
                req.method(),
                path,
                query,
                req.headers(),
            ) {
                return res;
            }
        }
        let recv = match self.recv(&req) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(client = %conn.client_ip, uri = %req.uri(), error = %e, "request refused");
                return e.to_response();
            }
        };
        if conn.proto == "http" && recv.rule.config.redirect_to_https {
            return self.redirect_to_https(&recv, &req);
        }
        let hsts = match conn.proto {
            "https" => recv.rule.hsts.clone(),
            _ => None,
        };
        let mut res = self.routed(conn, req, mode, start, recv).await;
        if let Some(v) = hsts {
            res.headers_mut().insert(STRICT_TRANSPORT_SECURITY, v);
        }
        res
    }

    /// The request has a rule: screening, purge, lookup, fetch, deliver.
    async fn routed(
        self: &Arc<Self>,
        conn: &Arc<ConnInfo>,
        mut req: Request<RequestBody>,
        mode: Mode,
        start: Instant,
        recv: Recv,
    ) -> Response<ProxyBody> {
        // recv: screening (client, rate, size, SQL injection) before anything else happens.
        let client = self.screen.client_ip(conn.client_ip, req.headers());
        if mode == Mode::Client {
            if let Err(e) = self.screen_request(&recv, client, &mut req).await {
                if let ProxyError::ClientBody(BodyFault::TooLarge) = e {
                    // An HTTP/1.1 client that is still sending would see the connection reset
                    // before it reads the 413; read (and drop) a bounded amount first, as
                    // NGINX's lingering close does. Not for `Expect: 100-continue` (that
                    // client waits) and not for HTTP/2 (streams are reset on their own).
                    let expects = req.headers().contains_key(EXPECT);
                    if !expects && req.version() <= Version::HTTP_11 {
                        let body = std::mem::replace(req.body_mut(), RequestBody::Empty);
                        body.discard(LINGER_BYTES, LINGER_TIME).await;
                    }
                }
                let log = (self.access_log && recv.rule.config.enable_logging).then(|| {
                    Box::new(AccessRecord::new(
                        start, client, conn.proto, &recv.host, &req,
                    ))
                });
                return finish(refused(&e, client, &recv), log, CacheLabel::Block);
            }
        }
        if admin::is_purge(req.method()) {
            let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
            let host = recv.host.to_str().unwrap_or_default();
            let ignore_query = recv.rule.config.ignore_query_string;
            return admin::purge_method(
                &self.admin,
                self.cache.as_deref(),
                conn.client_ip,
                req.headers(),
                host,
                pq,
                ignore_query,
            );
        }
        let log = (mode == Mode::Client && self.access_log && recv.rule.config.enable_logging)
            .then(|| {
                Box::new(AccessRecord::new(
                    start, client, conn.proto, &recv.host, &req,
                ))
            });
        let mut label = match recv.decision {
            PathDecision::Block => {
                tracing::info!(host = ?recv.host, path = req.uri().path(), "blocked by path rule");
                let res = refused(&ProxyError::BlockedByPathRule, client, &recv);
                return finish(res, log, CacheLabel::Block);
            }
            PathDecision::Bypass => CacheLabel::Bypass,
            PathDecision::Cacheable { .. } | PathDecision::Dynamic => CacheLabel::Dynamic,
        };

        // lookup → hit | miss | pass
        let mut miss = None;
        let mut looked_up = false;
        if let (Some(cache), PathDecision::Cacheable { max_age_seconds }) =
            (&self.cache, recv.decision)
        {
            let method = req.method();
            let head = method == Method::HEAD;
            if max_age_seconds > 0 && (method == Method::GET || head) {
                let rule = &recv.rule.config;
                let policy = RulePolicy {
                    default_ttl: Duration::from_secs(max_age_seconds),
                    override_origin: rule.max_age_overrides_origin,
                    heuristic: match rule.cache_heuristic {
                        CacheHeuristic::MaxAge => Heuristic::MaxAge,
                        CacheHeuristic::LastModified => Heuristic::LastModified,
                        CacheHeuristic::None => Heuristic::None,
                    },
                    store_set_cookie: rule.store_set_cookie,
                };
                let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
                let host = recv.host.to_str().unwrap_or_default();
                let refresh = mode == Mode::Refresh;
                let https_key =
                    conn.proto == "https" && recv.rule.config.origins_differ_by_scheme();
                looked_up = true;
                match cache.lookup(
                    host,
                    pq,
                    recv.rule.config.ignore_query_string,
                    https_key,
                    req.headers(),
                    policy,
                    refresh,
                ) {
                    Found::Hit(obj) => {
                        let (res, label) = if req.version() == Version::HTTP_2 {
                            lookup::respond(&obj, req.headers(), head, Served::Fresh)
                        } else {
                            lookup::respond_h1(&obj, req.headers(), head, Served::Fresh)
                        };
                        return finish(res, log, label);
                    }
                    Found::Miss(l) => {
                        if l.directives.only_if_cached {
                            let mut res = ProxyError::NotCached.to_response();
                            lookup::label(
                                res.headers_mut(),
                                CacheLabel::Miss,
                                "rampart; fwd=miss; detail=only-if-cached",
                            );
                            return finish(res, log, CacheLabel::Miss);
                        }
                        if let Some(stale) = l.stale.as_ref().filter(|_| mode == Mode::Client) {
                            if lookup::stale_while_revalidate_allows(stale, &l, SystemTime::now()) {
                                if !stale.refreshing.swap(true, Ordering::Relaxed) {
                                    self.refresh_in_background(conn, &req, stale.clone());
                                }
                                let (res, label) = lookup::respond(
                                    stale,
                                    req.headers(),
                                    head,
                                    Served::StaleWhileRevalidate,
                                );
                                return finish(res, log, label);
                            }
                        }
                        label = if l.forced {
                            CacheLabel::Bypass
                        } else if l.stale.is_some() {
                            CacheLabel::Expired
                        } else {
                            CacheLabel::Miss
                        };
                        // HEAD misses are passed; only a GET response can be stored.
                        if !head {
                            miss = Some(l);
                        }
                    }
                }
            }
        }

        // A range miss becomes a shared whole-object fetch (see `ranges.rs`).
        let mut widened = match (&self.cache, &miss) {
            (Some(cache), Some(l)) if mode == Mode::Client => Widened::new(&mut req, cache, l),
            _ => None,
        };

        // Coalescing: one origin request per resource at a time; later misses wait for it.
        let mut leader = None;
        if let (Some(cache), Some(l)) = (&self.cache, &miss) {
            // A client-forced refresh (no-cache) fetches for itself; so do requests for a range
            // or with preconditions, which a shared full 200 would not answer.
            // An authorised request must not get a response fetched for somebody else.
            let shared_answer_fits = !req.headers().contains_key(http::header::RANGE)
                && !req.headers().contains_key(http::header::AUTHORIZATION)
                && !conditional::client_has_conditionals(req.headers());
            if !l.forced && (shared_answer_fits || mode == Mode::Refresh) {
                match cache.coalescer().join(&l.key) {
                    Role::Leader(g) => leader = Some(g),
                    // Somebody is already fetching it: nothing to refresh.
                    Role::Waiter(_) if mode == Mode::Refresh => {
                        return ProxyError::NotCached.to_response()
                    }
                    Role::Waiter(inflight) => {
                        let wait = self.upstream.timeout().unwrap_or(Duration::from_secs(45));
                        if let Some(head) = inflight.wait_head(wait).await {
                            let same_variant = match &head.vary {
                                Vary::None => true,
                                v => v
                                    .variant_key(req.headers())
                                    .is_some_and(|k| Some(&k) == head.variant.as_ref()),
                            };
                            if same_variant {
                                let mut headers = head.headers.clone();
                                let (status, body) = ranges::cut_range(
                                    widened.as_ref().map(|w| &w.headers),
                                    head.status,
                                    &mut headers,
                                    InflightBody::new(inflight, head.length),
                                    head.length,
                                );
                                let mut res = Response::new(body);
                                *res.status_mut() = status;
                                *res.headers_mut() = headers;
                                lookup::label(
                                    res.headers_mut(),
                                    CacheLabel::Miss,
                                    "rampart; fwd=miss; collapsed",
                                );
                                return finish(res, log, CacheLabel::Miss);
                            }
                        } else {
                            // Released: the leader may have refreshed the entry (304) — look again.
                            let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
                            let host = recv.host.to_str().unwrap_or_default();
                            if let Found::Hit(obj) = cache.lookup(
                                host,
                                pq,
                                recv.rule.config.ignore_query_string,
                                l.key.is_https(),
                                req.headers(),
                                l.policy,
                                false,
                            ) {
                                let client_headers =
                                    widened.as_ref().map_or(req.headers(), |w| &w.headers);
                                let (res, label) = if req.version() == Version::HTTP_2 {
                                    lookup::respond(&obj, client_headers, false, Served::Fresh)
                                } else {
                                    lookup::respond_h1(&obj, client_headers, false, Served::Fresh)
                                };
                                return finish(res, log, label);
                            }
                        }
                        // Released (or another variant): fetch on our own.
                    }
                }
            }
        }

        // Only a leader's fetch can go on for the store after the client's range is sent.
        if leader.is_none() {
            if let Some(w) = widened.take() {
                w.restore(&mut req);
            }
        }

        // pass → fetch, revalidating a stale entry with its validators.
        let method = req.method().clone();
        let unsafe_target = (self.cache.is_some() && !method.is_safe()).then(|| {
            req.uri()
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned())
        });
        let client_conditionals = conditional::client_has_conditionals(req.headers());
        let revalidating = miss
            .as_ref()
            .and_then(|l| l.stale.as_ref())
            .filter(|_| !client_conditionals);
        let validators = revalidating.map(|s| conditional::validators(&s.headers));
        let mut log = log;
        let fetched = self
            .pass(
                conn,
                &recv,
                req,
                miss.is_some(),
                validators,
                log.as_deref_mut(),
            )
            .await;
        let stale = miss.as_ref().and_then(|l| l.stale.clone());
        let fetched = match fetched {
            Ok(f) => f,
            Err(e) => {
                // A client body that broke (too large, too slow, malformed) while it streamed
                // to the origin is the client's failure.
                if let ProxyError::ClientBody(_) = e {
                    return finish(refused(&e, client, &recv), log, CacheLabel::Block);
                }
                tracing::error!(
                    domain = recv.rule.config.domain_text,
                    side = e.side().as_str(),
                    status = e.status().as_u16(),
                    error = %e,
                    "upstream request failed"
                );
                if let Some(stale) = stale
                    .filter(|s| lookup::stale_if_error_allows(s, SystemTime::now(), self.grace))
                {
                    // The request was sent on: only a widened range request's headers remain.
                    let none = HeaderMap::new();
                    let client_headers = widened.as_ref().map_or(&none, |w| &w.headers);
                    let (res, label) =
                        lookup::respond(&stale, client_headers, false, Served::StaleIfError);
                    return finish(res, log, label);
                }
                return finish(origin_error(&e, label), log, label);
            }
        };
        let response_time = SystemTime::now();
        let status = fetched.res.status();

        if let (Some(cache), Some(pq)) = (&self.cache, unsafe_target) {
            if status.is_success() || status.is_redirection() {
                invalidate_after_unsafe(cache, &recv, &pq, fetched.res.headers());
            }
        }

        // The origin confirmed the stale entry (304): freshen it and answer from it.
        if let (Some(cache), Some(l), Some(stale), Some(req_headers)) =
            (&self.cache, &miss, &stale, &fetched.req_headers)
        {
            if status == StatusCode::NOT_MODIFIED && revalidating.is_some() {
                let obj = cache.freshen(
                    l,
                    stale,
                    req_headers,
                    fetched.res.headers(),
                    fetched.request_time,
                    response_time,
                );
                let client_headers = widened.as_ref().map_or(req_headers, |w| &w.headers);
                let (res, label) =
                    lookup::respond(&obj, client_headers, false, Served::Revalidated);
                return finish(res, log, label);
            }
            // The origin is failing: a stale entry may stand in (stale-if-error, grace).
            if matches!(status.as_u16(), 500 | 502 | 503 | 504)
                && lookup::stale_if_error_allows(stale, response_time, self.grace)
            {
                tracing::warn!(
                    status = status.as_u16(),
                    domain = recv.rule.config.domain_text,
                    "origin error; serving stale"
                );
                let client_headers = widened.as_ref().map_or(req_headers, |w| &w.headers);
                let (res, label) =
                    lookup::respond(stale, client_headers, false, Served::StaleIfError);
                return finish(res, log, label);
            }
        }

        // deliver (+ store)
        let (mut parts, mut body) = downstream(fetched.res, fetched.downstream_version);
        let mut ticket = None;
        // A request that was never looked up (path policy, method, caching off) bypassed it.
        let mut cache_status = if label == CacheLabel::Bypass || !looked_up {
            "rampart; fwd=bypass"
        } else {
            "rampart; fwd=uri-miss"
        };
        if let (Some(cache), Some(l), Some(req_headers)) =
            (&self.cache, &miss, &fetched.req_headers)
        {
            match cache.prepare_store(
                l,
                &method,
                req_headers,
                parts.status,
                &parts.headers,
                fetched.request_time,
                response_time,
            ) {
                Ok(t) => {
                    ticket = Some(t);
                    cache_status = match label {
                        CacheLabel::Expired => "rampart; fwd=stale; stored",
                        CacheLabel::Bypass => "rampart; fwd=request; stored",
                        _ => "rampart; fwd=miss; stored",
                    };
                }
                Err(why) => {
                    tracing::debug!(reason = why.as_str(), "response not stored");
                    if label != CacheLabel::Bypass {
                        label = CacheLabel::Dynamic;
                    }
                    cache_status = "rampart; fwd=miss";
                }
            }
        }
        // rampart is the CDN cache `CDN-Cache-Control` targets (RFC 9213): it stops here.
        if self.cache.is_some() {
            parts.headers.remove(&CDN_CACHE_CONTROL);
        }
        let mut length = crate::headers::content_length(&parts.headers);
        // A widened range request whose whole representation is not shareable (not storable,
        // or of unknown length): ask the origin again, for the range this time.
        let shared = ticket.is_some() && leader.is_some() && length.is_some();
        if let (Some(cache), Some(l), false) = (&self.cache, &miss, shared) {
            if let Some(w) = widened.take().filter(|_| parts.status == StatusCode::OK) {
                cache.refuse_widening(&l.key);
                drop((body, ticket.take(), leader.take()));
                let again = self.pass(conn, &recv, w.request(), false, None, log.as_deref_mut());
                let fetched = match again.await {
                    Ok(f) => f,
                    Err(e) => return finish(origin_error(&e, label), log, label),
                };
                (parts, body) = downstream(fetched.res, fetched.downstream_version);
                parts.headers.remove(&CDN_CACHE_CONTROL);
                length = crate::headers::content_length(&parts.headers);
                if label != CacheLabel::Bypass {
                    label = CacheLabel::Dynamic;
                }
                cache_status = "rampart; fwd=miss";
            }
        }
        let body = match (ticket, leader, length) {
            // Storable with a known length: waiters stream the leader's fetch with it.
            (Some(t), Some(leader), Some(length)) => {
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
                let fetch = leader.publish(head, body, t, self.upstream.timeout());
                let (status, body) = ranges::cut_range(
                    widened.as_ref().map(|w| &w.headers),
                    parts.status,
                    &mut parts.headers,
                    fetch,
                    length,
                );
                parts.status = status;
                body
            }
            // Otherwise the leader guard is dropped here, releasing any waiters at once.
            (Some(t), _, _) => ProxyBody::tee(body, t),
            (None, _, _) => ProxyBody::stream(body),
        };
        lookup::label(&mut parts.headers, label, cache_status);
        finish(Response::from_parts(parts, body), log, label)
    }

    /// stale-while-revalidate: refreshes `stale` with a background request built from this one
    /// (same host, target and headers, no body); the response is stored, not sent anywhere.
    fn refresh_in_background(
        self: &Arc<Self>,
        conn: &Arc<ConnInfo>,
        req: &Request<RequestBody>,
        stale: Arc<Object>,
    ) {
        let mut bg = Request::new(RequestBody::Empty);
        *bg.method_mut() = Method::GET;
        *bg.uri_mut() = req.uri().clone();
        *bg.version_mut() = req.version();
        let mut headers = req.headers().clone();
        // The refresh wants the whole representation: none of the client's preconditions/ranges.
        for name in [
            http::header::IF_NONE_MATCH,
            http::header::IF_MODIFIED_SINCE,
            http::header::IF_MATCH,
            http::header::IF_UNMODIFIED_SINCE,
            http::header::IF_RANGE,
            http::header::RANGE,
        ] {
            headers.remove(name);
        }
        *bg.headers_mut() = headers;
        let (me, conn) = (self.clone(), conn.clone());
        tokio::spawn(async move {
            // Boxed: `run` spawning `run` would otherwise be an infinitely sized future.
            let fut: std::pin::Pin<
                Box<dyn std::future::Future<Output = Response<ProxyBody>> + Send>,
            > = Box::pin(async move { me.run(&conn, bg, Mode::Refresh).await });
            let mut body = fut.await.into_body();
            // Drain it so a teed body reaches the store.
            while let Some(frame) = body.frame().await {
                if frame.is_err() {
                    break;
                }
            }
            stale.refreshing.store(false, Ordering::Relaxed);
        });
    }

    /// recv's screening stage (see `screen.rs`); reads and screens a form or JSON body when
    /// SQL-injection screening is on, replacing the streamed body with the bytes read.
    async fn screen_request(
        &self,
        recv: &Recv,
        client: IpAddr,
        req: &mut Request<RequestBody>,
    ) -> Result<(), ProxyError> {
        let kind = self.screen.check_head(&recv.rule, client, req)?;
        let limit = self.screen.body_limit(&recv.rule);
        req.body_mut().set_limit(limit);
        if let (Some(kind), RequestBody::Stream(_)) = (kind, req.body()) {
            // Screening reads the body into memory: never without a bound, even when the
            // body limit is off.
            let cap = crate::screen::MAX_INSPECTED_BODY;
            let max = limit.map_or(cap, |l| l.min(cap));
            req.body_mut().set_limit(Some(max));
            // Reserve the memory first: the declared length, or the most it may be.
            let declared = crate::headers::content_length(req.headers());
            let permit = self
                .screen
                .reserve_inspection(declared.unwrap_or(max).min(max), self.body_limits.idle)
                .await?;
            let body = std::mem::replace(req.body_mut(), RequestBody::Empty);
            let bytes = body
                .collect()
                .await
                .map_err(|e| ProxyError::ClientBody(e.0))?;
            self.screen
                .check_body(&recv.rule, client, req.uri().path(), kind, &bytes)?;
            *req.body_mut() = RequestBody::Full(Some(bytes), Some(permit));
        }
        req.body_mut()
            .prime()
            .await
            .map_err(|e| ProxyError::ClientBody(e.0))
    }

    /// recv: find the rule by host and apply the path policy.
    fn recv<B>(&self, req: &Request<B>) -> Result<Recv, ProxyError> {
        // RFC 9112 §3.2.2: an absolute-form target's authority wins over Host; HTTP/2 carries
        // the host in :authority, which hyper puts in the URI.
        let host = match req.uri().authority() {
            Some(a) => HeaderValue::from_str(a.as_str())
                .map_err(|_| ProxyError::BadRequest("authority"))?,
            None => req
                .headers()
                .get(HOST)
                .cloned()
                .ok_or(ProxyError::MissingHost)?,
        };
        let host_str = host.to_str().map_err(|_| ProxyError::BadRequest("host"))?;
        let rule = self
            .router
            .find(host_str)
            .ok_or_else(|| ProxyError::NoRoute(host_str.to_owned()))?
            .clone();
        let decision = rule.decide(req.uri().path());
        Ok(Recv {
            rule,
            host,
            decision,
        })
    }

    /// pass → fetch: forward to the rule's upstreams, failing over on connect errors when the
    /// request has no body (so it can be sent again).
    async fn pass(
        &self,
        conn: &ConnInfo,
        recv: &Recv,
        req: Request<RequestBody>,
        keep_headers: bool,
        validators: Option<(Option<HeaderValue>, Option<HeaderValue>)>,
        mut log: Option<&mut AccessRecord>,
    ) -> Result<Fetched, ProxyError> {
        let (mut parts, body) = req.into_parts();
        let downstream_version = parts.version;
        let h = &mut parts.headers;
        // The request as the client made it (before any rewriting and before rampart's own
        // validators): lookup computes Vary variants from the client's headers, so storing must
        // too, and a revalidated entry answers the client's own request.
        let req_headers = keep_headers.then(|| h.clone());
        strip_hop_by_hop(h);
        // rampart answers `Expect: 100-continue` itself (hyper sends 100 when the body is read).
        h.remove(EXPECT);
        h.insert(HOST, recv.host.clone());
        add_forwarded(h, &conn.client_ip_header, &recv.host, conn.proto);
        append_via(h, downstream_version);
        if let Some((etag, last_modified)) = validators {
            if let Some(v) = etag {
                h.insert(IF_NONE_MATCH, v);
            }
            if let Some(v) = last_modified {
                h.insert(IF_MODIFIED_SINCE, v);
            }
        }

        let upstreams = &recv.rule.upstreams;
        let resendable = matches!(body, RequestBody::Empty);
        // A copy to re-send after a connect failure; only for body-less requests to a rule with
        // more than one origin, so the common case clones nothing.
        let spare = (resendable && upstreams.len() > 1).then(|| {
            (
                parts.method.clone(),
                parts.uri.clone(),
                parts.headers.clone(),
            )
        });
        parts.version = Version::HTTP_11;
        let request_time = SystemTime::now();
        let mut first = Some(Request::from_parts(parts, body));

        let mut last_err = None;
        for member in upstreams.order() {
            let req = match (first.take(), &spare) {
                (Some(req), _) => req,
                (None, Some((m, u, hm))) => rebuild(m, u, hm),
                (None, None) => break,
            };
            let (shown, sent) = match UpstreamSet::route(member, conn.proto == "https") {
                Ok((shown, key, scheme)) => {
                    if let Some(l) = log.as_deref_mut() {
                        l.upstream = Some(shown.clone());
                    }
                    (shown, self.upstream.send(req, key, scheme).await)
                }
                Err(e) => (&member.target.authority, Err(e)),
            };
            match sent {
                Ok(res) => {
                    upstreams.mark_up(member);
                    return Ok(Fetched {
                        res,
                        req_headers,
                        request_time,
                        downstream_version,
                    });
                }
                Err(e) if e.may_fail_over() => {
                    tracing::warn!(upstream = %shown, error = %e, "origin failed before the request was sent; marking it down");
                    upstreams.mark_down(member);
                    last_err = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| ProxyError::UpstreamConnect("no upstream".into())))
    }
}

fn rebuild(method: &Method, uri: &Uri, headers: &HeaderMap) -> Request<RequestBody> {
    let mut req = Request::new(RequestBody::Empty);
    *req.method_mut() = method.clone();
    *req.uri_mut() = uri.clone();
    *req.version_mut() = Version::HTTP_11;
    *req.headers_mut() = headers.clone();
    req
}

/// What fetch brings back.
struct Fetched {
    res: Response<Incoming>,
    /// The request headers as sent to the origin (kept only when the response may be stored).
    req_headers: Option<HeaderMap>,
    request_time: SystemTime,
    downstream_version: Version,
}

/// RFC 9111 §4.4: a successful unsafe request invalidates its target and the `Location` and
/// `Content-Location` URIs on the same host.
fn invalidate_after_unsafe(cache: &Cache, recv: &Recv, pq: &str, res_headers: &HeaderMap) {
    let Ok(host) = recv.host.to_str() else { return };
    let ignore_query = recv.rule.config.ignore_query_string;
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
            Some(a) => crate::recv::strip_port(a.as_str())
                .eq_ignore_ascii_case(crate::recv::strip_port(host)),
        };
        if same_host {
            if let Some(p) = uri.path_and_query() {
                cache.invalidate(host, p.as_str(), ignore_query);
            }
        }
    }
}

/// The response to a request refused by screening or policy: the error's status, labelled
/// `Block`. Body failures are logged here; other refusals where they were decided.
fn refused(e: &ProxyError, client: IpAddr, recv: &Recv) -> Response<ProxyBody> {
    if let ProxyError::ClientBody(_) = e {
        tracing::info!(%client, domain = recv.rule.config.domain_text, error = %e, status = e.status().as_u16(), "request body refused");
    }
    let mut res = e.to_response();
    lookup::label(
        res.headers_mut(),
        CacheLabel::Block,
        "rampart; fwd=bypass; detail=blocked",
    );
    res
}

fn finish(
    mut res: Response<ProxyBody>,
    log: Option<Box<AccessRecord>>,
    cache: CacheLabel,
) -> Response<ProxyBody> {
    if let Some(mut log) = log {
        log.status = res.status().as_u16();
        log.cache = cache.as_str();
        res.body_mut().set_log(log);
    }
    res
}

/// An origin response's head made ready for the client: hop-by-hop fields out, `Via` in, the
/// client's HTTP version.
fn downstream(res: Response<Incoming>, version: Version) -> (http::response::Parts, Incoming) {
    let (mut parts, body) = res.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    append_via(&mut parts.headers, parts.version);
    parts.version = version;
    (parts, body)
}

/// rampart's own 502/504 for an origin failure, with the label decided for the request.
fn origin_error(e: &ProxyError, label: CacheLabel) -> Response<ProxyBody> {
    let mut res = e.to_response();
    lookup::label(
        res.headers_mut(),
        label,
        "rampart; fwd=miss; detail=origin-error",
    );
    res
}
