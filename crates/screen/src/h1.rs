//! The HTTP/1.1 head checks against request smuggling (RFC 9112): requests from clients, and
//! responses from origins ([`response_framing`]: the same field rules, plus the bodies a status
//! or a `HEAD` request rule out).
//!
//! Parsers disagree in a few places: some drop `Content-Length` when `Transfer-Encoding` is
//! also present, merge duplicate equal lengths or accept lists such as `5, 5`, or accept any
//! coding list that ends in `chunked`. A proxy that repairs such a request instead of refusing
//! it is one half of a request-smuggling pair. [`framing`] takes a head parsed by `httparse`
//! and either says how its body is delimited or refuses it:
//!
//! - `Content-Length` together with `Transfer-Encoding`; more than one `Content-Length`; a
//!   length that is not plain digits;
//! - `Transfer-Encoding` that is anything but a single `chunked`, or any in HTTP/1.0;
//! - a missing (HTTP/1.1) or repeated `Host`;
//! - request targets a reverse proxy does not serve: `CONNECT` (authority-form), `*` for
//!   anything but `OPTIONS`, absolute-form with a scheme other than http/https.
//!
//! rampart's HTTP/1.1 server (`rampart_proxy::http1::server`) parses each head once and applies
//! these checks to it, as its client to origins does with [`response_framing`]. They live here,
//! not in `rampart_proxy::http1` with the rest of HTTP/1.1, so the fuzz targets and this crate's
//! tests run them without building the proxy; its body decoder enforces strict chunk framing (`HEXDIG+ [; extension] CRLF …
//! CRLF`, no overflow, no control bytes in extensions or trailers).

/// How a request's body is delimited (RFC 9112 §6.3), once its head passed [`framing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    None,
    /// Exactly this many bytes (more than zero).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// The checks of the list above on one complete head: the body's framing when the head is
/// unambiguous, the reason to refuse it otherwise.
pub fn framing(req: &httparse::Request<'_, '_>) -> Result<Framing, &'static str> {
    let method = req.method.unwrap_or("");
    let target = req.path.unwrap_or("");
    if method == "CONNECT" {
        return Err("CONNECT is not served by a reverse proxy");
    }
    if target == "*" {
        if method != "OPTIONS" {
            return Err("asterisk-form target for a method other than OPTIONS");
        }
    } else if !target.starts_with('/') {
        let lower = target.get(..8).unwrap_or(target).to_ascii_lowercase();
        if !(lower.starts_with("http://") || lower.starts_with("https://")) {
            return Err("request target is neither origin-form nor http(s) absolute-form");
        }
    }
    let BodyFields {
        length,
        lengths,
        te,
        hosts,
    } = BodyFields::scan(req.headers)?;
    if req.version == Some(0) && te.is_some() {
        return Err("Transfer-Encoding in an HTTP/1.0 request");
    }
    if lengths > 1 {
        return Err("more than one Content-Length");
    }
    if lengths == 1 && te.is_some() {
        return Err("Content-Length together with Transfer-Encoding");
    }
    if te == Some(false) {
        return Err("Transfer-Encoding other than a single chunked");
    }
    if req.version == Some(1) && hosts == 0 {
        return Err("missing Host");
    }
    if hosts > 1 {
        return Err("more than one Host");
    }
    Ok(match (te, length) {
        (Some(true), _) => Framing::Chunked,
        (_, Some(n)) if n > 0 => Framing::Length(n),
        _ => Framing::None,
    })
}

/// How a response from an origin is delimited (RFC 9112 §6.3), once its head passed
/// [`response_framing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFraming {
    /// No body: `HEAD`'s answer, 1xx, 204, 304, or a zero length.
    None,
    /// Exactly this many bytes (more than zero).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Neither a length nor chunked: the body ends when the origin closes the connection
    /// (which cannot carry another request).
    UntilClose,
}

/// The checks of [`framing`] for a response head from an origin, for a request that was `HEAD`
/// when `head`: an origin that sends both `Content-Length` and `Transfer-Encoding`, more than
/// one `Content-Length`, a length that is not plain digits, or a transfer coding other than a
/// single `chunked` (which rampart would pass on undecoded, or decode wrongly) is refused
/// (the proxy answers 502 and stores nothing), where a lenient client would guess.
pub fn response_framing(
    res: &httparse::Response<'_, '_>,
    head: bool,
) -> Result<ResponseFraming, &'static str> {
    let BodyFields {
        length,
        lengths,
        te,
        ..
    } = BodyFields::scan(res.headers)?;
    if lengths > 1 {
        return Err("more than one Content-Length");
    }
    if lengths == 1 && te.is_some() {
        return Err("Content-Length together with Transfer-Encoding");
    }
    if te == Some(false) || (res.version == Some(0) && te.is_some()) {
        return Err("Transfer-Encoding other than a single chunked");
    }
    let status = res.code.unwrap_or(0);
    if head || (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(ResponseFraming::None);
    }
    Ok(match (te, length) {
        (Some(true), _) => ResponseFraming::Chunked,
        (_, Some(0)) => ResponseFraming::None,
        (_, Some(n)) => ResponseFraming::Length(n),
        (_, None) => ResponseFraming::UntilClose,
    })
}

