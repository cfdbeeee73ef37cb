//! A request on its way to an HTTP/1.1 origin: its head, then its body as it arrives from the
//! client, with `Content-Length` when its length is known, chunked otherwise (a head and a
//! complete body go out in one vectored write). Poll-driven, so the
//! same task that reads the origin's answer moves it (an origin may answer before the body
//! is all there, and go on reading it).

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body::Body;
use tokio::io::AsyncWrite;

use crate::body::request::{RequestBody, RequestBodyError};

/// How long a body read in full may wait for the origin to take it.
const PAUSE: Duration = Duration::from_secs(60);

/// How the body is delimited for the origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadFraming {
    /// No body (and no length field: GET, HEAD and friends).
    None,
    Length(u64),
    Chunked,
}

/// Why a body could not be written.
#[derive(Debug)]
pub enum UploadError {
    /// The client's body failed (too large, too slow, broken): its fault.
    Body(RequestBodyError),
    /// The connection to the origin failed.
    Io(io::Error),
}

/// The request (its head first, then its body) and what of it is still to be written.
pub struct Upload {
    /// The request head, kept whole to send the request again.
    head: Bytes,
    /// Bytes of the head written so far.
    head_sent: usize,
    /// A body read in full, kept to send the request again.
    full: Option<Bytes>,
    body: RequestBody,
    framing: UploadFraming,
    /// Bytes taken from the body (with their framing) not yet written: after the head's.
    queue: VecDeque<Bytes>,
    /// Body bytes taken so far (Length: never more than announced).
    taken: u64,
    /// The body ended and its end is queued.
    ended: bool,
    /// Bytes written so far (head, body and framing).
    written: u64,
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload")
            .field("framing", &self.framing)
            .field("taken", &self.taken)
            .finish_non_exhaustive()
    }
}

/// How `body` is framed for the origin. `with_length`: the method's requests carry a length
/// even when empty (POST, PUT…).
pub fn framing_of(body: &RequestBody, with_length: bool) -> UploadFraming {
    match body {
        RequestBody::Empty if with_length => UploadFraming::Length(0),
        RequestBody::Empty => UploadFraming::None,
        RequestBody::Full(b, _) => UploadFraming::Length(b.as_ref().map_or(0, |b| b.len() as u64)),
        RequestBody::Stream(_) => match body.size_hint().exact() {
            Some(n) => UploadFraming::Length(n),
            None => UploadFraming::Chunked,
        },
    }
}

impl Upload {
    /// `head`: the request head, written for `framing` ([`framing_of`]).
    pub fn new(head: Bytes, body: RequestBody, framing: UploadFraming) -> Self {
        let ended = matches!(framing, UploadFraming::None | UploadFraming::Length(0));
        let full = match &body {
            RequestBody::Full(Some(b), _) => Some(b.clone()),
            _ => None,
        };
        Upload {
            head,
            head_sent: 0,
            full,
            // Empty until the body brings something: no allocation for a body-less request.
            queue: VecDeque::new(),
            body,
            framing,
            taken: 0,
            ended,
            written: 0,
        }
    }

    /// Everything has been written (or there was nothing to write).
    pub fn is_done(&self) -> bool {
        self.ended && self.head_sent == self.head.len() && self.queue.is_empty()
    }

    /// Some byte of the request has gone out.
    pub fn started(&self) -> bool {
        self.written > 0
    }

    /// Bytes written so far: whether the origin is still taking the body.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The longest the body may pause: the client body's own limit
    /// (`client_body_timeout_seconds`), or [`PAUSE`] for a body read in full already.
    pub fn pause_limit(&self) -> Duration {
        self.body.pause_limit().unwrap_or(PAUSE)
    }

    /// Whether the request can be sent again from its start ([`Upload::rewind`]): its body
    /// is none, or was read in full before it was sent.
    pub fn can_rewind(&self) -> bool {
        match &self.body {
            RequestBody::Empty => true,
            RequestBody::Full(..) => self.full.is_some() || self.taken == 0,
            RequestBody::Stream(_) => false,
        }
    }

