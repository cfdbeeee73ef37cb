//! recv: the first stage ([`recv`]). Answers that need no rule ([`local_answer`]: ACME
//! http-01, the management API), then the rule by host and the path policy ([`route`], over
//! the routing table in `policy/route.rs`), the HTTPS redirect, and screening ([`screen`]:
//! client, rate, size, SQL injection) before anything else happens; then `PURGE`, the
//! access-log record, the path rule's block, and the way on: WebSocket or the cache.

use rampart_head::{Request, Response};
use std::time::Duration;

use http::header::{HeaderValue, EXPECT, HOST};
use http::uri::PathAndQuery;
use http::{StatusCode, Uri, Version};
use rampart_cache::key::valid_host_name;

use crate::admin;
use crate::body::local::text;
use crate::body::{ProxyBody, RequestBody};
use crate::error::BodyFault;
use crate::error::ProxyError;
use crate::outcome::CacheOutcome;
use crate::pipeline::conn_info::Scheme;
use crate::pipeline::step::Step;
use crate::pipeline::synth;
use crate::pipeline::txn::{target, AnswerVars, Mode, Route, RouteExtras, Txn};
use crate::pipeline::websocket;
use crate::pipeline::worker_state::Worker;
use crate::policy::path;
use crate::policy::rewrite;
use crate::policy::route::PathDecision;
use crate::policy::route::Router;
use crate::telemetry::access_log::AccessRecord;
use crate::telemetry::metrics;

/// Where ACME http-01 challenges are fetched (RFC 8555 §8.3).
const ACME_CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";

/// How much of a refused body is read and dropped before answering 413, and for how long.
const LINGER_BYTES: u64 = 32 << 20;
const LINGER_TIME: Duration = Duration::from_secs(2);

