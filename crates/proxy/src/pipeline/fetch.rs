//! fetch: the request made ready for the origin (hop-by-hop fields out, `Host`, forwarding
//! fields (`X-Forwarded-*`, `Forwarded`) and `Via` in, rampart's validators when it revalidates a stale entry), sent to the
//! rule's upstreams in order, failing over to the next when one cannot be reached and the
//! request has no body (so it can be sent again).

use std::borrow::Cow;
use std::future::Future;
use std::time::{Instant, SystemTime};

use http::header::{HeaderValue, FORWARDED, HOST, IF_MODIFIED_SINCE, IF_NONE_MATCH, TE};
use http::request::Parts;
use http::uri::Authority;
use http::{HeaderMap, Method, Request, Response, Version};
use rampart_cache::conditional;
use rampart_config::{OriginProtocol, RoutingMethod};

use crate::body::origin::OriginBody;
use crate::body::RequestBody;
use crate::error::{Chain, ProxyError};
use crate::headers::{
    forwarded, forwarded_element, forwarded_for, via_value, wants_trailers, X_FORWARDED_FOR,
    X_FORWARDED_HOST, X_FORWARDED_PORT, X_FORWARDED_PROTO,
};
use crate::origin::fields::{OriginFields, Outgoing};
use crate::origin::pool::{UpstreamSet, UpstreamState, ERROR_PENALTY};
use crate::pipeline::conn_info::{ConnInfo, Scheme};
use crate::pipeline::txn::{target, Mode, Txn};
use crate::pipeline::worker_state::Worker;
use crate::policy::rewrite;
use crate::telemetry::access_log;

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
/// Not an `async fn`: fetch's changes to the request are decided before the future is made,
/// which then holds the request and those changes only (an `async fn` keeps its arguments for
/// its whole life).
pub fn send<'a>(
    w: &'a Worker,
    txn: &'a mut Txn,
    req: Request<RequestBody>,
    plan: Plan,
) -> impl Future<Output = Result<Fetched, ProxyError>> + 'a {
    let (head, body) = req.into_parts();
    let downstream_version = head.version;
    // invariant: the dispatcher fetches only after recv found a route.
    let Some(route) = &txn.route else {
        unreachable!("fetch before recv")
    };
    // The client's fields stay as the client sent them (before rampart's own validators):
    // lookup computes Vary variants from them, so storing must too, and a revalidated entry
    // answers the client's own request. fetch's changes go beside them.
    // Looked up only for a client that sent a `Forwarded` list to extend.
    let trusted = head.headers.contains_key(FORWARDED) && w.screen.trusts(txn.conn.client_ip);
    let mut fields = for_origin(
        &head.headers,
        &txn.conn,
        &route.host,
        downstream_version,
        trusted,
        plan.validators.as_ref(),
    );
    if plan.upgrade {
        ask_for_websocket(&mut fields);
    }
    // The rule's request field rules (and its path rule's), after rampart's own: they win.
    let rule = &route.rule.config;
    if route.rule.extras.request_rules
        && rewrite::rules(rule, route.path_rule(), false)
            .next()
            .is_some()
    {
        let id = fields
            .get(&access_log::X_REQUEST_ID)
            .or_else(|| access_log::usable_request_id(&head.headers))
            .cloned();
        // The name `for_origin` put in `Host`.
        let host = fields
            .get(&HOST)
            .cloned()
            .unwrap_or_else(|| crate::headers::origin_host(&route.host));
        let vars = rewrite::Vars {
            client_ip: Some(txn.client),
            scheme: txn.conn.scheme.as_str(),
            host: host.to_str().unwrap_or(""),
            request_id: id.as_ref(),
            path: head.uri.path(),
            query: head.uri.query().unwrap_or(""),
        };
        rewrite::to_origin(
            rewrite::rules(rule, route.path_rule(), false),
            &mut fields,
            &vars,
        );
    }
    let keep_headers = plan.keep_headers;
    let revalidating = plan.validators.is_some();
    // WebSocket handshakes are HTTP/1.1 whatever the origin's protocol.
    let http1_only = plan.upgrade;
    let request_time = SystemTime::now();
    let done = move |res, head: Parts| Fetched {
        res,
        req_headers: keep_headers.then_some(head.headers),
        request_time,
        downstream_version,
        method: head.method,
        unsafe_target: plan.unsafe_target,
        revalidating,
    };

    // Returned as it is: wrapped in another `async` block, it would be moved once more per
    // request (~500 instructions of copying a pass).
    try_origins(w, txn, head, fields, body, http1_only, done)
}

