//! The connector behind the upstream pool: plain TCP, or TCP + TLS (rustls) for origins over
//! HTTPS.
//!
//! The pool keys connections by scheme and authority. A TLS origin's URI carries the name to
//! send as SNI and to verify in its certificate as the authority's user part
//! (`https://origin.example@10.0.0.5:443`), so two rules that reach the same address under
//! different names never share a connection. hyper sends origin-form request targets, so the
//! user part never reaches the wire.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::{Authority, PathAndQuery, Scheme};
use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::telemetry::metrics::{Counted, OriginConnStats};

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

/// Connects to origins, with TLS where the URI's scheme is `https`.
#[derive(Clone)]
pub struct OriginConnector {
    tcp: HttpConnector,
    tls: TlsConnector,
    /// `proxy_connect_timeout_seconds`: the limit of the TCP connection and, separately, of the
    /// TLS handshake.
    connect_timeout: Duration,
    /// HTTP/2 connections (`origin_protocol = "h2"`): TLS offers only `h2` in ALPN and an
    /// origin that does not choose it is an error, not a connection to misread.
    h2: bool,
}

impl std::fmt::Debug for OriginConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginConnector").finish_non_exhaustive()
    }
}

impl OriginConnector {
    pub fn new(
        mut tcp: HttpConnector,
        tls: Arc<rustls::ClientConfig>,
        connect_timeout: Duration,
    ) -> Self {
        tcp.enforce_http(false);
        // The connect timeout is applied here, where its expiry is a typed error.
        tcp.set_connect_timeout(None);
        OriginConnector {
            tcp,
            tls: TlsConnector::from(tls),
            connect_timeout,
            h2: false,
        }
    }

    /// The same connector for HTTP/2: TLS offers `h2` alone in ALPN and requires it.
    pub fn for_h2(&self, tls: &rustls::ClientConfig) -> Self {
        let mut tls = tls.clone();
        tls.alpn_protocols = vec![b"h2".to_vec()];
        OriginConnector {
            tcp: self.tcp.clone(),
            tls: TlsConnector::from(Arc::new(tls)),
            connect_timeout: self.connect_timeout,
            h2: true,
        }
    }
}

/// The origin's TLS handshake did not choose `h2` although `origin_protocol = "h2"`.
#[derive(Debug, thiserror::Error)]
#[error("the origin did not choose HTTP/2 (ALPN h2) in its TLS handshake")]
pub struct NoH2;

/// A TCP connection to an origin, its bytes counted for the metrics.
type Tcp = Counted<TcpStream, OriginConnStats>;

/// A connection to an origin.
#[derive(Debug)]
pub enum OriginIo {
    Plain(TokioIo<Tcp>),
    /// Boxed: a rustls connection is over 1 KiB.
    Tls(Box<TokioIo<TlsStream<Tcp>>>),
}

impl Connection for OriginIo {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for OriginIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            OriginIo::Plain(s) => Pin::new(s).poll_read(cx, buf),
            OriginIo::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for OriginIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            OriginIo::Plain(s) => Pin::new(s).poll_write(cx, buf),
            OriginIo::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            OriginIo::Plain(s) => Pin::new(s).poll_flush(cx),
            OriginIo::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            OriginIo::Plain(s) => Pin::new(s).poll_shutdown(cx),
            OriginIo::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            OriginIo::Plain(s) => s.is_write_vectored(),
            OriginIo::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            OriginIo::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            OriginIo::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }
}

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
/// write before anything else. hyper sends origin-form targets, so the user part never
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

use crate::error::BoxError;

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

impl tower_service::Service<Uri> for OriginConnector {
    type Response = OriginIo;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<OriginIo, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.tcp.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let tls = uri.scheme_str() == Some("https");
        // The user part: the TLS name, and a PROXY header to send first ([`proxied_key`]).
        let user = uri
            .authority()
            .and_then(|a| a.as_str().rsplit_once('@'))
            .map(|(user, _)| user);
        let (name, proxy_header) = match user.map(|u| u.split_once(PROXY_MARK)) {
            Some(Some((name, hex))) => (Some(name.to_owned()), unhex(hex)),
            Some(None) => (user.map(str::to_owned), None),
            None => (None, None),
        };
        // Counted under the address (`host:port`), without the TLS name.
        let origin = uri
            .authority()
            .and_then(|a| a.as_str().rsplit('@').next())
            .unwrap_or_default()
            .to_owned();
        let connecting = self.tcp.call(uri);
        let connector = self.tls.clone();
        let limit = self.connect_timeout;
        let h2 = self.h2;
        Box::pin(async move {
            let tcp = match tokio::time::timeout(limit, connecting).await {
                Ok(tcp) => tcp?,
                Err(_) => return Err(OriginConnectTimeout(limit).into()),
            };
            let stats = crate::telemetry::metrics::get().origin(&origin).opened();
            let mut tcp = Counted::new(tcp.into_inner(), stats);
            if let Some(header) = proxy_header {
                // Before TLS and HTTP: the origin reads it first.
                tokio::io::AsyncWriteExt::write_all(&mut tcp, &header).await?;
            }
            let tcp = TokioIo::new(tcp);
            if !tls {
                return Ok(OriginIo::Plain(tcp));
            }
            let name = name.unwrap_or_default();
            let server_name = ServerName::try_from(name.clone()).map_err(|e| OriginTlsError {
                name: name.clone(),
                source: io::Error::new(io::ErrorKind::InvalidInput, e),
            })?;
            // Bounded on its own: a peer that accepts and then stays silent must fail over
            // like a refused connection, not use up the whole `proxy_timeout`.
            let handshake = connector.connect(server_name, tcp.into_inner());
            match tokio::time::timeout(limit, handshake).await {
                Ok(Ok(s)) if h2 && s.get_ref().1.alpn_protocol() != Some(b"h2") => {
                    Err(OriginTlsError {
                        name,
                        source: io::Error::new(io::ErrorKind::InvalidData, NoH2),
                    }
                    .into())
                }
                Ok(Ok(s)) => Ok(OriginIo::Tls(Box::new(TokioIo::new(s)))),
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
        })
    }
}
