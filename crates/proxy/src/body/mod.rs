//! The response body type: a streamed upstream body or a complete local one, with an optional
//! access-log record that is written when the body has been sent (or dropped), so the log line
//! carries the real byte count and duration. With logging off the record is `None` and costs a
//! branch.

pub mod h1;
pub mod h3;
pub mod local;

use std::future::Future as _;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::caching::coalesce::InflightBody;
use crate::caching::writer::{StoreTicket, Tee};
use crate::error::BodyFault;
use crate::telemetry::access_log::AccessRecord;
use rampart_cache::store::Object;
use rampart_transform::compress::StreamEncoder;
use std::sync::{Arc, OnceLock};

enum Kind {
    Full(Option<Bytes>),
    Stream(Incoming),
    /// A coalesced fetch's body, shared with other clients.
    Inflight(InflightBody),
    /// Streamed to the client and collected for the cache at the same time.
    Tee(Box<Tee>),
    /// Another body, compressed as it streams (`caching/transform.rs`).
    Encoded(Box<Encoding>),
    /// Chunks made by rampart as they come (the dashboard's event stream).
    Channel(tokio::sync::mpsc::Receiver<Bytes>),
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

/// Body of every response rampart sends downstream.
pub struct ProxyBody {
    kind: Kind,
    log: Option<Box<AccessRecord>>,
    /// A fresh hit on HTTP/1.x: the stored object, whose header block the h1 writer sends
    /// straight from the store (the response's own map then holds only the per-response fields,
    /// `Age` and `X-Arc2-Cache-Age`), instead of a copy of the map per hit.
    stored: Option<Arc<Object>>,
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
            stored: None,
        }
    }

    /// A fresh hit's body, carrying the object's header block (see [`ProxyBody::stored_headers`]).
    /// Only for writers that send that block: rampart's HTTP/1 writer.
    pub fn hit(obj: Arc<Object>) -> Self {
        let mut b = ProxyBody::full(obj.body.clone());
        b.stored = Some(obj);
        b
    }

    /// The stored header fields that precede the response's own, for a [`ProxyBody::hit`].
    pub fn stored_headers(&self) -> Option<&http::HeaderMap> {
        self.stored.as_deref().map(|o| &o.headers)
    }

    pub fn stream(body: Incoming) -> Self {
        ProxyBody {
            kind: Kind::Stream(body),
            log: None,
            stored: None,
        }
    }

    /// Sends each chunk received on `rx`; ends when every sender is gone.
    pub fn channel(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Self {
        ProxyBody {
            kind: Kind::Channel(rx),
            log: None,
            stored: None,
        }
    }

    /// Streams a coalesced fetch's body.
    pub fn inflight(body: InflightBody) -> Self {
        ProxyBody {
            kind: Kind::Inflight(body),
            log: None,
            stored: None,
        }
    }

    /// Streams `body` and stores it with `ticket` when it ends completely.
    pub fn tee(body: Incoming, ticket: Box<StoreTicket>) -> Self {
        match Tee::new(body, ticket) {
            Ok(tee) => ProxyBody {
                kind: Kind::Tee(Box::new(tee)),
                log: None,
                stored: None,
            },
            Err(empty) => ProxyBody::stream(empty),
        }
    }

    /// `body` compressed by `encoder` as it streams. The access-log record stays outside, so
    /// it counts the bytes sent.
    pub fn encoded(mut body: ProxyBody, encoder: StreamEncoder) -> Self {
        let log = body.log.take();
        ProxyBody {
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
            Kind::Tee(t) => ready!(t.poll_frame(cx)).map(|r| r.map_err(Into::into)),
            Kind::Encoded(e) => ready!(e.poll_frame(cx)),
            Kind::Channel(rx) => ready!(rx.poll_recv(cx)).map(|b| Ok(Frame::data(b))),
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
            Kind::Tee(t) => t.is_end_stream(),
            Kind::Encoded(e) => e.encoder.is_none(),
            Kind::Channel(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Stream(s) => s.size_hint(),
            Kind::Inflight(s) => s.size_hint(),
            Kind::Tee(t) => t.size_hint(),
            Kind::Encoded(_) | Kind::Channel(_) => SizeHint::default(),
        }
    }
}

/// Body of a request sent upstream: nothing (GET and friends — lets a request be re-sent to
/// another origin after a connect failure), a body screening has already read in full, or the
/// client's body, streamed under the request limits.
pub enum RequestBody {
    Empty,
    /// Bytes read in full (for screening), with their share of the inspection memory budget,
    /// released when the body is dropped.
    Full(Option<Bytes>, Option<tokio::sync::OwnedSemaphorePermit>),
    Stream(Box<Limited>),
}

/// Limits a client's request body is read under.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    pub max: Option<u64>,
    pub idle: Duration,
    pub total: Option<Duration>,
}

