//! The dispatcher: recv → lookup → hit | miss | pass → fetch → store → deliver, then respond
//! (`LIFECYCLE.md` has every state and transition).
//!
//! [`Pipeline::handle`] runs the stages over one [`Txn`]. Each stage is a function in the module
//! of its name and returns the next [`Step`] (or `Err(ProxyError)`); `Pipeline::stages` is the
//! one place that matches on it, and the respond stage (`respond.rs`) ends every request: the
//! one place an error becomes a response and the access-log record is attached.

pub mod conn_info;
pub mod deliver;
pub mod fetch;
mod from_peer;
pub mod hit;
pub mod lookup;
pub mod miss;
pub mod ranges;
pub mod recv;
pub mod refresh;
pub mod respond;
pub mod step;
pub mod store;
pub mod synth;
pub mod txn;
pub mod websocket;
pub mod worker_state;

use rampart_head::{Request, Response};
use std::future::Future;
use std::sync::Arc;

use tracing::Instrument as _;

use crate::body::{ClientBody, ProxyBody, RequestBody};
use crate::error::ProxyError;
use crate::outcome::Served;
use crate::telemetry::metrics;
use conn_info::ConnInfo;
use respond::Reply;
use step::Step;
use txn::{Mode, Txn};
use websocket::Switched;
use worker_state::Worker;

/// One worker's pipeline: the stages over its [`Worker`] state.
#[derive(Debug)]
pub struct Pipeline {
    w: Worker,
}

impl Pipeline {
    pub fn new(w: Worker) -> Self {
        Pipeline { w }
    }

    /// Handles one request end to end. Never fails: errors become synthetic responses.
    /// `interim`: where the origin's interim answers go when the request has a place of its own
    /// for them (an HTTP/2 or HTTP/3 stream); `None` on HTTP/1.1, whose connection takes them.
    ///
    /// Not an `async fn`, so the future is `run`'s alone, without a second copy of the request.
    pub fn handle<'a>(
        self: &'a Arc<Self>,
        conn: &'a Arc<ConnInfo>,
        req: Request<ClientBody>,
        interim: Option<Arc<crate::interim::Interim>>,
    ) -> impl Future<Output = Response<ProxyBody>> + 'a {
        let limits = self.w.body_limits;
        self.run(
            conn,
            req.map(|b| RequestBody::from_client(b, limits)),
            Mode::Client,
            interim,
        )
    }

    async fn run(
        self: &Arc<Self>,
        conn: &Arc<ConnInfo>,
        req: Request<RequestBody>,
        mode: Mode,
        interim: Option<Arc<crate::interim::Interim>>,
    ) -> Response<ProxyBody> {
        let span = tracing::debug_span!("request", method = %req.method(), uri = %req.uri(), ?mode);
        let mut txn = Txn::new(conn, mode);
        txn.interim = interim;
        txn.protocol = metrics::Protocol::of(req.version());
        // Without a subscriber for debug, no wrapper: `Instrumented` would move the stages'
        // future once more per request (~130 instructions of memcpy, callgrind).
        let res = if span.is_disabled() {
            self.stages(&mut txn, req).await
        } else {
            self.stages(&mut txn, req).instrument(span.clone()).await
        };
        let _in = span.enter();
        respond::respond(&self.w, &mut txn, res)
    }

    /// Every transition a request takes: each stage names the next ([`Step`]) and this loop
    /// runs it, until a stage has the answer. The respond stage ends every request; an `Err`
    /// becomes its response there (through synth).
    async fn stages(
        self: &Arc<Self>,
        txn: &mut Txn,
        mut req: Request<RequestBody>,
    ) -> Result<Reply, ProxyError> {
        let w = &self.w;
        let mut step = recv::recv(w, txn, &mut req).await?;
        loop {
            step = match step {
                Step::Lookup => lookup::lookup(w, txn, &req)?,
                Step::Hit(stored) => {
                    if stored.served == Served::StaleWhileRevalidate {
                        refresh::start(self, &txn.conn, &req, &stored.obj);
                    }
                    return Ok(Reply::Ready(hit::hit(txn, &stored, &req)));
                }
                // Boxed: the waits of a miss (another client's fetch, the Redis tier) and the
                // origin's stages hold kilobytes of state across their awaits; a request
                // answered from the store should not carry (and move) them.
                Step::Miss => boxed!(miss::join(w, txn, &mut req)).await?,
                // The cache takes no part; the request is fetched all the same.
                Step::Pass => {
                    tracing::debug!("pass");
                    Step::Fetch
                }
                Step::Fetch => {
                    respond::negotiate(txn, &req);
                    let sent = boxed!(fetch::fetch(w, txn, sent_on(&mut req))).await;
                    match sent {
                        Ok(fetched) => store::store(w, txn, fetched)?,
                        Err(e) => store::fetch_failed(w, txn, e)?,
                    }
                }
                Step::Peer(peer) => {
                    respond::negotiate(txn, &req);
                    // Boxed: only with a fleet, and it would grow every request's future.
                    match boxed!(fetch::from_peer(w, txn, &req, peer)).await {
                        Ok(fetched) => store::store(w, txn, fetched)?,
                        // The owner failed (marked down): the origin, as without a fleet.
                        Err(()) => Step::Fetch,
                    }
                }
                Step::Refetch(again) => {
                    // Boxed: rare, and it would double the size of every delivery's future.
                    let plan = fetch::Plan::default();
                    match boxed!(fetch::send(w, txn, *again, plan)).await {
                        Ok(fetched) => store::store(w, txn, fetched)?,
                        Err(e) => store::fetch_failed(w, txn, e)?,
                    }
                }
                Step::Deliver(d) => return Ok(Reply::Origin(deliver::deliver(w, txn, *d))),
                Step::Stream(res) => {
                    respond::negotiate(txn, &req);
                    return Ok(Reply::Origin(*res));
                }
                Step::WebSocket(kind) => {
                    Step::Upgrade(Box::new(websocket::handshake(txn, &mut req, kind)?))
                }
                Step::Upgrade(up) => {
                    let plan = websocket::plan();
                    let sent = boxed!(fetch::send(w, txn, sent_on(&mut req), plan)).await?;
                    match websocket::switch(w, txn, *up, sent)? {
                        Switched::Tunnel(res) => return Ok(Reply::Ready(res)),
                        Switched::Refused(fetched) => store::store(w, txn, fetched)?,
                    }
                }
                Step::Done(res) => return Ok(Reply::Ready(*res)),
            };
        }
    }
}

