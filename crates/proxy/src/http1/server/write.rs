//! A response onto an HTTP/1.1 connection. The head is serialised once into
//! a buffer that lives for this response only; a complete body small enough goes out in the same
//! write, a larger one beside it (vectored), a streamed one as it comes, chunked when its length
//! is not known.

use rampart_head::Fields;
use std::cell::RefCell;
use std::io::IoSlice;
use std::time::{SystemTime, UNIX_EPOCH};

pub use crate::body::StoredHead;
use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::{HeaderName, StatusCode, Version};
use http_body::Body;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::http1::numbers::{chunk_line, itoa};

/// Bodies up to this size are copied behind the head and sent in one write.
pub const COALESCE: usize = 8 * 1024;

/// How the body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body bytes at all (HEAD, 1xx, 204, 304).
    None,
    Length(u64),
    Chunked,
    /// Until the connection closes (an HTTP/1.0 client and no known length).
    Close,
}

/// What the request said that shapes the response.
#[derive(Debug, Clone, Copy)]
pub struct Exchange {
    pub head_request: bool,
    pub version: Version,
    pub keep_alive: bool,
}

/// Serialises the head into `out` and returns the body's framing and whether the connection
/// stays open after this response. `stored`: a hit's fields, sent from the block made when the
/// object was stored, then `Age` and `X-Arc2-Cache-Age`, before `headers`.
pub fn head(
    out: &mut Vec<u8>,
    status: StatusCode,
    stored: Option<StoredHead<'_>>,
    headers: &Fields,
    hint: Option<u64>,
    ex: Exchange,
) -> (Framing, bool) {
    let mut keep_alive = ex.keep_alive;
    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    // One walk over the fields for what shapes the head (cheaper than hashed look-ups). A
    // stored block holds no length: the body's own (`hint`) frames it.
    let (mut declared, mut close) = (None, false);
    let mut has_date = stored.is_some_and(|s| s.wire.has_date);
    let mut first_length = true;
    for (name, value) in headers {
        if name == CONTENT_LENGTH {
            if std::mem::take(&mut first_length) {
                declared = crate::headers::parse_content_length(value);
            }
        } else if name == CONNECTION {
            close |= value.as_bytes().eq_ignore_ascii_case(b"close");
        } else if name == DATE {
            has_date = true;
        }
    }
    let framing = if ex.head_request || bodiless {
        Framing::None
    } else if let Some(n) = declared.or(hint) {
        Framing::Length(n)
    } else if ex.version == Version::HTTP_11 {
        Framing::Chunked
    } else {
        keep_alive = false;
        Framing::Close
    };
    if close {
        keep_alive = false;
    }
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    if let Some(s) = stored {
        out.extend_from_slice(&s.wire.block);
        let mut digits = [0u8; 20];
        let age = itoa(s.age, &mut digits);
        out.extend_from_slice(b"age: ");
        out.extend_from_slice(age);
        out.extend_from_slice(b"\r\nx-arc2-cache-age: ");
        out.extend_from_slice(age);
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in headers {
        if name == TRANSFER_ENCODING || name == CONNECTION {
            continue;
        }
        if name == CONTENT_LENGTH && framing != Framing::Length(declared.unwrap_or(u64::MAX)) {
            // Kept on HEAD and 304 answers (it describes the representation); dropped where
            // this writer frames the body itself.
            if !(ex.head_request || status == StatusCode::NOT_MODIFIED) {
                continue;
            }
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    match framing {
        Framing::Length(n) if declared != Some(n) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(itoa(n, &mut [0u8; 20]));
            out.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        _ => {}
    }
    if !has_date {
        out.extend_from_slice(b"date: ");
        date(out);
        out.extend_from_slice(b"\r\n");
    }
    if !keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    } else if ex.version == Version::HTTP_10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    (framing, keep_alive)
}

/// The head of an interim (1xx) answer passed on from the origin: its fields (hop-by-hop ones
/// already gone) without any length, which a 1xx never has.
pub fn interim(out: &mut Vec<u8>, status: StatusCode, headers: &Fields) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    fields(out, headers, &[CONTENT_LENGTH]);
    out.extend_from_slice(b"\r\n");
}

/// The head of a `101 Switching Protocols`: the response's fields (hop-by-hop ones already
/// gone) and `Connection: upgrade`.
pub fn switching(out: &mut Vec<u8>, headers: &Fields) {
    out.extend_from_slice(b"HTTP/1.1 101 Switching Protocols\r\n");
    fields(
        out,
        headers,
        &[CONNECTION, TRANSFER_ENCODING, CONTENT_LENGTH],
    );
    out.extend_from_slice(b"connection: upgrade\r\n\r\n");
}

/// Each field of `headers` as a `name: value` line, but those named in `skip`.
fn fields(out: &mut Vec<u8>, headers: &Fields, skip: &[HeaderName]) {
    for (name, value) in headers {
        if skip.contains(name) {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

thread_local! {
    /// The `Date` value of the current second (formatting it costs more than a response head).
    static DATE_NOW: RefCell<(u64, [u8; 29])> = const { RefCell::new((0, [0u8; 29])) };
}

/// The current `Date` value (cached for the second).
pub fn date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE_NOW.with(|d| {
        let mut d = d.borrow_mut();
        if d.0 != secs {
            let text = httpdate::fmt_http_date(now);
            if text.len() == 29 {
                d.1.copy_from_slice(text.as_bytes());
                d.0 = secs;
            } else {
                out.extend_from_slice(text.as_bytes());
                return;
            }
        }
        out.extend_from_slice(&d.1);
    });
}

/// How writing a body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// All of it, framed as announced.
    Complete,
    /// The body failed or was shorter than announced: the connection must close.
    Cut,
}

/// Writes the head (in `out`) and then the body, and flushes. `Err` only for the socket.
pub async fn send<W, B>(
    io: &mut W,
    mut out: Vec<u8>,
    framing: Framing,
    body: &mut B,
) -> std::io::Result<Sent>
where
    W: AsyncWrite + Unpin,
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    if framing == Framing::None {
        io.write_all(&out).await?;
        io.flush().await?;
        return Ok(Sent::Complete);
    }
    let mut written: u64 = 0;
    let mut first = true;
    loop {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut *body).poll_frame(cx)).await;
        let data = match frame {
            None => break,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "response body failed; closing the connection");
                if !out.is_empty() {
                    io.write_all(&out).await?;
                }
                io.flush().await?;
                return Ok(Sent::Cut);
            }
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue, // trailers: not sent over HTTP/1.1
            },
        };
        if data.is_empty() {
            continue;
        }
        let data = match framing {
            Framing::Length(n) => {
                let room = n.saturating_sub(written);
                if room == 0 {
                    continue;
                }
                if data.len() as u64 > room {
                    data.slice(..room as usize)
                } else {
                    data
                }
            }
            _ => data,
        };
        written += data.len() as u64;
        let complete_soon = first && body.is_end_stream();
        first = false;
        if framing == Framing::Chunked {
            let mut size = [0u8; 18];
            let line = chunk_line(data.len(), &mut size);
            if out.len() + line.len() + data.len() + 7 <= COALESCE {
                out.extend_from_slice(line);
                out.extend_from_slice(&data);
                out.extend_from_slice(b"\r\n");
                if complete_soon {
                    out.extend_from_slice(b"0\r\n\r\n");
                    io.write_all(&out).await?;
                    io.flush().await?;
                    return Ok(Sent::Complete);
                }
            } else {
                out.extend_from_slice(line);
                write_two(io, &out, &data).await?;
                out.clear();
                out.extend_from_slice(b"\r\n");
            }
        } else if out.len() + data.len() <= COALESCE {
            out.extend_from_slice(&data);
        } else {
            write_two(io, &out, &data).await?;
            out.clear();
        }
        if !out.is_empty() && !complete_soon {
            io.write_all(&out).await?;
            out.clear();
        }
    }
    if framing == Framing::Chunked {
        out.extend_from_slice(b"0\r\n\r\n");
    }
    if !out.is_empty() {
        io.write_all(&out).await?;
    }
    io.flush().await?;
    Ok(match framing {
        Framing::Length(n) if written < n => Sent::Cut,
        _ => Sent::Complete,
    })
}

