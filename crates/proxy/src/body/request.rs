//! A client's request body on its way to the origin: as its connection delivers it
//! ([`ClientBody`]), and under the request limits ([`RequestBody`], [`BodyLimits`]).

use std::future::Future as _;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::error::BodyFault;

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
/// from its HTTP/2 server, or from an HTTP/3 request stream.
#[derive(Debug)]
pub enum ClientBody {
    Empty,
    H1(crate::http1::body::Incoming),
    H2(crate::http2::server::stream::H2Body),
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

    /// The longest pause between two pieces of a streamed body (`None`: nothing to wait for).
    pub fn pause_limit(&self) -> Option<Duration> {
        match self {
            RequestBody::Stream(s) => Some(s.idle),
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
