//! A request head from the bytes a connection has read, parsed once.
//!
//! `httparse` finds the head; [`rampart_screen::h1::framing`] refuses anything whose message
//! boundaries two HTTP/1.1 implementations could read differently (the request-smuggling
//! checks); the `http` request is built over the one buffer the head arrived in: the target and
//! every field value are slices of it, not copies.

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue, CONNECTION, EXPECT};
use http::{Method, Uri, Version};
use rampart_head::Fields;
use rampart_screen::h1::Framing;

/// Offset and length of a piece of the head.
type Span = (u32, u32);

/// Why a head was refused; each becomes a status and the connection closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Malformed, or ambiguous framing (400).
    Bad(&'static str),
    /// Longer than the head limit, or more fields than allowed (431).
    TooLarge,
    /// A request line that does not end within the head limit: its target is too long (414).
    UriTooLong,
    /// Not HTTP/1.0 or HTTP/1.1 (505).
    Version,
}

/// A complete, accepted request head.
#[derive(Debug)]
pub struct Head {
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    pub headers: Fields,
    pub framing: Framing,
    /// The client allows the connection to carry another request after this one.
    pub keep_alive: bool,
    /// `Expect: 100-continue`.
    pub expects_continue: bool,
}

/// Parses the head at the start of `buf`. `Ok(None)`: incomplete (read more, unless `buf` is
/// already over `max_head`). On success the head's bytes are split off `buf`.
pub fn parse(
    buf: &mut BytesMut,
    max_head: usize,
    max_headers: usize,
) -> Result<Option<Head>, HeadError> {
    // Tolerate empty lines before a request line (RFC 9112 §2.2), as most servers do.
    let blank = buf
        .iter()
        .take_while(|b| **b == b'\r' || **b == b'\n')
        .count();
    if blank > 0 {
        let _ = buf.split_to(blank);
    }
    if buf.is_empty() {
        return Ok(None);
    }
    // The field slots are left uninitialised (httparse fills what it uses): zeroing 64 of
    // them cost more than parsing a typical head. A head with more fields than the stack
    // holds (and a limit that allows them) is parsed again with slots on the heap: allocating
    // them for every head (the default limit is 100) cost ~400 instructions a request.
    let mut stack = [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; 64];
    let mut heap = Vec::new();
    let mut req = httparse::Request::new(&mut []);
    let mut parsed = req.parse_with_uninit_headers(buf, &mut stack[..max_headers.min(64)]);
    if matches!(parsed, Err(httparse::Error::TooManyHeaders)) && max_headers > 64 {
        heap.resize_with(max_headers, std::mem::MaybeUninit::uninit);
        req = httparse::Request::new(&mut []);
        parsed = req.parse_with_uninit_headers(buf, &mut heap);
    }
    let len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            return if buf.len() > max_head {
                Err(too_large(buf, max_head))
            } else {
                Ok(None)
            };
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(httparse::Error::Version) if names_a_version(buf) => return Err(HeadError::Version),
        Err(_) => return Err(HeadError::Bad("malformed request head")),
    };
    if len > max_head {
        return Err(too_large(buf, max_head));
    }
    let framing = rampart_screen::h1::framing(&req).map_err(HeadError::Bad)?;
    let version = if req.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let method = Method::from_bytes(req.method.unwrap_or("").as_bytes())
        .map_err(|_| HeadError::Bad("invalid method"))?;
    // Where the target and each field lie, to slice the frozen buffer afterwards.
    let base = buf.as_ptr() as usize;
    // A head is at most `max_head` bytes (far below 4 GiB).
    let at = |s: &[u8]| ((s.as_ptr() as usize - base) as u32, s.len() as u32);
    let target = at(req.path.unwrap_or("").as_bytes());
    let n = req.headers.len();
    // Small: zeroed for every head, and most heads have a handful of fields.
    let mut on_stack = [((0, 0), (0, 0)); 16];
    let mut on_heap = Vec::new();
    let ranges: &mut [(Span, Span)] = if n <= on_stack.len() {
        &mut on_stack[..n]
    } else {
        on_heap.resize(n, ((0, 0), (0, 0)));
        &mut on_heap
    };
    for (r, h) in ranges.iter_mut().zip(req.headers.iter()) {
        *r = (at(h.name.as_bytes()), at(h.value));
    }
    let head: Bytes = buf.split_to(len).freeze();
    let uri = Uri::from_maybe_shared(head.slice(target.0 as usize..(target.0 + target.1) as usize))
        .map_err(|_| HeadError::Bad("invalid request target"))?;
    let mut headers = Fields::with_capacity(n);
    let mut conn = Persistence {
        keep_alive: version == Version::HTTP_11,
        expects_continue: false,
    };
    fill_fields(&mut headers, &mut conn, version, &head, ranges)?;
    Ok(Some(Head {
        method,
        uri,
        version,
        headers,
        framing,
        keep_alive: conn.keep_alive,
        expects_continue: conn.expects_continue,
    }))
}

