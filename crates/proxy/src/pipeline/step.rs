//! Where a request is in the pipeline. Each stage returns the next [`Step`]; the dispatcher
//! (`Pipeline::stages`) matches on it and runs that stage, so the order of the stages is
//! decided by the stages and read in one place (as Varnish's `req_step`).

use http::Response;

use crate::body::ProxyBody;
use crate::pipeline::hit::Stored;
use crate::pipeline::websocket;

/// The next stage of a request.
///
/// Small (a few words), so that passing it from stage to dispatcher copies no memory block.
#[derive(Debug)]
pub enum Step {
    /// After recv: the cache is asked.
    Lookup,
    /// After recv: a WebSocket handshake, which passes to the origin and may become a tunnel.
    WebSocket(websocket::Kind),
    /// A stored object answers (see [`Stored`] for who found it).
    Hit(Stored),
    /// After lookup: not usable from the store, and the response may be stored: the request
    /// joins the fetch of its resource (`Txn::miss` is set).
    Miss,
    /// After lookup: the cache takes no part; the request goes to the origin.
    Pass,
    /// After miss: this request fetches, as the leader of the coalesced fetch or on its own.
    Fetch,
    /// After miss: the origin's response as another client's fetch streams it (a coalesced
    /// waiter's answer), on its way to the client as the leader's is: compressed as it streams
    /// when the rule compresses. Boxed, as `Done` is.
    Stream(Box<Response<ProxyBody>>),
    /// The response is ready without another stage: a local answer (recv). Boxed: a response
    /// is large, and every request's step would be moved at its size.
    Done(Box<Response<ProxyBody>>),
}
