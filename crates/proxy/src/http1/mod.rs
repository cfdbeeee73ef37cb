//! HTTP/1.1 in rampart's own code, both sides in one place:
//!
//! - [`server`]: the connection loop for clients (heads parsed once, bodies fed as the pipeline
//!   reads them, responses serialised once, keep-alive, the switch to a tunnel);
//! - [`client`]: the exchange with origins over the worker's idle connections;
//! - [`body`]: the request-body decoder (Content-Length, chunked) both sides use, and the feed
//!   from a client connection to the pipeline;
//! - [`upload`]: a request body written to an origin as it arrives;
//! - [`numbers`]: decimal lengths and chunk-size lines as both writers format them.
//!
//! The framing rules (which heads are refused as smuggling vectors: `Transfer-Encoding` with
//! `Content-Length`, obsolete folding, bad chunk sizes, …) are `rampart_screen::h1`: they stay
//! in the screening crate so the fuzz targets and that crate's conformance tests run them
//! without building the proxy. Both [`server`] and [`client`] call them on every head.
//!
//! Each part sits in the layer of what it does (`tests/layering.rs`): the server is a transport
//! (it calls the pipeline), the client an origin part, the body feed and upload are bodies, the
//! numbers are net.

pub mod body;
pub mod client;
pub mod numbers;
pub mod server;
pub mod upload;
