//! What a stream shares with the code outside its connection: the request body as the
//! connection receives it ([`Inbound`], read through [`H2Body`]), the waker that runs the
//! stream again in its connection's task ([`Woken`]), and the byte pipe a WebSocket over HTTP/2
//! becomes ([`TunnelIo`]).
//!
//! Everything a stream does runs in its connection's task: the pipeline's future, the
//! response body, the request body's window updates. A stream's waker only records the
//! stream's id and wakes the connection, which then polls that stream alone.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

use crate::http2::frame::Reason;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The streams of one connection woken since it last looked, and the connection's own waker.
#[derive(Debug, Default)]
pub struct Woken {
    state: Mutex<(Vec<u32>, Option<Waker>)>,
}

impl Woken {
    /// Records the connection task's waker (when it changed).
    pub fn register(&self, w: &Waker) {
        let mut s = lock(&self.state);
        if !s.1.as_ref().is_some_and(|old| old.will_wake(w)) {
            s.1 = Some(w.clone());
        }
    }

    /// Moves the ids woken so far into `into`.
    pub fn take(&self, into: &mut Vec<u32>) {
        let mut s = lock(&self.state);
        into.append(&mut s.0);
    }

    fn wake(&self, id: u32) {
        let waker = {
            let mut s = lock(&self.state);
            if !s.0.contains(&id) {
                s.0.push(id);
            }
            s.1.clone()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The waker of one stream: records it as woken and wakes its connection.
struct StreamWake {
    id: u32,
    woken: Arc<Woken>,
}

impl Wake for StreamWake {
    fn wake(self: Arc<Self>) {
        self.woken.wake(self.id);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.wake(self.id);
    }
}

/// A waker for stream `id` of the connection that owns `woken`.
pub fn waker(id: u32, woken: &Arc<Woken>) -> Waker {
    Waker::from(Arc::new(StreamWake {
        id,
        woken: woken.clone(),
    }))
}

/// How a request body ended.
#[derive(Debug)]
enum End {
    /// END_STREAM, with the trailers when there were some.
    Done(Option<HeaderMap>),
    /// The stream was reset (by the client, or by the server for a protocol error).
    Reset(Reason),
}

#[derive(Debug, Default)]
struct InState {
    chunks: VecDeque<Bytes>,
    end: Option<End>,
    /// Bytes the reader took that the client has not been given window for yet.
    consumed: u32,
    /// The reader is gone: what arrives is dropped and its window given back at once.
    gone: bool,
    reader: Option<Waker>,
}

/// A request body between the connection (which pushes what DATA frames bring) and the
/// pipeline (which reads it through [`H2Body`]). What it holds is bounded by the stream's
/// receive window: the client is given more only for what the reader took.
#[derive(Debug, Default)]
pub struct Inbound {
    state: Mutex<InState>,
}

impl Inbound {
    /// Bytes of a DATA frame. False when the reader is gone (the caller gives the window
    /// back at once).
    pub fn push(&self, data: Bytes) -> bool {
        let mut s = lock(&self.state);
        if s.gone {
            return false;
        }
        if !data.is_empty() {
            s.chunks.push_back(data);
        }
        if let Some(w) = s.reader.take() {
            w.wake();
        }
        true
    }

    /// The end of the body: END_STREAM with `trailers`.
    pub fn finish(&self, trailers: Option<HeaderMap>) {
        self.end(End::Done(trailers));
    }

    /// The stream was reset: the reader gets an error after what it has.
    pub fn reset(&self, reason: Reason) {
        self.end(End::Reset(reason));
    }

    fn end(&self, end: End) {
        let mut s = lock(&self.state);
        if s.end.is_none() {
            s.end = Some(end);
        }
        if let Some(w) = s.reader.take() {
            w.wake();
        }
    }

    /// Bytes the reader took since the last call: window to give back to the client.
    pub fn take_consumed(&self) -> u32 {
        std::mem::take(&mut lock(&self.state).consumed)
    }

    /// The reader is gone.
    pub fn is_gone(&self) -> bool {
        lock(&self.state).gone
    }
}

/// The bytes read before the connection is told (a window update per frame would be a frame
/// per frame).
const CONSUMED_WAKE: u32 = 16 * 1024;

/// A request body as the pipeline reads it (`ClientBody::H2`).
#[derive(Debug)]
pub struct H2Body {
    inbound: Arc<Inbound>,
    /// Wakes the stream's connection to send window updates.
    conn: Waker,
    /// The declared `content-length`, for the size hint.
    length: Option<u64>,
    taken: u64,
}

impl H2Body {
    pub fn new(inbound: Arc<Inbound>, conn: Waker, length: Option<u64>) -> Self {
        H2Body {
            inbound,
            conn,
            length,
            taken: 0,
        }
    }
}

/// A request body that ended with a stream reset.
#[derive(Debug, thiserror::Error)]
#[error("the HTTP/2 request stream was reset ({0:?})")]
pub struct StreamReset(pub Reason);

impl Body for H2Body {
    type Data = Bytes;
    type Error = StreamReset;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StreamReset>>> {
        let this = &mut *self;
        let mut s = lock(&this.inbound.state);
        if let Some(chunk) = s.chunks.pop_front() {
            let n = chunk.len() as u32;
            let before = s.consumed;
            s.consumed = s.consumed.saturating_add(n);
            let tell = before < CONSUMED_WAKE && s.consumed >= CONSUMED_WAKE;
            drop(s);
            if tell {
                this.conn.wake_by_ref();
            }
            this.taken += u64::from(n);
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        match s.end.take() {
            Some(End::Done(trailers)) => {
                s.end = Some(End::Done(None));
                let pending = s.consumed > 0;
                drop(s);
                if pending {
                    this.conn.wake_by_ref();
                }
                Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))))
            }
            Some(End::Reset(r)) => {
                s.end = Some(End::Reset(r));
                Poll::Ready(Some(Err(StreamReset(r))))
            }
            None => {
                s.reader = Some(cx.waker().clone());
                let pending = s.consumed > 0;
                drop(s);
                // The reader waits: the client gets window for everything taken, or it
                // would wait too (less than CONSUMED_WAKE was taken since the last update).
                if pending {
                    this.conn.wake_by_ref();
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        let s = lock(&self.inbound.state);
        s.chunks.is_empty() && matches!(s.end, Some(End::Done(None)))
    }

    fn size_hint(&self) -> SizeHint {
        match self.length {
            Some(n) => SizeHint::with_exact(n.saturating_sub(self.taken)),
            None => SizeHint::default(),
        }
    }
}

impl Drop for H2Body {
    fn drop(&mut self) {
        let mut s = lock(&self.inbound.state);
        s.gone = true;
        // What is buffered is given back to the client as window.
        let held: usize = s.chunks.drain(..).map(|c| c.len()).sum();
        s.consumed = s.consumed.saturating_add(held as u32);
        drop(s);
        self.conn.wake_by_ref();
    }
}

/// A WebSocket over HTTP/2 (RFC 8441) as the tunnel sees it: reads are the stream's DATA from
/// the client, writes go into a pipe whose other end the connection sends as DATA.
pub struct TunnelIo {
    pub body: H2Body,
    /// Bytes of a DATA frame not yet read.
    pub rest: Bytes,
    pub out: DuplexStream,
}

impl AsyncRead for TunnelIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.rest.is_empty() {
                let n = this.rest.len().min(buf.remaining());
                buf.put_slice(&this.rest.split_to(n));
                return Poll::Ready(Ok(()));
            }
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        this.rest = d;
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionReset, e)))
                }
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl AsyncWrite for TunnelIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.out).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.out).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.out).poll_shutdown(cx)
    }
}
