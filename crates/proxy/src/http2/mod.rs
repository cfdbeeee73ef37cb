//! HTTP/2 in rampart's own code, on the side that faces clients:
//!
//! - [`frame`]: frames on the wire, checked by type (RFC 9113 §4, §6), and their writers;
//! - [`hpack`]: header compression (RFC 7541), the decoder with its dynamic table and a
//!   stateless encoder whose blocks are valid on any connection;
//! - [`server`]: the connection (streams, flow control, the defences of RFC 9113 §10.5),
//!   request heads, and the response writer with its pre-encoded hit blocks.
//!
//! HTTP/2 to origins (gRPC) stays on the h2 crate through hyper (`origin/h2.rs`).
//!
//! Each part sits in the layer of what it does (`tests/layering.rs`), as `http1` does: the
//! server is a transport (it calls the pipeline), its request-body feed (`server::stream`) a
//! body, the codec and HPACK are net.

pub mod frame;
pub mod hpack;
pub mod server;
