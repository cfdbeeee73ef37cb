//! A response head from the bytes an origin connection has read, parsed once.
//!
//! `httparse` finds the head; [`rampart_screen::h1::response_framing`] refuses a head whose
//! body two HTTP/1.1 implementations could delimit differently (both `Content-Length` and
//! `Transfer-Encoding`, two lengths, a coding other than a single `chunked`): such an answer
//! is a 502 and is never stored. The `http` head is built over the one buffer it arrived in:
//! every field value is a slice of it, not a copy.

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue, CONNECTION};
use http::{StatusCode, Version};
use rampart_head::Fields;
use rampart_screen::h1::ResponseFraming;

/// Why an origin's response head was refused: the exchange fails (502) and the connection is
/// closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Not a response head, or one whose framing is ambiguous.
    Bad(&'static str),
    /// Longer than the head limit, or more fields than allowed.
    TooLarge,
}

/// A field's name and value as (offset, length) in the head (a head is at most
/// `ORIGIN_READ_BUFFER` bytes, far below 4 GiB).
type Span = ((u32, u32), (u32, u32));

/// A complete, accepted response head.
#[derive(Debug)]
pub struct ResponseHead {
    pub status: StatusCode,
    pub version: Version,
    pub headers: Fields,
    pub framing: ResponseFraming,
    /// The connection may carry another request once the body has been read: the origin
    /// did not ask to close it, and the body's end is known without the close.
    pub keep_alive: bool,
}

