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
use http::{HeaderMap, Request, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream};
use tokio::time::Instant;

use super::head::{self, HeadError};
use super::stream::{self, H2Body, Inbound, Woken};
use super::write::{self, Outbox};
use super::{Limits, StreamFuture};
use crate::body::{ClientBody, ProxyBody};
use crate::http2::frame::{
    self, flag, setting, Frame, FrameError, Head, Reason, DEFAULT_MAX_FRAME, DEFAULT_WINDOW,
    HEAD_LEN, MAX_MAX_FRAME, MAX_WINDOW,
};
use crate::http2::hpack::{self, Decoder};
use crate::interim::Interim;

/// The client's connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The receive window of each stream (SETTINGS_INITIAL_WINDOW_SIZE): what a request body may
/// have in flight before the pipeline reads it.
const STREAM_WINDOW: u32 = 256 * 1024;

/// The connection's receive window: all request bodies of a connection together.
const CONN_WINDOW: u32 = 1024 * 1024;

/// Connection window given back in one WINDOW_UPDATE at least.
const CONN_CREDIT_MIN: u32 = 64 * 1024;

/// Reading pauses while more than this waits in the outbox.
const READ_PAUSE: usize = 256 * 1024;

/// Body frames stop being made while more than this waits in the outbox.
pub(super) const WRITE_HIGH: usize = 128 * 1024;

/// Frames that do nothing (empty DATA, PRIORITY, PING, SETTINGS, WINDOW_UPDATE on closed
/// streams) tolerated between two answered requests.
const JUNK_LIMIT: u32 = 1_000;

/// Client resets of unfinished streams tolerated beyond the answers the connection completed
/// (rapid reset, CVE-2023-44487).
const RESET_LIMIT: u32 = 200;

/// A header block may take this many frames (HEADERS and its CONTINUATIONs).
const MAX_BLOCK_FRAMES: u32 = 128;

/// Polls of the loop before the task yields to the others on its thread.
const LOOP_BUDGET: u32 = 32;

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
struct Partial {
    id: u32,
    block: Vec<u8>,
    end_stream: bool,
    depends_on: Option<u32>,
    frames: u32,
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
    partial: Option<Partial>,
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

    fn on_frame(&mut self, h: Head, payload: Bytes) -> Result<(), ConnError> {
        if !self.settings_seen {
            if h.kind != frame::kind::SETTINGS || h.has(flag::ACK) {
                return Err(ConnError::Protocol(
                    Reason::PROTOCOL_ERROR,
                    "the first frame is not SETTINGS",
                ));
            }
            self.settings_seen = true;
        }
        if let Some(p) = &self.partial {
            if h.kind != frame::kind::CONTINUATION || h.stream != p.id {
                return Err(ConnError::Protocol(
                    Reason::PROTOCOL_ERROR,
                    "a frame inside a header block",
                ));
            }
        }
        let f = match Frame::parse(&h, &payload) {
            Ok(f) => f,
            Err(FrameError::Connection(r, why)) => return Err(ConnError::Protocol(r, why)),
            Err(FrameError::Stream(id, r, _)) => {
                self.reset(id, r);
                return Ok(());
            }
        };
        match f {
            Frame::Data {
                stream,
                data,
                end_stream,
                flow,
            } => {
                let data = payload.slice_ref(data);
                self.on_data(stream, data, end_stream, flow)
            }
            Frame::Headers {
                stream,
                block,
                end_stream,
                end_headers,
                depends_on,
            } => {
                if stream % 2 == 0 {
                    return Err(ConnError::Protocol(
                        Reason::PROTOCOL_ERROR,
                        "HEADERS on an even stream",
                    ));
                }
                if end_headers {
                    self.on_block(stream, block, end_stream, depends_on)
                } else {
                    self.partial = Some(Partial {
                        id: stream,
                        block: block.to_vec(),
                        end_stream,
                        depends_on,
                        frames: 1,
                    });
                    self.check_partial()
                }
            }
            Frame::Continuation {
                block, end_headers, ..
            } => {
                let Some(p) = self.partial.as_mut() else {
                    return Err(ConnError::Protocol(
                        Reason::PROTOCOL_ERROR,
                        "CONTINUATION without HEADERS",
                    ));
                };
                p.block.extend_from_slice(block);
                p.frames += 1;
                self.check_partial()?;
                if end_headers {
                    if let Some(p) = self.partial.take() {
                        self.on_block(p.id, &p.block, p.end_stream, p.depends_on)?;
                    }
                }
                Ok(())
            }
            Frame::Priority { stream, depends_on } => {
                self.junk()?;
                if depends_on == stream {
                    // RFC 9113 §5.3.1: a stream cannot depend on itself.
                    self.reset(stream, Reason::PROTOCOL_ERROR);
                }
                Ok(())
            }
            Frame::Reset { stream, .. } => self.on_reset(stream),
            Frame::Settings { ack, pairs } => {
                self.junk()?;
                if ack {
                    return Ok(());
                }
                self.on_settings(pairs)
            }
            Frame::Ping { ack, data } => {
                self.junk()?;
                if !ack {
                    let before = self.out.buf().len();
                    frame::ping_ack(self.out.buf(), &data);
                    self.out.added(before);
                }
                Ok(())
            }
            Frame::GoAway { .. } => {
                // The client starts nothing more: the connection ends when its streams do.
                self.go_away();
                Ok(())
            }
            Frame::WindowUpdate { stream, increment } => self.on_window_update(stream, increment),
            Frame::PushPromise | Frame::Unknown => Ok(()),
        }
    }

