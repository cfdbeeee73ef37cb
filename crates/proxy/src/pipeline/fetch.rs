//! fetch: the request made ready for the origin (hop-by-hop fields out, `Host`, forwarding
//! fields (`X-Forwarded-*`, `Forwarded`) and `Via` in, rampart's validators when it revalidates
//! a stale entry, the rule's request field rules), then sent to the rule's origins
//! (`origin/failover.rs`: their order, failover, health marking, the latency average).

use rampart_head::{Fields, Request, Response};
use std::future::Future;
use std::time::SystemTime;

use http::header::{HeaderValue, FORWARDED, HOST, IF_MODIFIED_SINCE, IF_NONE_MATCH, TE};
use http::{Method, Version};
use rampart_cache::conditional;
use rampart_head::request::Parts;

use crate::body::origin::OriginBody;
use crate::body::RequestBody;
use crate::error::ProxyError;
use crate::headers::{
    forwarded, forwarded_element, forwarded_for, via_value, wants_trailers, X_FORWARDED_FOR,
    X_FORWARDED_HOST, X_FORWARDED_PORT, X_FORWARDED_PROTO,
};
use crate::origin::failover::{self, Attempt};
use crate::origin::fields::OriginFields;
use crate::pipeline::conn_info::{ConnInfo, Scheme};
use crate::pipeline::txn::{target, Mode, Route, Txn};
use crate::pipeline::worker_state::Worker;
use crate::policy::rewrite;
use crate::telemetry::access_log;

/// What fetch brings back.
#[derive(Debug)]
pub struct Fetched {
    pub res: Response<OriginBody>,
    /// The client's request headers (kept only when the response may be stored).
    pub req_headers: Option<Fields>,
    pub request_time: SystemTime,
    pub downstream_version: Version,
    pub method: Method,
    /// The target of an unsafe request, which a success invalidates (RFC 9111 §4.4).
    pub unsafe_target: Option<String>,
    /// The request revalidated the stale entry with its validators (a 304 refreshes it).
    pub revalidating: bool,
    /// The answer is the fleet's owner's of the key, not the origin's.
    pub from_owner: bool,
}

/// Validators rampart adds when it revalidates a stale entry: `ETag`, `Last-Modified`.
type Validators = (Option<HeaderValue>, Option<HeaderValue>);

/// What fetch asks of [`send`] beyond sending the request.
#[derive(Debug, Default)]
pub struct Plan<'p> {
    /// Keep the client's request headers: the response may be stored.
    pub keep_headers: bool,
    /// rampart's validators, added to revalidate the stale entry.
    pub validators: Option<Validators>,
    /// Passed on to [`Fetched::unsafe_target`].
    pub unsafe_target: Option<String>,
    /// Ask the origin to switch to WebSocket (`Connection: upgrade`, `Upgrade: websocket`,
    /// which the hop-by-hop rewrite removed).
    pub upgrade: bool,
    /// Ask this member of the fleet (the key's owner, `origin/fleet/`), not the rule's
    /// origins.
    pub peer: Option<&'p crate::origin::fleet::Member>,
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
    let stale = txn.missed().and_then(|l| l.stale.as_ref());
    let validators = stale
        .filter(|_| !client_conditionals)
        .map(|s| conditional::validators(&s.headers));
    let plan = Plan {
        keep_headers: txn.miss.is_some(),
        validators,
        unsafe_target,
        upgrade: false,
        peer: None,
    };
    send(w, txn, req, plan)
}

