//! The response body type: a streamed upstream body or a complete local one, with an optional
//! access-log record that is written when the body has been sent (or dropped), so the log line
//! carries the real byte count and duration. With logging off the record is `None` and costs a
//! branch.

pub mod h3;
pub mod local;
pub mod origin;
pub mod request;

pub use request::{BodyLimits, ClientBody, Limited, RequestBody, RequestBodyError};

use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::body::origin::OriginBody;
use crate::caching::coalesce::InflightBody;
use crate::caching::writer::{StoreTicket, Tee};
use crate::telemetry::access_log::AccessRecord;
use rampart_cache::disk::large::Extent;
use rampart_cache::store::Object;
use rampart_otel::RequestTrace;
use rampart_transform::compress::StreamEncoder;
use std::sync::Arc;

enum Kind {
    Full(Option<Bytes>),
    Stream(OriginBody),
    /// A coalesced fetch's body, shared with other clients.
    Inflight(InflightBody),
    /// Streamed to the client and collected for the cache at the same time.
    Tee(Box<Tee<OriginBody>>),
    /// Another body, compressed as it streams (`caching/transform.rs`).
    Encoded(Box<Encoding>),
    /// Chunks made by rampart as they come (the dashboard's event stream).
    Channel(tokio::sync::mpsc::Receiver<Bytes>),
    /// A large object's body read from the disk tier a chunk at a time, as the client takes
    /// it (`pos..end`).
    Disk(Arc<Extent>, u64, u64),
}

/// A body compressed as it streams: each chunk is fed to the encoder, whose output is sent as
/// it comes; when the inner body pauses, the encoder is flushed so the client can decode what
/// arrived so far.
struct Encoding {
    inner: ProxyBody,
    encoder: Option<StreamEncoder>,
    /// Fed since the last flush.
    dirty: bool,
}

impl Encoding {
    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        loop {
            let Some(encoder) = self.encoder.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers are not kept: the encoded body ends with the encoder's end.
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    let out = encoder.write(&data)?;
                    self.dirty = true;
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    self.encoder = None;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    let out = self.encoder.take().map(StreamEncoder::finish).transpose()?;
                    return Poll::Ready(out.filter(|b| !b.is_empty()).map(|b| Ok(Frame::data(b))));
                }
                Poll::Pending => {
                    if self.dirty {
                        self.dirty = false;
                        let out = encoder.flush()?;
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

/// The stored part of a fresh hit's head ([`ProxyBody::hit`]): the object's fields as they go
/// on the wire, and its age in seconds, which the HTTP/1.1 writer sends after them.
#[derive(Debug, Clone, Copy)]
pub struct StoredHead<'a> {
    pub wire: &'a rampart_cache::store::WireFields,
    pub age: u64,
}

/// Body of every response rampart sends downstream.
pub struct ProxyBody {
    kind: Kind,
    log: Option<Box<AccessRecord>>,
    /// The request's trace: its server span ends when the body does. Dropped by hand (in
    /// `Drop`, out of line): as a plain field its drop glue cost every response ~36
    /// instructions with tracing off (callgrind).
    trace: ManuallyDrop<Option<Box<RequestTrace>>>,
    /// A fresh hit on HTTP/1.x or HTTP/2: the stored object, whose header block the writer
    /// sends as the store made it ([`rampart_cache::store::WireFields`]), and its age in seconds,
    /// which the writer sends as `Age` and `X-Arc2-Cache-Age`. The response's own map holds
    /// only what is added per response (HSTS, `Alt-Svc`, `Connection: close`), and is
    /// usually empty: nothing is copied or hashed per hit.
    stored: Option<(Arc<Object>, u64)>,
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
            trace: ManuallyDrop::new(None),
            stored: None,
        }
    }

    /// A fresh hit's body, carrying the object's header block and its age (see
    /// [`ProxyBody::stored_head`]). Only for writers that send that block: rampart's HTTP/1.1
    /// and HTTP/2 writers.
    pub fn hit(obj: Arc<Object>, age: u64) -> Self {
        let mut b = ProxyBody::full(obj.body.clone());
        b.stored = Some((obj, age));
        b
    }

    /// The whole body, taken out of it, when it is already in memory (a hit, a synthesised
    /// answer) and `len` bytes long; `None` (and the body untouched) otherwise. Counted as sent
    /// (the access log's `bytes`), as a body read through [`Body::poll_frame`] is.
    pub fn take_whole(&mut self, len: usize) -> Option<Bytes> {
        let whole = match &mut self.kind {
            Kind::Full(b) if b.as_ref().map_or(0, Bytes::len) == len => {
                b.take().unwrap_or_default()
            }
            _ => return None,
        };
        self.count(whole.len());
        Some(whole)
    }