    /// Counts a frame that did nothing.
    fn junk(&mut self) -> Result<(), ConnError> {
        self.junk += 1;
        if self.junk > JUNK_LIMIT {
            return Err(ConnError::Protocol(
                Reason::ENHANCE_YOUR_CALM,
                "too many frames that do nothing",
            ));
        }
        Ok(())
    }

    /// A header block may not grow past what its decoded size could be, nor take more than
    /// [`MAX_BLOCK_FRAMES`] frames (CONTINUATION floods).
    fn check_partial(&self) -> Result<(), ConnError> {
        if let Some(p) = &self.partial {
            let max = 2 * self.limits.max_header_list as usize + 16 * 1024;
            if p.block.len() > max || p.frames > MAX_BLOCK_FRAMES {
                return Err(ConnError::Protocol(
                    Reason::ENHANCE_YOUR_CALM,
                    "a header block without end",
                ));
            }
        }
        Ok(())
    }

    fn on_settings(&mut self, pairs: &[u8]) -> Result<(), ConnError> {
        for p in pairs.chunks_exact(6) {
            let id = u16::from_be_bytes([p[0], p[1]]);
            let value = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
            match id {
                setting::HEADER_TABLE_SIZE if value < 4096 => {
                    self.peer.table_update = true;
                }
                setting::ENABLE_PUSH if value > 1 => {
                    return Err(ConnError::Protocol(Reason::PROTOCOL_ERROR, "ENABLE_PUSH"));
                }
                setting::INITIAL_WINDOW_SIZE => {
                    if value > MAX_WINDOW {
                        return Err(ConnError::Protocol(
                            Reason::FLOW_CONTROL_ERROR,
                            "INITIAL_WINDOW_SIZE",
                        ));
                    }
                    let delta = i64::from(value) - i64::from(self.peer.initial_window);
                    self.peer.initial_window = value;
                    for s in &mut self.streams {
                        s.send_window += delta;
                        if s.send_window > i64::from(MAX_WINDOW) {
                            return Err(ConnError::Protocol(
                                Reason::FLOW_CONTROL_ERROR,
                                "a window past 2^31-1",
                            ));
                        }
                        if delta > 0 {
                            self.runnable.push(s.id);
                        }
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(DEFAULT_MAX_FRAME..=MAX_MAX_FRAME).contains(&value) {
                        return Err(ConnError::Protocol(
                            Reason::PROTOCOL_ERROR,
                            "MAX_FRAME_SIZE",
                        ));
                    }
                    self.peer.max_frame = value;
                }
                _ => {}
            }
        }
        let before = self.out.buf().len();
        frame::settings_ack(self.out.buf());
        self.out.added(before);
        Ok(())
    }

    fn on_window_update(&mut self, id: u32, increment: u32) -> Result<(), ConnError> {
        if id == 0 {
            if increment == 0 {
                return Err(ConnError::Protocol(
                    Reason::PROTOCOL_ERROR,
                    "WINDOW_UPDATE of 0",
                ));
            }
            self.send_window += i64::from(increment);
            if self.send_window > i64::from(MAX_WINDOW) {
                return Err(ConnError::Protocol(
                    Reason::FLOW_CONTROL_ERROR,
                    "a window past 2^31-1",
                ));
            }
            self.wake_senders();
            return Ok(());
        }
        if id > self.last_id {
            return Err(ConnError::Protocol(
                Reason::PROTOCOL_ERROR,
                "WINDOW_UPDATE on an idle stream",
            ));
        }
        let Some(i) = self.find(id) else {
            return self.junk();
        };
        if increment == 0 {
            self.reset(id, Reason::PROTOCOL_ERROR);
            return Ok(());
        }
        let s = &mut self.streams[i];
        s.send_window += i64::from(increment);
        if s.send_window > i64::from(MAX_WINDOW) {
            self.reset(id, Reason::FLOW_CONTROL_ERROR);
            return Ok(());
        }
        self.runnable.push(id);
        Ok(())
    }

    fn on_reset(&mut self, id: u32) -> Result<(), ConnError> {
        if id > self.last_id {
            return Err(ConnError::Protocol(
                Reason::PROTOCOL_ERROR,
                "RST_STREAM on an idle stream",
            ));
        }
        let Some(i) = self.find(id) else {
            return Ok(());
        };
        let s = self.streams.swap_remove(i);
        if let Some(inbound) = &s.inbound {
            inbound.reset(Reason::CANCEL);
        }
        self.give_conn_credit_of(&s);
        self.resets += 1;
        if self.resets > self.completed + RESET_LIMIT {
            return Err(ConnError::Protocol(
                Reason::ENHANCE_YOUR_CALM,
                "too many streams reset by the client",
            ));
        }
        Ok(())
    }

    fn on_data(
        &mut self,
        id: u32,
        data: Bytes,
        end_stream: bool,
        flow: u32,
    ) -> Result<(), ConnError> {
        if i64::from(flow) > self.recv_window {
            return Err(ConnError::Protocol(
                Reason::FLOW_CONTROL_ERROR,
                "DATA past the connection window",
            ));
        }
        self.recv_window -= i64::from(flow);
        let Some(i) = self.find(id) else {
            if id > self.last_id {
                return Err(ConnError::Protocol(
                    Reason::PROTOCOL_ERROR,
                    "DATA on an idle stream",
                ));
            }
            // A closed stream: the window comes back; a stream the server reset may still
            // get what the client sent before it knew.
            self.conn_credit += flow;
            if !self.reset_ids.contains(&id) {
                self.reset(id, Reason::STREAM_CLOSED);
            }
            return self.junk();
        };
        let s = &mut self.streams[i];
        if !s.recv_open {
            self.conn_credit += flow;
            self.reset(id, Reason::STREAM_CLOSED);
            return Ok(());
        }
        if i64::from(flow) > s.recv_window {
            self.conn_credit += flow;
            self.reset(id, Reason::FLOW_CONTROL_ERROR);
            return Ok(());
        }
        s.recv_window -= i64::from(flow);
        let len = data.len() as u32;
        // Padding is given back at once.
        s.credit += flow - len;
        self.conn_credit += flow - len;
        s.received += u64::from(len);
        if s.length
            .is_some_and(|l| s.received > l || (end_stream && s.received != l))
        {
            // RFC 9113 §8.1.1: DATA that does not add up to `content-length`.
            crate::telemetry::metrics::get().malformed(400);
            self.reset(id, Reason::PROTOCOL_ERROR);
            return Ok(());
        }
        let empty = data.is_empty() && !end_stream;
        if let Some(inbound) = &s.inbound {
            if !inbound.push(data) {
                s.credit += len;
                self.conn_credit += len;
            }
            if end_stream {
                inbound.finish(None);
            }
        }
        if end_stream {
            s.recv_open = false;
            if s.task.is_none() && s.body.is_none() {
                self.close(id);
            }
        }
        self.runnable.push(id);
        if empty {
            self.junk()?;
        }
        Ok(())
    }

    /// A whole header block: a new request, or a request's trailers.
    fn on_block(
        &mut self,
        id: u32,
        block: &[u8],
        end_stream: bool,
        depends_on: Option<u32>,
    ) -> Result<(), ConnError> {
        let max_list = self.limits.max_header_list as usize;
        if let Some(i) = self.find(id) {
            return self.on_trailers(i, block, end_stream);
        }
        if id <= self.last_id {
            // Decoded all the same: the table must stay in step with the client's.
            let _ = self.dec.decode(block, max_list, |_, _| {});
            return Err(ConnError::Protocol(
                Reason::STREAM_CLOSED,
                "HEADERS on a closed stream",
            ));
        }
        self.last_id = id;
        let head = head::request(&mut self.dec, block, max_list, true);
        let head = match head {
            Ok(h) => h,
            Err(HeadError::Compression(e)) => {
                tracing::debug!(error = %e, "HPACK");
                return Err(ConnError::Protocol(
                    Reason::COMPRESSION_ERROR,
                    "a header block that does not decode",
                ));
            }
            Err(HeadError::TooLarge) => {
                crate::telemetry::metrics::get().malformed(431);
                self.refuse(id, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, end_stream);
                return Ok(());
            }
            Err(HeadError::Malformed(why)) => {
                tracing::debug!(why, "malformed HTTP/2 request");
                crate::telemetry::metrics::get().malformed(400);
                self.reset(id, Reason::PROTOCOL_ERROR);
                return Ok(());
            }
        };
        if depends_on == Some(id) {
            self.reset(id, Reason::PROTOCOL_ERROR);
            return Ok(());
        }
        if self.goaway.is_some_and(|last| id > last) {
            // After our GOAWAY: not processed, the client may retry it elsewhere.
            self.reset(id, Reason::REFUSED_STREAM);
            return Ok(());
        }
        if self.streams.len() >= self.limits.max_streams as usize {
            self.reset(id, Reason::REFUSED_STREAM);
            self.resets += 1;
            return Ok(());
        }
        if end_stream && head.length.is_some_and(|l| l > 0) {
            crate::telemetry::metrics::get().malformed(400);
            self.reset(id, Reason::PROTOCOL_ERROR);
            return Ok(());
        }
        self.start(id, head, end_stream);
        Ok(())
    }

    fn on_trailers(&mut self, i: usize, block: &[u8], end_stream: bool) -> Result<(), ConnError> {
        let max_list = self.limits.max_header_list as usize;
        let mut trailers = HeaderMap::new();
        let mut bad = false;
        let decoded = self.dec.decode(block, max_list, |n, v| {
            let name = http::HeaderName::from_bytes(n);
            let value = http::HeaderValue::from_bytes(v);
            match (n.first(), name, value) {
                (Some(b':'), _, _) | (_, Err(_), _) | (_, _, Err(_)) => bad = true,
                (_, Ok(n), Ok(v)) => {
                    trailers.append(n, v);
                }
            }
        });
        if let Err(e) = decoded {
            if e != hpack::HpackError::ListTooLarge {
                return Err(ConnError::Protocol(
                    Reason::COMPRESSION_ERROR,
                    "a header block that does not decode",
                ));
            }
            bad = true;
        }
        let s = &mut self.streams[i];
        let id = s.id;
        if !s.recv_open {
            self.reset(id, Reason::STREAM_CLOSED);
            return Ok(());
        }
        // RFC 9113 §8.1: trailers end the stream; §8.1.1: a body short of its length.
        if !end_stream || bad || s.length.is_some_and(|l| l != s.received) {
            self.reset(id, Reason::PROTOCOL_ERROR);
            return Ok(());
        }
        s.recv_open = false;
        if let Some(inbound) = &s.inbound {
            inbound.finish(Some(trailers));
        }
        self.runnable.push(id);
        Ok(())
    }

    /// A new stream: its request goes to the pipeline.
    fn start(&mut self, id: u32, head: head::Head, end_stream: bool) {
        self.started += 1;
        let waker = stream::waker(id, &self.woken);
        let inbound = (!end_stream).then(|| Arc::new(Inbound::default()));
        // A WebSocket's stream carries the tunnel's bytes, not a request body.
        let body = match &inbound {
            Some(i) if !head.websocket => {
                ClientBody::H2(H2Body::new(i.clone(), waker.clone(), head.length))
            }
            _ => ClientBody::Empty,
        };
        let head_request = head.req.method() == http::Method::HEAD;
        let req = head.req.map(|()| body);
        let interim = Arc::new(Interim::default());
        let task = match crate::transport::malformed::malformed(&req) {
            // RFC 9113 §8.1.1: a malformed request may be answered before its stream closes.
            Some(why) => {
                tracing::debug!(why, "malformed HTTP/2 request");
                crate::telemetry::metrics::get().malformed(400);
                let res = crate::error::ProxyError::BadRequest(why).to_response();
                Box::pin(std::future::ready(res)) as StreamFuture
            }
            None => (self.handler)(req, interim.clone()),
        };
        self.streams.push(Stream {
            id,
            waker,
            task: Some(task),
            interim: Some(interim),
            inbound,
            recv_open: !end_stream,
            recv_window: i64::from(STREAM_WINDOW),
            credit: 0,
            length: head.length,
            received: 0,
            body: None,
            pending: None,
            pending_end: false,
            send_window: i64::from(self.peer.initial_window),
            head_request,
            websocket: head.websocket,
        });
        self.runnable.push(id);
    }

    // --- Streams ----------------------------------------------------------------------------

    pub(super) fn find(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    /// Every stream with something to send runs again (a window opened, or room in the
    /// outbox).
    fn wake_senders(&mut self) {
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

    /// Answers stream `id` with `status` and nothing else (a request refused before it
    /// became one).
    fn refuse(&mut self, id: u32, status: StatusCode, end_stream: bool) {
        let mut block = Vec::new();
        write::response_block(&mut block, status, None, &HeaderMap::new(), Some(0));
        let before = self.out.buf().len();
        let max = self.peer.max_frame as usize;
        frame::headers(self.out.buf(), id, &block, true, max);
        self.out.added(before);
        if !end_stream {
            // The rest of its body is not wanted.
            self.reset(id, Reason::NO_ERROR);
        }
    }

    /// The window a closed stream's unread body held comes back to the connection.
    /// What the stream took of the connection's window and was not given back yet: all it
    /// received that its own window did not get back, but for the credit already counted.
    fn give_conn_credit_of(&mut self, s: &Stream) {
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
