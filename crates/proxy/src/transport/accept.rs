//! One client connection, from accept to its last byte: [PROXY header] → [TLS] → HTTP/1.1 |
//! HTTP/2, chosen by ALPN or by the first bytes (the HTTP/2 preface, strictly after ALPN `h2`).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::watch;

use crate::http1::server as h1;
use crate::interim::Interim;
use crate::pipeline::conn_info::ConnInfo;
use crate::telemetry::metrics::Counted;
use crate::transport::in_force::Slot;

/// A connection as accept leaves it to its task.
pub(crate) struct Accepted {
    pub(crate) conn: Conn,
    pub(crate) acceptor: Option<tokio_rustls::TlsAcceptor>,
    /// Reads the client hello first, to answer other instances' TLS-ALPN-01 challenges.
    pub(crate) shared_alpn: Option<rampart_tls::alpn::SharedAlpn>,
    /// The listener reads a PROXY header first.
    pub(crate) proxy_header: bool,
    /// With a PROXY header: the per-address limit, applied to the client it names.
    pub(crate) per_ip: Option<Arc<crate::transport::limits::PerIp>>,
}

impl Accepted {
    /// [PROXY header] → [TLS] → HTTP. Returns the per-address slot taken for the client a
    /// PROXY header named (held until the connection ends), and a plaintext HTTP/1.1
    /// connection that went idle after its first requests, for its task to keep
    /// (`transport/idle.rs`).
    pub(crate) async fn serve(
        self,
        mut stream: ClientStream,
        stop: &mut watch::Receiver<bool>,
    ) -> (
        Option<crate::transport::limits::PerIpSlot>,
        Option<Parkable>,
    ) {
        let Accepted {
            mut conn,
            acceptor,
            shared_alpn,
            proxy_header,
            per_ip,
        } = self;
        let mut first = BytesMut::new();
        let mut slot = None;
        if proxy_header {
            let read = tokio::select! {
                r = crate::net::proxy_protocol::read(&mut stream, conn.limits.header_read_timeout) => r,
                _ = stop.changed() => return (None, None),
            };
            let (header, rest) = match read {
                Ok(x) => x,
                Err(e) => {
                    crate::telemetry::metrics::get().proxy_protocol_refused(e.reason());
                    tracing::debug!(peer = %conn.peer, error = %e, "PROXY protocol header refused; connection closed");
                    return (None, None);
                }
            };
            if let Some((client, dest)) = header.addresses {
                conn.peer = client;
                conn.info = Arc::new(ConnInfo::new(client, dest, conn.info.scheme));
            }
            if let Some(table) = per_ip {
                slot = table.acquire(conn.info.client_ip);
                if slot.is_none() {
                    crate::telemetry::metrics::get().refused_per_ip();
                    tracing::debug!(client = %conn.peer, "per-address connection limit reached; connection closed");
                    return (None, None);
                }
            }
            first = rest;
        }
        // Plaintext: in this future (the task's first allocation, freed when the connection
        // goes idle); TLS: in an allocation of its own.
        let parked = match acceptor {
            None => conn
                .serve(stream, first, false, stop)
                .await
                .map(|(idle, h1)| Parkable {
                    io: idle.io,
                    keepalive_until: idle.keepalive_until,
                    h1,
                }),
            Some(acceptor) if first.is_empty() => {
                boxed!(conn.serve_tls(acceptor, shared_alpn, stream, stop)).await;
                None
            }
            Some(acceptor) => {
                let stream = Rewind::new(first.freeze(), stream);
                boxed!(conn.serve_tls(acceptor, shared_alpn, stream, stop)).await;
                None
            }
        };
        (slot, parked)
    }
}

/// A plaintext HTTP/1.1 connection between requests: its stream, the end of its keep-alive
/// time, and what serving it again needs (`transport/idle.rs`, `transport/park.rs`).
pub(crate) struct Parkable {
    pub(crate) io: ClientStream,
    pub(crate) keepalive_until: tokio::time::Instant,
    pub(crate) h1: H1Conn,
}

/// What an HTTP/1.1 connection keeps from one request to the next.
pub(crate) struct H1Conn {
    /// Where each request finds the configuration in force.
    pub(crate) slot: Arc<Slot>,
    /// With the connection's place for the origin's interim answers.
    pub(crate) info: Arc<ConnInfo>,
    pub(crate) limits: h1::Limits,
}

impl H1Conn {
    fn new(slot: Arc<Slot>, mut info: Arc<ConnInfo>, limits: h1::Limits) -> H1Conn {
        // Where the origin's interim answers for this connection's requests go.
        Arc::make_mut(&mut info).interim = Some(Arc::new(Interim::default()));
        H1Conn { slot, info, limits }
    }