/// Parses the response head at the start of `buf`, for a request that was `HEAD` when
/// `head_request`. `Ok(None)`: incomplete (read more, unless `buf` is already over
/// `max_head`). On success the head's bytes are split off `buf`. An interim response (1xx
/// other than 101) is a head like any other: the caller reads the next one after it.
pub fn parse(
    buf: &mut BytesMut,
    max_head: usize,
    max_headers: usize,
    head_request: bool,
) -> Result<Option<ResponseHead>, HeadError> {
    // The field slots are left uninitialised (httparse fills what it uses), as the server's
    // are: initialising 64 slots would write 2 KiB for every answer. More fields than the
    // stack holds: parsed again with slots on the heap, as the server does.
    let mut stack = [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; 64];
    let mut heap = Vec::new();
    let config = httparse::ParserConfig::default();
    let mut res = httparse::Response::new(&mut []);
    let mut parsed =
        config.parse_response_with_uninit_headers(&mut res, buf, &mut stack[..max_headers.min(64)]);
    if matches!(parsed, Err(httparse::Error::TooManyHeaders)) && max_headers > 64 {
        heap.resize_with(max_headers, std::mem::MaybeUninit::uninit);
        res = httparse::Response::new(&mut []);
        parsed = config.parse_response_with_uninit_headers(&mut res, buf, &mut heap);
    }
    let len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > max_head => return Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(_) => return Err(HeadError::Bad("malformed response head")),
    };
    if len > max_head {
        return Err(HeadError::TooLarge);
    }
    let framing =
        rampart_screen::h1::response_framing(&res, head_request).map_err(HeadError::Bad)?;
    // RFC 9110 §15: a status is 100–599 (`StatusCode` takes up to 999); anything else is no
    // answer a client could read.
    let status = res
        .code
        .filter(|c| (100..=599).contains(c))
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or(HeadError::Bad("status code outside 100–599"))?;
    let version = if res.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    // Where each field lies, to slice the frozen head afterwards (on the stack for heads of
    // ordinary size).
    let base = buf.as_ptr() as usize;
    let at = |s: &[u8]| ((s.as_ptr() as usize - base) as u32, s.len() as u32);
    // Small: zeroed for every head, and most heads have a handful of fields.
    let mut stack_spans = [((0, 0), (0, 0)); 16];
    let mut heap_spans = Vec::new();
    let n = res.headers.len();
    let spans: &mut [Span] = if n <= stack_spans.len() {
        &mut stack_spans[..n]
    } else {
        heap_spans.resize(n, ((0, 0), (0, 0)));
        &mut heap_spans
    };
    for (span, h) in spans.iter_mut().zip(res.headers.iter()) {
        *span = (at(h.name.as_bytes()), at(h.value));
    }
    let head: Bytes = buf.split_to(len).freeze();
    // Room for the fields deliver adds (`Cache-Status`, `X-Arc2-Cache`, `Via`, `Vary`…)
    // without rebuilding the map.
    let mut headers = Fields::with_capacity(n + 6);
    let mut keep_alive = version == Version::HTTP_11;
    for &mut ((ns, nl), (vs, vl)) in spans {
        let (ns, nl, vs, vl) = (ns as usize, nl as usize, vs as usize, vl as usize);
        let name = HeaderName::from_bytes(&head[ns..ns + nl])
            .map_err(|_| HeadError::Bad("invalid field name"))?;
        let value = HeaderValue::from_maybe_shared(head.slice(vs..vs + vl))
            .map_err(|_| HeadError::Bad("invalid field value"))?;
        if name == CONNECTION {
            for token in value
                .as_bytes()
                .split(|b| *b == b',')
                .map(<[u8]>::trim_ascii)
            {
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && version == Version::HTTP_10 {
                    keep_alive = true;
                }
            }
        }
        headers.append(name, value);
    }
    let keep_alive = keep_alive && framing != ResponseFraming::UntilClose;
    Ok(Some(ResponseHead {
        status,
        version,
        headers,
        framing,
        keep_alive,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn one(raw: &[u8], head_request: bool) -> Result<Option<ResponseHead>, HeadError> {
        parse(&mut BytesMut::from(raw), 16 * 1024, 100, head_request)
    }

    /// An answer with more fields than the parser's stack slots (64) is read whole up to the
    /// limit, and refused past it.
    #[test]
    fn field_counts_around_the_stack_slots() {
        let head = |n: usize| {
            let mut raw = b"HTTP/1.1 204 No Content\r\n".to_vec();
            for i in 0..n {
                raw.extend_from_slice(format!("X-F{i}: {i}\r\n").as_bytes());
            }
            raw.extend_from_slice(b"\r\n");
            BytesMut::from(&raw[..])
        };
        for (n, limit, whole) in [
            (64, 64, true),
            (65, 64, false),
            (65, 100, true),
            (100, 100, true),
            (101, 100, false),
        ] {
            match parse(&mut head(n), 1 << 20, limit, false) {
                Ok(Some(h)) => {
                    assert!(whole, "{n} fields, limit {limit}: read");
                    assert_eq!(h.headers.len(), n);
                }
                Err(HeadError::TooLarge) => assert!(!whole, "{n} fields, limit {limit}: refused"),
                other => panic!("{n} fields, limit {limit}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_head_is_parsed_once_and_split_off_its_body() {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"v1\"\r\nX-A: 1\r\nX-A: 2\r\n\r\nhello"[..],
        );
        let h = parse(&mut buf, 16 * 1024, 100, false).unwrap().unwrap();
        assert_eq!(h.status, StatusCode::OK);
        assert_eq!(h.version, Version::HTTP_11);
        assert_eq!(h.framing, ResponseFraming::Length(5));
        assert!(h.keep_alive);
        assert_eq!(h.headers["etag"], "\"v1\"");
        assert_eq!(h.headers.get_all("x-a").iter().count(), 2);
        assert_eq!(&buf[..], b"hello", "the body stays in the buffer");
    }

    #[test]
    fn whether_the_connection_can_be_used_again() {
        let cases: [(&[u8], bool); 5] = [
            (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n", true),
            (
                b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n",
                false,
            ),
            (b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false),
            (
                b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\n",
                true,
            ),
            // The body ends when the origin closes: nothing can follow it.
            (b"HTTP/1.1 200 OK\r\n\r\n", false),
        ];
        for (raw, want) in cases {
            let h = one(raw, false).unwrap().unwrap();
            assert_eq!(h.keep_alive, want, "{}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn incomplete_oversized_and_ambiguous_heads() {
        assert!(one(b"HTTP/1.1 200 OK\r\nContent-Le", false)
            .unwrap()
            .is_none());
        let long = [&b"HTTP/1.1 200 OK\r\nX: "[..], &[b'a'; 20_000]].concat();
        assert_eq!(one(&long, false).unwrap_err(), HeadError::TooLarge);
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..101 {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(one(&many, false).unwrap_err(), HeadError::TooLarge);
        for raw in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            b"HTTP/9.9 200 OK\r\n\r\n",
            b"HTTP/1.1 20 OK\r\n\r\n",
            b"HTTP/1.1 999 Odd\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 600 Odd\r\nContent-Length: 0\r\n\r\n",
            b"NOT HTTP AT ALL\r\n\r\n",
        ] {
            let got = one(raw, false);
            assert!(
                matches!(got, Err(HeadError::Bad(_))),
                "{}: {got:?}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn interim_and_bodiless_answers() {
        let h = one(
            b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.status.as_u16(), 103);
        assert_eq!(h.framing, ResponseFraming::None);
        let h = one(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true)
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, ResponseFraming::None, "the answer to HEAD");
        assert!(h.keep_alive);
    }
}
