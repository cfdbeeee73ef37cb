//! fetch: the request made ready for the origin (hop-by-hop fields out, `Host`, forwarding
//! fields and `Via` in, rampart's validators when it revalidates a stale entry), sent to the
//! rule's upstreams in order, failing over to the next when one cannot be reached and the
//! request has no body (so it can be sent again).

use std::borrow::Cow;
use std::future::Future;
use std::time::{Instant, SystemTime};

use http::header::{HeaderValue, EXPECT, HOST, IF_MODIFIED_SINCE, IF_NONE_MATCH, TE};
use http::uri::Authority;
use http::{HeaderMap, Method, Request, Response, Uri, Version};
use rampart_cache::conditional;
use rampart_config::{OriginProtocol, RoutingMethod};

use crate::body::origin::OriginBody;
use crate::body::RequestBody;
use crate::error::{Chain, ProxyError};
use crate::headers::{add_forwarded, append_via, strip_hop_by_hop, wants_trailers};
use crate::origin::pool::{UpstreamSet, UpstreamState, ERROR_PENALTY};
use crate::pipeline::conn_info::{ConnInfo, Scheme};
use crate::pipeline::txn::{target, Mode, Txn};
use crate::pipeline::worker_state::Worker;

/// What fetch brings back.
#[derive(Debug)]
pub struct Fetched {
    pub res: Response<OriginBody>,
    /// The client's request headers (kept only when the response may be stored).
    pub req_headers: Option<HeaderMap>,
    pub request_time: SystemTime,
    pub downstream_version: Version,
    pub method: Method,
    /// The target of an unsafe request, which a success invalidates (RFC 9111 §4.4).
    pub unsafe_target: Option<String>,
    /// The request revalidated the stale entry with its validators (a 304 refreshes it).
    pub revalidating: bool,
}

/// Validators rampart adds when it revalidates a stale entry: `ETag`, `Last-Modified`.
type Validators = (Option<HeaderValue>, Option<HeaderValue>);

/// What fetch asks of [`send`] beyond sending the request.
#[derive(Debug, Default)]
pub struct Plan {
    /// Keep the client's request headers: the response may be stored.
    pub keep_headers: bool,
    /// rampart's validators, added to revalidate the stale entry.
    pub validators: Option<Validators>,
    /// Passed on to [`Fetched::unsafe_target`].
    pub unsafe_target: Option<String>,
    /// Ask the origin to switch to WebSocket (`Connection: upgrade`, `Upgrade: websocket`,
    /// which the hop-by-hop rewrite removed).
    pub upgrade: bool,
}

/// The fetch stage: revalidates a stale entry with its validators unless the client sent
/// preconditions of its own.
///
/// Not an `async fn`: what it decides needs no waiting, and the future is then `send`'s alone
/// (no second copy of the request in it).
pub fn fetch<'a>(
    w: &'a Worker,
    txn: &'a mut Txn,
    req: Request<RequestBody>,
) -> impl Future<Output = Result<Fetched, ProxyError>> + 'a {
    let unsafe_target =
        (w.cache.is_some() && !req.method().is_safe()).then(|| target(&req).to_owned());
    let client_conditionals = conditional::client_has_conditionals(req.headers());
    let stale = txn.miss.as_ref().and_then(|l| l.stale.as_ref());
    let validators = stale
        .filter(|_| !client_conditionals)
        .map(|s| conditional::validators(&s.headers));
    let plan = Plan {
        keep_headers: txn.miss.is_some(),
        validators,
        unsafe_target,
        upgrade: false,
    };
    send(w, txn, req, plan)
}