/// Asks the fleet's member `peer`, the owner of the miss's key, for a copy of `req` (the
/// request stays here for the origin, should the owner fail): with the client's fields and
/// `X-Rampart-Peer` ([`for_peer`]). `Err(())`: the owner failed, or refused this instance's signature,
/// and is marked down for a while.
pub async fn from_peer(
    w: &Worker,
    txn: &mut Txn,
    req: &Request<RequestBody>,
    peer: std::sync::Arc<crate::origin::fleet::Member>,
) -> Result<Fetched, ()> {
    let mut copy = Request::new(RequestBody::Empty);
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    let plan = Plan {
        keep_headers: true,
        peer: Some(&peer),
        ..Plan::default()
    };
    let Some(fleet) = w.fleet.clone() else {
        return Err(());
    };
    // An owner whose answer's head is late may be fetching from a slow origin for the whole
    // fleet (wait for it), or stalled (go to the origin).
    let sent = {
        let sending = send(w, txn, copy, plan);
        tokio::pin!(sending);
        match tokio::time::timeout(fleet.timeout, &mut sending).await {
            Ok(sent) => sent,
            Err(_) if fleet.alive(&peer).await => sending.await,
            Err(_) => Err(ProxyError::OriginTimeout),
        }
    };
    let failed = match sent {
        // Refused by the owner's screening, which a peer's request skips: its signature (or
        // the instances' configurations) did not agree.
        Ok(f) if f.res.status() == http::StatusCode::FORBIDDEN && label(&f) == Some("Block") => {
            "it refused this instance's request: are cache_peer_key and cache_peers the same on every instance?".to_owned()
        }
        Ok(f) => {
            let label = label(&f);
            // A range (or precondition) the owner was sent as the client sent it, and could
            // not keep whole: this URL's next ones go to the origin from here for a while, as
            // a widened miss whose whole answer could not be stored does, not through the owner
            // each time.
            if matches!(label, Some("Dynamic" | "Bypass"))
                && crate::pipeline::ranges::would_widen(req.headers())
            {
                if let (Some(cache), Some(m)) = (&w.cache, txn.missed()) {
                    cache.refuse_widening(&m.key);
                }
            }
            let hit = label == Some("Hit");
            txn.outcome = Some(crate::outcome::CacheOutcome::Peer { hit });
            return Ok(f);
        }
        Err(e) => crate::error::Chain(&e).to_string(),
    };
    tracing::warn!(peer = %peer.addr, error = failed, "peer failed; asking the origin, and not this peer for a while");
    peer.origins.mark_all_down();
    Err(())
}

/// What the owner's cache did (its `X-Arc2-Cache`).
fn label(f: &Fetched) -> Option<&str> {
    f.res
        .headers()
        .get(&crate::outcome::X_ARC2_CACHE)
        .and_then(|v| v.to_str().ok())
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
    plan: Plan<'a>,
) -> impl Future<Output = Result<Fetched, ProxyError>> + 'a {
    let (head, body) = req.into_parts();
    let downstream_version = head.version;
    // The client's fields stay as the client sent them (before rampart's own validators):
    // lookup computes Vary variants from them, so storing must too, and a revalidated entry
    // answers the client's own request. fetch's changes go beside them.
    let peer = plan.peer;
    let fleet = peer.and(w.fleet.as_deref());
    let mut fields = match fleet {
        Some(_) => for_peer(&head.headers, &txn.route().host),
        None => {
            // Looked up only for a client that sent a `Forwarded` list to extend.
            let trusted =
                head.headers.contains_key(FORWARDED) && w.screen.trusts(txn.conn.client_ip);
            for_origin(
                &head.headers,
                &txn.conn,
                &txn.route().host,
                downstream_version,
                trusted,
                plan.validators.as_ref(),
            )
        }
    };
    if plan.upgrade {
        ask_for_websocket(&mut fields);
    }
    if let Some(t) = txn.trace.as_mut() {
        trace_context(t, &head.headers, &mut fields);
    }
    // The rule's request field rules (and its path rule's), after rampart's own: they win.
    // Not toward a peer: the owner applies them, once, on its way to the origin.
    let route = txn.route();
    if route.rule.extras.request_rules && fleet.is_none() {
        field_rules(route, txn.client, txn.conn.scheme, &head, &mut fields);
    }
    if let Some(f) = fleet {
        // Signed over what the owner reads: the method, `Host` as sent, and the target.
        let host = fields.get(&HOST).map_or(&b""[..], HeaderValue::as_bytes);
        let target = head.uri.path_and_query().map_or("/", |p| p.as_str());
        let marked = crate::origin::fleet::Marked {
            purpose: crate::origin::fleet::Purpose::Forward,
            https: txn.conn.scheme == Scheme::Https,
            client: txn.conn.client_ip_header.as_bytes(),
            port: txn.conn.local_port_header.as_bytes(),
        };
        let marker = f.sign(&marked, head.method.as_str(), host, target);
        fields.replace(crate::origin::fleet::X_RAMPART_PEER.clone(), marker);
    }
    let keep_headers = plan.keep_headers;
    let revalidating = plan.validators.is_some();
    let from_owner = fleet.is_some();
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
        from_owner,
    };

    // A peer is asked over HTTP (the client's scheme is in `X-Rampart-Peer`).
    let https = txn.scheme() == Scheme::Https && fleet.is_none();
    let client_request = txn.mode == Mode::Client;
    let crate::pipeline::txn::Routed {
        route,
        log,
        conn,
        interim,
        trace,
    } = txn.routed();
    // A rule that sends PROXY headers: the one for this client (not to a peer).
    let proxy_header = route
        .rule
        .config
        .send_proxy_protocol
        .filter(|_| fleet.is_none())
        .map(|v| crate::net::proxy_protocol::encode(v, Some((conn.peer, conn.local))));
    // 1xx answers go to the client whose request this is: never from a background refresh
    // (the connection is serving another request by then).
    let interim = interim.filter(|_| client_request);
    let attempt = Attempt {
        https,
        proxy_header,
        interim,
        http1_only,
        log,
        trace,
    };
    // Returned as it is: wrapped in another `async` block, it would be moved once more per
    // request (~500 instructions of copying a pass).
    let (client, origins) = match (fleet, peer) {
        (Some(f), Some(m)) => (&f.client, &m.origins),
        _ => (&w.origin_client, &route.rule.origins),
    };
    failover::send(client, origins, attempt, head, fields, body, done)
}