    /// Starts the request over, to send it again on another connection. Only when
    /// [`Upload::can_rewind`]; nothing is kept of the first attempt (a failed connection).
    pub fn rewind(&mut self) {
        debug_assert!(self.can_rewind());
        if let RequestBody::Full(b, _) = &mut self.body {
            *b = self.full.clone();
        }
        self.head_sent = 0;
        self.queue.clear();
        self.taken = 0;
        self.ended = matches!(self.framing, UploadFraming::None | UploadFraming::Length(0));
        self.written = 0;
    }

    /// Writes what the body has to `io` until it waits for the client, the origin, or is done.
    pub fn poll_write<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), UploadError>> {
        loop {
            while self.head_sent < self.head.len() || !self.queue.is_empty() {
                ready!(self.poll_queue(io, cx)).map_err(UploadError::Io)?;
            }
            if self.ended {
                return Pin::new(&mut *io).poll_flush(cx).map_err(UploadError::Io);
            }
            let frame = match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(frame) => frame,
                Poll::Pending => {
                    // Waiting for the client: what was written must reach the origin meanwhile
                    // (TLS may hold the last record until a flush).
                    let _ = Pin::new(&mut *io).poll_flush(cx);
                    return Poll::Pending;
                }
            };
            match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.push(data);
                    }
                }
                Some(Err(e)) => return Poll::Ready(Err(UploadError::Body(e))),
                None => self.end()?,
            }
        }
    }

    fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        match self.framing {
            UploadFraming::Length(n) => {
                let room = n.saturating_sub(self.taken);
                let data = if data.len() as u64 > room {
                    data.slice(..room as usize)
                } else {
                    data
                };
                self.taken += data.len() as u64;
                self.queue.push_back(data);
                if self.taken == n {
                    self.ended = true;
                }
            }
            UploadFraming::Chunked => {
                self.taken += data.len() as u64;
                let mut line = [0u8; 18];
                let line = crate::http1::numbers::chunk_line(data.len(), &mut line);
                self.queue.push_back(Bytes::copy_from_slice(line));
                self.queue.push_back(data);
                self.queue.push_back(Bytes::from_static(b"\r\n"));
            }
            UploadFraming::None => {}
        }
    }

    /// The body's end: the last chunk, or a check that the announced length was all sent.
    fn end(&mut self) -> Result<(), UploadError> {
        match self.framing {
            UploadFraming::Chunked => self.queue.push_back(Bytes::from_static(b"0\r\n\r\n")),
            UploadFraming::Length(n) if self.taken < n => {
                return Err(UploadError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the request body ended before its announced length",
                )))
            }
            _ => {}
        }
        self.ended = true;
        Ok(())
    }

    fn poll_queue<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        let head = &self.head[self.head_sent..];
        let pieces = usize::from(!head.is_empty()) + self.queue.len();
        let n = if io.is_write_vectored() && pieces > 1 {
            let mut slices = [IoSlice::new(&[]); 4];
            let all = std::iter::once(head)
                .filter(|h| !h.is_empty())
                .chain(self.queue.iter().map(|b| &b[..]));
            for (s, b) in slices.iter_mut().zip(all) {
                *s = IoSlice::new(b);
            }
            let k = pieces.min(4);
            ready!(Pin::new(&mut *io).poll_write_vectored(cx, &slices[..k]))?
        } else {
            let front = if head.is_empty() {
                self.queue.front().map_or(&[][..], |b| &b[..])
            } else {
                head
            };
            ready!(Pin::new(&mut *io).poll_write(cx, front))?
        };
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        self.written += n as u64;
        let from_head = n.min(self.head.len() - self.head_sent);
        self.head_sent += from_head;
        let mut left = n - from_head;
        while left > 0 {
            let Some(front) = self.queue.front_mut() else {
                break;
            };
            if front.len() <= left {
                left -= front.len();
                self.queue.pop_front();
            } else {
                front.advance(left);
                left = 0;
            }
        }
        Poll::Ready(Ok(()))
    }
}
