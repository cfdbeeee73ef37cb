//! The response side of a stream: its pipeline future run to the answer, the answer's
//! HEADERS (interim ones first), then its body as DATA frames within both flow-control
//! windows, trailers, and the switch of a WebSocket's stream to its tunnel.

use rampart_head::{Fields, Request, Response};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::StatusCode;
use http_body::Body as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::conn::{Conn, Outgoing, WRITE_HIGH};
use super::stream::{H2Body, TunnelIo};
use super::write;
use super::StreamFuture;
use crate::body::{ClientBody, ProxyBody};
use crate::http2::frame::{self, flag, Reason};
use crate::http2::hpack;
use crate::interim::Interim;

impl<I, H> Conn<I, H>
where
    I: AsyncRead + AsyncWrite + Unpin,
    H: FnMut(Request<ClientBody>, Arc<Interim>) -> StreamFuture,
{
    /// Runs stream `id`: its pipeline future, then its body, as far as the windows and the
    /// outbox allow.
    pub(super) fn run_stream(&mut self, id: u32) {
        let Some(i) = self.find(id) else {
            return;
        };
        // Window for what the pipeline read of the request body.
        let s = &mut self.streams[i];
        if let Some(inbound) = &s.inbound {
            let taken = inbound.take_consumed();
            s.credit += taken;
            self.conn_credit += taken;
        }
        if s.credit > 0 && s.recv_open {
            let before = self.out.buf().len();
            frame::window_update(self.out.buf(), id, s.credit);
            self.out.added(before);
            s.recv_window += i64::from(s.credit);
            s.credit = 0;
            self.give_conn_credit(true);
        }
        let s = &mut self.streams[i];
        if let Some(task) = s.task.as_mut() {
            let waker = s.waker.clone();
            let mut cx = Context::from_waker(&waker);
            let res = match task.as_mut().poll(&mut cx) {
                Poll::Ready(res) => res,
                Poll::Pending => {
                    // Interim answers from the origin go out as they come (103 Early Hints).
                    loop {
                        let polled = self.streams[i]
                            .interim
                            .as_ref()
                            .map(|x| x.poll_take(&mut cx));
                        let Some(Poll::Ready(list)) = polled else {
                            break;
                        };
                        self.send_interim(i, list);
                    }
                    return;
                }
            };
            let s = &mut self.streams[i];
            s.task = None;
            if let Some(interim) = s.interim.take() {
                let late = interim.take();
                if !late.is_empty() {
                    self.send_interim(i, late);
                }
            }
            self.respond(i, res);
        }
        self.send_body(id);
    }

    fn send_interim(&mut self, i: usize, list: Vec<(StatusCode, Fields)>) {
        let id = self.streams[i].id;
        for (status, headers) in list {
            self.headers_frame(id, false, |block| {
                write::interim_block(block, status, &headers);
            });
        }
    }

    /// A HEADERS frame (and CONTINUATIONs when the block is larger than the client's frame
    /// size) whose block `encode` writes straight into the outbox.
    pub(super) fn headers_frame(
        &mut self,
        id: u32,
        end_stream: bool,
        encode: impl FnOnce(&mut Vec<u8>),
    ) {
        let update = std::mem::take(&mut self.peer.table_update);
        let max = self.peer.max_frame as usize;
        let buf = self.out.buf();
        let before = buf.len();
        buf.extend_from_slice(&[0; frame::HEAD_LEN]);
        if update {
            // RFC 7541 §4.2: the first block after the client lowered its table; this
            // encoder never uses the table.
            hpack::encode_table_size_update(0, buf);
        }
        encode(buf);
        let len = buf.len() - before - frame::HEAD_LEN;
        if len <= max {
            let flags = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
            let head = frame::head_bytes(len, frame::kind::HEADERS, flags, id);
            buf[before..before + frame::HEAD_LEN].copy_from_slice(&head);
        } else {
            let block = buf.split_off(before + frame::HEAD_LEN);
            buf.truncate(before);
            frame::headers(buf, id, &block, end_stream, max);
        }
        self.out.added(before);
    }

    /// The pipeline's answer: its HEADERS now, its body from [`Conn::send_body`].
    fn respond(&mut self, i: usize, mut res: Response<ProxyBody>) {
        let (id, websocket, head_request) = {
            let s = &self.streams[i];
            (s.id, s.websocket, s.head_request)
        };
        let tunnel = if websocket && res.status() == StatusCode::OK {
            res.extensions_mut().remove::<crate::net::tunnel::Tunnel>()
        } else {
            None
        };
        let body_len = res.body().size_hint().exact();
        let empty = head_request
            || res.body().is_end_stream()
            || res.status() == StatusCode::NO_CONTENT
            || res.status() == StatusCode::NOT_MODIFIED;
        let end_stream = empty && tunnel.is_none();
        let length = if tunnel.is_some() || head_request {
            None
        } else {
            body_len
        };
        let stored = res.body().stored_head();
        let (status, headers) = (res.status(), res.headers());
        self.headers_frame(id, end_stream, |block| match stored {
            Some(stored) => {
                let h2 = stored
                    .wire
                    .h2
                    .get_or_init(|| write::stored_block(&stored.wire.block));
                write::response_block(block, status, Some((stored, h2)), headers, length);
            }
            None => write::response_block(block, status, None, headers, length),
        });
        let s = &mut self.streams[i];
        if let Some(tunnel) = tunnel {
            let (theirs, ours) = tokio::io::duplex(64 * 1024);
            s.body = Some(Outgoing::Pipe(ours));
            let inbound = s.inbound.clone().unwrap_or_default();
            let io = TunnelIo {
                body: H2Body::new(inbound, s.waker.clone(), None),
                rest: Bytes::new(),
                out: theirs,
            };
            tokio::spawn(async move {
                let open = crate::telemetry::metrics::get().tunnel_opened();
                let (ended, moved) = crate::net::tunnel::run(io, Bytes::new(), tunnel).await;
                tracing::debug!(?ended, ?moved, "WebSocket over HTTP/2 ended");
                drop(open);
            });
            return;
        }
        if end_stream {
            // The body (an access-log record with it) ends here.
            drop(res);
            self.close(id);
            return;
        }
        s.body = Some(Outgoing::Body(res.into_body()));
    }

    /// Sends what the stream's body has, as DATA frames within both windows, until the body
    /// waits, a window shuts or the outbox is full.
    fn send_body(&mut self, id: u32) {
        let Some(i) = self.find(id) else {
            return;
        };
        loop {
            if self.out.len() > WRITE_HIGH {
                return;
            }
            let s = &mut self.streams[i];
            let Some(body) = s.body.as_mut() else {
                return;
            };
            if s.pending.is_none() {
                let waker = s.waker.clone();
                let mut cx = Context::from_waker(&waker);
                match poll_outgoing(body, &mut cx) {
                    Poll::Pending => return,
                    Poll::Ready(Next::Data(d, last)) => {
                        s.pending = Some(d);
                        s.pending_end = last;
                    }
                    Poll::Ready(Next::Trailers(t)) => {
                        self.headers_frame(id, true, |block| write::fields_block(block, &t));
                        self.finish_body(i);
                        return;
                    }
                    Poll::Ready(Next::End) => {
                        let before = self.out.buf().len();
                        frame::head(self.out.buf(), 0, frame::kind::DATA, flag::END_STREAM, id);
                        self.out.added(before);
                        self.finish_body(i);
                        return;
                    }
                    Poll::Ready(Next::Failed) => {
                        self.reset(id, Reason::INTERNAL_ERROR);
                        return;
                    }
                }
            }
            let s = &mut self.streams[i];
            let Some(data) = s.pending.as_mut() else {
                continue;
            };
            let room = s.send_window.min(self.send_window).max(0) as usize;
            let n = data.len().min(room).min(self.peer.max_frame as usize);
            if n == 0 && !data.is_empty() {
                // Waiting for a WINDOW_UPDATE.
                return;
            }
            let chunk = data.split_to(n);
            let last = data.is_empty() && s.pending_end;
            if data.is_empty() {
                s.pending = None;
            }
            s.send_window -= n as i64;
            self.send_window -= n as i64;
            let before = self.out.buf().len();
            let flags = if last { flag::END_STREAM } else { 0 };
            frame::head(self.out.buf(), n, frame::kind::DATA, flags, id);
            self.out.added(before);
            self.out.push_shared(chunk);
            if last {
                self.finish_body(i);
                return;
            }
        }
    }

    /// The response's END_STREAM is queued.
    fn finish_body(&mut self, i: usize) {
        let s = &mut self.streams[i];
        s.body = None;
        s.pending = None;
        let id = s.id;
        self.close(id);
    }
}

