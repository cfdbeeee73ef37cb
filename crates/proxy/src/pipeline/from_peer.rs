//! recv's part for a fleet's peers (`origin/fleet/`): a request that carries
//! `X-Rampart-Peer` is refused, answered (rampart's own: a probe, a purge), or marked as a
//! peer's and let through with the client and scheme the peer had.

use http::header::{HeaderValue, HOST};
use http::StatusCode;
use rampart_head::{Request, Response};

use crate::body::local::text;
use crate::body::{ProxyBody, RequestBody};
use crate::error::ProxyError;
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
/// address and signature, and marked (its scheme is the one the peer's client used); anything
/// else that carries the field is refused.
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
    let verified = fleet.verify(
        &value,
        txn.conn.peer.ip(),
        req.method().as_str(),
        host,
        target,
    );
    let Some((purpose, https)) = verified else {
        tracing::warn!(peer = %txn.conn.peer, "X-Rampart-Peer from a non-peer or with a bad signature: refused");
        return Err(ProxyError::Blocked(crate::error::Screened::NotAPeer));
    };
    if purpose == crate::origin::fleet::Purpose::Control {
        txn.peer_control = true;
        return Ok(());
    }
    txn.from_peer = true;
    // The request as the peer had it from its client: that client (the peer named it last in
    // `X-Forwarded-For`, which goes on without it, as the peer would have sent it to the
    // origin), and the scheme it used.
    let mut conn = (*txn.conn).clone();
    conn.scheme = if https { Scheme::Https } else { Scheme::Http };
    if let Some((client, text)) = crate::origin::fleet::take_forwarded_client(req.headers_mut()) {
        conn.client_ip = client;
        conn.client_ip_header = text;
    }
    txn.conn = std::sync::Arc::new(conn);
    Ok(())
}
