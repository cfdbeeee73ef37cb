//! The body of an origin's response as rampart reads it: from its own HTTP/1.1 client (the
//! connection itself, read as the body is polled, so a slow client holds the origin back by
//! TCP and nothing is buffered ahead), or from hyper's HTTP/2 client.
//!
//! An HTTP/1.1 body read to its end, as framed, gives its connection back to the worker's
//! idle pool when the origin allows it; one dropped before its end closes the connection.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body::{Body, Frame, SizeHint};

use crate::error::BoxError;
use crate::http1::body::Decoder;
use crate::http1::upload::Upload;
use crate::net::idle::{IdlePool, PoolKey};
use crate::net::origin_stream::OriginStream;
use crate::net::read::poll_read_into;

/// Trailer fields kept from a chunked response (more are dropped).
const MAX_TRAILER_FIELDS: usize = 32;

/// A response body from an origin.
#[derive(Debug)]
pub enum OriginBody {
    /// No body (HEAD, 1xx, 204, 304, or a length of 0).
    Empty,
    H1(Box<H1Body>),
    H2(hyper::body::Incoming),
}

/// How an HTTP/1.1 response body ends.
#[derive(Debug)]
pub enum Delimit {
    /// By its length or its chunked framing.
    Framed(Decoder),
    /// When the origin closes the connection.
    UntilClose,
}

/// Where a connection goes when its exchange is over: the worker's idle pool, under its key.
#[derive(Debug)]
pub struct Home {
    pub pool: Arc<IdlePool>,
    pub key: PoolKey,
}

/// What is left of an exchange whose answer has been read to its end: the connection goes
/// back to the pool (`home`) when nothing of the exchange is left on it (`clean`: no byte
/// read past the answer). A request body the origin has not taken in full yet (it answered
/// early) is written on first, in a task of its own, as the client sends it (under the
/// client body's own limits); then the connection is pooled or closed.
pub fn settle(io: OriginStream, clean: bool, upload: Option<Upload>, home: Option<Home>) {
    match upload.filter(|u| !u.is_done()) {
        None => {
            if let (Some(h), true) = (home, clean) {
                h.pool.put(h.key, io);
            }
        }
        Some(upload) => {
            tokio::spawn(finish_upload(io, clean, upload, home));
        }
    }
}

/// Writes the rest of `upload` after the answer, then pools the connection. An origin that
/// takes nothing for the body's pause limit (it stopped reading without closing) ends it: the
/// connection is closed, and the client's connection sees its body unread.
async fn finish_upload(mut io: OriginStream, clean: bool, mut upload: Upload, home: Option<Home>) {
    let pause = upload.pause_limit();
    loop {
        let before = upload.written();
        let step = std::future::poll_fn(|cx| match upload.poll_write(&mut io, cx) {
            Poll::Ready(r) => Poll::Ready(Some(r)),
            Poll::Pending if upload.written() != before => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        });
        match tokio::time::timeout(pause, step).await {
            Ok(None) => {}
            Ok(Some(Ok(()))) => {
                if let (Some(h), true) = (home, clean) {
                    h.pool.put(h.key, io);
                }
                return;
            }
            Ok(Some(Err(_))) => return,
            Err(_) => {
                tracing::debug!(
                    ?pause,
                    "the origin stopped taking the request body after its answer; closing"
                );
                return;
            }
        }
    }
}

/// An HTTP/1.1 response body, read from its connection as it is polled.
pub struct H1Body {
    io: Option<OriginStream>,
    /// Bytes read past the head, not yet handed on.
    buf: BytesMut,
    delimit: Delimit,
    /// The request body, still being written (an origin may answer before it has it all).
    upload: Option<Upload>,
    /// A chunked body's trailer section, as it arrives.
    trailers: Option<Vec<u8>>,
    /// Where the connection goes at the end; `None`: it is closed.
    home: Option<Home>,
    /// Bytes of a `Content-Length` body still to come.
    left: Option<u64>,
    done: bool,
}

impl std::fmt::Debug for H1Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H1Body")
            .field("delimit", &self.delimit)
            .field("left", &self.left)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

