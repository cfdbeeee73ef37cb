//! Where a request is in the pipeline. Each stage returns the next [`Step`]; the dispatcher
//! (`Pipeline::stages`) matches on it and runs that stage, so the order of the stages is
//! decided by the stages and read in one place (as Varnish's `req_step`). See `LIFECYCLE.md`.

use crate::body::{ProxyBody, RequestBody};
use crate::pipeline::deliver::Delivery;
use crate::pipeline::hit::Stored;
use crate::pipeline::websocket;
use rampart_head::{Request, Response};

/// The next stage of a request.
///
/// Small (a few words), so that passing it from stage to dispatcher copies no memory block:
/// what is large is boxed.
#[derive(Debug)]
pub enum Step {
    /// After recv: the cache is asked.
    Lookup,
    /// After recv: a WebSocket handshake, which is checked, then passes to the origin and may
    /// become a tunnel.
    WebSocket(websocket::Kind),
    /// After the handshake is checked: sent to the origin as an HTTP/1.1 upgrade.
    Upgrade(Box<websocket::Upgrade>),
    /// A stored object answers (see [`Stored`] for who found it).
    Hit(Stored),
    /// After lookup: not usable from the store, and the response may be stored: the request
    /// joins the fetch of its resource (`Txn::miss` is set).
    Miss,
    /// After lookup: the cache takes no part; the request goes to the origin.
    Pass,
    /// After miss: this request fetches, as the leader of the coalesced fetch or on its own.
    Fetch,
    /// After miss: the leader of this instance's fetch asks the key's owner in the fleet
    /// (`origin/fleet/`) before the origin.
    Peer(std::sync::Arc<crate::origin::fleet::Member>),
    /// After store: a widened range request whose whole representation cannot be shared is
    /// sent again as the client asked (never stored).
    Refetch(Box<Request<RequestBody>>),
    /// After store: the origin's response goes to the client, as the store decided.
    Deliver(Box<Delivery>),
    /// After miss: the origin's response as another client's fetch streams it (a coalesced
    /// waiter's answer), on its way to the client as the leader's is.
    Stream(Box<Response<ProxyBody>>),
    /// The response is ready without another stage: a local answer (recv), a tunnel.
    Done(Box<Response<ProxyBody>>),
}
