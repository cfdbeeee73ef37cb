//! What the transport reads from the configuration in force: one [`Current`] per worker, held
//! in a [`Slot`] that a reload swaps whole. A new connection takes its [`ConnSettings`] when it
//! is accepted; each request takes the pipeline in force when it starts.

use std::sync::Arc;

use arc_swap::ArcSwap;
use hyper_util::rt::TokioExecutor;
use socket2::TcpKeepalive;

use crate::pipeline::Pipeline;
use crate::transport::h1;
use crate::transport::limits::PerIp;

/// What a new connection reads from the configuration in force when it is accepted.
#[derive(Debug)]
pub struct ConnSettings {
    pub limits: h1::Limits,
    pub h2: Arc<hyper::server::conn::http2::Builder<TokioExecutor>>,
    /// `None` when no rule is served over HTTPS (HTTPS listeners are closed then).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Other instances' TLS-ALPN-01 answers, taken from Redis during a validation handshake.
    pub shared_alpn: Option<rampart_tls::alpn::SharedAlpn>,
    /// HTTP/3's QUIC settings (`None`: `http3` is off; its listeners are closed then).
    pub quic: Option<Arc<quinn::ServerConfig>>,
    /// Largest request header section (HTTP/2's list, HTTP/3's field section).
    pub max_header_list: u32,
    pub keepalive: Option<TcpKeepalive>,
    pub per_ip: Option<Arc<PerIp>>,
    /// Which listeners read a PROXY protocol header, from whom.
    pub proxy_protocol: Arc<rampart_config::ProxyProtocolConfig>,
    pub shutdown_timeout: std::time::Duration,
}

/// One worker's view of the configuration in force.
#[derive(Debug)]
pub struct Current {
    pub pipeline: Arc<Pipeline>,
    pub conn: ConnSettings,
}

/// Where a worker finds its [`Current`]: read once per request and per new connection.
pub type Slot = ArcSwap<Current>;
