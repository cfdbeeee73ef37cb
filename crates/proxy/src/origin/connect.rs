//! The connector behind the upstream pool: plain TCP, or TCP + TLS (rustls) for origins over
//! HTTPS, with the PROXY header first when the rule sends one.
//!
//! The pool keys connections by scheme and authority. A TLS origin's key carries the name to
//! send as SNI and to verify in its certificate as the authority's user part
//! (`origin.example@10.0.0.5:443`), so two rules that reach the same address under
//! different names never share a connection. Requests go out with origin-form targets, so the
//! user part never reaches the wire.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use http::uri::{Authority, PathAndQuery, Scheme};
use http::Uri;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::error::BoxError;
use crate::net::idle::PoolKey;
use crate::net::origin_stream::OriginStream;
use crate::telemetry::metrics::Counted;

/// The largest read buffer of an origin connection (HTTP/2: the largest response header
/// block).
pub const ORIGIN_READ_BUFFER: usize = 64 * 1024;

/// A TLS handshake with an origin failed (certificate not trusted, name mismatch, protocol).
#[derive(Debug, thiserror::Error)]
#[error("TLS handshake with the origin as {name:?} failed")]
pub struct OriginTlsError {
    pub name: String,
    #[source]
    pub source: io::Error,
}

/// The TCP connection to an origin was not established within `proxy_connect_timeout_seconds`
/// (rampart's own limit; the kernel's ETIMEDOUT arrives as an `io::Error` of kind `TimedOut`).
#[derive(Debug, thiserror::Error)]
#[error("no connection within {0:?}")]
pub struct OriginConnectTimeout(pub Duration);

/// Connects to origins, with TLS where the pool key says so.
#[derive(Clone)]
pub struct OriginConnector {
    nodelay: bool,
    tls: TlsConnector,
    /// `proxy_connect_timeout_seconds`: the limit of the TCP connection and, separately, of the
    /// TLS handshake.
    connect_timeout: Duration,
    /// HTTP/2 connections (`origin_protocol = "h2"`): TLS offers only `h2` in ALPN and an
    /// origin that does not choose it is an error, not a connection to misread.
    h2: bool,
    /// The local address connections leave from (a fleet's peers know each other by address);
    /// `None`: the system's choice.
    bind: Option<std::net::IpAddr>,
}

impl std::fmt::Debug for OriginConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginConnector").finish_non_exhaustive()
    }
}

impl OriginConnector {
    pub fn new(nodelay: bool, tls: Arc<rustls::ClientConfig>, connect_timeout: Duration) -> Self {
        OriginConnector {
            nodelay,
            tls: TlsConnector::from(tls),
            connect_timeout,
            h2: false,
            bind: None,
        }
    }

    /// `proxy_connect_timeout_seconds` (or a fleet's `cache_peer_timeout_ms`).
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The same connector, its connections leaving from `ip` (to IP addresses).
    pub fn bound_to(mut self, ip: std::net::IpAddr) -> Self {
        self.bind = Some(ip);
        self
    }

    /// The same connector for HTTP/2: TLS offers `h2` alone in ALPN and requires it.
    pub fn for_h2(&self, tls: &rustls::ClientConfig) -> Self {
        let mut tls = tls.clone();
        tls.alpn_protocols = vec![b"h2".to_vec()];
        OriginConnector {
            nodelay: self.nodelay,
            tls: TlsConnector::from(Arc::new(tls)),
            connect_timeout: self.connect_timeout,
            h2: true,
            bind: self.bind,
        }
    }