/// A client's request body as its connection delivers it: from rampart's HTTP/1.1 server,
/// from hyper's HTTP/2 server, or from an HTTP/3 request stream.
#[derive(Debug)]
pub enum ClientBody {
    Empty,
    H1(crate::body::h1::Incoming),
    H2(Incoming),
    H3(Box<crate::body::h3::H3Body>),
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            ClientBody::Empty => Poll::Ready(None),
            ClientBody::H1(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            ClientBody::H2(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            ClientBody::H3(b) => Pin::new(&mut **b).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Empty => true,
            ClientBody::H1(b) => b.is_end_stream(),
            ClientBody::H2(b) => b.is_end_stream(),
            ClientBody::H3(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Empty => SizeHint::with_exact(0),
            ClientBody::H1(b) => b.size_hint(),
            ClientBody::H2(b) => b.size_hint(),
            ClientBody::H3(b) => b.size_hint(),
        }
    }
}

/// A client's body with its limits enforced as it streams.
pub struct Limited {
    body: ClientBody,
    max: Option<u64>,
    seen: u64,
    idle: Duration,
    deadline: Option<Instant>,
    timer: Pin<Box<Sleep>>,
    /// A frame read ahead by [`RequestBody::prime`].
    primed: Option<Frame<Bytes>>,
    /// The fault, once there is one, where the upstream client's caller finds it whatever
    /// error the client reports (the origin may close first: see [`RequestBody::fault`]).
    fault: Arc<OnceLock<BodyFault>>,
}

impl Limited {
    fn failed(&self, fault: BodyFault) -> RequestBodyError {
        let _ = self.fault.set(fault);
        RequestBodyError(fault)
    }

    fn deadline_after_frame(&self) -> Instant {
        let idle = Instant::now() + self.idle;
        self.deadline.map_or(idle, |d| d.min(idle))
    }
}

/// The error a request body yields to the upstream client.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("client request body: {0:?}")]
pub struct RequestBodyError(pub BodyFault);

impl RequestBody {
    /// A client's body; one that is already complete (GET and friends) becomes `Empty`.
    pub fn from_client(body: ClientBody, limits: BodyLimits) -> Self {
        if body.is_end_stream() {
            return RequestBody::Empty;
        }
        let deadline = limits.total.map(|t| Instant::now() + t);
        let first = deadline.map_or(Instant::now() + limits.idle, |d| {
            d.min(Instant::now() + limits.idle)
        });
        RequestBody::Stream(Box::new(Limited {
            body,
            max: limits.max,
            seen: 0,
            idle: limits.idle,
            deadline,
            timer: Box::pin(tokio::time::sleep_until(first)),
            primed: None,
            fault: Arc::default(),
        }))
    }

    /// Where the body's fault will be, for whoever sends it on: the upstream client may report
    /// the origin closing the connection (cut off mid-body) rather than the body's error.
    pub fn fault(&self) -> Option<Arc<OnceLock<BodyFault>>> {
        match self {
            RequestBody::Stream(s) => Some(s.fault.clone()),
            _ => None,
        }
    }

    /// Lifts the limit on the whole body's duration (`client_body_total_timeout_seconds`) for
    /// a stream that is long-lived by design (a gRPC call); the pause limit stays.
    pub fn without_total_timeout(&mut self) {
        if let RequestBody::Stream(s) = self {
            s.deadline = None;
            // The timer may stand at the total deadline (when that came before the first
            // pause limit): from now on it is the pause limit alone.
            let next = Instant::now() + s.idle;
            s.timer.as_mut().reset(next);
        }
    }