/// The recv stage: the head's field count (HTTP/2, HTTP/3), the path in its normal form,
/// answers that need no rule (reloads and rule changes, ACME http-01, the management API), then
/// the rule, the HTTPS redirect, screening, `PURGE`, the access-log record and the path rule's
/// block. Next: [`Step::Lookup`], [`Step::WebSocket`], or [`Step::Done`] with a local answer.
pub async fn recv(
    w: &Worker,
    txn: &mut Txn,
    req: &mut Request<RequestBody>,
) -> Result<Step, ProxyError> {
    // HTTP/2 and HTTP/3 heads are bounded in bytes by their servers; the field count
    // `max_request_headers` sets is checked here (HTTP/1.1's parser applies it itself).
    if req.version() >= http::Version::HTTP_2 && req.headers().len() > w.max_headers {
        return Err(ProxyError::HeadTooLarge);
    }
    if w.fleet.is_some() {
        // Before the path is normalised: the signature is over the target as it was sent.
        if let Some(answer) = crate::pipeline::from_peer::peer_request(w, txn, req) {
            return answer;
        }
    }
    normalize_path(req)?;
    if txn.mode == Mode::Client && admin::is_control(&w.admin, req) {
        let req = std::mem::replace(req, Request::new(RequestBody::Empty));
        // Boxed: a configuration change is rare; every other request stays small.
        return Box::pin(admin::control(w.api(), req))
            .await
            .map(|res| Step::Done(Box::new(res)));
    }
    if let Some(answer) = local_answer(w, txn, req) {
        return answer.map(|res| Step::Done(Box::new(res)));
    }
    if may_be_shared_challenge(w, req) {
        if let Some(answer) = boxed!(shared_challenge(w, txn, req)).await {
            return answer.map(|res| Step::Done(Box::new(res)));
        }
    }
    txn.route = Some(route_as(&w.router, req, txn.scheme(), !txn.from_peer)?);
    if let Some(tracer) = w.tracer.as_deref() {
        txn.trace = Some(begin_trace(tracer, txn, req));
    }
    if txn.route().rule.extras.request_id {
        // The same id for the origin, the access log and the rules that name it.
        let id = crate::telemetry::access_log::request_id(req.headers_mut());
        let extras = txn.route.as_mut().and_then(|r| r.extras.as_mut());
        if let Some(vars) = extras.and_then(|e| e.answer_vars.as_mut()) {
            vars.request_id = Some(id);
        }
    }
    let metrics = metrics::get();
    if metrics.watched() && txn.mode == Mode::Client {
        metrics.seen(txn.host(), req.uri().path());
    }
    if let Some(redirect) = redirect_to_https(txn, req, w.https_port) {
        if txn.trace.is_some() {
            // Before screening: the client as screening would read it.
            let client = w.screen.client_ip(txn.conn.client_ip, req.headers());
            trace_addresses(txn, client);
        }
        return Ok(Step::Done(Box::new(redirect)));
    }
    if let Err(e) = screen(w, txn, req).await {
        if txn.trace.is_some() {
            trace_addresses(txn, txn.client);
        }
        open_log(w, txn, req);
        remember_refusal(txn, req, &e);
        return Err(e);
    }
    if txn.trace.is_some() {
        trace_addresses(txn, txn.client);
        if let Some(t) = txn.traced() {
            t.event("recv", &[("rampart.screening", "passed".into())]);
        }
    }
    if admin::is_purge(req.method()) {
        let purge = admin::Purge {
            client: txn.conn.client_ip,
            host: txn.host(),
            target: target(req),
            ignore_query: txn.route().rule.config.ignore_query_string,
        };
        // Boxed: it may wait for the disk tier's purge log; every other request stays small.
        return Box::pin(admin::purge_method(w.api(), purge, req.headers()))
            .await
            .map(|res| Step::Done(Box::new(res)));
    }
    open_log(w, txn, req);
    let extras = txn.route.as_mut().and_then(|r| r.extras.as_mut());
    if let Some((status, location)) = extras.and_then(|e| e.redirect.take()) {
        tracing::debug!(path = req.uri().path(), location, "redirected");
        return Ok(Step::Done(Box::new(synth::redirect(status, &location))));
    }
    if txn.route().decision == PathDecision::Block {
        tracing::info!(host = ?txn.route().host, path = req.uri().path(), "blocked by path rule");
        txn.outcome = Some(CacheOutcome::Blocked);
        remember_refusal(txn, req, &ProxyError::BlockedByPathRule);
        return Err(ProxyError::BlockedByPathRule);
    }
    // A switch to WebSocket passes to the origin and may become a tunnel.
    if let Some(kind) = websocket::wants(req) {
        return Ok(Step::WebSocket(kind));
    }
    // A reverse proxy opens no tunnels of its own choosing (as NGINX: 400).
    if req.method() == http::Method::CONNECT {
        return Err(ProxyError::BadRequest(
            "CONNECT is only served for WebSocket over HTTP/2",
        ));
    }
    Ok(Step::Lookup)
}

/// The request's trace (the client's continued, or a new one) and, when it is recorded, the
/// server span's name and request attributes (HTTP's semantic conventions).
fn begin_trace(
    tracer: &rampart_otel::Tracer,
    txn: &Txn,
    req: &Request<RequestBody>,
) -> rampart_otel::RequestTrace {
    let h = req.headers();
    let mut t = tracer.begin(
        h.get_all(&rampart_otel::TRACEPARENT),
        || h.get_all(&rampart_otel::TRACESTATE),
        txn.conn.client_ip,
        txn.start,
    );
    if !t.sampled() {
        return t;
    }
    let rule = txn.domain();
    // HTTP's conventions: a method outside the standard ones is `_OTHER` (the span is named
    // `HTTP …`), so a client cannot make a name per request; what it sent is kept beside.
    match known_method(req.method()) {
        Some(m) => {
            t.name(m, rule);
            t.attr("http.request.method", m);
        }
        None => {
            t.name("HTTP", rule);
            t.attr("http.request.method", "_OTHER");
            t.attr("http.request.method_original", req.method().as_str());
        }
    }
    if txn.mode == Mode::Refresh {
        t.attr("rampart.refresh", true);
    }
    let version = match req.version() {
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        _ => "1.1",
    };
    t.attrs(&[
        ("http.route", rule.into()),
        ("url.path", req.uri().path().into()),
        ("url.scheme", txn.scheme().as_str().into()),
        ("server.address", txn.host_name().into()),
        ("server.port", txn.conn.local.port().into()),
        ("network.protocol.version", version.into()),
    ]);
    if let Some(ua) = h.get(http::header::USER_AGENT) {
        t.attr(
            "user_agent.original",
            rampart_otel::Value::Bytes(ua.as_bytes()),
        );
    }
    t
}

