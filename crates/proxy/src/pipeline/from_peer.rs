//! recv's part for a fleet's peers (`origin/fleet/`): a request that carries
//! `X-Rampart-Peer` is refused, answered (rampart's own: a probe, a purge), or marked as a
//! peer's and let through with the client and scheme the peer had.

use http::header::{HeaderValue, HOST};
use http::StatusCode;
use rampart_head::{Request, Response};

use crate::body::local::text;
use crate::body::{ProxyBody, RequestBody};
use crate::error::ProxyError;
use crate::origin::fleet::{Marked, Purpose};
use crate::pipeline::conn_info::Scheme;
use crate::pipeline::step::Step;
use crate::pipeline::txn::Txn;
use crate::pipeline::worker_state::Worker;

/// A request that carries `X-Rampart-Peer`: refused, answered (rampart's own requests), or
/// marked as a peer's and let through (`None`).
#[inline(never)]
pub fn peer_request(
    w: &Worker,
    txn: &mut Txn,
    req: &mut Request<RequestBody>,
) -> Option<Result<Step, ProxyError>> {
    let fleet = w.fleet.as_deref()?;
    if let Err(e) = from_peer(fleet, txn, req) {
        return Some(Err(e));
    }
    txn.peer_control
        .then(|| Ok(Step::Done(Box::new(peer_answer(w, req)))))
}

/// rampart's own requests from a peer: a probe (it runs), or a purge it made, applied here
/// (and not sent on).
#[inline(never)]
fn peer_answer(w: &Worker, req: &Request<RequestBody>) -> Response<ProxyBody> {
    if req.uri().path() == crate::origin::fleet::PROBE_PATH {
        return text(StatusCode::NO_CONTENT, "");
    }
    let purge = (req.uri().path() == crate::origin::fleet::PURGE_PATH
        && req.method() == http::Method::POST)
        .then(|| crate::origin::fleet::purge_of(req.uri().query().unwrap_or("")))
        .flatten();
    match (purge, &w.cache) {
        (Some((scope, soft)), Some(cache)) => {
            let n = cache.apply_remote(&scope, soft);
            tracing::debug!(purged = n, soft, "a peer's purge");
            text(StatusCode::NO_CONTENT, "")
        }
        (Some(_), None) => text(StatusCode::NO_CONTENT, ""),
        (None, _) => text(
            StatusCode::BAD_REQUEST,
            "not a peer request rampart knows\n",
        ),
    }
}

/// A request from a peer of the fleet (`X-Rampart-Peer`, taken out here): recognised by its
/// address and signature, and marked (its client, the port it came to and its scheme are the
/// ones the marker names); anything else that carries the field is refused.
#[inline(never)]
fn from_peer(
    fleet: &crate::origin::fleet::Fleet,
    txn: &mut Txn,
    req: &mut Request<RequestBody>,
) -> Result<(), ProxyError> {
    let Some(value) = req
        .headers_mut()
        .remove(&crate::origin::fleet::X_RAMPART_PEER)
    else {
        return Ok(());
    };
    let host = req
        .headers()
        .get(HOST)
        .map_or(&b""[..], HeaderValue::as_bytes);
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let verified = fleet
        .verify(
            &value,
            txn.conn.peer.ip(),
            req.method().as_str(),
            host,
            target,
        )
        .and_then(|m| match m.purpose {
            Purpose::Control => Some(None),
            Purpose::Forward => forwarded_client(&m).map(Some),
        });
    let Some(client) = verified else {
        tracing::warn!(peer = %txn.conn.peer, "X-Rampart-Peer from a non-peer or with a bad signature: refused");
        return Err(ProxyError::Blocked(crate::error::Screened::NotAPeer));
    };
    let Some(client) = client else {
        txn.peer_control = true;
        return Ok(());
    };
    txn.from_peer = true;
    // The request as the peer had it from its client: that client, the port it came to and
    // the scheme it used (the forwarding fields toward the origin are written from them).
    let mut conn = (*txn.conn).clone();
    conn.scheme = client.scheme;
    conn.client_ip = client.ip;
    conn.client_ip_header = client.ip_text;
    conn.local_port_header = client.port;
    txn.conn = std::sync::Arc::new(conn);
    Ok(())
}

/// The client a forwarded request's marker names.
struct Client {
    ip: std::net::IpAddr,
    ip_text: HeaderValue,
    port: HeaderValue,
    scheme: Scheme,
}

/// The client a forwarded request's marker names: an address as written in a field, and a
/// port's digits (anything else: refused).
fn forwarded_client(m: &Marked<'_>) -> Option<Client> {
    let ip = std::str::from_utf8(m.client)
        .ok()?
        .parse::<std::net::IpAddr>()
        .ok()?;
    let port_ok = !m.port.is_empty() && m.port.len() <= 5 && m.port.iter().all(u8::is_ascii_digit);
    if !port_ok {
        return None;
    }
    Some(Client {
        ip: ip.to_canonical(),
        ip_text: HeaderValue::from_bytes(m.client).ok()?,
        port: HeaderValue::from_bytes(m.port).ok()?,
        scheme: if m.https { Scheme::Https } else { Scheme::Http },
    })
}
