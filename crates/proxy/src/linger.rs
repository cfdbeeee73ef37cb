//! A lingering close for HTTP/2 connections: after the last GOAWAY and the end of rampart's
//! sending side, the socket is read (and what arrives dropped) until the client closes it, or
//! for [`LINGER`] at most, before it is closed.
//!
//! A client may open a stream just as the server's final GOAWAY leaves (a graceful shutdown
//! at a drain or an upgrade, or an idle connection closed). Closed at once, the socket answers
//! those late frames with a TCP reset, which can reach the client before it has read the
//! GOAWAY: it then sees a broken connection instead of a stream the server refused (which RFC
//! 9113 §6.8 lets it send again, even a POST). The chaos soak caught a POST lost that way at an
//! upgrade. NGINX does the same (`lingering_close`).

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Longest wait for the client to close after rampart's side is shut.
pub const LINGER: Duration = Duration::from_secs(2);

/// An I/O whose shutdown lingers (see the module).
pub struct Linger<I> {
    inner: I,
    /// Set once the inner shutdown is done: when the lingering ends at the latest.
    until: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<I> Linger<I> {
    pub fn new(inner: I) -> Linger<I> {
        Linger { inner, until: None }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Linger<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Linger<I> {
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
        if this.until.is_none() {
            ready!(Pin::new(&mut this.inner).poll_shutdown(cx))?;
            this.until = Some(Box::pin(tokio::time::sleep(LINGER)));
        }
        let mut scratch = [0u8; 2048];
        loop {
            if let Some(until) = this.until.as_mut() {
                if until.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Ok(()));
                }
            }
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut buf) {
                // The client closed (or the connection broke): done.
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Err(_)) => return Poll::Ready(Ok(())),
                // Late frames: dropped.
                Poll::Ready(Ok(())) => continue,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[tokio::test]
    async fn shutdown_reads_until_the_client_closes() {
        let (client, server) = tokio::io::duplex(64);
        let mut server = Linger::new(server);
        let (mut cr, mut cw) = tokio::io::split(client);
        server.write_all(b"goaway").await.unwrap();
        let started = tokio::time::Instant::now();
        let shut = tokio::spawn(async move { server.shutdown().await });
        // The client's late frames do not fail anything; its close ends the lingering.
        cw.write_all(b"late frame").await.unwrap();
        let mut got = Vec::new();
        cr.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"goaway");
        drop(cw);
        drop(cr);
        shut.await.unwrap().unwrap();
        assert!(started.elapsed() < LINGER);
    }

    #[tokio::test]
    async fn a_client_that_never_closes_is_given_linger_at_most() {
        let (_client, server) = tokio::io::duplex(64);
        let mut server = Linger::new(server);
        let started = tokio::time::Instant::now();
        server.shutdown().await.unwrap();
        let took = started.elapsed();
        assert!(took >= LINGER && took < LINGER * 2, "{took:?}");
    }
}