    /// The stored fields and the age that precede the response's own, for a
    /// [`ProxyBody::hit`].
    pub fn stored_head(&self) -> Option<StoredHead<'_>> {
        self.stored.as_ref().map(|(o, age)| StoredHead {
            wire: &o.wire,
            age: *age,
        })
    }

    pub fn stream(body: OriginBody) -> Self {
        ProxyBody {
            kind: Kind::Stream(body),
            log: None,
            trace: ManuallyDrop::new(None),
            stored: None,
        }
    }

    /// Bytes `start..end` of a large object on disk, read (and checked) a chunk at a time as
    /// the client takes them: the memory one response holds is a chunk, whatever the size.
    pub fn disk(extent: Arc<Extent>, start: u64, end: u64) -> Self {
        ProxyBody {
            kind: Kind::Disk(extent, start, end),
            log: None,
            trace: ManuallyDrop::new(None),
            stored: None,
        }
    }

    /// Sends each chunk received on `rx`; ends when every sender is gone.
    pub fn channel(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Self {
        ProxyBody {
            kind: Kind::Channel(rx),
            log: None,
            trace: ManuallyDrop::new(None),
            stored: None,
        }
    }

    /// Streams a coalesced fetch's body.
    pub fn inflight(body: InflightBody) -> Self {
        ProxyBody {
            kind: Kind::Inflight(body),
            log: None,
            trace: ManuallyDrop::new(None),
            stored: None,
        }
    }

    /// Streams `body` and stores it with `ticket` when it ends completely.
    pub fn tee(body: OriginBody, ticket: Box<StoreTicket>) -> Self {
        match Tee::new(body, ticket) {
            Ok(tee) => ProxyBody {
                kind: Kind::Tee(Box::new(tee)),
                log: None,
                trace: ManuallyDrop::new(None),
                stored: None,
            },
            Err(empty) => ProxyBody::stream(empty),
        }
    }

    /// `body` compressed by `encoder` as it streams. The access-log record stays outside, so
    /// it counts the bytes sent.
    pub fn encoded(mut body: ProxyBody, encoder: StreamEncoder) -> Self {
        let log = body.log.take();
        let trace = body.trace.take();
        ProxyBody {
            trace: ManuallyDrop::new(trace),
            kind: Kind::Encoded(Box::new(Encoding {
                inner: body,
                encoder: Some(encoder),
                dirty: false,
            })),
            log,
            stored: None,
        }
    }

    /// Attaches an access-log record, written when the body ends.
    pub fn set_log(&mut self, record: Box<AccessRecord>) {
        self.log = Some(record);
    }

    /// Attaches the request's trace, whose server span ends when the body ends.
    pub fn set_trace(&mut self, trace: Box<RequestTrace>) {
        if let Some(old) = self.trace.replace(trace) {
            end_trace(*old);
        }
    }

    fn count(&mut self, n: usize) {
        if let Some(log) = &mut self.log {
            log.bytes += n as u64;
        }
        if let Some(t) = self.trace.as_deref_mut() {
            t.sent(n as u64);
        }
    }
}

impl Drop for ProxyBody {
    fn drop(&mut self) {
        if let Some(log) = self.log.take() {
            log.write();
        }
        if let Some(t) = self.trace.take() {
            end_trace(*t);
        }
    }
}

/// Ends a response's trace (its server span, queued for export).
#[cold]
#[inline(never)]
fn end_trace(t: RequestTrace) {
    t.end();
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
            Kind::Stream(s) => ready!(Pin::new(s).poll_frame(cx)),
            Kind::Inflight(s) => ready!(Pin::new(s).poll_frame(cx)).map(|r| r.map_err(Into::into)),
            Kind::Tee(t) => ready!(t.poll_frame(cx)),
            Kind::Encoded(e) => ready!(e.poll_frame(cx)),
            Kind::Channel(rx) => ready!(rx.poll_recv(cx)).map(|b| Ok(Frame::data(b))),
            Kind::Disk(extent, pos, end) => {
                if *pos >= *end {
                    None
                } else {
                    let want = usize::try_from(*end - *pos).unwrap_or(usize::MAX);
                    match extent.read(*pos, want) {
                        Ok(b) if !b.is_empty() => {
                            *pos += b.len() as u64;
                            Some(Ok(Frame::data(b)))
                        }
                        Ok(_) => {
                            *pos = *end;
                            Some(Err("a large object on disk ended early".into()))
                        }
                        Err(e) => {
                            *pos = *end;
                            Some(Err(e.into()))
                        }
                    }
                }
            }
        };
        if let Some(Ok(f)) = &frame {
            if let Some(d) = f.data_ref() {
                let n = d.len();
                this.count(n);
            }
        }
        if let Some(Err(e)) = &frame {
            if let Some(log) = &mut this.log {
                log.aborted = true;
            }
            if let Some(t) = this.trace.as_deref_mut() {
                t.error(format!("the body ended early: {e}"));
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(b) => b.is_none(),
            Kind::Stream(s) => s.is_end_stream(),
            Kind::Inflight(s) => s.is_end_stream(),
            Kind::Tee(t) => t.is_end_stream(),
            Kind::Encoded(e) => e.encoder.is_none(),
            Kind::Channel(_) => false,
            Kind::Disk(_, pos, end) => pos >= end,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Stream(s) => s.size_hint(),
            Kind::Inflight(s) => s.size_hint(),
            Kind::Tee(t) => t.size_hint(),
            Kind::Encoded(_) | Kind::Channel(_) => SizeHint::default(),
            Kind::Disk(_, pos, end) => SizeHint::with_exact(end.saturating_sub(*pos)),
        }
    }
}
