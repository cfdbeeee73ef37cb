//! How a request goes to a rule's origins: in the order the rule's routing method gives
//! (`balance.rs`), failing over to the next when one cannot be reached and the request can be
//! sent again; each answer or failure marks the origin's health and feeds the `Performance`
//! average and the origin's metrics.

use std::borrow::Cow;
use std::time::Instant;

use http::uri::Authority;
use rampart_config::{OriginProtocol, RoutingMethod};
use rampart_head::request::Parts;
use rampart_head::Response;

use crate::body::origin::OriginBody;
use crate::body::RequestBody;
use crate::error::{Chain, ProxyError};
use crate::interim::Interim;
use crate::origin::balance::{OriginMember, OriginSet, ERROR_PENALTY};
use crate::origin::client::OriginClient;
use crate::origin::fields::{OriginFields, Outgoing};
use crate::telemetry::access_log::AccessRecord;
use crate::telemetry::metrics::OriginErrorKind;
use rampart_otel::span::{Attr, Kind, Status};
use rampart_otel::{ChildRef, RequestTrace, ORIGIN_SPAN};

/// The client's side of a request to the origins.
#[derive(Debug)]
pub struct Attempt<'a> {
    /// The request came over HTTPS (origins answer on their HTTPS port then).
    pub https: bool,
    /// The PROXY header for this client, when the rule sends them (its connections are its
    /// own; see `connect::proxied_key`).
    pub proxy_header: Option<Vec<u8>>,
    /// Where the client's connection takes 1xx answers (client requests only).
    pub interim: Option<&'a Interim>,
    /// HTTP/1.1 whatever the origin's protocol (a WebSocket handshake).
    pub http1_only: bool,
    /// The access-log record: the origin chosen and its response-head time.
    pub log: Option<&'a mut AccessRecord>,
    /// The request's trace when it records spans: the origin exchange is a span of its own.
    pub trace: Option<&'a mut RequestTrace>,
}

/// Sends the request to `origins` in order until one answers (then `done` makes what the
/// caller brings back), failing over on a failed connection when the request has no body
/// (it is then sent again from the same head).
pub async fn send<T>(
    client: &OriginClient,
    origins: &OriginSet,
    mut a: Attempt<'_>,
    head: Parts,
    fields: OriginFields,
    body: RequestBody,
    done: impl FnOnce(Response<OriginBody>, Parts) -> T,
) -> Result<T, ProxyError> {
    // Sent again after a failed connection: body-less requests to a rule with more than one
    // origin (with one, `order` may offer it again when it is down: fail open).
    let resendable = matches!(body, RequestBody::Empty) && origins.len() > 1;
    let mut body = Some(body);
    // The last failure, for the client when no origin answers.
    let mut last_err = None;
    let mut span = Exchange::start(&mut a);
    for member in origins.order() {
        let (shown, sent) = match pool_key(member, a.https, a.proxy_header.as_deref()) {
            Ok((shown, key, scheme)) => {
                let tls = scheme.as_str() == "https";
                let body = match body.take() {
                    Some(b) => b,
                    None if resendable => RequestBody::Empty,
                    None => break,
                };
                if let Some(l) = a.log.as_deref_mut() {
                    l.upstream = Some(shown.clone());
                }
                tracing::debug!(upstream = %shown, "fetch");
                let protocol = if a.http1_only {
                    OriginProtocol::Http1
                } else {
                    member.target.protocol
                };
                // The response-head time: for the metrics, `Performance` and the access log.
                // (The future is made in the await: held in a local first, this future would
                // keep room for it twice.)
                let sent_at = Instant::now();
                let req = Outgoing {
                    head: &head,
                    fields: &fields,
                    body,
                };
                let sent = client
                    .send(req, &key, scheme, protocol, a.interim, a.http1_only)
                    .await;
                let took = sent_at.elapsed();
                if let Some(l) = a.log.as_deref_mut() {
                    l.upstream_time = Some(took);
                }
                span.attempt(&mut a, shown, took, &sent);
                record(origins, member, tls, took, &sent);
                (shown, sent)
            }
            Err(e) => (&member.target.authority, Err(e)),
        };
        match sent {
            Ok(res) => {
                origins.mark_up(member);
                span.end(&mut a, None);
                return Ok(done(res, head));
            }
            Err(e) if e.may_fail_over() => {
                tracing::warn!(upstream = %shown, error = %Chain(&e), "origin failed before the request was sent; marking it down");
                origins.mark_down(member);
                last_err = Some(e);
            }
            // The connection failed before any of the answer came (an origin killed or
            // restarted mid-request): a safe, body-less request goes to the next origin, as
            // NGINX's `proxy_next_upstream error` does. The origin is not marked down: its
            // next connection says whether it is.
            Err(e @ ProxyError::OriginProtocol(_)) if resendable && head.method.is_safe() => {
                tracing::warn!(upstream = %shown, error = %Chain(&e), "origin connection failed before the answer; trying the next origin");
                last_err = Some(e);
            }
            Err(e) => {
                span.end(&mut a, Some(&e));
                return Err(e);
            }
        }
    }
    let e = last_err.unwrap_or_else(|| ProxyError::OriginConnect("no upstream".into()));
    span.end(&mut a, Some(&e));
    Err(e)
}

