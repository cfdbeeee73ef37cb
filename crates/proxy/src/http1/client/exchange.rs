//! rampart's HTTP/1.1 client: the request is written and the answer read by the task that
//! serves the client, on a connection taken from the worker's idle pool (or made for it), with
//! no channel and no second task in between.
//!
//! One exchange: the head and body go out ([`Upload`]) while the answer is read, so an origin
//! that answers before it has the whole body is heard at once. Interim answers are passed to
//! the client's connection (103) or dropped (100); the final head is checked for framing a
//! second implementation could read differently (`rampart_screen::h1::response_framing`):
//! such an answer is a 502 and is never stored. The body is then read as the response is sent
//! on ([`H1Body`]), and the connection goes back to the pool at its end.
//!
//! A pooled connection the origin closed meanwhile fails before any byte of the answer: the
//! request goes again, once, on a new connection, when it can be sent twice (no body, or
//! one read in full) and is idempotent or had not been written at all.

use rampart_head::Response;
use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, CONNECTION, CONTENT_LENGTH, TE, TRANSFER_ENCODING};
use http::{Method, StatusCode};
use rampart_head::request::Parts;
use rampart_screen::h1::ResponseFraming;

use crate::body::origin::{settle, Delimit, H1Body, Home, OriginBody};
use crate::body::RequestBodyError;
use crate::error::BoxError;
use crate::http1::body::Decoder;
use crate::http1::client::head::{self, HeadError, ResponseHead};
use crate::http1::upload::{framing_of, Upload, UploadError, UploadFraming};
use crate::interim::Interim;
use crate::net::idle::{IdlePool, PoolKey};
use crate::net::origin_stream::{OriginStream, Prefixed};
use crate::net::read::poll_read_into;
use crate::net::tunnel::OriginSide;
use crate::origin::connect::{OriginConnector, ORIGIN_READ_BUFFER};
use crate::origin::fields::{OriginFields, Outgoing};

/// The most fields a response head may have (hyper's limit, which rampart had before).
const MAX_FIELDS: usize = 100;

/// Interim answers read before the final one; more is a broken origin.
const MAX_INTERIM: usize = 16;

/// Why an exchange failed.
#[derive(Debug)]
pub enum H1Failure {
    /// No connection (TCP, TLS, PROXY header): nothing was sent.
    Connect(BoxError),
    /// The origin's answer was missing, malformed or ambiguous, or the connection failed.
    Protocol(BoxError),
    /// The client's request body failed while it was sent.
    Body(RequestBodyError),
}

