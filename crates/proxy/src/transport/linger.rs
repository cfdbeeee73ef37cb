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

/// The state of a lingering shutdown, kept by the I/O wrapper that does it (`Rewind`).
#[derive(Default)]
pub struct Lingering {
    /// Set once the inner shutdown is done: when the lingering ends at the latest.
    until: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Lingering {
    /// Shuts `inner`'s sending side, then reads and drops until the client closes, or for
    /// [`LINGER`].
    pub fn poll_shutdown<I: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        inner: &mut I,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        if self.until.is_none() {
            ready!(Pin::new(&mut *inner).poll_shutdown(cx))?;
            self.until = Some(Box::pin(tokio::time::sleep(LINGER)));
        }
        let mut scratch = [0u8; 2048];
        loop {
            if let Some(until) = self.until.as_mut() {
                if until.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Ok(()));
                }
            }
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut *inner).poll_read(cx, &mut buf) {
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

    async fn shutdown(io: &mut tokio::io::DuplexStream) -> io::Result<()> {
        let mut l = Lingering::default();
        std::future::poll_fn(|cx| l.poll_shutdown(io, cx)).await
    }

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[tokio::test]
    async fn shutdown_reads_until_the_client_closes() {
        let (client, mut server) = tokio::io::duplex(64);
        let (mut cr, mut cw) = tokio::io::split(client);
        server.write_all(b"goaway").await.unwrap();
        let started = tokio::time::Instant::now();
        let shut = tokio::spawn(async move { shutdown(&mut server).await });
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
        let (_client, mut server) = tokio::io::duplex(64);
        let started = tokio::time::Instant::now();
        shutdown(&mut server).await.unwrap();
        let took = started.elapsed();
        assert!(took >= LINGER && took < LINGER * 2, "{took:?}");
    }
}
