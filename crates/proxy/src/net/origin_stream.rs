//! A connection to an origin as bytes: plain TCP or TCP + TLS, its bytes counted for the
//! metrics. The HTTP/1.1 client (`http1/client/`) reads and writes it directly; the HTTP/2 client
//! gets it wrapped for hyper.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::telemetry::metrics::{Counted, OriginConnStats};

/// A TCP connection to an origin, its bytes counted.
pub type Tcp = Counted<TcpStream, OriginConnStats>;

/// A connection to an origin.
#[derive(Debug)]
pub enum OriginStream {
    Plain(Tcp),
    /// Boxed: a rustls connection is over 1 KiB.
    Tls(Box<TlsStream<Tcp>>),
}

impl OriginStream {
    /// Whether an idle connection can still carry a request: the origin has neither closed it
    /// nor sent anything unasked (which would be read as the next answer). Costs no system call
    /// while the socket has had no event since its last read.
    pub fn is_usable(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut byte = [0u8; 1];
        let mut rb = ReadBuf::new(&mut byte);
        matches!(Pin::new(self).poll_read(&mut cx, &mut rb), Poll::Pending)
    }
}

impl AsyncRead for OriginStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            OriginStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            OriginStream::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for OriginStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            OriginStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            OriginStream::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            OriginStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            OriginStream::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            OriginStream::Plain(s) => s.is_write_vectored(),
            OriginStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            OriginStream::Plain(s) => Pin::new(s).poll_flush(cx),
            OriginStream::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            OriginStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            OriginStream::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

/// A connection whose first bytes were already read: they are read again first (what an
/// origin sent right after its `101 Switching Protocols` head).
#[derive(Debug)]
pub struct Prefixed<S> {
    first: Bytes,
    io: S,
}

impl<S> Prefixed<S> {
    pub fn new(first: Bytes, io: S) -> Self {
        Prefixed { first, io }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.first.is_empty() {
            let n = this.first.len().min(buf.remaining());
            buf.put_slice(&this.first[..n]);
            this.first.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