/// What `Connection` and `Expect` say.
struct Persistence {
    keep_alive: bool,
    expects_continue: bool,
}

/// The head's fields, sliced from the frozen head at `ranges`; `Connection` and `Expect` are
/// read on the way.
#[inline(always)]
fn fill_fields(
    headers: &mut Fields,
    h: &mut Persistence,
    version: Version,
    head: &Bytes,
    ranges: &[(Span, Span)],
) -> Result<(), HeadError> {
    for &((ns, nl), (vs, vl)) in ranges {
        let (ns, nl, vs, vl) = (ns as usize, nl as usize, vs as usize, vl as usize);
        let name = HeaderName::from_bytes(&head[ns..ns + nl])
            .map_err(|_| HeadError::Bad("invalid field name"))?;
        let value = HeaderValue::from_maybe_shared(head.slice(vs..vs + vl))
            .map_err(|_| HeadError::Bad("invalid field value"))?;
        if name == CONNECTION {
            for token in value.as_bytes().split(|b| *b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    h.keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && version == Version::HTTP_10 {
                    h.keep_alive = true;
                }
            }
        } else if name == EXPECT && value.as_bytes().eq_ignore_ascii_case(b"100-continue") {
            h.expects_continue = version == Version::HTTP_11;
        }
        headers.append(name, value);
    }
    Ok(())
}

/// What a head over `max_head` bytes is: a request line that does not end within the limit
/// is a target too long (414, as NGINX answers), anything else too many or too long fields
/// (431).
fn too_large(buf: &[u8], max_head: usize) -> HeadError {
    if buf[..max_head.min(buf.len())].contains(&b'\n') {
        HeadError::TooLarge
    } else {
        HeadError::UriTooLong
    }
}