/// The origin's answer broke the protocol.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("the origin closed the connection before answering")]
    Closed(#[source] Option<std::io::Error>),
    #[error("the origin closed the connection in the middle of its response head")]
    CutHead,
    #[error("the origin's response head is invalid: {0}")]
    Bad(&'static str),
    #[error("the origin's response head is larger than {ORIGIN_READ_BUFFER} bytes or has more than {MAX_FIELDS} fields")]
    TooLarge,
    #[error("the origin sent more than {MAX_INTERIM} interim responses")]
    TooManyInterim,
    #[error("the origin switched protocols for a request that asked for no upgrade")]
    UnaskedSwitch,
    #[error("reading the origin's answer failed")]
    Io(#[source] std::io::Error),
}

/// A worker's HTTP/1.1 client.
#[derive(Debug, Clone)]
pub struct H1Client {
    pool: Arc<IdlePool>,
    connector: OriginConnector,
}

impl H1Client {
    pub fn new(pool: Arc<IdlePool>, connector: OriginConnector) -> Self {
        H1Client { pool, connector }
    }

    /// Sends `req` (the client's head with fetch's changes beside it, `Host` among them) to the
    /// origin at `key` and reads the head of its final answer. `interim`: where 1xx answers
    /// go; `upgrade`: the request asks to switch protocols (a `101` is then its answer, with
    /// the connection in its extensions as an [`OriginSide`]).
    pub async fn send(
        &self,
        req: Outgoing<'_>,
        key: PoolKey,
        interim: Option<&Interim>,
        upgrade: bool,
    ) -> Result<Response<OriginBody>, H1Failure> {
        let Outgoing { head, fields, body } = req;
        let method = &head.method;
        let head_request = *method == Method::HEAD;
        let framing = framing_of(&body, carries_length(method));
        // Room for the client's fields and rampart's; a field larger than most (the
        // `traceparent`, 70 bytes) asks for its room, or the buffer would grow (~300
        // instructions, callgrind).
        let mut out = Vec::with_capacity(256 + 32 * head.headers.len() + fields.room());
        request_head(&mut out, head, fields, framing, !self.pool.keeps());
        let mut upload = Upload::new(Bytes::from(out), body, framing);
        let idempotent = method.is_idempotent();
        let mut retried = false;
        loop {
            // A second try always opens a new connection (the pool's other idle ones may be
            // as stale as the first).
            let pooled = if retried { None } else { self.pool.take(&key) };
            let (mut io, reused) = match pooled {
                Some(io) => (io, true),
                // Boxed: a TLS handshake's future is large, and most requests reuse a
                // connection.
                _ => (
                    boxed!(self.connector.connect(&key))
                        .await
                        .map_err(H1Failure::Connect)?,
                    false,
                ),
            };
            let mut buf = BytesMut::new();
            match exchange(&mut io, &mut upload, &mut buf, head_request, interim).await {
                Ok(head) => return self.response(head, io, buf, upload, key, upgrade),
                Err(Failed::Body(e)) => return Err(H1Failure::Body(e)),
                // A pooled connection the origin had closed: the request goes again, from its
                // start, on a new one.
                Err(Failed::Answer(AnswerError::Closed(e)))
                    if reused && upload.can_rewind() && (idempotent || !upload.started()) =>
                {
                    tracing::debug!(error = ?e, "pooled origin connection was closed; sending again on a new one");
                    upload.rewind();
                    retried = true;
                }
                Err(Failed::Answer(e)) => return Err(H1Failure::Protocol(Box::new(e))),
            }
        }
    }

    /// The response for a final head: its body read from the connection, or the connection
    /// back in the pool when there is no body (or handed over, for a `101`).
    fn response(
        &self,
        head: ResponseHead,
        io: OriginStream,
        buf: BytesMut,
        upload: Upload,
        key: PoolKey,
        upgrade: bool,
    ) -> Result<Response<OriginBody>, H1Failure> {
        let mut res = Response::new(OriginBody::Empty);
        *res.status_mut() = head.status;
        *res.version_mut() = head.version;
        *res.headers_mut() = head.headers;
        if head.status == StatusCode::SWITCHING_PROTOCOLS {
            if !upgrade {
                return Err(H1Failure::Protocol(Box::new(AnswerError::UnaskedSwitch)));
            }
            let side = OriginSide::new(Prefixed::new(buf.freeze(), io));
            res.extensions_mut().insert(side);
            return Ok(res);
        }
        let home = (head.keep_alive && self.pool.keeps()).then(|| Home {
            pool: self.pool.clone(),
            key,
        });
        let delimit = match head.framing {
            ResponseFraming::None | ResponseFraming::Length(0) => {
                settle(io, buf.is_empty(), Some(upload), home);
                return Ok(res);
            }
            ResponseFraming::Length(n) => Delimit::Framed(Decoder::Length(n)),
            ResponseFraming::Chunked => Delimit::Framed(Decoder::chunked()),
            ResponseFraming::UntilClose => Delimit::UntilClose,
        };
        let body = H1Body::new(io, buf, delimit, Some(upload), home);
        *res.body_mut() = OriginBody::H1(Box::new(body));
        Ok(res)
    }
}

/// Whether a request of `method` says `Content-Length: 0` when it has no body (as HTTP/1.1
/// clients do for methods whose requests usually carry one).
fn carries_length(method: &Method) -> bool {
    !matches!(
        *method,
        Method::GET
            | Method::HEAD
            | Method::DELETE
            | Method::OPTIONS
            | Method::TRACE
            | Method::CONNECT
    )
}

/// Serialises the request head: origin-form target; fetch's fields and rampart's `traceparent`,
/// then the client's that fetch leaves in, then `Via` and what a rule adds ([`OriginFields`]); never a framing or `TE` field (the framing
/// is this writer's, and rampart sends HTTP/1.1 clients no trailers); the framing of the body,
/// and `Connection: close` when the connection will not be kept.
fn request_head(
    out: &mut Vec<u8>,
    head: &Parts,
    fields: &OriginFields,
    framing: UploadFraming,
    close: bool,
) {
    out.extend_from_slice(head.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(
        head.uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .as_bytes(),
    );
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut has_connection = false;
    let mut line = |name: &HeaderName, value: &[u8]| {
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING || name == TE {
            return;
        }
        has_connection |= name == CONNECTION;
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    for (name, value) in fields.before() {
        line(name, value.as_bytes());
    }
    if let Some(tp) = fields.traceparent() {
        line(&rampart_otel::TRACEPARENT, tp.as_bytes());
    }
    let kept = head.headers.iter().filter(|(name, _)| !fields.skips(name));
    for (name, value) in kept.chain(fields.after()) {
        line(name, value.as_bytes());
    }
    match framing {
        UploadFraming::Length(n) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(crate::http1::numbers::itoa(n, &mut [0u8; 20]));
            out.extend_from_slice(b"\r\n");
        }
        UploadFraming::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        UploadFraming::None => {}
    }
    if close && !has_connection {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// How an exchange failed.
enum Failed {
    Body(RequestBodyError),
    Answer(AnswerError),
}

/// Writes the request and reads until the final answer's head, passing interim ones on.
async fn exchange(
    io: &mut OriginStream,
    upload: &mut Upload,
    buf: &mut BytesMut,
    head_request: bool,
    interim: Option<&Interim>,
) -> Result<ResponseHead, Failed> {
    // A failed write: the answer may still be there to read (an origin that answered and
    // closed without reading the whole body).
    let mut write_failed: Option<std::io::Error> = None;
    let mut interims = 0;
    poll_fn(|cx| {
        if write_failed.is_none() && !upload.is_done() {
            match upload.poll_write(io, cx) {
                Poll::Ready(Err(UploadError::Body(e))) => return Poll::Ready(Err(Failed::Body(e))),
                Poll::Ready(Err(UploadError::Io(e))) => write_failed = Some(e),
                Poll::Ready(Ok(())) | Poll::Pending => {}
            }
        }
        loop {
            if !buf.is_empty() {
                match head::parse(buf, ORIGIN_READ_BUFFER, MAX_FIELDS, head_request) {
                    Ok(Some(h))
                        if h.status.is_informational()
                            && h.status != StatusCode::SWITCHING_PROTOCOLS =>
                    {
                        interims += 1;
                        if interims > MAX_INTERIM {
                            return Poll::Ready(Err(Failed::Answer(AnswerError::TooManyInterim)));
                        }
                        if let (Some(i), false) = (interim, h.status == StatusCode::CONTINUE) {
                            i.push(h.status, h.headers);
                        }
                        continue;
                    }
                    Ok(Some(h)) => return Poll::Ready(Ok(h)),
                    Ok(None) => {}
                    Err(HeadError::Bad(reason)) => {
                        return Poll::Ready(Err(Failed::Answer(AnswerError::Bad(reason))))
                    }
                    Err(HeadError::TooLarge) => {
                        return Poll::Ready(Err(Failed::Answer(AnswerError::TooLarge)))
                    }
                }
            }
            let answered = interims > 0 || !buf.is_empty();
            match poll_read_into(io, cx, buf) {
                Poll::Ready(Ok(0)) if answered => {
                    return Poll::Ready(Err(Failed::Answer(AnswerError::CutHead)))
                }
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(Failed::Answer(AnswerError::Closed(
                        write_failed.take(),
                    ))))
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) if answered => {
                    return Poll::Ready(Err(Failed::Answer(AnswerError::Io(e))))
                }
                Poll::Ready(Err(e)) => {
                    return Poll::Ready(Err(Failed::Answer(AnswerError::Closed(Some(e)))))
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn request_heads() {
        let mut h = rampart_head::Fields::new();
        h.insert("host", "client.test".parse().unwrap());
        h.insert("content-length", "99".parse().unwrap());
        h.insert("te", "trailers".parse().unwrap());
        h.insert("accept", "*/*".parse().unwrap());
        h.insert("via", "1.0 other".parse().unwrap());
        let (mut head, ()) = rampart_head::Request::post("/a?b=1")
            .body(())
            .unwrap()
            .into_parts();
        head.headers = h;
        let mut fields = OriginFields::for_client(&head.headers);
        fields.set(http::header::VIA, "1.1 rampart".parse().unwrap());
        fields.set(http::header::HOST, "origin.test".parse().unwrap());
        fields.set(TE, "trailers".parse().unwrap());
        let mut out = Vec::new();
        request_head(&mut out, &head, &fields, UploadFraming::Chunked, false);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /a?b=1 HTTP/1.1\r\nhost: origin.test\r\naccept: */*\r\nvia: 1.0 other\r\n\
             via: 1.1 rampart\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        let (head, ()) = rampart_head::Request::get("http://x/")
            .body(())
            .unwrap()
            .into_parts();
        let mut out = Vec::new();
        request_head(
            &mut out,
            &head,
            &OriginFields::default(),
            UploadFraming::None,
            true,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET / HTTP/1.1\r\nconnection: close\r\n\r\n"
        );
        assert!(carries_length(&Method::POST) && !carries_length(&Method::GET));
    }

    #[test]
    fn rampart_s_traceparent_is_the_only_one_in_the_head() {
        let mut h = rampart_head::Fields::new();
        h.insert("traceparent", "00-client".parse().unwrap());
        h.insert("accept", "*/*".parse().unwrap());
        let (mut head, ()) = rampart_head::Request::get("/t")
            .body(())
            .unwrap()
            .into_parts();
        head.headers = h;
        let mut fields = OriginFields::for_client(&head.headers);
        fields.set(http::header::HOST, "origin.test".parse().unwrap());
        fields.set_traceparent(rampart_otel::TraceParent::new(
            rampart_otel::TraceId([1; 16]),
            rampart_otel::SpanId([2; 8]),
            1,
        ));
        let mut out = Vec::new();
        request_head(&mut out, &head, &fields, UploadFraming::None, false);
        let want = format!(
            "GET /t HTTP/1.1\r\nhost: origin.test\r\ntraceparent: 00-{}-{}-01\r\n\
             accept: */*\r\n\r\n",
            "01".repeat(16),
            "02".repeat(8)
        );
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }
}
