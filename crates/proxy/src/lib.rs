//! rampart's proxy engine: the request pipeline and everything around it.
//!
//! ```text
//! server (threads, accept loops, reload) → transport (TLS, ALPN; HTTP/1.1 | HTTP/2 | HTTP/3)
//!   → pipeline: recv → lookup → hit | miss | pass → fetch → store → deliver → respond
//!     (pipeline/LIFECYCLE.md)
//! ```
//!
//! Every request is a [`pipeline::txn::Txn`] that the stages fill in; the stages read the
//! worker's shared state ([`pipeline::worker_state::Worker`]).
//!
//! The folders are layers, top to bottom; a folder imports only the folders below it
//! (`tests/layering.rs` checks it, and that no files import each other in a circle):
//!
//! server > transport > pipeline > admin > policy > origin > body > caching > net > telemetry
//!
//! - `server`: the process: worker threads, accept loops, reload and the configuration in
//!   force, active health probes.
//! - `transport`: socket → request: listening sockets, accept (PROXY header, TLS, ALPN),
//!   connection limits, HTTP/2 and the HTTP/3 (`h3`) server.
//! - `pipeline`: the dispatcher and one file per stage, the request's state ([`pipeline::txn`]).
//! - `admin`: the management API, purge, the dashboard, the metrics exposition, the channel
//!   to the binary.
//! - `policy`: routing, path normalisation, screening.
//! - `origin`: a rule's origins with balancing and shared health, failover, the worker's client
//!   to them, the connector, HTTP/2 to origins.
//! - `body`: request and response bodies: the HTTP/3 body feed, an origin's response body.
//! - `caching`: glue to the cache crate, its three tiers behind one `Cache` (memory, disk, the
//!   shared Redis tier), the writer, coalescing, transforms (compression, minification, WebP).
//! - `net`: byte level on both sides: reading, the PROXY protocol, tunnels, origin
//!   connections and the idle ones kept for reuse.
//! - `telemetry`: counters, histograms, the access log.
//! - `http1`: HTTP/1.1, one home for both sides, its parts each in the layer of what it does:
//!   the server (`http1::server`, a transport), the client to origins (`http1::client`, an
//!   origin part), the request-body feed and upload (`http1::body`, `http1::upload`, bodies) and
//!   the numbers it writes (`http1::numbers`, net). Its framing rules stay in
//!   `rampart_screen::h1`, where the fuzz targets and the screening crate's tests reach them
//!   without the proxy.
//! - root leaves, below every folder: [`error`] (the error type and its one status map),
//!   [`outcome`] (what the cache did), [`headers`] (header rewriting), [`interim`] (1xx
//!   responses from an origin on their way to the client).

/// `Box::pin(future)` made in a statement of its own, for `boxed!(f).await`: the awaiting future
/// then holds only the box. With `Box::pin(f).await` it also keeps room for `f` itself: the
/// temporary's storage lasts to the end of the statement, across the await (a 37 KB request
/// future where 2 KB were in use, measured).
macro_rules! boxed {
    ($f:expr) => {{
        let b = ::std::boxed::Box::pin($f);
        b
    }};
}

pub mod admin;
pub mod body;
pub mod caching;
pub mod error;
pub mod headers;
pub mod http1;
pub mod http2;
pub mod interim;
pub mod net;
pub mod origin;
pub mod outcome;
pub mod pipeline;
pub mod policy;
pub mod server;
pub mod telemetry;
pub mod transport;

pub use server::reload::Reloaded;
pub use server::{Running, Server};