/// What a head's fields say about its body (and, for a request, its `Host`).
struct BodyFields {
    /// The `Content-Length` value (the last one, when there are several).
    length: Option<u64>,
    /// How many `Content-Length` lines.
    lengths: usize,
    /// `Some(true)`: exactly one `chunked`; `Some(false)`: any other `Transfer-Encoding`.
    te: Option<bool>,
    hosts: usize,
}

impl BodyFields {
    fn scan(headers: &[httparse::Header<'_>]) -> Result<BodyFields, &'static str> {
        let mut length: Option<u64> = None;
        let mut lengths = 0;
        let mut te: Option<bool> = None; // Some(true) while exactly one `chunked` seen
        let mut hosts = 0;
        // By length first: most fields are none of the three, and a length compare is all
        // it takes to know (this runs on every head, both ways).
        for h in headers.iter() {
            let name = h.name;
            let len = name.len();
            if len == 14 && name.eq_ignore_ascii_case("content-length") {
                lengths += 1;
                let v = h.value.trim_ascii();
                if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
                    return Err("invalid Content-Length");
                }
                // At most 18 digits: below 2^63, no overflow.
                length = Some(v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')));
            } else if len == 17 && name.eq_ignore_ascii_case("transfer-encoding") {
                for coding in h.value.split(|&b| b == b',') {
                    let c = coding.trim_ascii();
                    if c.is_empty() {
                        continue;
                    }
                    te = match te {
                        None if c.eq_ignore_ascii_case(b"chunked") => Some(true),
                        _ => Some(false),
                    };
                }
                if te.is_none() {
                    te = Some(false);
                }
            } else if len == 4 && name.eq_ignore_ascii_case("host") {
                hosts += 1;
            }
        }
        Ok(BodyFields {
            length,
            lengths,
            te,
            hosts,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn check(raw: &[u8]) -> Result<Framing, &'static str> {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        assert!(req.parse(raw).unwrap().is_complete(), "{raw:?}");
        framing(&req)
    }

    #[test]
    fn unambiguous_heads_have_a_framing() {
        let cases: [(&[u8], Framing); 7] = [
            (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", Framing::None),
            (b"GET / HTTP/1.0\r\n\r\n", Framing::None),
            (
                b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n",
                Framing::Length(5),
            ),
            (
                b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
                Framing::None,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n",
                Framing::Chunked,
            ),
            (b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", Framing::None),
            (b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", Framing::None),
        ];
        for (raw, want) in cases {
            assert_eq!(check(raw), Ok(want), "{}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn smuggling_heads_are_refused() {
        let cases: [(&[u8], &str); 14] = [
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", "together"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n", "together"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\n", "more than one"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4, 4\r\n\r\n", "invalid Content-Length"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +4\r\n\r\n", "invalid Content-Length"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "single chunked"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "single chunked"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", "single chunked"),
            (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.0"),
            (b"GET / HTTP/1.1\r\n\r\n", "missing Host"),
            (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "more than one Host"),
            (b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n", "CONNECT"),
            (b"GET * HTTP/1.1\r\nHost: a\r\n\r\n", "asterisk"),
            (b"GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n", "absolute-form"),
        ];
        for (raw, want) in cases {
            let reason = check(raw).unwrap_err();
            assert!(
                reason.contains(want),
                "{reason:?} for {:?}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    fn check_response(raw: &[u8], head: bool) -> Result<ResponseFraming, &'static str> {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut res = httparse::Response::new(&mut headers);
        assert!(res.parse(raw).unwrap().is_complete(), "{raw:?}");
        response_framing(&res, head)
    }

    #[test]
    fn responses_say_how_their_body_ends() {
        use ResponseFraming::*;
        let cases: [(&[u8], bool, ResponseFraming); 10] = [
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n",
                false,
                Length(12),
            ),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, None),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                false,
                Chunked,
            ),
            (b"HTTP/1.1 200 OK\r\n\r\n", false, UntilClose),
            (b"HTTP/1.0 200 OK\r\n\r\n", false, UntilClose),
            // No body, whatever the fields say.
            (b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", true, None),
            (
                b"HTTP/1.1 304 Not Modified\r\nContent-Length: 12\r\n\r\n",
                false,
                None,
            ),
            (b"HTTP/1.1 204 No Content\r\n\r\n", false, None),
            (
                b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n",
                false,
                None,
            ),
            (
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
                false,
                None,
            ),
        ];
        for (raw, head, want) in cases {
            let text = String::from_utf8_lossy(raw);
            assert_eq!(check_response(raw, head), Ok(want), "{text}");
        }
    }

    #[test]
    fn responses_that_could_smuggle_or_that_rampart_cannot_decode_are_refused() {
        let refused: [&[u8]; 7] = [
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        ];
        for raw in refused {
            let text = String::from_utf8_lossy(raw);
            assert!(check_response(raw, false).is_err(), "{text}");
            // Even where no body follows: the head itself is ambiguous.
            assert!(check_response(raw, true).is_err(), "{text}");
        }
    }
}