/// The origin exchange's span, when the request records one: an event per origin tried, the
/// origin that answered, the attempts, the time to the answer's head.
struct Exchange {
    span: Option<ChildRef>,
    attempts: u32,
}

impl Exchange {
    fn start(a: &mut Attempt<'_>) -> Exchange {
        let span = a
            .trace
            .as_deref_mut()
            .and_then(|t| t.child(ORIGIN_SPAN, Kind::Client));
        Exchange { span, attempts: 0 }
    }

    fn attempt(
        &mut self,
        a: &mut Attempt<'_>,
        origin: &Authority,
        took: std::time::Duration,
        sent: &Result<Response<OriginBody>, ProxyError>,
    ) {
        self.attempts += 1;
        let Some(t) = a.trace.as_deref_mut() else {
            return;
        };
        let mut attrs: Vec<Attr> = vec![
            ("server.address", origin.host().to_owned().into()),
            (
                "rampart.origin.time_to_head_us",
                (took.as_micros() as u64).into(),
            ),
        ];
        if let Some(p) = origin.port_u16() {
            attrs.push(("server.port", p.into()));
        }
        match sent {
            Ok(res) => attrs.push(("http.response.status_code", res.status().as_u16().into())),
            Err(e) => {
                let kind = OriginErrorKind::of(e).map_or("other", |k| k.label());
                attrs.push(("error.type", kind.into()));
                attrs.push(("rampart.error", Chain(e).to_string().into()));
            }
        }
        t.child_event(self.span, "attempt", attrs);
        let Some(s) = t.child_mut(self.span) else {
            return;
        };
        s.attrs
            .retain(|(k, _)| !matches!(*k, "server.address" | "server.port"));
        s.attr("server.address", origin.host().to_owned());
        if let Some(p) = origin.port_u16() {
            s.attr("server.port", p);
        }
        if let Ok(res) = sent {
            s.attr("http.response.status_code", res.status().as_u16());
            s.attr("rampart.origin.time_to_head_us", took.as_micros() as u64);
            // HTTP's conventions for a client span: a 4xx or 5xx answer is an error.
            if res.status().is_client_error() || res.status().is_server_error() {
                s.attr("error.type", res.status().as_str().to_owned());
                s.status = Status::Error(format!("the origin answered {}", res.status()).into());
            }
        }
    }

    fn end(&self, a: &mut Attempt<'_>, failed: Option<&ProxyError>) {
        let Some(t) = a.trace.as_deref_mut() else {
            return;
        };
        if let Some(s) = t.child_mut(self.span) {
            s.attr("rampart.origin.attempts", u64::from(self.attempts));
            if let Some(e) = failed {
                s.status = Status::Error(rampart_otel::span::bounded(Chain(e).to_string()));
            }
        }
        t.end_child(self.span);
    }
}

/// `member`'s pool key for this request, with the name shown in logs and the scheme; a rule
/// that sends PROXY headers (`header`) keys each client's connections apart.
fn pool_key<'m>(
    member: &'m OriginMember,
    https: bool,
    header: Option<&[u8]>,
) -> Result<(&'m Authority, Cow<'m, Authority>, http::uri::Scheme), ProxyError> {
    match header {
        None => OriginSet::route(member, https).map(|(s, k, sc)| (s, Cow::Borrowed(k), sc)),
        Some(h) => {
            OriginSet::route_proxied(member, https, h).map(|(s, k, sc)| (s, Cow::Owned(k), sc))
        }
    }
}

/// What one origin's answer (or failure) counts for: `Performance` routing's average and the
/// origin's metrics.
fn record(
    origins: &OriginSet,
    member: &OriginMember,
    tls: bool,
    took: std::time::Duration,
    sent: &Result<Response<OriginBody>, ProxyError>,
) {
    if origins.method() == RoutingMethod::Performance {
        member.record(match sent {
            Ok(res) if !res.status().is_server_error() => took,
            _ => took.max(ERROR_PENALTY),
        });
    }
    member.stats(tls).request(sent.as_ref().map(|_| took));
}
