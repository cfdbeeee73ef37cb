//! The frames a client sends, one at a time ([`Conn::on_frame`]): each checked against the
//! stream states (RFC 9113 §5.1) and the flow-control windows (§6.9), a new request started
//! on its stream ([`Conn::start`]), the rest of a request's body and trailers handed to it, the
//! client's SETTINGS, PING, WINDOW_UPDATE, RST_STREAM and GOAWAY, and the frames that do
//! nothing counted against the flood limits.

use rampart_head::{Fields, Request};
use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite};

use super::conn::{Conn, ConnError, Partial, Stream, STREAM_WINDOW};
use super::head::{self, HeadError};
use super::stream::{self, H2Body, Inbound};
use super::write;
use super::StreamFuture;
use crate::body::ClientBody;
use crate::http2::frame::{
    self, flag, setting, Frame, FrameError, Head, Reason, DEFAULT_MAX_FRAME, MAX_MAX_FRAME,
    MAX_WINDOW,
};
use crate::http2::hpack;
use crate::interim::Interim;

/// Frames that do nothing (empty DATA, PRIORITY, PING, SETTINGS, WINDOW_UPDATE on closed
/// streams) tolerated between two answered requests.
const JUNK_LIMIT: u32 = 1_000;

/// Client resets of unfinished streams tolerated beyond the answers the connection completed
/// (rapid reset, CVE-2023-44487).
const RESET_LIMIT: u32 = 200;

/// A header block may take this many frames (HEADERS and its CONTINUATIONs).
const MAX_BLOCK_FRAMES: u32 = 128;

impl<I, H> Conn<I, H>
where
    I: AsyncRead + AsyncWrite + Unpin,
    H: FnMut(Request<ClientBody>, Arc<Interim>) -> StreamFuture,
{
    pub(super) fn on_frame(&mut self, h: Head, payload: Bytes) -> Result<(), ConnError> {
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
            f @ (Frame::Headers { .. } | Frame::Continuation { .. }) => self.on_header_frame(f),
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

    /// HEADERS, or a CONTINUATION of the header block in progress: a whole block goes to
    /// [`Conn::on_block`].
    fn on_header_frame(&mut self, f: Frame<'_>) -> Result<(), ConnError> {
        match f {
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
                    return self.on_block(stream, block, end_stream, depends_on);
                }
                self.partial = Some(Partial {
                    id: stream,
                    block: block.to_vec(),
                    end_stream,
                    depends_on,
                    frames: 1,
                });
                self.check_partial()
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
            _ => Ok(()),
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
            if self.skipped.iter().any(|&(lo, hi)| (lo..=hi).contains(&id)) {
                return Err(ConnError::Protocol(
                    Reason::PROTOCOL_ERROR,
                    "HEADERS opening a stream below one already opened",
                ));
            }
            return Err(ConnError::Protocol(
                Reason::STREAM_CLOSED,
                "HEADERS on a closed stream",
            ));
        }
        let next = if self.last_id == 0 {
            1
        } else {
            self.last_id + 2
        };
        if id > next {
            if self.skipped.len() == super::conn::SKIPPED_KEPT {
                self.skipped.remove(0);
            }
            self.skipped.push((next, id - 2));
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
        let mut trailers = http::HeaderMap::new();
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

    /// Answers stream `id` with `status` and nothing else (a request refused before it
    /// became one).
    fn refuse(&mut self, id: u32, status: StatusCode, end_stream: bool) {
        let mut block = Vec::new();
        write::response_block(&mut block, status, None, &Fields::new(), Some(0));
        let before = self.out.buf().len();
        let max = self.peer.max_frame as usize;
        frame::headers(self.out.buf(), id, &block, true, max);
        self.out.added(before);
        if !end_stream {
            // The rest of its body is not wanted.
            self.reset(id, Reason::NO_ERROR);
        }
    }
}