/// Writes `a` then `b`, vectored where the stream supports it.
async fn write_two<W: AsyncWrite + Unpin>(io: &mut W, a: &[u8], b: &[u8]) -> std::io::Result<()> {
    let (mut a, mut b) = (a, b);
    while !a.is_empty() {
        let n = io
            .write_vectored(&[IoSlice::new(a), IoSlice::new(b)])
            .await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        if n < a.len() {
            a = &a[n..];
        } else {
            b = &b[n - a.len()..];
            a = &[];
        }
    }
    io.write_all(b).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn text(
        status: u16,
        h: &[(&str, &str)],
        hint: Option<u64>,
        ex: Exchange,
    ) -> (String, Framing, bool) {
        let mut map = Fields::new();
        for (k, v) in h {
            map.append(
                http::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        let mut out = Vec::new();
        let (f, k) = head(
            &mut out,
            StatusCode::from_u16(status).unwrap(),
            None,
            &map,
            hint,
            ex,
        );
        (String::from_utf8(out).unwrap(), f, k)
    }

    const GET11: Exchange = Exchange {
        head_request: false,
        version: Version::HTTP_11,
        keep_alive: true,
    };

    #[test]
    fn stored_fields_come_first_then_the_age_and_the_body_frames_itself() {
        let mut stored = Fields::new();
        // A stored length is not trusted over the body's (the block leaves it out).
        stored.insert(CONTENT_LENGTH, HeaderValue::from_static("99"));
        stored.insert(
            DATE,
            HeaderValue::from_static("Mon, 23 Nov 2026 10:00:00 GMT"),
        );
        stored.insert(CONNECTION, HeaderValue::from_static("close"));
        stored.append("x-two", HeaderValue::from_static("a"));
        stored.append("x-two", HeaderValue::from_static("b"));
        let wire = rampart_cache::store::fields(&stored, &[]).wire;
        let mut own = Fields::new();
        own.insert(
            http::header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=60"),
        );
        let mut out = Vec::new();
        let stored = StoredHead {
            wire: &wire,
            age: 3,
        };
        let (f, k) = head(
            &mut out,
            StatusCode::OK,
            Some(stored),
            &own,
            Some(12),
            GET11,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\ndate: Mon, 23 Nov 2026 10:00:00 GMT\r\nx-two: a\r\nx-two: b\r\n\
             age: 3\r\nx-arc2-cache-age: 3\r\nstrict-transport-security: max-age=60\r\n\
             content-length: 12\r\n\r\n"
        );
        assert_eq!((f, k), (Framing::Length(12), true));
    }

    #[test]
    fn framing_choices() {
        let (t, f, k) = text(200, &[("x-a", "1")], Some(12), GET11);
        assert!(
            t.starts_with("HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 12\r\ndate: "),
            "{t}"
        );
        assert!(t.ends_with(" GMT\r\n\r\n"));
        assert_eq!((f, k), (Framing::Length(12), true));
        let (t, f, _) = text(200, &[], None, GET11);
        assert!(t.contains("transfer-encoding: chunked\r\n"));
        assert_eq!(f, Framing::Chunked);
        let ten = Exchange {
            version: Version::HTTP_10,
            ..GET11
        };
        let (t, f, k) = text(200, &[], None, ten);
        assert_eq!((f, k), (Framing::Close, false));
        assert!(t.contains("connection: close\r\n"));
        let (t, _, k) = text(200, &[], Some(1), ten);
        assert!(k && t.contains("connection: keep-alive\r\n"));
        // HEAD and 304 keep the representation's length and send no body.
        let head_req = Exchange {
            head_request: true,
            ..GET11
        };
        let (t, f, _) = text(200, &[("content-length", "99")], Some(0), head_req);
        assert!(t.contains("content-length: 99\r\n"));
        assert_eq!(f, Framing::None);
        let (t, f, _) = text(304, &[("date", "x")], None, GET11);
        assert_eq!(t, "HTTP/1.1 304 Not Modified\r\ndate: x\r\n\r\n");
        assert_eq!(f, Framing::None);
        let (t, _, k) = text(200, &[("connection", "close")], Some(0), GET11);
        assert!(!k && t.matches("connection").count() == 1, "{t}");
    }
}
