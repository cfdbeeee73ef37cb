//! rampart's proxy engine: the request pipeline and everything around it.
//!
//! ```text
//! server (threads, accept loops, reload) → transport (TLS, ALPN; HTTP/1.1 | HTTP/2 | HTTP/3)
//!   → pipeline: recv → lookup → hit | miss | pass → fetch → deliver | synth
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
//!   connection limits, the HTTP/1.1 (`h1`), HTTP/2 and HTTP/3 (`h3`) servers.
//! - `pipeline`: the dispatcher and one file per stage, the request's state ([`pipeline::txn`]),
//!   the Redis shared tier and WebSocket.
//! - `admin`: the management API, purge, the dashboard, the metrics exposition, the channel
//!   to the binary.
//! - `policy`: routing, path normalisation, screening.
//! - `origin`: upstream sets with balancing and passive health, the connector, rampart's own
//!   HTTP/1.1 client (`h1`) and HTTP/2 to origins.
//! - `body`: request and response bodies: the HTTP/1 and HTTP/3 body feeds, an origin's
//!   response body and a request body on its way to an origin.
//! - `caching`: glue to the cache crate: look-up, the writer, coalescing, transforms
//!   (compression, minification, WebP).
//! - `net`: byte level on both sides: reading, the PROXY protocol, tunnels, origin
//!   connections and the idle ones kept for reuse.
//! - `telemetry`: counters, histograms, the access log.
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