/// An HTTP/1.1 response body that broke: bad framing, or the origin closed the connection
/// before the end its framing announced.
#[derive(Debug, thiserror::Error)]
pub enum OriginBodyError {
    #[error("the origin's response body framing is invalid: {0}")]
    Framing(&'static str),
    #[error("the origin closed the connection before the end of the response body")]
    Cut,
    #[error("reading the origin's response body failed")]
    Io(#[source] std::io::Error),
}

impl H1Body {
    /// The body that follows a head: `buf` holds the bytes read past it; `home` is where the
    /// connection goes after the end (when the origin keeps it open).
    pub fn new(
        io: OriginStream,
        buf: BytesMut,
        delimit: Delimit,
        upload: Option<Upload>,
        home: Option<Home>,
    ) -> Self {
        let (left, trailers) = match &delimit {
            Delimit::Framed(Decoder::Length(n)) => (Some(*n), None),
            Delimit::Framed(_) => (None, Some(Vec::new())),
            Delimit::UntilClose => (None, None),
        };
        H1Body {
            io: Some(io),
            buf,
            delimit,
            upload: upload.filter(|u| !u.is_done()),
            trailers,
            home,
            left,
            done: false,
        }
    }

    /// The end: the connection goes back to the pool if it can carry another request.
    fn finish(&mut self) {
        self.done = true;
        if let Some(io) = self.io.take() {
            settle(
                io,
                self.buf.is_empty(),
                self.upload.take(),
                self.home.take(),
            );
        }
    }

    /// Moves the request body on, if some is still to go; a failure there means the
    /// connection cannot be used again (the answer itself may still be whole).
    fn push_upload(&mut self, cx: &mut Context<'_>) {
        let (Some(u), Some(io)) = (self.upload.as_mut(), self.io.as_mut()) else {
            return;
        };
        match u.poll_write(io, cx) {
            Poll::Ready(Ok(())) => self.upload = None,
            Poll::Ready(Err(_)) => {
                self.upload = None;
                self.home = None;
            }
            Poll::Pending => {}
        }
    }

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, OriginBodyError>>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            self.push_upload(cx);
            match &mut self.delimit {
                Delimit::Framed(d) => {
                    match d.decode_keeping(&mut self.buf, self.trailers.as_mut()) {
                        Ok(Some(data)) => {
                            if let Some(l) = &mut self.left {
                                *l -= data.len() as u64;
                            }
                            if d.is_done() && self.trailers.is_none() {
                                // A length-delimited body: its last bytes end it.
                                self.finish();
                            }
                            return Poll::Ready(Some(Ok(Frame::data(data))));
                        }
                        Ok(None) if d.is_done() => {
                            let trailers = self.trailers.take();
                            self.finish();
                            return Poll::Ready(
                                trailers
                                    .as_deref()
                                    .and_then(parse_trailers)
                                    .map(|t| Ok(Frame::trailers(t))),
                            );
                        }
                        Ok(None) => {}
                        Err(reason) => {
                            self.home = None;
                            self.done = true;
                            return Poll::Ready(Some(Err(OriginBodyError::Framing(reason))));
                        }
                    }
                }
                Delimit::UntilClose => {
                    if !self.buf.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(self.buf.split().freeze()))));
                    }
                }
            }
            let Some(io) = self.io.as_mut() else {
                return Poll::Ready(None);
            };
            match poll_read_into(io, cx, &mut self.buf) {
                Poll::Ready(Ok(0)) => {
                    self.home = None;
                    self.done = true;
                    return Poll::Ready(match self.delimit {
                        Delimit::UntilClose => None,
                        Delimit::Framed(_) => Some(Err(OriginBodyError::Cut)),
                    });
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => {
                    self.home = None;
                    self.done = true;
                    return Poll::Ready(Some(Err(OriginBodyError::Io(e))));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// The fields of a trailer section (`None` when it has none, or is not valid).
fn parse_trailers(raw: &[u8]) -> Option<HeaderMap> {
    if raw.len() <= 2 {
        return None;
    }
    let mut slots = [httparse::EMPTY_HEADER; MAX_TRAILER_FIELDS];
    let fields = match httparse::parse_headers(raw, &mut slots) {
        Ok(httparse::Status::Complete((_, fields))) => fields,
        _ => return None,
    };
    let mut map = HeaderMap::with_capacity(fields.len());
    for f in fields.iter() {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(f.name.as_bytes()),
            HeaderValue::from_bytes(f.value),
        ) {
            map.append(n, v);
        }
    }
    (!map.is_empty()).then_some(map)
}

impl Body for OriginBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            OriginBody::Empty => Poll::Ready(None),
            OriginBody::H1(b) => b.poll_next(cx).map(|f| f.map(|r| r.map_err(Into::into))),
            OriginBody::H2(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(Into::into))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            OriginBody::Empty => true,
            OriginBody::H1(b) => b.done,
            OriginBody::H2(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            OriginBody::Empty => SizeHint::with_exact(0),
            OriginBody::H1(b) => match b.left {
                Some(n) => SizeHint::with_exact(n),
                None => SizeHint::default(),
            },
            OriginBody::H2(b) => b.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailer_sections() {
        let t = parse_trailers(b"Grpc-Status: 0\r\nX-A: 1\r\n\r\n").unwrap_or_default();
        assert_eq!(t.len(), 2);
        assert_eq!(t["grpc-status"], "0");
        assert!(parse_trailers(b"\r\n").is_none());
        assert!(parse_trailers(b"").is_none());
    }
}