/// What a response body gave.
enum Next {
    /// Data, and whether it is the body's last.
    Data(Bytes, bool),
    Trailers(http::HeaderMap),
    End,
    Failed,
}

fn poll_outgoing(body: &mut Outgoing, cx: &mut Context<'_>) -> Poll<Next> {
    match body {
        Outgoing::Body(b) => loop {
            let frame = match std::pin::Pin::new(&mut *b).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(Next::End),
                Poll::Ready(Some(Err(e))) => {
                    tracing::debug!(error = %e, "response body failed; stream reset");
                    return Poll::Ready(Next::Failed);
                }
                Poll::Ready(Some(Ok(f))) => f,
            };
            match frame.into_data() {
                Ok(d) if d.is_empty() => continue,
                Ok(d) => return Poll::Ready(Next::Data(d, b.is_end_stream())),
                Err(f) => {
                    if let Ok(t) = f.into_trailers() {
                        return Poll::Ready(Next::Trailers(t));
                    }
                }
            }
        },
        Outgoing::Pipe(p) => {
            let mut buf = [0u8; 16 * 1024];
            let mut rb = ReadBuf::new(&mut buf);
            match std::pin::Pin::new(p).poll_read(cx, &mut rb) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Err(_)) => Poll::Ready(Next::Failed),
                Poll::Ready(Ok(())) if rb.filled().is_empty() => Poll::Ready(Next::End),
                Poll::Ready(Ok(())) => {
                    Poll::Ready(Next::Data(Bytes::copy_from_slice(rb.filled()), false))
                }
            }
        }
    }
}
