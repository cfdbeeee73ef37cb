//! The response body type: a streamed upstream body or a complete local one, with an optional
//! access-log record that is written when the body has been sent (or dropped), so the log line
//! carries the real byte count and duration. With logging off the record is `None` and costs a
//! branch.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::log::AccessRecord;

enum Kind {
    Full(Option<Bytes>),
    Stream(Incoming),
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

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let frame = match &mut this.kind {
            Kind::Full(b) => b.take().map(|b| Ok(Frame::data(b))),
            Kind::Stream(s) => ready!(Pin::new(s).poll_frame(cx)),
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
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Stream(s) => s.size_hint(),
        }
    }
}

/// Body of a request sent upstream: nothing (GET and friends — lets a request be re-sent to
/// another origin after a connect failure) or the client's body, streamed.
pub enum RequestBody {
    Empty,
    Stream(Incoming),
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
