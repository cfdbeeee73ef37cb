//! rampart's proxy engine: the request pipeline and everything around it.
//!
//! ```text
//! accept (server) → HTTP/1 | HTTP/2 → recv (route, path policy) → lookup → hit | miss | pass
//!   → fetch (upstream pool) → deliver (+ store) | synth (errors, blocks) → log (access log)
//! ```

pub mod admin;
pub mod body;
pub mod coalesce;
pub mod conn;
pub mod fetch;
pub mod h1;
pub mod headers;
pub mod log;
pub mod lookup;
pub mod origin;
pub mod pipeline;
pub mod ranges;
pub mod recv;
pub mod screen;
pub mod server;
pub mod synth;

pub use log::ACCESS_TARGET;
pub use server::{Running, Server};
