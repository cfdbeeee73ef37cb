//! A request's body as its HTTP/3 stream delivers it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf as _, Bytes};
use h3::error::Code;
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
    /// The last read is still in flight (it returned `Pending`): h3-quinn holds the QUIC
    /// stream inside that read, where `stop_sending` cannot reach it (it would panic).
    in_flight: bool,
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
            in_flight: false,
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

impl Drop for H3Body {
    /// A body nobody reads to its end (the response went first: a refusal, or an origin that
    /// answered early): the client is asked to stop sending, with H3_NO_ERROR so it still
    /// reads the response (RFC 9114 §4.1).
    ///
    /// Not while a read is in flight: the QUIC stream is inside that read then (h3-quinn would
    /// panic); dropping it there makes quinn send STOP_SENDING itself (with code 0).
    fn drop(&mut self) {
        if self.reading != Reading::Done && !self.in_flight {
            self.stream.stop_sending(Code::H3_NO_ERROR);
        }
    }
}

impl Body for H3Body {
    type Data = Bytes;
    type Error = h3::error::StreamError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = self.as_mut().read(cx);
        self.in_flight = polled.is_pending();
        polled
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
