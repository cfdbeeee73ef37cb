//! One HTTP/2 connection's state and its poll: read → frames → streams → write, in one task.
//!
//! [`Conn::poll_run`] loops until nothing moves: it reads what the socket has and handles each
//! whole frame ([`Conn::on_frame`]), polls the streams that were woken or that can send again
//! (their pipeline future, then their body into DATA frames within the windows:
//! [`Conn::run_stream`]), and writes the outbox. Reading pauses while the outbox holds more
//! than [`READ_PAUSE`] bytes: a client that does not read cannot make its control answers
//! (PING, SETTINGS acknowledgements) pile up.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rampart_head::Request;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream};
use tokio::time::Instant;

use super::stream::{Inbound, Woken};
use super::write::Outbox;
use super::{Limits, StreamFuture};
use crate::body::{ClientBody, ProxyBody};
use crate::http2::frame::{
    self, setting, Head, Reason, DEFAULT_MAX_FRAME, DEFAULT_WINDOW, HEAD_LEN,
};
use crate::http2::hpack::Decoder;
use crate::interim::Interim;

/// The client's connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The receive window of each stream (SETTINGS_INITIAL_WINDOW_SIZE): what a request body may
/// have in flight before the pipeline reads it.
pub(super) const STREAM_WINDOW: u32 = 256 * 1024;

/// The connection's receive window: all request bodies of a connection together.
const CONN_WINDOW: u32 = 1024 * 1024;

/// Connection window given back in one WINDOW_UPDATE at least.
const CONN_CREDIT_MIN: u32 = 64 * 1024;

/// Reading pauses while more than this waits in the outbox.
const READ_PAUSE: usize = 256 * 1024;

/// Body frames stop being made while more than this waits in the outbox.
pub(super) const WRITE_HIGH: usize = 128 * 1024;

/// Polls of the loop before the task yields to the others on its thread.
const LOOP_BUDGET: u32 = 32;

/// How many ranges of skipped stream ids a connection remembers (`Conn::skipped`): clients
/// open ids in order, so a range is rare; past this the oldest is forgotten and its ids read
/// as closed streams.
pub(super) const SKIPPED_KEPT: usize = 8;