    /// A new connection to the origin at `key`: TCP (each address the name resolves to, in
    /// order, within the connect timeout), the PROXY header if the key carries one, then TLS
    /// when `key.tls`, with the key's TLS name as SNI and the name verified.
    pub async fn connect(&self, key: &PoolKey) -> Result<OriginStream, BoxError> {
        let authority = key.authority.as_str();
        // The user part: the TLS name, and a PROXY header to send first ([`proxied_key`]).
        let (user, address) = match authority.rsplit_once('@') {
            Some((user, address)) => (Some(user), address),
            None => (None, authority),
        };
        let (name, proxy_header) = match user.map(|u| u.split_once(PROXY_MARK)) {
            Some(Some((name, hex))) => (Some(name), unhex(hex)),
            Some(None) => (user, None),
            None => (None, None),
        };
        let limit = self.connect_timeout;
        let tcp = match tokio::time::timeout(limit, tcp_connect(address, self.bind)).await {
            Ok(tcp) => tcp?,
            Err(_) => return Err(OriginConnectTimeout(limit).into()),
        };
        if self.nodelay {
            tcp.set_nodelay(true)?;
        }
        // Counted under the address (`host:port`), without the TLS name.
        let stats = crate::telemetry::metrics::get().origin(address).opened();
        let mut tcp = Counted::new(tcp, stats);
        if let Some(header) = proxy_header {
            // Before TLS and HTTP: the origin reads it first.
            tokio::io::AsyncWriteExt::write_all(&mut tcp, &header).await?;
        }
        if !key.tls {
            return Ok(OriginStream::Plain(tcp));
        }
        let name = name.unwrap_or_default().to_owned();
        let server_name = ServerName::try_from(name.clone()).map_err(|e| OriginTlsError {
            name: name.clone(),
            source: io::Error::new(io::ErrorKind::InvalidInput, e),
        })?;
        // Bounded on its own: a peer that accepts and then stays silent must fail over
        // like a refused connection, not use up the whole `proxy_timeout`.
        let handshake = self.tls.connect(server_name, tcp);
        match tokio::time::timeout(limit, handshake).await {
            Ok(Ok(s)) if self.h2 && s.get_ref().1.alpn_protocol() != Some(b"h2") => {
                Err(OriginTlsError {
                    name,
                    source: io::Error::new(io::ErrorKind::InvalidData, NoH2),
                }
                .into())
            }
            Ok(Ok(s)) => Ok(OriginStream::Tls(Box::new(s))),
            Ok(Err(source)) => Err(OriginTlsError { name, source }.into()),
            Err(_) => Err(OriginTlsError {
                name,
                source: io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {}s", limit.as_secs_f64()),
                ),
            }
            .into()),
        }
    }
}

/// A TCP connection to `address` (`host:port`, `[v6]:port`): an IP address directly, a name
/// through the resolver, each of its addresses in turn until one accepts.
async fn tcp_connect(address: &str, bind: Option<std::net::IpAddr>) -> io::Result<TcpStream> {
    if let Ok(sa) = address.parse::<std::net::SocketAddr>() {
        let Some(ip) = bind else {
            return TcpStream::connect(sa).await;
        };
        let socket = match sa {
            std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.bind(std::net::SocketAddr::new(ip, 0))?;
        return socket.connect(sa).await;
    }
    let mut last = None;
    for sa in tokio::net::lookup_host(address).await? {
        match TcpStream::connect(sa).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{address} resolves to no address"),
        )
    }))
}

/// The origin's TLS handshake did not choose `h2` although `origin_protocol = "h2"`.
#[derive(Debug, thiserror::Error)]
#[error("the origin did not choose HTTP/2 (ALPN h2) in its TLS handshake")]
pub struct NoH2;

/// `uri`'s path and query (`/` when it has none) under `scheme` and `authority`: the target
/// as a client of the origin sends it (`None` if the parts do not make a URI).
pub fn absolute_uri(uri: &Uri, scheme: Scheme, authority: Authority) -> Option<Uri> {
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(scheme);
    parts.authority = Some(authority);
    parts.path_and_query = Some(
        uri.path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/")),
    );
    Uri::from_parts(parts).ok()
}

/// Marks the user part of a proxied pool key: `[TLS name];pp=HEX@host:port`.
pub const PROXY_MARK: &str = ";pp=";

/// The pool key of connections that start with the PROXY header `header`: the header, in hex,
/// joins the authority's user part. The pool then never gives one client's connection to
/// another (the header names the client), and the connector (this file) knows what to
/// write before anything else. Requests go out with origin-form targets, so the user part never
/// reaches the wire.
pub fn proxied_key(key: &Authority, header: &[u8]) -> Option<Authority> {
    use std::fmt::Write as _;
    let (user, host) = match key.as_str().rsplit_once('@') {
        Some((user, host)) => (user, host),
        None => ("", key.as_str()),
    };
    let mut s = String::with_capacity(key.as_str().len() + PROXY_MARK.len() + 2 * header.len() + 1);
    s.push_str(user);
    s.push_str(PROXY_MARK);
    for b in header {
        let _ = write!(s, "{b:02x}");
    }
    s.push('@');
    s.push_str(host);
    Authority::try_from(s).ok()
}

/// The bytes of a hex string (`None` when it is not one).
fn unhex(hex: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = hex.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    b.chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}