/// The client's address (known once screening has read `X-Forwarded-For` from a trusted
/// proxy) and the TCP peer's, in the server span: one formatting when they are the same.
#[inline(never)]
fn trace_addresses(txn: &mut Txn, client: std::net::IpAddr) {
    let peer = txn.conn.peer.ip();
    let Some(t) = txn.traced() else {
        return;
    };
    let client_text = rampart_otel::IpText::new(&client);
    let peer_text = (peer != client).then(|| rampart_otel::IpText::new(&peer));
    t.attrs(&[
        ("client.address", client_text.value()),
        (
            "network.peer.address",
            peer_text.as_ref().unwrap_or(&client_text).value(),
        ),
    ]);
}

/// The name of a standard method (RFC 9110 and PATCH), as a constant; `None` for any other.
fn known_method(m: &http::Method) -> Option<&'static str> {
    use http::Method;
    let known = [
        Method::GET,
        Method::HEAD,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::OPTIONS,
        Method::PATCH,
        Method::CONNECT,
        Method::TRACE,
    ];
    const NAMES: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT", "TRACE",
    ];
    known.iter().position(|k| k == m).map(|i| NAMES[i])
}

/// Starts the access-log record when logging is on for the rule (client requests only),
/// with the request's id (the client's, or a new one put in the request for the origin).
#[inline]
fn open_log(w: &Worker, txn: &mut Txn, req: &mut Request<RequestBody>) {
    let route = txn.route();
    if w.access_log && txn.mode == Mode::Client && route.rule.config.enable_logging {
        let id = crate::telemetry::access_log::request_id(req.headers_mut());
        let record = AccessRecord::new(
            w.access.clone(),
            txn.start,
            txn.client,
            txn.scheme().as_str(),
            &route.host,
            req,
            id,
        );
        txn.log = Some(Box::new(record));
    }
}

/// Keeps a screening or path-rule refusal for the dashboard's list (and the trace).
fn remember_refusal<B>(txn: &mut Txn, req: &Request<B>, e: &ProxyError) {
    let Some(reason) = metrics::BlockReason::of(e) else {
        return;
    };
    if let Some(t) = txn.trace.as_mut().filter(|t| t.sampled()) {
        // A screening refusal comes before the `recv` event; a path rule's after it.
        let detail = e.to_string();
        t.event(
            "refused",
            &[
                ("rampart.refusal", reason.label().into()),
                ("rampart.refusal.detail", detail.as_str().into()),
            ],
        );
    }
    metrics::get().remember_refusal(metrics::Refusal {
        time: std::time::SystemTime::now(),
        client: txn.client,
        host: txn.host().to_owned(),
        path: req.uri().path().to_owned(),
        reason: reason.label(),
    });
}

/// Requests rampart answers before routing: ACME http-01 challenges and, when an `api_key` is
/// set, the management API under `/_rampart/`.
pub fn local_answer(
    w: &Worker,
    txn: &Txn,
    req: &Request<RequestBody>,
) -> Option<Result<Response<ProxyBody>, ProxyError>> {
    if let Some(store) = &w.acme {
        if let Some(token) = req.uri().path().strip_prefix(ACME_CHALLENGE_PREFIX) {
            if let Some(answer) = store.http_challenge(token) {
                tracing::info!(client = %txn.client, "answered an ACME http-01 challenge");
                return Some(Ok(text(StatusCode::OK, answer)));
            }
        }
    }
    if txn.mode == Mode::Client
        && (w.admin.api_key.is_some() || !w.admin.metrics_allow.is_empty())
        && req.uri().path().starts_with(admin::ADMIN_PREFIX)
    {
        return admin::admin_request(w.api(), txn.conn.client_ip, req);
    }
    None
}