/// Why the connection ended.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("protocol error {0:?}: {1}")]
    Protocol(Reason, &'static str),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// What the client said in its SETTINGS.
#[derive(Debug, Clone, Copy)]
pub(super) struct Peer {
    pub(super) initial_window: u32,
    pub(super) max_frame: u32,
    /// The client lowered its header table: the next block starts with a size update.
    pub(super) table_update: bool,
}

/// A header block still taking CONTINUATION frames.
pub(super) struct Partial {
    pub(super) id: u32,
    pub(super) block: Vec<u8>,
    pub(super) end_stream: bool,
    pub(super) depends_on: Option<u32>,
    pub(super) frames: u32,
}

/// What a stream sends after its head.
pub(super) enum Outgoing {
    Body(ProxyBody),
    /// A WebSocket over HTTP/2: what the tunnel writes.
    Pipe(DuplexStream),
}

pub(super) struct Stream {
    pub(super) id: u32,
    pub(super) waker: Waker,
    /// The pipeline's future, until it answers.
    pub(super) task: Option<StreamFuture>,
    pub(super) interim: Option<Arc<Interim>>,
    pub(super) inbound: Option<Arc<Inbound>>,
    /// The client may still send DATA.
    pub(super) recv_open: bool,
    pub(super) recv_window: i64,
    /// Window to give back to the client (padding, a body nobody reads).
    pub(super) credit: u32,
    pub(super) length: Option<u64>,
    pub(super) received: u64,
    pub(super) body: Option<Outgoing>,
    /// Data the windows held back.
    pub(super) pending: Option<Bytes>,
    /// `pending` is the body's last.
    pub(super) pending_end: bool,
    pub(super) send_window: i64,
    pub(super) head_request: bool,
    pub(super) websocket: bool,
}

pub struct Conn<I, H> {
    pub(super) io: I,
    pub(super) handler: H,
    pub(super) limits: Limits,
    pub(super) rbuf: BytesMut,
    pub(super) out: Outbox,
    pub(super) dec: Decoder,
    pub(super) preface: bool,
    pub(super) settings_seen: bool,
    pub(super) peer: Peer,
    pub(super) send_window: i64,
    pub(super) recv_window: i64,
    pub(super) conn_credit: u32,
    pub(super) streams: Vec<Stream>,
    pub(super) last_id: u32,
    /// Client stream ids jumped over (never opened), as inclusive ranges, the last
    /// [`SKIPPED_KEPT`]: HEADERS on one of them is an unexpected identifier (RFC 9113 §5.1.1,
    /// PROTOCOL_ERROR), on any other id at or below `last_id` a closed stream (STREAM_CLOSED).
    pub(super) skipped: Vec<(u32, u32)>,
    pub(super) partial: Option<Partial>,
    pub(super) woken: Arc<Woken>,
    /// Streams to run on the next turn (new ones, ones whose windows opened).
    pub(super) runnable: Vec<u32>,
    pub(super) ids: Vec<u32>,
    /// The last stream id a GOAWAY of ours named.
    pub(super) goaway: Option<u32>,
    pub(super) read_closed: bool,
    pub(super) started: u64,
    pub(super) completed: u32,
    pub(super) junk: u32,
    pub(super) resets: u32,
    /// Since when data ready to send has found no window, or the socket no room.
    pub(super) stalled_since: Option<Instant>,
    /// Streams the server reset, whose late frames are ignored.
    pub(super) reset_ids: [u32; 8],
    pub(super) reset_at: usize,
}

impl<I, H> Conn<I, H>
where
    I: AsyncRead + AsyncWrite + Unpin,
    H: FnMut(Request<ClientBody>, Arc<Interim>) -> StreamFuture,
{
    pub fn new(io: I, limits: Limits, handler: H) -> Self {
        let mut c = Conn {
            io,
            handler,
            limits,
            rbuf: BytesMut::new(),
            out: Outbox::default(),
            dec: Decoder::new(4096),
            preface: false,
            settings_seen: false,
            peer: Peer {
                initial_window: DEFAULT_WINDOW,
                max_frame: DEFAULT_MAX_FRAME,
                table_update: false,
            },
            send_window: i64::from(DEFAULT_WINDOW),
            recv_window: i64::from(CONN_WINDOW),
            conn_credit: 0,
            streams: Vec::new(),
            last_id: 0,
            skipped: Vec::new(),
            partial: None,
            woken: Arc::new(Woken::default()),
            runnable: Vec::new(),
            ids: Vec::new(),
            goaway: None,
            read_closed: false,
            started: 0,
            completed: 0,
            junk: 0,
            resets: 0,
            stalled_since: None,
            reset_ids: [0; 8],
            reset_at: 0,
        };
        // The server's preface: its SETTINGS, and the connection window raised.
        let before = c.out.buf().len();
        frame::settings(
            c.out.buf(),
            &[
                (setting::MAX_CONCURRENT_STREAMS, limits.max_streams),
                (setting::INITIAL_WINDOW_SIZE, STREAM_WINDOW),
                (setting::MAX_HEADER_LIST_SIZE, limits.max_header_list),
                (setting::ENABLE_CONNECT_PROTOCOL, 1),
            ],
        );
        frame::window_update(c.out.buf(), 0, CONN_WINDOW - DEFAULT_WINDOW);
        c.out.added(before);
        c
    }

    /// Requests started so far.
    pub fn started(&self) -> u64 {
        self.started
    }

    pub fn into_io(self) -> I {
        self.io
    }

    #[cfg(test)]
    pub(super) fn io_mut(&mut self) -> &mut I {
        &mut self.io
    }

    /// Data has waited on the client (its windows, or its socket) for `limit`.
    pub fn stalled(&self, limit: Duration) -> bool {
        self.stalled_since.is_some_and(|t| t.elapsed() >= limit)
    }

    /// Starts a graceful end: GOAWAY naming the last stream started; those finish.
    pub fn go_away(&mut self) {
        if self.goaway.is_none() {
            self.goaway = Some(self.last_id);
            let before = self.out.buf().len();
            frame::goaway(self.out.buf(), self.last_id, Reason::NO_ERROR);
            self.out.added(before);
        }
    }

    /// Runs the connection until it ends (`Ready`) or waits on the socket and its streams.
    pub fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConnError>> {
        self.woken.register(cx.waker());
        for _ in 0..LOOP_BUDGET {
            let mut moved = false;
            match self.poll_read(cx) {
                Poll::Ready(Ok(())) => moved = true,
                Poll::Ready(Err(e)) => return self.fail(cx, e),
                Poll::Pending => {}
            }
            self.woken.take(&mut self.ids);
            self.ids.append(&mut self.runnable);
            if !self.ids.is_empty() {
                moved = true;
                let mut ids = std::mem::take(&mut self.ids);
                ids.sort_unstable();
                ids.dedup();
                for id in ids.drain(..) {
                    self.run_stream(id);
                }
                self.ids = ids;
            }
            self.give_conn_credit(false);
            let was = self.out.len();
            match self.out.poll_write(&mut self.io, cx) {
                Poll::Ready(Ok(())) => {
                    if was > 0 {
                        moved = true;
                        // Streams that stopped for room run again.
                        self.wake_senders();
                    }
                    if let Poll::Ready(Err(e)) = std::pin::Pin::new(&mut self.io).poll_flush(cx) {
                        return Poll::Ready(Err(e.into()));
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                Poll::Pending => {
                    if self.out.len() < was {
                        moved = true;
                        if self.out.len() < WRITE_HIGH {
                            self.wake_senders();
                        }
                    }
                }
            }
            self.update_stall(self.out.len() < was);
            if self.finished() {
                return Poll::Ready(Ok(()));
            }
            if !moved {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// The connection has nothing left to do.
    fn finished(&self) -> bool {
        let quiet = self.streams.is_empty() && self.out.is_empty();
        quiet && (self.read_closed || self.goaway.is_some())
    }

    /// A connection error: GOAWAY with its code (written as far as the socket takes it).
    fn fail(&mut self, cx: &mut Context<'_>, e: ConnError) -> Poll<Result<(), ConnError>> {
        if let ConnError::Protocol(reason, why) = &e {
            tracing::debug!(?reason, why, "HTTP/2 connection error");
            let before = self.out.buf().len();
            frame::goaway(self.out.buf(), self.last_id, *reason);
            self.out.added(before);
            let _ = self.out.poll_write(&mut self.io, cx);
        }
        self.streams.clear();
        Poll::Ready(Err(e))
    }

    /// Keeps the time since which data has waited on the client without the client taking
    /// any (`wrote`: the socket took bytes this turn).
    fn update_stall(&mut self, wrote: bool) {
        let waiting = !self.out.is_empty()
            || self
                .streams
                .iter()
                .any(|s| s.pending.is_some() && (s.send_window <= 0 || self.send_window <= 0));
        if !waiting {
            self.stalled_since = None;
        } else if wrote || self.stalled_since.is_none() {
            self.stalled_since = Some(Instant::now());
        }
    }

    // --- Reading ----------------------------------------------------------------------------

    /// Reads once and handles the whole frames read. `Ready(Ok)` when bytes came.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConnError>> {
        if self.read_closed || self.out.len() > READ_PAUSE {
            return Poll::Pending;
        }
        // Through the worker's scratch buffer: between frames the connection holds only the
        // bytes of a frame not yet whole.
        let n = match crate::net::read::poll_read_into(&mut self.io, cx, &mut self.rbuf) {
            Poll::Ready(Ok(n)) => n,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
            Poll::Pending => return Poll::Pending,
        };
        if n == 0 {
            self.read_closed = true;
            // What the client started still gets its answers; nothing more comes.
            self.partial = None;
            return Poll::Ready(Ok(()));
        }
        self.frames()?;
        if self.rbuf.is_empty() && self.rbuf.capacity() > 64 * 1024 {
            self.rbuf = BytesMut::new();
        }
        Poll::Ready(Ok(()))
    }

    /// Handles every whole frame in the read buffer.
    fn frames(&mut self) -> Result<(), ConnError> {
        if !self.preface {
            let n = self.rbuf.len().min(PREFACE.len());
            if self.rbuf[..n] != PREFACE[..n] {
                return Err(ConnError::Protocol(
                    Reason::PROTOCOL_ERROR,
                    "invalid preface",
                ));
            }
            if n < PREFACE.len() {
                return Ok(());
            }
            let _ = self.rbuf.split_to(PREFACE.len());
            self.preface = true;
        }
        while let Some(h) = Head::parse(&self.rbuf) {
            if h.len > DEFAULT_MAX_FRAME {
                return Err(ConnError::Protocol(
                    Reason::FRAME_SIZE_ERROR,
                    "a frame over SETTINGS_MAX_FRAME_SIZE",
                ));
            }
            let total = HEAD_LEN + h.len as usize;
            if self.rbuf.len() < total {
                break;
            }
            let mut f = self.rbuf.split_to(total);
            let payload = f.split_off(HEAD_LEN).freeze();
            self.on_frame(h, payload)?;
        }
        Ok(())
    }

    // --- Streams ----------------------------------------------------------------------------

    pub(super) fn find(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    /// Every stream with something to send runs again (a window opened, or room in the
    /// outbox).
    pub(super) fn wake_senders(&mut self) {
        for s in &self.streams {
            if s.pending.is_some() || s.body.is_some() {
                self.runnable.push(s.id);
            }
        }
    }

    /// Resets stream `id` (a stream error): RST_STREAM, and the stream is gone.
    pub(super) fn reset(&mut self, id: u32, reason: Reason) {
        let before = self.out.buf().len();
        frame::reset(self.out.buf(), id, reason);
        self.out.added(before);
        self.reset_ids[self.reset_at % self.reset_ids.len()] = id;
        self.reset_at += 1;
        if let Some(i) = self.find(id) {
            let s = self.streams.swap_remove(i);
            if let Some(inbound) = &s.inbound {
                inbound.reset(reason);
            }
            self.give_conn_credit_of(&s);
        }
    }

    /// The window a closed stream's unread body held comes back to the connection.
    /// What the stream took of the connection's window and was not given back yet: all it
    /// received that its own window did not get back, but for the credit already counted.
    pub(super) fn give_conn_credit_of(&mut self, s: &Stream) {
        let unread = i64::from(STREAM_WINDOW) - s.recv_window - i64::from(s.credit);
        self.conn_credit += u32::try_from(unread.max(0)).unwrap_or(0);
    }

    pub(super) fn give_conn_credit(&mut self, force: bool) {
        if self.conn_credit >= CONN_CREDIT_MIN || (force && self.conn_credit > 0) {
            let before = self.out.buf().len();
            frame::window_update(self.out.buf(), 0, self.conn_credit);
            self.out.added(before);
            self.recv_window += i64::from(self.conn_credit);
            self.conn_credit = 0;
        }
    }

    /// The stream is done both ways: it is forgotten.
    pub(super) fn close(&mut self, id: u32) {
        if let Some(i) = self.find(id) {
            let s = self.streams.swap_remove(i);
            if s.recv_open {
                // The answer is complete; the rest of the request is not wanted (RFC 9113
                // §8.1).
                let before = self.out.buf().len();
                frame::reset(self.out.buf(), id, Reason::NO_ERROR);
                self.out.added(before);
                self.reset_ids[self.reset_at % self.reset_ids.len()] = id;
                self.reset_at += 1;
            }
            self.give_conn_credit_of(&s);
            self.completed += 1;
            self.junk = 0;
        }
    }
}
