//! A request's body as its HTTP/3 stream delivers it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf as _, Bytes};
use h3::server::RequestStream;
use http_body::{Body, Frame, SizeHint};

/// What is left to read of a request stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    Data,
    Trailers,
    Done,
}

/// A request's body as its HTTP/3 stream delivers it: DATA frames, then trailers.
pub struct H3Body {
    stream: RequestStream<h3_quinn::RecvStream, Bytes>,
    /// A chunk read while looking for the body's end (see [`H3Body::into_client`]).
    first: Option<Bytes>,
    reading: Reading,
}

impl std::fmt::Debug for H3Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("H3Body")
    }
}

impl H3Body {
    pub(crate) fn new(stream: RequestStream<h3_quinn::RecvStream, Bytes>) -> Self {
        H3Body {
            stream,
            first: None,
            reading: Reading::Data,
        }
    }

    /// Whether the stream has already ended without a body (a GET's end arrives with its
    /// head). Reads what has arrived, without waiting; a chunk read is kept for the first read.
    pub(crate) fn ended_without_body(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match Pin::new(&mut *self).poll_frame(&mut cx) {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    self.first = Some(data);
                    false
                }
                // Trailers without a body: nothing to forward (HTTP/1.1 origins could not
                // take them without one).
                Err(_) => true,
            },
            // The error comes again on the next read.
            Poll::Ready(Some(Err(_))) => {
                self.reading = Reading::Data;
                false
            }
            Poll::Pending => false,
        }
    }
}

// No `Drop` asking the client to stop sending with H3_NO_ERROR: a body nobody reads to its end
// (a refusal, an origin that answered early, an upload cut at its limit) is stopped by quinn
// when the stream is dropped, with code 0, which RFC 9114 §8.1/§9 has the client treat as
// H3_NO_ERROR, so it still reads the response (§4.1). h3-quinn's own `stop_sending` panics
// whenever a read of the stream is in flight, and h3 leaves one in flight even after a read
// that returned data (it polls for more before handing out what it has buffered): calling it
// would take the connection's worker task down in one upload cut in six under load.

impl Body for H3Body {
    type Data = Bytes;
    type Error = h3::error::StreamError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.as_mut().read(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.reading == Reading::Done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

impl H3Body {
    fn read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h3::error::StreamError>>> {
        if let Some(data) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        loop {
            match self.reading {
                Reading::Data => match std::task::ready!(self.stream.poll_recv_data(cx)) {
                    Ok(Some(mut buf)) => {
                        let data = buf.copy_to_bytes(buf.remaining());
                        if !data.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(data))));
                        }
                    }
                    Ok(None) => self.reading = Reading::Trailers,
                    Err(e) => {
                        self.reading = Reading::Done;
                        return Poll::Ready(Some(Err(e)));
                    }
                },
                Reading::Trailers => {
                    let trailers = std::task::ready!(self.stream.poll_recv_trailers(cx));
                    self.reading = Reading::Done;
                    return Poll::Ready(match trailers {
                        Ok(Some(t)) => Some(Ok(Frame::trailers(t))),
                        Ok(None) => None,
                        Err(e) => Some(Err(e)),
                    });
                }
                Reading::Done => return Poll::Ready(None),
            }
        }
    }
}
