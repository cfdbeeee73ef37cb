//! What a request knows of the connection it came on: the client's and rampart's addresses
//! and the scheme, computed once when the transport accepts the connection.

use std::net::{IpAddr, SocketAddr};

use std::sync::Arc;

use http::header::HeaderValue;

use crate::interim::Interim;

/// How the client connected to rampart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// Per-connection facts the pipeline needs, computed once at accept.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The client's address (IPv4-mapped IPv6 addresses as IPv4).
    pub client_ip: IpAddr,
    /// `client_ip` pre-rendered for `X-Forwarded-For`.
    pub client_ip_header: HeaderValue,
    pub scheme: Scheme,
    /// The client's address and port, and the address it connected to: the TCP connection's,
    /// or what a PROXY protocol header said on a listener that reads one.
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// `local`'s port pre-rendered for `X-Forwarded-Port`.
    pub local_port_header: HeaderValue,
    /// Where interim (1xx) answers from the origin go: the HTTP/1.1 connection writes them
    /// ahead of the final response. `None` on HTTP/2 and HTTP/3, where each stream has its own
    /// (`Txn::interim`), and for HTTP/1.0 clients.
    pub interim: Option<Arc<Interim>>,
}

impl ConnInfo {
    pub fn new(peer: SocketAddr, local: SocketAddr, scheme: Scheme) -> Self {
        let client_ip = peer.ip().to_canonical();
        // invariant: an IP address renders as ASCII digits, dots, colons and hex letters.
        #[allow(clippy::unwrap_used)]
        let client_ip_header = HeaderValue::from_str(&client_ip.to_string()).unwrap();
        ConnInfo {
            client_ip,
            client_ip_header,
            scheme,
            peer,
            local,
            local_port_header: HeaderValue::from(local.port()),
            interim: None,
        }
    }
}
