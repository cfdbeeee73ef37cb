//! The response body type: a streamed upstream body or a complete local one, with an optional
//! access-log record that is written when the body has been sent (or dropped), so the log line
//! carries the real byte count and duration. With logging off the record is `None` and costs a
//! branch.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::coalesce::InflightBody;
use crate::log::AccessRecord;
use crate::lookup::StoreTicket;

enum Kind {
    Full(Option<Bytes>),
    Stream(Incoming),
    /// A coalesced fetch's body, shared with other clients.
    Inflight(InflightBody),
    /// Streamed to the client and collected for the cache at the same time.
    Tee(Box<Tee>),
}

/// The cache side of a teed body: chunks are kept (reference-counted, not copied) until the
/// body ends, then stored as one object. Past the size limit the copy is dropped and the body
/// simply streams on.
struct Tee {
    inner: Incoming,
    chunks: Vec<Bytes>,
    size: usize,
    ticket: Option<Box<StoreTicket>>,
}

impl Tee {
    fn on_frame(&mut self, frame: &Option<Result<Frame<Bytes>, hyper::Error>>) {
        match frame {
            Some(Ok(f)) => {
                if let (Some(d), Some(t)) = (f.data_ref(), &self.ticket) {
                    self.size += d.len();
                    if self.size > t.max_body() {
                        self.ticket = None;
                        self.chunks = Vec::new();
                        return;
                    }
                    self.chunks.push(d.clone());
                }
                // hyper stops polling a body once its declared length has been written, so a
                // length-delimited body is complete when the origin's body says so.
                if self.inner.is_end_stream() {
                    self.complete();
                }
            }
            // The origin failed mid-body: never store a truncated response.
            Some(Err(_)) => {
                self.ticket = None;
                self.chunks = Vec::new();
            }
            None => self.complete(),
        }
    }

    fn complete(&mut self) {
        if let Some(t) = self.ticket.take() {
            t.complete_chunks(std::mem::take(&mut self.chunks));
        }
    }
}

/// Body of every response rampart sends downstream.
pub struct ProxyBody {
    kind: Kind,
    log: Option<Box<AccessRecord>>,
}

impl std::fmt::Debug for ProxyBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProxyBody")
    }
}

impl ProxyBody {
    pub fn full(bytes: Bytes) -> Self {
        ProxyBody {
            kind: Kind::Full(if bytes.is_empty() { None } else { Some(bytes) }),
            log: None,
        }
    }

    pub fn stream(body: Incoming) -> Self {
        ProxyBody {
            kind: Kind::Stream(body),
            log: None,
        }
    }

    /// Streams a coalesced fetch's body.
    pub fn inflight(body: InflightBody) -> Self {
        ProxyBody {
            kind: Kind::Inflight(body),
            log: None,
        }
    }

    /// Streams `body` and stores it with `ticket` when it ends completely.
    pub fn tee(body: Incoming, ticket: Box<StoreTicket>) -> Self {
        if body.is_end_stream() {
            // An empty body is never polled: store it now.
            ticket.complete(Bytes::new());
            return ProxyBody::stream(body);
        }
        ProxyBody {
            kind: Kind::Tee(Box::new(Tee {
                inner: body,
                chunks: Vec::new(),
                size: 0,
                ticket: Some(ticket),
            })),
            log: None,
        }
    }

    /// Attaches an access-log record, written when the body ends.
    pub fn set_log(&mut self, record: Box<AccessRecord>) {
        self.log = Some(record);
    }

    fn count(&mut self, n: usize) {
        if let Some(log) = &mut self.log {
            log.bytes += n as u64;
        }
    }
}

impl Drop for ProxyBody {
    fn drop(&mut self) {
        if let Some(log) = self.log.take() {
            log.write();
        }
    }
}

/// Errors a response body can end with (origin failure mid-body).
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        let frame: Option<Result<Frame<Bytes>, BodyError>> = match &mut this.kind {
            Kind::Full(b) => b.take().map(|b| Ok(Frame::data(b))),
            Kind::Stream(s) => ready!(Pin::new(s).poll_frame(cx)).map(|r| r.map_err(Into::into)),
            Kind::Inflight(s) => ready!(Pin::new(s).poll_frame(cx)).map(|r| r.map_err(Into::into)),
            Kind::Tee(t) => {
                let frame = ready!(Pin::new(&mut t.inner).poll_frame(cx));
                t.on_frame(&frame);
                frame.map(|r| r.map_err(Into::into))
            }
        };
        if let Some(Ok(f)) = &frame {
            if let Some(d) = f.data_ref() {
                let n = d.len();
                this.count(n);
            }
        }
        if let Some(Err(_)) = &frame {
            if let Some(log) = &mut this.log {
                log.aborted = true;
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(b) => b.is_none(),
            Kind::Stream(s) => s.is_end_stream(),
            Kind::Inflight(s) => s.is_end_stream(),
            Kind::Tee(t) => t.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Stream(s) => s.size_hint(),
            Kind::Inflight(s) => s.size_hint(),
            Kind::Tee(t) => t.inner.size_hint(),
        }
    }
}

/// Body of a request sent upstream: nothing (GET and friends — lets a request be re-sent to
/// another origin after a connect failure) or the client's body, streamed.
pub enum RequestBody {
    Empty,
    Stream(Incoming),
}

impl RequestBody {
    /// A client's body; one that is already complete (GET and friends) becomes `Empty`.
    pub fn from_incoming(body: Incoming) -> Self {
        if body.is_end_stream() {
            RequestBody::Empty
        } else {
            RequestBody::Stream(body)
        }
    }
}

impl std::fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestBody")
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            RequestBody::Empty => Poll::Ready(None),
            RequestBody::Stream(s) => Pin::new(s).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Empty => true,
            RequestBody::Stream(s) => s.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Empty => SizeHint::with_exact(0),
            RequestBody::Stream(s) => s.size_hint(),
        }
    }
}