/// An ACME http-01 challenge that another instance's order published in Redis (this one's
/// own are answered by [`local_answer`]); `None` when there is none, and the request goes on.
pub async fn shared_challenge(
    w: &Worker,
    txn: &Txn,
    req: &Request<RequestBody>,
) -> Option<Result<Response<ProxyBody>, ProxyError>> {
    let shared = w.shared.as_ref().filter(|s| s.config().certificates)?;
    let token = req.uri().path().strip_prefix(ACME_CHALLENGE_PREFIX)?;
    match shared.http_challenge(token).await {
        Ok(Some(answer)) => {
            tracing::info!(client = %txn.client, "answered an ACME http-01 challenge (from Redis)");
            Some(Ok(text(StatusCode::OK, answer)))
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(error = %e, "cannot look up an ACME challenge in Redis");
            None
        }
    }
}

/// Whether [`shared_challenge`] may have an answer (checked first: it costs nothing).
pub fn may_be_shared_challenge<B>(w: &Worker, req: &Request<B>) -> bool {
    w.acme.is_some() && w.shared.is_some() && req.uri().path().starts_with(ACME_CHALLENGE_PREFIX)
}

/// Finds the rule by host; decides its redirect, or makes its rewrite; and applies the path
/// policy to the path [`normalize_path`] made (rewritten: path rules and the cache key see the
/// path the origin gets).
pub fn route<B>(
    router: &Router,
    req: &mut Request<B>,
    scheme: Scheme,
) -> Result<Route, ProxyError> {
    route_as(router, req, scheme, true)
}

/// [`route`]; `paths`: the rule's redirects and rewrites apply (not to a peer's request: the
/// peer applied them).
fn route_as<B>(
    router: &Router,
    req: &mut Request<B>,
    scheme: Scheme,
    paths: bool,
) -> Result<Route, ProxyError> {
    // RFC 9112 §3.2.2: an absolute-form target's authority wins over Host; HTTP/2 carries
    // the host in :authority, which hyper puts in the URI.
    let host = match req.uri().authority() {
        Some(a) => {
            HeaderValue::from_str(a.as_str()).map_err(|_| ProxyError::BadRequest("authority"))?
        }
        None => req
            .headers()
            .get(HOST)
            .cloned()
            .ok_or(ProxyError::MissingHost)?,
    };
    // A host the key would read differently from the origin is refused (see
    // `valid_host_name`); what passes is visible ASCII.
    let Some(name_len) = valid_host_name(host.as_bytes()) else {
        return Err(ProxyError::BadRequest("invalid Host"));
    };
    let host_str = host.to_str().map_err(|_| ProxyError::BadRequest("host"))?;
    let rule = router
        .find_name(&host_str[..name_len])
        .ok_or_else(|| ProxyError::NoRoute(host_str.to_owned()))?
        .clone();
    let mut extras = None;
    if rule.extras.paths && paths {
        extras = redirect_or_rewrite(&rule.config, req, scheme, &host)?;
    }
    let (decision, path_rule) = rule.decide_with(&path::match_form(req.uri().path()));
    if rule.extras.answer_rules
        && rewrite::rules(&rule.config, path_rule, true)
            .next()
            .is_some()
    {
        extras
            .get_or_insert_with(Box::<RouteExtras>::default)
            .answer_vars = Some(AnswerVars {
            request_id: None,
            path: req.uri().path().into(),
            query: req.uri().query().unwrap_or("").into(),
        });
    }
    tracing::debug!(domain = rule.config.domain_text, ?decision, "routed");
    Ok(Route {
        rule,
        host,
        // A valid name is at most 255 bytes.
        name_len: name_len as u8,
        decision,
        path_rule: path_rule.map(|i| i as u32),
        extras,
    })
}