/// Sends `req` to the rule's upstreams, failing over on connect errors when it has no body.
///
/// Not an `async fn`: the request is rewritten before the future is made, which then holds
/// the rewritten request only (an `async fn` keeps its arguments for its whole life).
pub fn send<'a>(
    w: &'a Worker,
    txn: &'a mut Txn,
    req: Request<RequestBody>,
    plan: Plan,
) -> impl Future<Output = Result<Fetched, ProxyError>> + 'a {
    let (mut parts, body) = req.into_parts();
    let downstream_version = parts.version;
    let method = parts.method.clone();
    // invariant: the dispatcher fetches only after recv found a route.
    let Some(route) = &txn.route else {
        unreachable!("fetch before recv")
    };
    let conn = &txn.conn;
    // The request as the client made it (before any rewriting and before rampart's own
    // validators): lookup computes Vary variants from the client's headers, so storing must
    // too, and a revalidated entry answers the client's own request.
    let req_headers = plan.keep_headers.then(|| parts.headers.clone());
    let revalidating = plan.validators.is_some();
    // Room for the fields added below, made once: growing the map field by field rebuilds it
    // twice (~2,000 instructions a pass).
    parts.headers.reserve(8);
    rewrite_for_origin(
        &mut parts.headers,
        conn,
        &route.host,
        downstream_version,
        plan.validators,
    );
    if plan.upgrade {
        ask_for_websocket(&mut parts.headers);
    }
    // WebSocket handshakes are HTTP/1.1 whatever the origin's protocol.
    let http1_only = plan.upgrade;
    let resendable = matches!(body, RequestBody::Empty);
    // A copy to re-send after a connect failure; only for body-less requests to a rule with
    // more than one origin, so the common case clones nothing.
    let spare = (resendable && route.rule.upstreams.len() > 1).then(|| {
        (
            parts.method.clone(),
            parts.uri.clone(),
            parts.headers.clone(),
        )
    });
    parts.version = Version::HTTP_11;
    let first = Request::from_parts(parts, body);
    let request_time = SystemTime::now();
    let done = move |res| Fetched {
        res,
        req_headers,
        request_time,
        downstream_version,
        method,
        unsafe_target: plan.unsafe_target,
        revalidating,
    };

    // Returned as it is: wrapped in another `async` block, it would be moved once more per
    // request (~500 instructions of copying a pass).
    try_origins(w, txn, first, spare, http1_only, done)
}