/// The request as it leaves for the origin; what stays behind is an empty request of the
/// same version (a stage after fetch answers for the fields fetch kept, never from it).
fn sent_on(req: &mut Request<RequestBody>) -> Request<RequestBody> {
    let mut empty = Request::new(RequestBody::Empty);
    *empty.version_mut() = req.version();
    std::mem::replace(req, empty)
}

#[cfg(test)]
mod stage_tests;

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::pipeline::conn_info::Scheme;
    use crate::pipeline::stage_tests::pipeline;

    /// Not a timing test: a future's size is fixed when it is compiled, and every request moves
    /// its future (into the connection's box, through hyper). With the origin's stages inline
    /// a cached hit carried ~17 KiB of state it never used: +6 % instructions per hit.
    #[test]
    fn a_request_answered_from_the_store_carries_no_origin_state() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let _rt = rt.enter();
        let p = pipeline();
        let conn = Arc::new(ConnInfo::new(
            (Ipv4Addr::LOCALHOST, 40000).into(),
            (Ipv4Addr::LOCALHOST, 80).into(),
            Scheme::Http,
        ));
        let handle = p.handle(&conn, Request::new(ClientBody::Empty), None);
        let mut txn = Txn::new(&conn, Mode::Client);
        let mut req = Request::get("http://a.example/")
            .body(RequestBody::Empty)
            .unwrap_or_else(|e| panic!("{e}"));
        txn.route = Some(
            recv::route(&p.w.router, &mut req, Scheme::Http).unwrap_or_else(|e| panic!("{e}")),
        );
        let fetch = fetch::fetch(&p.w, &mut txn, req);
        let (handle, fetch) = (
            std::mem::size_of_val(&handle),
            std::mem::size_of_val(&fetch),
        );
        eprintln!("handle {handle} bytes, fetch {fetch} bytes");
        // Debug-build sizes (tests) were about 2.3 and 2.5 KiB; the shared rate limit's Redis
        // round trip is boxed (inline it made `handle` over 3 KiB), and the origin's stages
        // inline made the first ~4 KiB (~17 KiB in release).
        assert!(
            handle <= 3 * 1024,
            "the future of every request is {handle} bytes"
        );
        assert!(
            fetch > 1024,
            "fetch is {fetch} bytes: is boxing it still worth it?"
        );
    }
}