    /// A parked connection's state when it wakes: the configuration in force now.
    pub(crate) fn resume(slot: Arc<Slot>, peer: SocketAddr, local: SocketAddr) -> H1Conn {
        let limits = slot.load().conn.limits;
        let scheme = crate::pipeline::conn_info::Scheme::Http;
        let info = Arc::new(ConnInfo::new(peer, local, scheme));
        H1Conn::new(slot, info, limits)
    }

    /// rampart's HTTP/1.1 server on `io` (`first`: bytes already read), the pipeline behind
    /// it; the connection back when it waits for a next request (see [`h1::serve`], and
    /// `at_once` there).
    pub(crate) async fn serve<I>(
        &self,
        io: I,
        first: BytesMut,
        at_once: bool,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<h1::Idle<I>>
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send,
    {
        let handler = |req| {
            let (pipeline, info) = (self.slot.load().pipeline.clone(), self.info.clone());
            // Boxed: the connection's own state stays small between requests.
            Box::pin(async move { pipeline.handle(&info, req, None).await })
        };
        let interim = self.info.interim.as_deref();
        h1::serve(io, first, self.limits, at_once, handler, interim, stop).await
    }
}

/// The HTTP/2 connection preface (prior knowledge h2c).
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Length of `PRI `, the preface's method: no HTTP/1.1 client uses it (RFC 9113 §11.6
/// registers it so that none does), so a connection that starts with it meant HTTP/2, and a
/// wrong byte after it is an HTTP/2 connection error, not an HTTP/1.1 request.
const H2_METHOD: usize = 4;

/// A client's TCP connection, its bytes counted for the metrics.
pub(crate) type ClientStream = Counted<tokio::net::TcpStream, crate::telemetry::metrics::ConnStats>;

/// What a connection task needs.
pub(crate) struct Conn {
    /// Where each request finds the configuration in force.
    pub(crate) slot: Arc<Slot>,
    pub(crate) info: Arc<ConnInfo>,
    pub(crate) h2: crate::http2::server::Limits,
    pub(crate) limits: h1::Limits,
    pub(crate) peer: SocketAddr,
}

impl Conn {
    /// The TLS handshake (within the request-head timeout), then HTTP/2 or HTTP/1.1 by ALPN; a
    /// TLS-ALPN-01 validation ends with the handshake.
    async fn serve_tls<I>(
        self,
        acceptor: tokio_rustls::TlsAcceptor,
        shared_alpn: Option<rampart_tls::alpn::SharedAlpn>,
        stream: I,
        stop: &mut watch::Receiver<bool>,
    ) where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let peer = self.peer;
        let accept = async {
            let Some(alpn) = shared_alpn else {
                return acceptor.accept(stream).await;
            };
            // The client hello first: a TLS-ALPN-01 validation of another instance's order
            // needs its answer from Redis before the certificate is chosen.
            let start =
                tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream)
                    .await?;
            let hello = start.client_hello();
            let sni = hello.server_name().map(str::to_owned);
            let protocols = hello.alpn().map(|p| p.map(<[u8]>::to_vec).collect());
            alpn.prepare(sni.as_deref(), protocols).await;
            start.into_stream(acceptor.config().clone()).await
        };
        // A stop (shutdown, or the upgrade to a new binary) does not cut a handshake short:
        // the client would send its request into a closed connection. It completes (within
        // the head timeout), and the request that follows is answered with `Connection:
        // close` like any on a stopping server (the chaos soak: TLS requests failed at every
        // upgrade).
        let handshake = tokio::time::timeout(self.limits.header_read_timeout, accept).await;
        let metrics = crate::telemetry::metrics::get();
        match handshake {
            Ok(Ok(tls)) => {
                metrics.handshake(Some(true));
                let alpn = tls.get_ref().1.alpn_protocol();
                if alpn == Some(rampart_tls::cert_store::ACME_TLS_ALPN) {
                    // A TLS-ALPN-01 validation: the handshake was the answer.
                    tracing::debug!(%peer, "ACME tls-alpn-01 validation handshake");
                } else {
                    // RFC 9113 §3.4: after ALPN `h2` the connection speaks only HTTP/2.
                    let h2_only = alpn == Some(b"h2");
                    let mut conn = self;
                    conn.limits.close_notify = true;
                    // A TLS session is far larger than a parked connection or an idle one
                    // in its task: it stays in `h1::serve`.
                    conn.limits.yield_after = None;
                    conn.limits.park_after = None;
                    conn.serve(tls, BytesMut::new(), h2_only, stop).await;
                }
            }
            Ok(Err(e)) => {
                metrics.handshake(Some(false));
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
            }
            Err(_) => {
                metrics.handshake(None);
                tracing::debug!(%peer, "TLS handshake timed out");
            }
        }
    }

    /// Reads the first bytes (after `first`, already read): the HTTP/2 preface goes to hyper's
    /// HTTP/2 server, anything else to rampart's HTTP/1.1 server. A connection that sends
    /// nothing within the request-head timeout is closed (it would hold a connection slot).
    ///
    /// A connection that must speak HTTP/2 (`h2_only`: ALPN chose it) or that began the
    /// preface (its method, `PRI `) and then broke it is an HTTP/2 connection
    /// error (RFC 9113 §3.4): it gets GOAWAY(PROTOCOL_ERROR) and is closed, never an HTTP/1.1
    /// answer.
    ///
    /// A plaintext HTTP/1.1 connection (`limits.yield_after`) is given back when it goes idle,
    /// for its task to keep (`transport/idle.rs`).
    async fn serve<I>(
        self,
        mut io: I,
        mut first: BytesMut,
        h2_only: bool,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<(h1::Idle<I>, H1Conn)>
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let mut deadline = tokio::time::Instant::now() + self.limits.header_read_timeout;
        loop {
            if !first.is_empty() {
                let n = first.len().min(H2_PREFACE.len());
                if first[..n] != H2_PREFACE[..n] {
                    let same = first
                        .iter()
                        .zip(H2_PREFACE)
                        .take_while(|(a, b)| a == b)
                        .count();
                    if h2_only || same >= H2_METHOD {
                        tracing::debug!(peer = %self.peer, "invalid HTTP/2 connection preface; GOAWAY");
                        crate::telemetry::metrics::get().malformed(400);
                        refuse_h2_preface(&mut io).await;
                        return None;
                    }
                    break;
                }
                if n == H2_PREFACE.len() {
                    let io = Rewind::lingering(first.freeze(), io);
                    boxed!(self.serve_h2(io, stop)).await;
                    return None;
                }
            }
            // Stopping: a connection that sent nothing yet gets a short grace for the request
            // its client may already be sending (as h1 gives an idle keep-alive connection).
            if *stop.borrow() {
                deadline = deadline.min(tokio::time::Instant::now() + h1::STOP_GRACE);
            }
            let read = tokio::select! {
                r = tokio::time::timeout_at(deadline, crate::net::read::read_some(&mut io)) => r,
                r = stop.changed(), if !*stop.borrow() => {
                    if r.is_err() {
                        return None;
                    }
                    continue;
                }
            };
            match read {
                Ok(Ok(b)) if !b.is_empty() => first.extend_from_slice(&b),
                _ => return None,
            }
        }
        let h1 = H1Conn::new(self.slot, self.info, self.limits);
        let idle = h1.serve(io, first, false, stop).await?;
        Some((idle, h1))
    }

    /// Serves HTTP/2 with rampart's own server (`http2::server`) until the connection ends,
    /// the worker drains, or no request starts for a whole keep-alive period.
    async fn serve_h2<I>(self, io: I, stop: &mut watch::Receiver<bool>)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (slot, info) = (self.slot, self.info);
        let handler = move |req, interim| {
            let (pipeline, info) = (slot.load().pipeline.clone(), info.clone());
            Box::pin(async move { pipeline.handle(&info, req, Some(interim)).await })
                as crate::http2::server::StreamFuture
        };
        crate::http2::server::serve(io, self.h2, handler, stop).await;
    }
}