/// Sends the request to the rule's origins in order until one answers (then `done` makes
/// what fetch brings back), failing over on a failed connection while a copy of the request
/// (`spare`, body-less requests only) is left.
async fn try_origins(
    w: &Worker,
    txn: &mut Txn,
    first: Request<RequestBody>,
    spare: Option<(Method, Uri, HeaderMap)>,
    http1_only: bool,
    done: impl FnOnce(Response<OriginBody>) -> Fetched,
) -> Result<Fetched, ProxyError> {
    let mut first = Some(first);
    let https = txn.scheme() == Scheme::Https;
    // Fields of `txn`, not `txn.route()`: the log record is written to while the route
    // is read.
    let Some(route) = &txn.route else {
        unreachable!("fetch before recv")
    };
    let upstreams = &route.rule.upstreams;
    // The last failure, for the client when no origin answers.
    let mut last_err = None;
    // A rule that sends PROXY headers: the one for this client (its connections are its
    // own; see `upstream::proxied_key`).
    let header = route.rule.config.send_proxy_protocol.map(|v| {
        let client = Some((txn.conn.peer, txn.conn.local));
        crate::net::proxy_protocol::encode(v, client)
    });
    for member in upstreams.order() {
        let (shown, sent) = match pool_key(member, https, header.as_deref()) {
            Ok((shown, key, scheme)) => {
                let tls = scheme.as_str() == "https";
                let req = match (first.take(), &spare) {
                    (Some(req), _) => req,
                    (None, Some((m, u, hm))) => rebuild(m, u, hm),
                    (None, None) => break,
                };
                if let Some(l) = txn.log.as_deref_mut() {
                    l.upstream = Some(shown.clone());
                }
                tracing::debug!(upstream = %shown, "fetch");
                let protocol = if http1_only {
                    OriginProtocol::Http1
                } else {
                    member.target.protocol
                };
                // 1xx answers go to the client whose request this is: never from a
                // background refresh (the connection is serving another request by then).
                let interim = txn
                    .conn
                    .interim
                    .as_deref()
                    .filter(|_| txn.mode == Mode::Client);
                // The response-head time: for the metrics, `Performance` and the access log.
                // (The future is made in the await: held in a local first, this future would
                // keep room for it twice.)
                let sent_at = Instant::now();
                let sent = w
                    .upstream
                    .send(req, &key, scheme, protocol, interim, http1_only)
                    .await;
                let took = sent_at.elapsed();
                if let Some(l) = txn.log.as_deref_mut() {
                    l.upstream_time = Some(took);
                }
                record(upstreams, member, tls, took, &sent);
                (shown, sent)
            }
            Err(e) => (&member.target.authority, Err(e)),
        };
        match sent {
            Ok(res) => {
                upstreams.mark_up(member);
                return Ok(done(res));
            }
            Err(e) if e.may_fail_over() => {
                tracing::warn!(upstream = %shown, error = %Chain(&e), "origin failed before the request was sent; marking it down");
                upstreams.mark_down(member);
                last_err = Some(e);
            }
            // The connection failed before any of the answer came (an origin killed or
            // restarted mid-request): a safe, body-less request goes to the next origin, as
            // NGINX's `proxy_next_upstream error` does. The origin is not marked down: its
            // next connection says whether it is.
            Err(e @ ProxyError::UpstreamProtocol(_))
                if spare.as_ref().is_some_and(|(m, _, _)| m.is_safe()) =>
            {
                tracing::warn!(upstream = %shown, error = %Chain(&e), "origin connection failed before the answer; trying the next origin");
                last_err = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last_err.unwrap_or_else(|| ProxyError::UpstreamConnect("no upstream".into())))
}

/// Asks the origin to switch to WebSocket (`Connection: upgrade`, `Upgrade: websocket`, which
/// the hop-by-hop rewrite removed).
fn ask_for_websocket(h: &mut HeaderMap) {
    h.insert(
        http::header::CONNECTION,
        HeaderValue::from_static("upgrade"),
    );
    h.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
}

/// `member`'s pool key for this request, with the name shown in logs and the scheme; a rule
/// that sends PROXY headers (`header`) keys each client's connections apart.
fn pool_key<'m>(
    member: &'m UpstreamState,
    https: bool,
    header: Option<&[u8]>,
) -> Result<(&'m Authority, Cow<'m, Authority>, http::uri::Scheme), ProxyError> {
    match header {
        None => UpstreamSet::route(member, https).map(|(s, k, sc)| (s, Cow::Borrowed(k), sc)),
        Some(h) => {
            UpstreamSet::route_proxied(member, https, h).map(|(s, k, sc)| (s, Cow::Owned(k), sc))
        }
    }
}

/// What one origin's answer (or failure) counts for: `Performance` routing's average and the
/// origin's metrics.
fn record(
    upstreams: &UpstreamSet,
    member: &UpstreamState,
    tls: bool,
    took: std::time::Duration,
    sent: &Result<Response<OriginBody>, ProxyError>,
) {
    if upstreams.method() == RoutingMethod::Performance {
        member.record(match sent {
            Ok(res) if !res.status().is_server_error() => took,
            _ => took.max(ERROR_PENALTY),
        });
    }
    member.stats(tls).request(sent.as_ref().map(|_| took));
}

/// The client's request fields made ready for the origin: hop-by-hop fields and `Expect` out,
/// `Host`, the forwarding fields and `Via` in, and rampart's validators when it revalidates.
fn rewrite_for_origin(
    h: &mut HeaderMap,
    conn: &ConnInfo,
    host: &HeaderValue,
    downstream_version: Version,
    validators: Option<Validators>,
) {
    // `TE: trailers` says the client takes trailer fields (gRPC requires it): the one TE
    // value that is passed on, to HTTP/2 origins (`Upstream::send` drops it for HTTP/1.1).
    // Only for HTTP/2 (and later) clients: rampart sends HTTP/1.1 clients no trailers.
    let trailers = downstream_version >= Version::HTTP_2 && wants_trailers(h);
    strip_hop_by_hop(h);
    if trailers {
        h.insert(TE, HeaderValue::from_static("trailers"));
    }
    // rampart answers `Expect: 100-continue` itself (hyper sends 100 when the body is read).
    h.remove(EXPECT);
    // The id the access log has (open_log put it in), the client's, or a new one.
    crate::telemetry::access_log::request_id(h);
    let host = crate::headers::origin_host(host);
    add_forwarded(
        h,
        &conn.client_ip_header,
        &host,
        conn.scheme.as_str(),
        &conn.local_port_header,
    );
    h.insert(HOST, host);
    append_via(h, downstream_version);
    if let Some((etag, last_modified)) = validators {
        if let Some(v) = etag {
            h.insert(IF_NONE_MATCH, v);
        }
        if let Some(v) = last_modified {
            h.insert(IF_MODIFIED_SINCE, v);
        }
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
