//! respond: the last stage of every request, whatever ended it. A response from the origin
//! is compressed as it streams when the rule compresses; an error becomes its synthetic
//! response (the only place, through `synth`); error pages replace bodies; the response field
//! rules and `expires` apply to answers from the origin or the cache; HSTS and Alt-Svc are
//! added over HTTPS; the request is counted for the metrics (once, here); and the access-log
//! record is attached to the body (written when the body has been sent).

use http::header::{ALT_SVC, STRICT_TRANSPORT_SECURITY};
use rampart_head::Response;
use rampart_transform::compress::StreamEncoder;

use crate::body::ProxyBody;
use crate::caching::coding::{compressible, encoded_headers, vary_on_accept_encoding};
use crate::error::ProxyError;
use crate::pipeline::conn_info::Scheme;
use crate::pipeline::synth;
use crate::pipeline::txn::{Mode, Txn};
use crate::pipeline::worker_state::Worker;
use crate::policy::rewrite;
use crate::telemetry::metrics;

/// How the stages end a request that is answered.
#[derive(Debug)]
pub enum Reply {
    /// An answer as it is: from the store, rampart's own, a tunnel.
    Ready(Response<ProxyBody>),
    /// The origin's response (or another client's fetch of it) as it streams: compressed on
    /// its way when the rule compresses ([`negotiate`]).
    Origin(Response<ProxyBody>),
}

/// The rule's compression for a response from the origin and the coding the client's
/// `Accept-Encoding` picks, kept for [`respond`] in `Txn::compress`: negotiated only where a
/// request leaves for the origin or joins another client's fetch (a hit picks its stored copy).
pub fn negotiate<B>(txn: &mut Txn, req: &rampart_head::Request<B>) {
    // A peer's answer goes as stored: the peer compresses for its own client.
    if txn.from_peer {
        txn.compress = None;
        return;
    }
    txn.compress = txn.route().rule.compress.clone().map(|c| {
        // A HEAD's answer has no body to encode (it still says `Vary: Accept-Encoding`).
        let coding = (req.method() != http::Method::HEAD)
            .then(|| c.negotiate(req.headers()))
            .flatten();
        (c, coding)
    });
}

/// The respond stage (see the module notes). Never fails.
pub fn respond(w: &Worker, txn: &mut Txn, res: Result<Reply, ProxyError>) -> Response<ProxyBody> {
    let res = res.map(|reply| match reply {
        Reply::Ready(res) => res,
        Reply::Origin(res) => compress(txn, res),
    });
    // Clients' requests are counted; background refreshes are not.
    let client = txn.mode == Mode::Client;
    // A peer's answer goes as stored or fetched: the peer applies the rule's pages and response
    // fields for its own client.
    let own = txn.route.as_ref().filter(|_| !txn.from_peer);
    let pages = own.map(|r| &r.rule.config.error_pages);
    // From the origin or the cache (rampart's own answers are errors or unlabelled).
    let relayed = res.is_ok() && txn.outcome.is_some();
    // The error's text, for a recorded trace's span status (5xx).
    let failure = match &res {
        Err(e) if txn.trace.as_ref().is_some_and(|t| t.sampled()) => {
            Some(crate::error::Chain(e).to_string())
        }
        _ => None,
    };
    let mut res = match res {
        Ok(res) => match pages {
            // `origin_errors`: the origin's 5xx gets the page of its status too.
            Some(p) if p.origin_errors && res.status().is_server_error() => {
                match p.get(res.status().as_u16()) {
                    Some(page) => rewrite::with_page(res, page),
                    None => res,
                }
            }
            _ => res,
        },
        Err(e) => {
            if client {
                metrics::get().refused(&e);
            }
            let res = synth::error(&e, txn);
            match pages.and_then(|p| p.get(res.status().as_u16())) {
                Some(page) if !e.is_api() => rewrite::with_page(res, page),
                _ => res,
            }
        }
    };
    if let Some(route) = own {
        if let Some(v) = route.answer_vars() {
            let host = crate::headers::origin_host(&route.host);
            let vars = rewrite::Vars {
                client_ip: Some(txn.client),
                scheme: txn.conn.scheme.as_str(),
                host: host.to_str().unwrap_or(""),
                request_id: v.request_id.as_ref(),
                path: &v.path,
                query: &v.query,
            };
            let rules = rewrite::rules(&route.rule.config, route.path_rule(), true);
            let kept = relayed && rewrite::keeps_fields(res.status());
            rewrite::to_client(rules, res.headers_mut(), &vars, kept);
        }
        if let Some(secs) = route.expires() {
            if relayed && rewrite::keeps_fields(res.status()) {
                rewrite::expires(res.headers_mut(), secs);
            }
        }
    }
    if client {
        let stats = match &txn.route {
            Some(r) => &*r.rule.stats,
            None => metrics::get().unrouted(),
        };
        stats.record(
            res.status().as_u16(),
            metrics::CacheMetric::of(txn.outcome),
            txn.protocol,
            txn.start.elapsed(),
        );
    }
    if txn.scheme() == Scheme::Https {
        if let Some(v) = txn.route.as_ref().and_then(|r| r.rule.hsts.clone()) {
            res.headers_mut().insert(STRICT_TRANSPORT_SECURITY, v);
        }
        // HTTP/3 is announced on the HTTPS (TCP) port it is served beside.
        if !w.alt_svc.is_empty() && txn.protocol != metrics::Protocol::Http3 {
            let port = txn.conn.local.port();
            if let Some((_, v)) = w.alt_svc.iter().find(|(p, _)| *p == port) {
                res.headers_mut().insert(ALT_SVC, v.clone());
            }
        }
    }
    if txn.trace.is_some() {
        end_trace(txn, &mut res, failure);
    }
    if let Some(mut log) = txn.log.take() {
        log.status = res.status().as_u16();
        if let Some(o) = txn.outcome {
            log.cache = o.label().as_str();
        }
        res.body_mut().set_log(log);
    }
    res
}