/// An HTTP/2 connection error for an invalid connection preface (RFC 9113 §3.4): an empty
/// SETTINGS frame (the server's own preface) and GOAWAY with PROTOCOL_ERROR, then the
/// connection is shut down.
pub async fn refuse_h2_preface<W: AsyncWrite + Unpin>(io: &mut W) {
    const FRAMES: [u8; 26] = [
        // SETTINGS: length 0, type 0x4, no flags, stream 0.
        0, 0, 0, 0x4, 0, 0, 0, 0, 0,
        // GOAWAY: length 8, type 0x7, no flags, stream 0; last stream 0, PROTOCOL_ERROR (0x1).
        0, 0, 8, 0x7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
    ];
    let _ = io.write_all(&FRAMES).await;
    let _ = io.shutdown().await;
}

/// An I/O stream with bytes already read put back in front (to hand a connection whose first
/// bytes were the HTTP/2 preface to hyper), and for HTTP/2 a lingering close (`linger.rs`).
pub struct Rewind<I> {
    pre: Bytes,
    inner: I,
    linger: Option<crate::transport::linger::Lingering>,
}

impl<I> Rewind<I> {
    pub fn new(pre: Bytes, inner: I) -> Self {
        Rewind {
            pre,
            inner,
            linger: None,
        }
    }

    /// As [`Rewind::new`], closed with a lingering close: a stream the client opens as the
    /// last GOAWAY leaves is refused, not reset with the connection.
    pub fn lingering(pre: Bytes, inner: I) -> Self {
        Rewind {
            pre,
            inner,
            linger: Some(crate::transport::linger::Lingering::default()),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Rewind<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.pre.is_empty() {
            let n = self.pre.len().min(buf.remaining());
            buf.put_slice(&self.pre.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Rewind<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match &mut this.linger {
            Some(l) => l.poll_shutdown(&mut this.inner, cx),
            None => Pin::new(&mut this.inner).poll_shutdown(cx),
        }
    }
}
