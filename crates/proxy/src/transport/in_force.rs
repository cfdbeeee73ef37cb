//! What the transport reads from the configuration in force: one [`Current`] per worker, held
//! in a [`Slot`] that a reload swaps whole. A new connection takes its [`ConnSettings`] when it
//! is accepted; each request takes the pipeline in force when it starts.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rampart_config::Config;
use rampart_tls::Tls;
use socket2::TcpKeepalive;

use crate::http1::server as h1;
use crate::pipeline::Pipeline;
use crate::transport::limits::PerIp;

/// What a new connection reads from the configuration in force when it is accepted.
#[derive(Debug)]
pub struct ConnSettings {
    pub limits: h1::Limits,
    /// HTTP/2's limits (rampart's own server, `http2::server`).
    pub h2: crate::http2::server::Limits,
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

impl ConnSettings {
    /// The settings `config` gives new connections (HTTPS ones with `tls`).
    pub fn new(config: &Config, tls: Option<&Tls>, per_ip: Option<Arc<PerIp>>) -> ConnSettings {
        let d = &config.downstream;
        // HTTP/2 flood limits (RFC 9113 §10.5): streams and the header list size (which also
        // bounds a header block's CONTINUATION frames); the reset and idle-frame budgets are
        // the server's own (`http2/server/conn.rs`).
        let h2 = crate::http2::server::Limits {
            max_streams: d.h2_max_concurrent_streams,
            max_header_list: d.h2_max_header_list_bytes,
            keepalive_timeout: d.keepalive_timeout,
            send_timeout: d.send_timeout,
        };
        ConnSettings {
            limits: h1::Limits {
                max_head: d.max_head_bytes,
                max_headers: d.max_headers,
                header_read_timeout: d.header_read_timeout,
                keepalive_timeout: d.keepalive_timeout,
                body_idle_timeout: d.body_idle_timeout,
                send_timeout: d.send_timeout,
                // Set per connection, for TLS (transport/accept.rs).
                close_notify: false,
                // A plaintext connection idle between requests waits in a small state of its
                // task (transport/idle.rs); TLS ones stay in `h1::serve` (transport/accept.rs).
                yield_after: Some(h1::YIELD_AFTER),
                // Idle connections leave their tasks (transport/park.rs): each worker thread
                // has its own epoll set, which a shared runtime's tasks would leave.
                park_after: d
                    .park_after
                    .filter(|_| config.runtime == rampart_config::RuntimeMode::PerCore),
            },
            h2,
            tls: tls.map(|t| t.server.clone()),
            shared_alpn: tls.and_then(|t| t.shared_alpn.clone()),
            quic: tls.and_then(|t| crate::transport::h3::config::server_config(config, t)),
            max_header_list: d.h2_max_header_list_bytes,
            keepalive: d.tcp_keepalive.map(|t| TcpKeepalive::new().with_time(t)),
            per_ip,
            proxy_protocol: Arc::new(config.proxy_protocol.clone()),
            shutdown_timeout: config.shutdown_timeout,
        }
    }
}