/// The trace's part of the respond stage (out of line: with tracing off a request pays one
/// test): the ids for the access log, the answer's attributes, and the trace handed to the
/// body, whose end ends the server span (the log line's moment).
#[inline(never)]
fn end_trace(txn: &mut Txn, res: &mut Response<ProxyBody>, failure: Option<String>) {
    let Some(mut trace) = txn.trace.take() else {
        return;
    };
    if let Some(log) = txn.log.as_deref_mut() {
        log.trace = Some((trace.trace_id, trace.span_id));
    }
    // An unsampled trace has nothing to record: it ends here.
    if trace.sampled() {
        deliver_event(&mut trace, txn, res.status(), failure);
        res.body_mut().set_trace(Box::new(trace));
    }
}

/// The answer's part of the server span: its status, the cache's outcome as `Cache-Status`
/// says it, and a failure (5xx) as the span's error.
fn deliver_event(
    t: &mut rampart_otel::RequestTrace,
    txn: &Txn,
    status: http::StatusCode,
    failure: Option<String>,
) {
    match txn.outcome {
        Some(o) => {
            let cache_status = o.cache_status();
            t.attrs(&[
                ("http.response.status_code", status.as_u16().into()),
                (
                    "rampart.cache_status",
                    rampart_otel::Value::Bytes(cache_status.as_bytes()),
                ),
                ("rampart.cache", o.label().as_str().into()),
            ]);
        }
        None => t.attr("http.response.status_code", status.as_u16()),
    }
    if status.is_server_error() {
        t.attr("error.type", status.as_str());
        t.error(failure.unwrap_or_else(|| status.to_string()));
    }
    t.event("deliver", &[]);
}

/// A response from the origin on its way to the client: compressed as it streams when the rule
/// compresses, the type is compressible and the client accepts a coding; `Vary:
/// Accept-Encoding` on every compressible response of such a rule.
fn compress(txn: &mut Txn, mut res: Response<ProxyBody>) -> Response<ProxyBody> {
    let Some((c, coding)) = txn.compress.take() else {
        return res;
    };
    if !compressible(res.status(), res.headers(), &c) {
        return res;
    }
    vary_on_accept_encoding(res.headers_mut());
    let Some(coding) = coding else {
        return res;
    };
    let encoder = match StreamEncoder::new(coding, c.stream_levels()) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(error = %e, coding = coding.as_str(), "cannot start an encoder; sending identity");
            return res;
        }
    };
    let (mut parts, body) = res.into_parts();
    encoded_headers(&mut parts.headers, coding, None);
    Response::from_parts(parts, ProxyBody::encoded(body, encoder))
}
