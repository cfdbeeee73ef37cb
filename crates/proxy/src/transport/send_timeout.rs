//! `client_send_timeout_seconds` (NGINX's `send_timeout`): a client that stops taking a
//! response is cut off after that long, so it cannot hold a connection, and the response's
//! memory, for ever (an HTTP/2 connection with a zero window kept 120 responses open
//! past 75 s).
//!
//! - HTTP/1.1 writes go through [`TimedWrite`]: a write the socket has not taken after the
//!   timeout fails the connection (the timer is only made when a write has to wait).
//! - HTTP/2 windows are the client's to open: a stream whose window stays shut is never written
//!   at all, so there is no write to time. Each response body is [`Watched`] instead: a
//!   connection on which some body has data the client does not take, while no body moved for
//!   the timeout, is closed by its task ([`Progress::stalled`]). Bodies are handed to the
//!   HTTP/2 server in pieces of at most [`PIECE`] bytes: it buffers whatever frame it is given,
//!   so a whole stored object handed at once through a window of one byte would sit in its
//!   buffer, unwatched.
//! - HTTP/3 times each `send_data` (see `quic/mod.rs`).
//!
//! A response waiting for its origin is not the client's doing and never times out here.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A connection's writer whose writes fail with `TimedOut` when the peer takes nothing for
/// `timeout`. Reads pass through.
pub struct TimedWrite<W> {
    inner: W,
    timeout: Duration,
    /// Made when a write has to wait; dropped when one completes.
    deadline: Option<Pin<Box<Sleep>>>,
    /// The timeout passed once: every later wait fails at once (counted and logged once).
    expired: bool,
}

impl<W> TimedWrite<W> {
    pub fn new(inner: W, timeout: Duration) -> Self {
        TimedWrite {
            inner,
            timeout,
            deadline: None,
            expired: false,
        }
    }

    /// The stream, for a connection that leaves its task between requests (no write waits
    /// then).
    pub fn into_inner(self) -> W {
        self.inner
    }

    /// `polled` as it is when ready; when pending, pending until the deadline, then an error.
    fn timed<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        if polled.is_ready() {
            self.deadline = None;
            return polled;
        }
        if self.expired {
            return Poll::Ready(Err(std::io::ErrorKind::TimedOut.into()));
        }
        let timeout = self.timeout;
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(deadline.as_mut().poll(cx));
        self.expired = true;
        tracing::info!(?timeout, "client took nothing of the response for client_send_timeout_seconds; closing the connection");
        crate::telemetry::metrics::get().send_timeout();
        Poll::Ready(Err(std::io::ErrorKind::TimedOut.into()))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for TimedWrite<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.timed(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.timed(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.timed(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.timed(cx, polled)
    }
}

impl<W: AsyncRead + Unpin> AsyncRead for TimedWrite<W> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

/// How an HTTP/2 connection's responses move: when one last did, and how many have data the
/// client has not taken.
#[derive(Debug)]
pub struct Progress {
    start: Instant,
    /// Milliseconds after `start` when a body last moved (was polled or made).
    last: AtomicU64,
    /// Bodies that handed a frame (or were made) and were not polled since.
    waiting: AtomicUsize,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            start: Instant::now(),
            last: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
        }
    }
}

impl Progress {
    fn moved(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last.store(ms, Ordering::Relaxed);
    }

    /// Some body waits for the client, and none moved for `timeout`.
    pub fn stalled(&self, timeout: Duration) -> bool {
        let since = self
            .start
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last.load(Ordering::Relaxed)));
        self.waiting.load(Ordering::Relaxed) > 0 && since >= timeout
    }
}

/// The largest data frame a [`Watched`] body hands over at once.
pub const PIECE: usize = 64 << 10;

/// A response body counted in its connection's [`Progress`], handed over in pieces.
pub struct Watched<B> {
    inner: B,
    progress: Arc<Progress>,
    /// Counted in `progress.waiting`.
    waiting: bool,
    /// What is left of the inner body's last frame.
    rest: Bytes,
}

impl<B> Watched<B> {
    /// A body that waits to be polled from the start (a stream whose window is shut is never
    /// polled at all).
    pub fn new(inner: B, progress: &Arc<Progress>) -> Self {
        progress.moved();
        progress.waiting.fetch_add(1, Ordering::Relaxed);
        Watched {
            inner,
            progress: progress.clone(),
            waiting: true,
            rest: Bytes::new(),
        }
    }

    fn set_waiting(&mut self, waiting: bool) {
        if self.waiting != waiting {
            self.waiting = waiting;
            if waiting {
                self.progress.waiting.fetch_add(1, Ordering::Relaxed);
            } else {
                self.progress.waiting.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

impl<B> Drop for Watched<B> {
    fn drop(&mut self) {
        self.set_waiting(false);
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Watched<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        self.progress.moved();
        let polled = if self.rest.is_empty() {
            Pin::new(&mut self.inner).poll_frame(cx)
        } else {
            Poll::Ready(Some(Ok(Frame::data(std::mem::take(&mut self.rest)))))
        };
        let polled = match polled {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(mut data) => {
                    if data.len() > PIECE {
                        self.rest = data.split_off(PIECE);
                    }
                    Poll::Ready(Some(Ok(Frame::data(data))))
                }
                Err(frame) => Poll::Ready(Some(Ok(frame))),
            },
            other => other,
        };
        // A frame handed over waits for the client until the next poll, unless it was the
        // last; a pending body waits for its origin, an ended one for nothing.
        let waits = matches!(&polled, Poll::Ready(Some(Ok(_)))) && !self.is_end_stream();
        self.set_waiting(waits);
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self.rest.len() as u64;
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_write_that_waits_past_the_timeout_fails() {
        // A pipe whose reader never reads: the second write waits for room.
        let (w, _r) = tokio::io::duplex(8);
        let mut t = TimedWrite::new(w, Duration::from_millis(100));
        use tokio::io::AsyncWriteExt as _;
        assert!(t.write_all(b"12345678").await.is_ok());
        let err = t.write_all(b"x").await.err().map(|e| e.kind());
        assert_eq!(err, Some(std::io::ErrorKind::TimedOut));
    }

    #[tokio::test]
    async fn a_body_never_polled_stalls_its_connection_once_the_timeout_passed() {
        let timeout = Duration::from_millis(100);
        let p = Arc::new(Progress::default());
        let body = Watched::new(http_body_util::Full::new(Bytes::from_static(b"x")), &p);
        assert!(!p.stalled(timeout));
        tokio::time::sleep(timeout + Duration::from_millis(50)).await;
        assert!(p.stalled(timeout));
        // Taken and ended: nothing waits any more.
        let mut body = body;
        let _ = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        assert!(!p.stalled(timeout));
        drop(body);
        assert_eq!(p.waiting.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn large_frames_are_handed_over_in_pieces_and_waiting_until_the_last() {
        let p = Arc::new(Progress::default());
        let whole = Bytes::from(vec![7u8; 3 * PIECE + 10]);
        let mut body = Watched::new(http_body_util::Full::new(whole.clone()), &p);
        let mut got = Vec::new();
        while let Some(f) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            let d = f.ok().and_then(|f| f.into_data().ok()).unwrap_or_default();
            assert!(d.len() <= PIECE);
            got.extend_from_slice(&d);
            let last = got.len() == whole.len();
            assert_eq!(p.waiting.load(Ordering::Relaxed), usize::from(!last));
        }
        assert_eq!(got, whole);
    }
}