/// Whether the request line ends in an HTTP version rampart does not speak (`HTTP/2.0`,
/// `HTTP/3`: 505) rather than in something that is no version at all (400). A line of more
/// than three parts (`GET /a b HTTP/1.1`) is malformed whatever it ends with.
fn names_a_version(buf: &[u8]) -> bool {
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().filter(|&&b| b == b' ').count() != 2 {
        return false;
    }
    let Some(v) = line.rsplit(|&b| b == b' ').next() else {
        return false;
    };
    match v.strip_prefix(b"HTTP/") {
        Some([major]) => major.is_ascii_digit(),
        Some([major, b'.', minor]) => major.is_ascii_digit() && minor.is_ascii_digit(),
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn one(raw: &[u8]) -> Result<Option<Head>, HeadError> {
        parse(&mut BytesMut::from(raw), 8192, 100)
    }

    #[test]
    fn a_head_and_what_follows() {
        let mut buf = BytesMut::from(
            &b"\r\nGET /a?b=1 HTTP/1.1\r\nHost: x\r\nX-Two: 1\r\nx-two: 2\r\n\r\nGET /next"[..],
        );
        let h = parse(&mut buf, 8192, 100).unwrap().unwrap();
        assert_eq!(
            (h.method, h.uri.to_string()),
            (Method::GET, "/a?b=1".to_owned())
        );
        assert_eq!(h.headers.get_all("x-two").iter().count(), 2);
        assert_eq!((h.framing, h.keep_alive), (Framing::None, true));
        assert_eq!(&buf[..], b"GET /next");
        assert!(parse(&mut buf, 8192, 100).unwrap().is_none());
    }

    /// A head with more fields than the parser's stack slots (64) is still read whole up to
    /// the limit, and refused past it.
    #[test]
    fn field_counts_around_the_stack_slots() {
        let head = |n: usize| {
            let mut raw = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
            for i in 1..n {
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
            (8, 8, true),
            (9, 8, false),
        ] {
            match parse(&mut head(n), 1 << 20, limit) {
                Ok(Some(h)) => {
                    assert!(whole, "{n} fields, limit {limit}: read");
                    assert_eq!(h.headers.len(), n);
                    assert_eq!(h.headers.get("x-f63").is_some(), n > 63);
                }
                Err(HeadError::TooLarge) => assert!(!whole, "{n} fields, limit {limit}: refused"),
                other => panic!("{n} fields, limit {limit}: {other:?}"),
            }
        }
    }

    #[test]
    fn keep_alive_by_version_and_connection() {
        let h = one(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(!h.keep_alive);
        let h = one(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(h.keep_alive);
        let h = one(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: x, close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.keep_alive);
        let h =
            one(b"PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n")
                .unwrap()
                .unwrap();
        assert!(h.expects_continue);
        assert_eq!(h.framing, Framing::Length(3));
    }

    #[test]
    fn refusals() {
        assert_eq!(
            one(b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n").err(),
            Some(HeadError::Bad("Content-Length together with Transfer-Encoding"))
        );
        assert_eq!(
            one(b"GET / HTTP/1.1\r\n\r\n").err(),
            Some(HeadError::Bad("missing Host"))
        );
        assert_eq!(
            one(b"GET / HTTP/2.0\r\n\r\n").err(),
            Some(HeadError::Version)
        );
        assert_eq!(one(b"GET / HTTP/3\r\n\r\n").err(), Some(HeadError::Version));
        // Not a version at all (a PROXY line sent to a listener that reads none): 400.
        assert_eq!(
            one(b"PROXY TCP4 192.0.2.1 192.0.2.2 1 2\r\n\r\n").err(),
            Some(HeadError::Bad("malformed request head"))
        );
        assert_eq!(
            one(b"GET / HTTP/1.1\r\nHost : a\r\n\r\n").err(),
            Some(HeadError::Bad("malformed request head"))
        );
        let long = [&b"GET / HTTP/1.1\r\nHost: a\r\nX: "[..], &[b'a'; 9000]].concat();
        assert_eq!(one(&long).err(), Some(HeadError::TooLarge));
        // A target longer than the head limit: 414, complete or not.
        let target = [&b"GET /"[..], &[b'a'; 9000]].concat();
        assert_eq!(one(&target).err(), Some(HeadError::UriTooLong));
        let whole = [&target[..], b" HTTP/1.1\r\nHost: a\r\n\r\n"].concat();
        assert_eq!(one(&whole).err(), Some(HeadError::UriTooLong));
        // A space inside the target is a malformed line, not an unknown version (400, not 505).
        assert_eq!(
            one(b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n").err(),
            Some(HeadError::Bad("malformed request head"))
        );
        let many: Vec<u8> = (0..101)
            .flat_map(|i| format!("X-{i}: 1\r\n").into_bytes())
            .collect();
        let raw = [&b"GET / HTTP/1.1\r\nHost: a\r\n"[..], &many, b"\r\n"].concat();
        assert_eq!(one(&raw).err(), Some(HeadError::TooLarge));
    }
}