/// Sends the request to the rule's origins in order until one answers (then `done` makes
/// what fetch brings back), failing over on a failed connection when the request has no body
/// (it is then sent again from the same head).
async fn try_origins(
    w: &Worker,
    txn: &mut Txn,
    head: Parts,
    fields: OriginFields,
    body: RequestBody,
    http1_only: bool,
    done: impl FnOnce(Response<OriginBody>, Parts) -> Fetched,
) -> Result<Fetched, ProxyError> {
    let https = txn.scheme() == Scheme::Https;
    // Fields of `txn`, not `txn.route()`: the log record is written to while the route
    // is read.
    let Some(route) = &txn.route else {
        unreachable!("fetch before recv")
    };
    let upstreams = &route.rule.upstreams;
    // Sent again after a failed connection: body-less requests to a rule with more than one
    // origin (with one, `order` may offer it again when it is down: fail open).
    let resendable = matches!(body, RequestBody::Empty) && upstreams.len() > 1;
    let mut body = Some(body);
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
                let body = match body.take() {
                    Some(b) => b,
                    None if resendable => RequestBody::Empty,
                    None => break,
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
                let req = Outgoing {
                    head: &head,
                    fields: &fields,
                    body,
                };
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
                return Ok(done(res, head));
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
            Err(e @ ProxyError::UpstreamProtocol(_)) if resendable && head.method.is_safe() => {
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
fn ask_for_websocket(f: &mut OriginFields) {
    f.set(
        http::header::CONNECTION,
        HeaderValue::from_static("upgrade"),
    );
    f.set(http::header::UPGRADE, HeaderValue::from_static("websocket"));
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

/// fetch's changes to the client's fields for the origin ([`OriginFields`]: the hop-by-hop
/// fields, those the client's `Connection` names and `Expect` stay behind): `Host`, the
/// forwarding fields and `Via`, the request id
/// when the client sent none usable, and rampart's validators when it revalidates.
/// `trusted`: the client is one of the `trusted_proxies`, whose `Forwarded` list is extended.
fn for_origin(
    client: &HeaderMap,
    conn: &ConnInfo,
    host: &HeaderValue,
    downstream_version: Version,
    trusted: bool,
    validators: Option<&Validators>,
) -> OriginFields {
    let mut f = OriginFields::for_client(client);
    let host = crate::headers::origin_host(host);
    f.set(HOST, host.clone());
    // `TE: trailers` says the client takes trailer fields (gRPC requires it): the one TE
    // value that is passed on, to HTTP/2 origins (the HTTP/1.1 client never sends TE).
    // Only for HTTP/2 (and later) clients: rampart sends HTTP/1.1 clients no trailers.
    if downstream_version >= Version::HTTP_2 && wants_trailers(client) {
        f.set(TE, HeaderValue::from_static("trailers"));
    }
    // The id the access log has (open_log put it in), the client's, or a new one. A field
    // the client's `Connection` names is not the client's to pass on: neither its id nor its
    // forwarding list is used then.
    let id = &access_log::X_REQUEST_ID;
    if f.drops(id) || access_log::usable_request_id(client).is_none() {
        f.set(id.clone(), access_log::new_request_id());
    }
    let xff = if f.drops(&X_FORWARDED_FOR) {
        conn.client_ip_header.clone()
    } else {
        forwarded_for(client, &conn.client_ip_header)
    };
    f.set(X_FORWARDED_FOR.clone(), xff);
    f.set(
        X_FORWARDED_PROTO.clone(),
        HeaderValue::from_static(conn.scheme.as_str()),
    );
    f.set(X_FORWARDED_HOST.clone(), host.clone());
    f.set(X_FORWARDED_PORT.clone(), conn.local_port_header.clone());
    // RFC 7239 says what the X-Forwarded-* fields say, host and scheme included: the client's
    // goes on only from a trusted proxy (and not when its `Connection` names it).
    let own = forwarded_element(
        conn.client_ip,
        &conn.client_ip_header,
        conn.scheme.as_str(),
        &host,
    );
    let extend = trusted && !f.drops(&FORWARDED);
    f.set(FORWARDED, forwarded(client, own, extend));
    f.set(http::header::VIA, via_value(downstream_version));
    if let Some((etag, last_modified)) = validators {
        if let Some(v) = etag {
            f.set(IF_NONE_MATCH, v.clone());
        }
        if let Some(v) = last_modified {
            f.set(IF_MODIFIED_SINCE, v.clone());
        }
    }
    f
}