/// A rule's redirects (the first that matches is answered after screening) and rewrites (the
/// first that matches changes the path now, normalised again).
#[inline(never)]
fn redirect_or_rewrite<B>(
    c: &rampart_config::RuleConfig,
    req: &mut Request<B>,
    scheme: Scheme,
    host: &HeaderValue,
) -> Result<Option<Box<RouteExtras>>, ProxyError> {
    if !c.redirects.is_empty() {
        // `{host}`: the name the cache key and the origin's `Host` have.
        let host = crate::headers::origin_host(host);
        let vars = rewrite::Vars {
            client_ip: None,
            scheme: scheme.as_str(),
            host: host.to_str().unwrap_or(""),
            request_id: None,
            path: req.uri().path(),
            query: req.uri().query().unwrap_or(""),
        };
        if let Some(r) = rewrite::redirect(&c.redirects, &vars) {
            return Ok(Some(Box::new(RouteExtras {
                redirect: Some(r),
                answer_vars: None,
            })));
        }
    }
    if let Some(to) = rewrite::rewrite(&c.rewrites, req.uri().path()) {
        tracing::debug!(from = req.uri().path(), to, "rewritten");
        set_path(req, &to)?;
        normalize_path(req)?;
    }
    Ok(None)
}

/// Puts `path` in place of the request's path (the query stays).
fn set_path<B>(req: &mut Request<B>, path: &str) -> Result<(), ProxyError> {
    let bad = || ProxyError::BadRequest("a rewrite made a path that is not a valid request target");
    let pq = match req.uri().query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let mut parts = req.uri().clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(pq).map_err(|_| bad())?);
    *req.uri_mut() = Uri::from_parts(parts).map_err(|_| bad())?;
    Ok(())
}

/// Rewrites the request target's path into its normal form (the query is kept as sent).
/// The first thing recv does: every decision after it (the management prefix, ACME, path
/// rules, the cache key) reads the path the origin will get, so `/%5frampart/` or
/// `/x/../_rampart/` cannot slip past a check the raw path would fail.
///
/// An absolute-form target with an empty path (`http://host?q`) has the path `/`: the origin
/// gets `/?q`, the target the rules and `{path}` saw, never `?q`.
#[inline]
pub fn normalize_path<B>(req: &mut Request<B>) -> Result<(), ProxyError> {
    let normal = path::normalize(req.uri().path())
        .map_err(|_| ProxyError::BadRequest("malformed percent-encoding in the path"))?;
    let empty_path = target(req).starts_with('?');
    let normal = match normal {
        Some(n) => n,
        None if empty_path => "/".to_owned(),
        None => return Ok(()),
    };
    let mut parts = req.uri().clone().into_parts();
    let pq = match req.uri().query() {
        Some(q) => format!("{normal}?{q}"),
        None => normal,
    };
    parts.path_and_query =
        Some(PathAndQuery::try_from(pq).map_err(|_| ProxyError::BadRequest("request target"))?);
    *req.uri_mut() =
        Uri::from_parts(parts).map_err(|_| ProxyError::BadRequest("request target"))?;
    Ok(())
}

/// `redirect_to_https`: `redirect_to_https_status` (308 by default) to the same host and target on the HTTPS listener.
pub fn redirect_to_https<B>(
    txn: &Txn,
    req: &Request<B>,
    https_port: Option<u16>,
) -> Option<Response<ProxyBody>> {
    if txn.scheme() != Scheme::Http || !txn.route().rule.config.redirect_to_https {
        return None;
    }
    let name = txn.host_name();
    let port = match https_port {
        Some(443) | None => String::new(),
        Some(p) => format!(":{p}"),
    };
    let location = format!("https://{name}{port}{}", target(req));
    let status = StatusCode::from_u16(txn.route().rule.config.redirect_to_https_status)
        .unwrap_or(StatusCode::PERMANENT_REDIRECT);
    Some(synth::redirect(status, &location))
}

/// Screening (see `policy/screening.rs`), for client requests: resolves the client address, checks the
/// head, and reads and screens a form or JSON body when SQL-injection screening is on (the
/// streamed body is then replaced with the bytes read). A refusal is labelled `Block`.
pub async fn screen(
    w: &Worker,
    txn: &mut Txn,
    req: &mut Request<RequestBody>,
) -> Result<(), ProxyError> {
    // A peer's request has its client's fields and address (`from_peer`): the same client.
    txn.client = w.screen.client_ip(txn.conn.client_ip, req.headers());
    if txn.from_peer {
        // Screened by the peer.
        return Ok(());
    }
    if txn.mode != Mode::Client {
        return Ok(());
    }
    let screened = screen_request(w, txn, req).await;
    if let Err(e) = &screened {
        txn.outcome = Some(CacheOutcome::Blocked);
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
    }
    screened
}

