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
use rampart_otel::{Attr, ChildRef, Kind, RequestTrace, Value, ORIGIN_SPAN};

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
    let mut span = Exchange::start();
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
                // The exchange's span starts with the first attempt, before its `traceparent`
                // leaves: a request dropped while it waits still ends it.
                span.begin(&mut a, sent_at);
                let req = Outgoing {
                    head: &head,
                    fields: &fields,
                    body,
                };
                let sent = client
                    .send(req, &key, scheme, protocol, a.interim, a.http1_only)
                    .await;
                let answered = Instant::now();
                let took = answered.duration_since(sent_at);
                if let Some(l) = a.log.as_deref_mut() {
                    l.upstream_time = Some(took);
                }
                span.attempt(&mut a, shown, (sent_at, answered), &sent);
                record(origins, member, tls, took, &sent);
                (shown, sent)
            }
            Err(e) => (&member.target.authority, Err(e)),
        };
        match sent {
            // The exchange's span ended with the answer's head (`Exchange::attempt`).
            Ok(res) => {
                origins.mark_up(member);
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

/// The origin exchange's span, when the request records one, from the first attempt's start to
/// the answer's head (the instants fetch reads anyway): an `attempt` event per origin that
/// failed (its error and how long it took to fail); the origin that answered, its status and
/// time to the answer's head as the span's attributes (or, when none did, the address of the
/// last tried), and the number of attempts when it ends. It holds nothing more: it is part
/// of every request's future, traced or not, and a larger future puts a pass's allocations in a
/// larger size class of the allocator (~400 instructions a pass, callgrind).
struct Exchange {
    span: Option<ChildRef>,
    attempts: u32,
}

impl Exchange {
    fn start() -> Exchange {
        Exchange {
            span: None,
            attempts: 0,
        }
    }

    /// Starts the span at the first attempt.
    fn begin(&mut self, a: &mut Attempt<'_>, sent_at: Instant) {
        if self.span.is_none() {
            if let Some(t) = a.trace.as_deref_mut() {
                self.span = t.child_at(ORIGIN_SPAN, Kind::Client, sent_at);
            }
        }
    }

    fn attempt(
        &mut self,
        a: &mut Attempt<'_>,
        origin: &Authority,
        (sent_at, answered): (Instant, Instant),
        sent: &Result<Response<OriginBody>, ProxyError>,
    ) {
        self.attempts += 1;
        let Some(t) = a.trace.as_deref_mut() else {
            return;
        };
        let took = answered.duration_since(sent_at).as_micros() as u64;
        let (host, port) = host_port(origin);
        let mut attrs: [Attr<'_>; 6] = [("", Value::Bool(false)); 6];
        attrs[0] = ("server.address", host.into());
        let mut n = 1;
        if let Some(p) = port {
            attrs[n] = ("server.port", p.into());
            n += 1;
        }
        let error;
        let address = n;
        match sent {
            // The origin that answered is the span's.
            Ok(res) => {
                t.child_attrs_at_end(self.span, &[]);
                let status = res.status();
                attrs[n] = ("http.response.status_code", status.as_u16().into());
                attrs[n + 1] = ("rampart.origin.time_to_head_us", took.into());
                n += 2;
                // HTTP's conventions for a client span: a 4xx or 5xx answer is an error.
                let failed = status.is_client_error() || status.is_server_error();
                if failed {
                    attrs[n] = ("error.type", status.as_str().into());
                    n += 1;
                }
                attrs[n] = ("rampart.origin.attempts", self.attempts.into());
                t.child_attrs(self.span, &attrs[..n + 1]);
                if failed {
                    t.child_error(self.span, format!("the origin answered {status}"));
                }
                t.end_child_at(self.span, answered);
            }
            // One that failed is an event, with its error; the span names it when no origin
            // answers after it.
            Err(e) => {
                t.child_attrs_at_end(self.span, &attrs[..address]);
                error = Chain(e).to_string();
                let kind = OriginErrorKind::of(e).map_or("other", |k| k.label());
                attrs[n] = ("error.type", kind.into());
                attrs[n + 1] = ("rampart.error", error.as_str().into());
                attrs[n + 2] = ("rampart.origin.time_to_failure_us", took.into());
                n += 3;
                t.child_event(self.span, "attempt", &attrs[..n]);
            }
        }
    }

    /// Ends the span of an exchange no origin answered.
    fn end(&mut self, a: &mut Attempt<'_>, failed: Option<&ProxyError>) {
        let Some(t) = a.trace.as_deref_mut() else {
            return;
        };
        // No origin was tried (none had a usable address).
        if self.span.is_none() {
            self.span = t.child(ORIGIN_SPAN, Kind::Client);
        }
        t.child_attr(self.span, "rampart.origin.attempts", self.attempts);
        if let Some(e) = failed {
            t.child_error(self.span, Chain(e).to_string());
        }
        t.end_child(self.span);
    }
}

/// An origin's host and port, for its span, in one pass over its text: `Authority::host` and
/// `port_u16` search it with the general string searchers, ~600 instructions for the two
/// (callgrind). An origin's authority is `host:port` or `[v6]:port`; userinfo goes the general
/// way.
fn host_port(a: &Authority) -> (&str, Option<u16>) {
    let s = a.as_str();
    let (mut colon, mut bracket) = (None, None);
    for (i, b) in s.bytes().enumerate() {
        match b {
            b'@' => return (a.host(), a.port_u16()),
            b':' => colon = Some(i),
            b']' => bracket = Some(i),
            _ => {}
        }
    }
    match colon {
        // The last colon, after any `]`, starts the port.
        Some(i) if bracket.is_none_or(|b| b < i) => (&s[..i], s[i + 1..].parse().ok()),
        _ => (s, None),
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

#[cfg(test)]
mod tests {
    #[test]
    fn an_origins_host_and_port_are_the_authoritys() {
        for a in [
            "127.0.0.1:8080",
            "origin.example",
            "origin.example:443",
            "[::1]:9000",
            "[2001:db8::1]",
            "user@origin.example:81",
            "user:secret@origin.example:82",
        ] {
            let auth: http::uri::Authority = a.parse().expect("an authority");
            assert_eq!(
                super::host_port(&auth),
                (auth.host(), auth.port_u16()),
                "{a}"
            );
        }
    }
}