    /// Sets the size limit (the rule's, known after routing).
    pub fn set_limit(&mut self, max: Option<u64>) {
        if let RequestBody::Stream(s) = self {
            s.max = max;
        }
    }

    /// Reads the first frame before anything is sent upstream, so a body that is broken,
    /// over the limit or never arrives from the start is refused without the origin seeing the
    /// request.
    pub async fn prime(&mut self) -> Result<(), RequestBodyError> {
        if !matches!(self, RequestBody::Stream(_)) {
            return Ok(());
        }
        match std::future::poll_fn(|cx| Pin::new(&mut *self).poll_frame(cx)).await {
            Some(Ok(frame)) => {
                if let RequestBody::Stream(s) = self {
                    s.primed = Some(frame);
                }
                Ok(())
            }
            Some(Err(e)) => Err(e),
            None => {
                *self = RequestBody::Empty;
                Ok(())
            }
        }
    }

    /// Reads and drops up to `max` bytes of a body nobody will use, for at most `within`.
    pub async fn discard(self, max: u64, within: Duration) {
        let RequestBody::Stream(mut s) = self else {
            return;
        };
        s.max = None;
        let mut stream = RequestBody::Stream(s);
        let mut seen = 0u64;
        let _ = tokio::time::timeout(within, async {
            while let Some(Ok(frame)) =
                std::future::poll_fn(|cx| Pin::new(&mut stream).poll_frame(cx)).await
            {
                seen += frame.data_ref().map_or(0, |d| d.len() as u64);
                if seen >= max {
                    break;
                }
            }
        })
        .await;
    }

    /// Reads the whole body (under its limits) into memory.
    pub async fn collect(self) -> Result<Bytes, RequestBodyError> {
        match self {
            RequestBody::Empty => Ok(Bytes::new()),
            RequestBody::Full(b, _) => Ok(b.unwrap_or_default()),
            RequestBody::Stream(s) => {
                let mut stream = RequestBody::Stream(s);
                let mut out = bytes::BytesMut::new();
                while let Some(frame) =
                    std::future::poll_fn(|cx| Pin::new(&mut stream).poll_frame(cx)).await
                {
                    if let Ok(data) = frame?.into_data() {
                        out.extend_from_slice(&data);
                    }
                }
                Ok(out.freeze())
            }
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
    type Error = RequestBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        match self.get_mut() {
            RequestBody::Empty => Poll::Ready(None),
            RequestBody::Full(b, _) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            RequestBody::Stream(s) => {
                let s = &mut **s;
                if let Some(frame) = s.primed.take() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                match Pin::new(&mut s.body).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Some(data) = frame.data_ref() {
                            s.seen += data.len() as u64;
                            if s.max.is_some_and(|m| s.seen > m) {
                                return Poll::Ready(Some(Err(s.failed(BodyFault::TooLarge))));
                            }
                        }
                        let next = s.deadline_after_frame();
                        s.timer.as_mut().reset(next);
                        Poll::Ready(Some(Ok(frame)))
                    }
                    Poll::Ready(Some(Err(e))) => {
                        tracing::debug!(error = %e, "client request body failed");
                        Poll::Ready(Some(Err(s.failed(BodyFault::Broken))))
                    }
                    Poll::Ready(None) => Poll::Ready(None),
                    Poll::Pending => match s.timer.as_mut().poll(cx) {
                        Poll::Ready(()) => Poll::Ready(Some(Err(s.failed(BodyFault::Timeout)))),
                        Poll::Pending => Poll::Pending,
                    },
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Empty => true,
            RequestBody::Full(b, _) => b.is_none(),
            RequestBody::Stream(s) => s.primed.is_none() && s.body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Empty => SizeHint::with_exact(0),
            RequestBody::Full(b, _) => {
                SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64))
            }
            RequestBody::Stream(s) => {
                // Incoming's hint counts what is left to read; add the frame read ahead.
                let extra = s
                    .primed
                    .as_ref()
                    .and_then(|f| f.data_ref())
                    .map_or(0, |d| d.len() as u64);
                let inner = s.body.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(inner.lower() + extra);
                if let Some(u) = inner.upper() {
                    hint.set_upper(u + extra);
                }
                hint
            }
        }
    }
}