async fn screen_request(
    w: &Worker,
    txn: &Txn,
    req: &mut Request<RequestBody>,
) -> Result<(), ProxyError> {
    let rule = &txn.route().rule;
    let kind = w.screen.check_head(rule, txn.client, req).await?;
    let limit = w.screen.body_limit(rule);
    req.body_mut().set_limit(limit);
    if let (Some(kind), RequestBody::Stream(_)) = (kind, req.body()) {
        // Screening reads the body into memory: never without a bound, even when the
        // body limit is off.
        let cap = crate::policy::screening::MAX_INSPECTED_BODY;
        let max = limit.map_or(cap, |l| l.min(cap));
        req.body_mut().set_limit(Some(max));
        // Reserve the memory first: the declared length, or the most it may be.
        let declared = crate::headers::content_length(req.headers());
        let permit = w
            .screen
            .reserve_inspection(declared.unwrap_or(max).min(max), w.body_limits.idle)
            .await?;
        let body = std::mem::replace(req.body_mut(), RequestBody::Empty);
        let bytes = body
            .collect()
            .await
            .map_err(|e| ProxyError::ClientBody(e.0))?;
        let content_type = req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .map_or(&b""[..], HeaderValue::as_bytes);
        w.screen.check_body(
            rule,
            txn.client,
            req.uri().path(),
            kind,
            content_type,
            &bytes,
        )?;
        *req.body_mut() = RequestBody::Full(Some(bytes), Some(permit));
    }
    // A gRPC call to an HTTP/2 origin: its stream may wait for the server before it sends
    // (bidirectional calls), so it starts as it is, and may last as long as the call (pauses
    // are still bounded). Only where a gRPC server can be (a rule with an HTTP/2 origin): the
    // header alone must not lift an upload's limits.
    if crate::headers::is_grpc(req.headers())
        && rule
            .origins
            .members()
            .iter()
            .any(|m| m.target.protocol != rampart_config::OriginProtocol::Http1)
    {
        req.body_mut().without_total_timeout();
        return Ok(());
    }
    req.body_mut()
        .prime()
        .await
        .map_err(|e| ProxyError::ClientBody(e.0))
}

#[cfg(test)]
mod stage_tests {
    use super::*;

    fn router() -> Router {
        let src = "[[proxy_rules]]\ndomain = \"example.com\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 1\n";
        let v = rampart_config::validate(src, 1);
        let c = v.config.unwrap_or_else(|| panic!("{:?}", v.diagnostics));
        Router::new(&c)
    }

    #[test]
    fn route_by_authority_then_host() {
        let r = router();
        let req = Request::get("/a").header(HOST, "Example.com:8080").body(());
        let found =
            route(&r, &mut req.unwrap_or_default(), Scheme::Http).map_err(|e| e.to_string());
        assert_eq!(
            found.map(|r| r.host),
            Ok(HeaderValue::from_static("Example.com:8080"))
        );
        // An absolute-form target's authority wins over Host.
        let req = Request::get("http://example.com/a")
            .header(HOST, "other.org")
            .body(());
        assert!(route(&r, &mut req.unwrap_or_default(), Scheme::Http).is_ok());
        let mut req = Request::get("/a").body(()).unwrap_or_default();
        assert!(matches!(
            route(&r, &mut req, Scheme::Http),
            Err(ProxyError::MissingHost)
        ));
        // Cache poisoning through the port: nothing but digits after the colon.
        for bad in [
            "example.com:@evil.com",
            "example.com:abc",
            "example.com:'\"><x>",
        ] {
            let req = Request::get("/a").header(HOST, bad).body(());
            let err = route(&r, &mut req.unwrap_or_default(), Scheme::Http).err();
            assert!(
                matches!(err, Some(ProxyError::BadRequest(_))),
                "{bad}: {err:?}"
            );
        }
        let req = Request::get("/a").header(HOST, "other.org").body(());
        let err = route(&r, &mut req.unwrap_or_default(), Scheme::Http)
            .err()
            .map(|e| e.status());
        assert_eq!(err, Some(StatusCode::NOT_FOUND));
    }
}
