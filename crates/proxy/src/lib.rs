//! rampart's proxy engine: the request pipeline and everything around it.
//!
//! ```text
//! accept (server) → HTTP/1 (h1) | HTTP/2 | HTTP/3 (quic) → pipeline:
//!   recv → lookup → hit | miss | pass → fetch → deliver | synth      (one module per stage)
//! ```
//!
//! Every request is a [`txn::Txn`] that the stages fill in; the stages read the worker's shared
//! state ([`worker::Worker`]). Imports go one way, from the dispatcher down:
//! `pipeline` → stages (`recv`, `lookup`, `hit`, `miss`, `fetch`, `deliver`, `synth`) →
//! `worker`, `txn` → `route`, `upstream`, `ranges` → `error`, `body` → `store` → `cache` →
//! `coalesce`, `outcome`, `log`, `headers`. There is no import circle.

pub mod admin;
pub mod body;
pub mod cache;
pub mod coalesce;
pub mod conn;
pub mod connection;
pub mod control;
pub mod dashboard;
pub mod deliver;
pub mod encode;
pub mod error;
pub mod fetch;
pub mod h1;
pub mod headers;
pub mod health;
pub mod hit;
pub mod linger;
pub mod listen;
pub mod live;
pub mod log;
pub mod lookup;
pub mod metrics;
pub mod miss;
pub mod origin;
pub mod origin_h2;
pub mod outcome;
pub mod path;
pub mod pipeline;
pub mod proxy_protocol;
pub mod quic;
pub mod ranges;
pub mod recv;
pub mod route;
pub mod screen;
pub mod send_timeout;
pub mod server;
pub mod store;
pub mod synth;
pub mod tier;
pub mod tunnel;
pub mod txn;
pub mod upgrade;
pub mod upstream;
pub mod worker;

pub use live::Reloaded;
pub use server::{Running, Server};
