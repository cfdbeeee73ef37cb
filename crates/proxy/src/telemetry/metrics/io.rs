//! Counting a connection's bytes as they pass: a wrapper around its socket.

use std::sync::atomic::Ordering::Relaxed;

use super::{ConnStats, OriginConnStats};

/// What counts a connection's bytes.
pub trait Tally {
    fn received(&self, n: usize);
    fn sent(&self, n: usize);
}

impl Tally for ConnStats {
    fn received(&self, n: usize) {
        self.shard.received.fetch_add(n as u64, Relaxed);
    }

    fn sent(&self, n: usize) {
        self.shard.sent.fetch_add(n as u64, Relaxed);
    }
}

impl Tally for OriginConnStats {
    fn received(&self, n: usize) {
        self.0.shard().received.fetch_add(n as u64, Relaxed);
    }

    fn sent(&self, n: usize) {
        self.0.shard().sent.fetch_add(n as u64, Relaxed);
    }
}

/// A connection (client or origin) whose bytes are counted as they pass.
#[derive(Debug)]
pub struct Counted<S, T> {
    io: S,
    stats: T,
}

impl<S, T> Counted<S, T> {
    pub fn new(io: S, stats: T) -> Self {
        Counted { io, stats }
    }

    pub fn get_ref(&self) -> &S {
        &self.io
    }

    /// The stream and its counters, apart (a connection being parked).
    pub fn into_parts(self) -> (S, T) {
        (self.io, self.stats)
    }
}

mod counted {
    use std::io;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    use super::{Counted, Tally};

    impl<S: AsyncRead + Unpin, T: Tally + Unpin> AsyncRead for Counted<S, T> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let before = buf.filled().len();
            let r = Pin::new(&mut self.io).poll_read(cx, buf);
            if let Poll::Ready(Ok(())) = r {
                self.stats.received(buf.filled().len() - before);
            }
            r
        }
    }

    impl<S: AsyncWrite + Unpin, T: Tally + Unpin> AsyncWrite for Counted<S, T> {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let r = Pin::new(&mut self.io).poll_write(cx, buf);
            if let Poll::Ready(Ok(n)) = r {
                self.stats.sent(n);
            }
            r
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
            if let Poll::Ready(Ok(n)) = r {
                self.stats.sent(n);
            }
            r
        }

        fn is_write_vectored(&self) -> bool {
            self.io.is_write_vectored()
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_shutdown(cx)
        }
    }
}