/// rampart's span as the origin's parent: its `traceparent` (and the client's `tracestate`
/// when its trace goes on) in place of the client's. Set before the rule's request field
/// rules, which may still replace, remove or add to them.
fn trace_context(
    t: &mut rampart_otel::RequestTrace,
    client: &rampart_head::Fields,
    fields: &mut OriginFields,
) {
    use rampart_otel::TRACESTATE;
    let (parent, state) = t.outgoing();
    fields.add_room(16 + parent.as_bytes().len() + state.map_or(0, |s| 16 + s.len()));
    fields.set_traceparent(parent);
    match state {
        Some(s) => fields.set(TRACESTATE.clone(), s.clone()),
        // The client's, of a context that does not go on.
        None if client.contains_key(&TRACESTATE) => fields.remove(&TRACESTATE),
        None => {}
    }
}

/// The rule's request field rules (and its path rule's) on the request for the origin, with
/// the request's facts they may name.
fn field_rules(
    route: &Route,
    client: std::net::IpAddr,
    scheme: Scheme,
    head: &Parts,
    fields: &mut OriginFields,
) {
    let rule = &route.rule.config;
    if rewrite::rules(rule, route.path_rule(), false)
        .next()
        .is_none()
    {
        return;
    }
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
        client_ip: Some(client),
        scheme: scheme.as_str(),
        host: host.to_str().unwrap_or(""),
        request_id: id.as_ref(),
        path: head.uri.path(),
        query: head.uri.query().unwrap_or(""),
    };
    rewrite::to_origin(
        rewrite::rules(rule, route.path_rule(), false),
        fields,
        &vars,
    );
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

/// The request for the fleet's owner of its key: the client's fields (less the hop-by-hop
/// ones), `Host` and the request id as for the origin. No forwarding fields and no `Via`: the
/// owner writes them toward the origin from what `X-Rampart-Peer` says (the client, its port
/// and scheme), as this instance would have, and reads fewer fields on a hit.
fn for_peer(client: &Fields, host: &HeaderValue) -> OriginFields {
    let mut f = OriginFields::for_client(client);
    f.set(HOST, crate::headers::origin_host(host));
    let id = &access_log::X_REQUEST_ID;
    if f.drops(id) || access_log::usable_request_id(client).is_none() {
        f.set(id.clone(), access_log::new_request_id());
    }
    f
}

/// fetch's changes to the client's fields for the origin ([`OriginFields`]: the hop-by-hop
/// fields, those the client's `Connection` names and `Expect` stay behind): `Host`, the
/// forwarding fields and `Via`, the request id
/// when the client sent none usable, and rampart's validators when it revalidates.
/// `trusted`: the client is one of the `trusted_proxies`, whose `Forwarded` list is extended.
fn for_origin(
    client: &Fields,
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
        const TRAILERS: HeaderValue = HeaderValue::from_static("trailers");
        f.set(TE, TRAILERS);
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
    const HTTP: HeaderValue = HeaderValue::from_static("http");
    const HTTPS: HeaderValue = HeaderValue::from_static("https");
    let proto = match conn.scheme {
        Scheme::Http => HTTP,
        Scheme::Https => HTTPS,
    };
    f.set(X_FORWARDED_PROTO.clone(), proto);
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
