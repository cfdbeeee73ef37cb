//! The HTTP/1.1 framing guard (RFC 9112).
//!
//! hyper parses requests leniently in a few places where origins disagree: with both
//! `Content-Length` and `Transfer-Encoding` it drops the length; it merges duplicate equal
//! lengths and accepts lists such as `5, 5`; it accepts any coding list that ends in `chunked`.
//! A proxy that repairs such a request instead of refusing it is one half of a request-smuggling
//! pair. The guard sits between the socket and hyper, follows the message boundaries of the byte
//! stream exactly as an HTTP/1.1 parser must (heads with `httparse`, the parser hyper uses, so
//! both see the same head; bodies by `Content-Length` or chunked framing), and stops the stream
//! at the first request that is not unambiguous:
//!
//! - `Content-Length` together with `Transfer-Encoding`; more than one `Content-Length`; a
//!   length that is not plain digits;
//! - `Transfer-Encoding` that is anything but a single `chunked`;
//! - a missing or repeated `Host`;
//! - request targets a reverse proxy does not serve: `CONNECT` (authority-form), `*` for
//!   anything but `OPTIONS`, absolute-form with a scheme other than http/https;
//! - chunk framing that is not `HEXDIG+ [; extension] CRLF … CRLF`, sizes that overflow,
//!   control bytes in extensions or trailers.
//!
//! Heads that `httparse` itself refuses (obs-fold, whitespace before the colon, bytes not
//! allowed in names or values, too many fields, too long) are passed on untouched: hyper refuses
//! them with the same parser and answers 400 or 431.
//!
//! On a refusal the caller hands the parser the bytes before the offending request's last head
//! byte (or before the bad framing byte), then [`POISON`], then end-of-stream. A NUL is invalid
//! anywhere in a request head and in a chunk-size line, and the blank line after it makes hyper
//! parse at once (it only parses a head once it sees its end), so hyper answers any earlier
//! pipelined requests, then fails on this one with 400 and closes: nothing of it reaches the
//! pipeline.

/// What the parser gets in place of a refused request: a NUL (invalid in any head or chunk
/// line) and an end-of-head marker.
pub const POISON: &[u8] = b"\0\r\n\r\n";

/// The HTTP/2 connection preface (prior knowledge h2c); after it the guard steps aside.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Longest chunk-size line (size + extensions) and trailer section accepted.
const MAX_CHUNK_LINE: usize = 4096;
const MAX_TRAILERS: usize = 16 * 1024;

/// What to do with a buffer of bytes read from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Hand all of it to the HTTP parser.
    Pass,
    /// Hand over only `keep` bytes, then `poison` ([`POISON`] for a head, a lone NUL inside a
    /// body), then end of stream.
    Reject {
        keep: usize,
        reason: &'static str,
        poison: &'static [u8],
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Collecting a request head (the first one may be the HTTP/2 preface).
    Head,
    /// `n` body bytes still to come.
    Body(u64),
    /// Chunked body: in the size line (`digits` seen so far, `ext` once past the size).
    ChunkSize {
        digits: u8,
        ext: bool,
        line: usize,
    },
    /// Chunked body: a CR was seen at the end of a size line.
    ChunkSizeLf {
        last: bool,
    },
    /// `n` bytes of chunk data, then CRLF.
    ChunkData(u64),
    ChunkDataCr,
    ChunkDataLf,
    /// Trailer section after the last chunk: `at_line_start`, `cr` pending, bytes so far.
    Trailers {
        line_len: usize,
        cr: bool,
        total: usize,
    },
    /// HTTP/2 or a head the parser will refuse on its own: no more checks.
    Passthrough,
    /// A refusal was issued.
    Rejected,
}

/// Follows one connection's request stream.
#[derive(Debug)]
pub struct Guard {
    state: State,
    head: Vec<u8>,
    /// Bytes of `head` that came from earlier `feed` calls.
    max_head: usize,
    max_headers: usize,
    first: bool,
    chunk_size: u64,
}

impl Guard {
    /// `max_head`/`max_headers` match the HTTP parser's limits, so a head the guard would have
    /// to buffer without end is one the parser refuses with 431 anyway.
    pub fn new(max_head: usize, max_headers: usize) -> Guard {
        Guard {
            state: State::Head,
            head: Vec::new(),
            max_head,
            max_headers,
            first: true,
            chunk_size: 0,
        }
    }

    /// Whether the guard has stopped checking (HTTP/2, or the parser will refuse the stream).
    pub fn is_passthrough(&self) -> bool {
        self.state == State::Passthrough
    }

    /// Feeds the next bytes read from the client.
    pub fn feed(&mut self, input: &[u8]) -> Verdict {
        let mut pos = 0;
        while pos < input.len() {
            match self.state {
                State::Passthrough => return Verdict::Pass,
                State::Rejected => {
                    return Verdict::Reject {
                        keep: 0,
                        reason: "stream already refused",
                        poison: b"",
                    }
                }
                State::Head => match self.head(input, pos) {
                    Ok(next) => pos = next,
                    Err(v) => {
                        self.state = State::Rejected;
                        return v;
                    }
                },
                State::Body(n) => {
                    let take = n.min((input.len() - pos) as u64);
                    pos += take as usize;
                    self.state = if take == n {
                        State::Head
                    } else {
                        State::Body(n - take)
                    };
                }
                State::ChunkData(n) => {
                    let take = n.min((input.len() - pos) as u64);
                    pos += take as usize;
                    self.state = if take == n {
                        State::ChunkDataCr
                    } else {
                        State::ChunkData(n - take)
                    };
                }
                _ => {
                    if let Err(reason) = self.chunk_byte(input[pos]) {
                        self.state = State::Rejected;
                        // Inside a body a CRLF could complete a chunk for hyper: a lone NUL
                        // and the end of the stream fail every chunk state.
                        return Verdict::Reject {
                            keep: pos,
                            reason,
                            poison: b"\0",
                        };
                    }
                    pos += 1;
                }
            }
        }
        Verdict::Pass
    }

    /// Reads a head from `input[pos..]` (after any part of it held from earlier reads);
    /// returns the position after the head when it is complete and acceptable, or after all
    /// input when more is needed. A head that arrives in one read is parsed in place.
    fn head(&mut self, input: &[u8], pos: usize) -> Result<usize, Verdict> {
        let before = self.head.len();
        let room = (self.max_head + 1).saturating_sub(before);
        let take = room.min(input.len() - pos);
        let fresh = &input[pos..pos + take];
        if before > 0 {
            self.head.extend_from_slice(fresh);
        }
        let buf: &[u8] = if before > 0 { &self.head } else { fresh };
        if self.first {
            let n = buf.len().min(H2_PREFACE.len());
            if buf[..n] == H2_PREFACE[..n] {
                if n == H2_PREFACE.len() {
                    self.state = State::Passthrough;
                    self.head = Vec::new();
                } else if before == 0 {
                    self.head.extend_from_slice(fresh);
                }
                return Ok(input.len());
            }
        }
        // The same number of header slots as the HTTP parser has, on the stack when it fits.
        let mut stack = [httparse::EMPTY_HEADER; 128];
        let mut heap = Vec::new();
        let slots: &mut [httparse::Header<'_>] = if self.max_headers <= stack.len() {
            &mut stack[..self.max_headers]
        } else {
            heap.resize(self.max_headers, httparse::EMPTY_HEADER);
            &mut heap
        };
        let mut req = httparse::Request::new(slots);
        match req.parse(buf) {
            Ok(httparse::Status::Complete(len)) => {
                self.first = false;
                // `len` counts from the start of the head; the head ends inside this input.
                let end = pos + (len - before);
                let framing = check(&req);
                self.head.clear();
                match framing {
                    Ok(f) => {
                        self.state = f;
                        Ok(end)
                    }
                    Err(reason) => Err(Verdict::Reject {
                        keep: end - 1,
                        reason,
                        poison: POISON,
                    }),
                }
            }
            Ok(httparse::Status::Partial) => {
                if before == 0 {
                    self.head.extend_from_slice(fresh);
                }
                if self.head.len() > self.max_head {
                    // hyper normally refuses a head this long with 431 long before (the guard's
                    // limit is a multiple of hyper's), but its read buffer can hold more than
                    // its limit; never step aside: refuse.
                    self.head = Vec::new();
                    return Err(Verdict::Reject {
                        keep: pos,
                        reason: "request head too large",
                        poison: POISON,
                    });
                }
                Ok(pos + take)
            }
            Err(httparse::Error::TooManyHeaders) => {
                // hyper has the same number of header slots and parses the same head: it
                // answers 431 and closes, whatever follows.
                self.state = State::Passthrough;
                self.head = Vec::new();
                Ok(input.len())
            }
            Err(_) => {
                // hyper refuses it too (same parser); refuse here so the guard never steps
                // aside for anything but HTTP/2.
                self.head = Vec::new();
                Err(Verdict::Reject {
                    keep: pos,
                    reason: "malformed request head",
                    poison: POISON,
                })
            }
        }
    }

    fn chunk_byte(&mut self, b: u8) -> Result<(), &'static str> {
        self.state = match self.state {
            State::ChunkSize { digits, ext, line } => {
                if line >= MAX_CHUNK_LINE {
                    return Err("chunk-size line too long");
                }
                let line = line + 1;
                match b {
                    b'\r' if digits > 0 => State::ChunkSizeLf {
                        last: self.chunk_size == 0,
                    },
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' if !ext => {
                        if digits >= 15 {
                            return Err("chunk size too large");
                        }
                        let v = (b as char).to_digit(16).unwrap_or(0) as u64;
                        self.chunk_size = self.chunk_size << 4 | v;
                        State::ChunkSize {
                            digits: digits + 1,
                            ext,
                            line,
                        }
                    }
                    b';' | b' ' | b'\t' if digits > 0 => State::ChunkSize {
                        digits,
                        ext: true,
                        line,
                    },
                    0x21..=0x7e | 0x80..=0xff if ext => State::ChunkSize { digits, ext, line },
                    _ => return Err("invalid chunk-size line"),
                }
            }
            State::ChunkSizeLf { last } => {
                if b != b'\n' {
                    return Err("chunk-size line not ended by CRLF");
                }
                if last {
                    State::Trailers {
                        line_len: 0,
                        cr: false,
                        total: 0,
                    }
                } else {
                    State::ChunkData(self.chunk_size)
                }
            }
            State::ChunkDataCr => {
                if b != b'\r' {
                    return Err("chunk data not followed by CRLF");
                }
                State::ChunkDataLf
            }
            State::ChunkDataLf => {
                if b != b'\n' {
                    return Err("chunk data not followed by CRLF");
                }
                self.chunk_size = 0;
                State::ChunkSize {
                    digits: 0,
                    ext: false,
                    line: 0,
                }
            }
            State::Trailers {
                line_len,
                cr,
                total,
            } => {
                if total >= MAX_TRAILERS {
                    return Err("trailer section too large");
                }
                let total = total + 1;
                match (cr, b) {
                    (false, b'\r') => State::Trailers {
                        line_len,
                        cr: true,
                        total,
                    },
                    (true, b'\n') if line_len == 0 => State::Head,
                    (true, b'\n') => State::Trailers {
                        line_len: 0,
                        cr: false,
                        total,
                    },
                    (false, b'\t' | 0x20..=0x7e | 0x80..=0xff) => State::Trailers {
                        line_len: line_len + 1,
                        cr: false,
                        total,
                    },
                    _ => return Err("invalid trailer field"),
                }
            }
            other => other,
        };
        Ok(())
    }
}

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
    Ok(match check(req)? {
        State::Body(n) => Framing::Length(n),
        State::ChunkSize { .. } => Framing::Chunked,
        _ => Framing::None,
    })
}

/// Checks a complete head and returns the state its body starts in.
fn check(req: &httparse::Request<'_, '_>) -> Result<State, &'static str> {
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
    let mut length: Option<u64> = None;
    let mut lengths = 0;
    let mut te: Option<bool> = None; // Some(true) while exactly one `chunked` seen
    let mut hosts = 0;
    for h in req.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            lengths += 1;
            let v = h.value.trim_ascii();
            if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
                return Err("invalid Content-Length");
            }
            length = std::str::from_utf8(v).ok().and_then(|s| s.parse().ok());
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
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
        } else if name.eq_ignore_ascii_case("host") {
            hosts += 1;
        }
    }
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
        (Some(true), _) => State::ChunkSize {
            digits: 0,
            ext: false,
            line: 0,
        },
        (_, Some(n)) if n > 0 => State::Body(n),
        _ => State::Head,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(bytes: &[u8]) -> Verdict {
        Guard::new(64 << 10, 100).feed(bytes)
    }

    /// Feeds the input one byte at a time and returns the verdict in input coordinates.
    fn run_bytewise(bytes: &[u8]) -> Verdict {
        let mut g = Guard::new(64 << 10, 100);
        for (i, b) in bytes.iter().enumerate() {
            if let Verdict::Reject {
                keep,
                reason,
                poison,
            } = g.feed(std::slice::from_ref(b))
            {
                return Verdict::Reject {
                    keep: i + keep,
                    reason,
                    poison,
                };
            }
        }
        Verdict::Pass
    }

    fn rejected(bytes: &[u8]) -> &'static str {
        let whole = run(bytes);
        assert_eq!(whole, run_bytewise(bytes), "split reads must agree");
        match whole {
            Verdict::Reject { reason, .. } => reason,
            Verdict::Pass => panic!("accepted: {:?}", String::from_utf8_lossy(bytes)),
        }
    }

    #[test]
    fn good_streams_pass_in_any_split() {
        let streams: [&[u8]; 6] = [
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\na;name=value\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n",
            b"\r\nGET http://a/ HTTP/1.1\r\nHost: a\r\n\r\nOPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.0\r\n\r\n",
        ];
        for s in streams {
            assert_eq!(run(s), Verdict::Pass, "{}", String::from_utf8_lossy(s));
            assert_eq!(run_bytewise(s), Verdict::Pass);
        }
    }

    #[test]
    fn h2_preface_turns_the_guard_off() {
        let mut g = Guard::new(8192, 100);
        assert_eq!(
            g.feed(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00"),
            Verdict::Pass
        );
        assert!(g.is_passthrough());
        assert_eq!(g.feed(b"anything"), Verdict::Pass);
    }

    #[test]
    fn smuggling_heads_are_refused() {
        let cases: [(&[u8], &str); 12] = [
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", "together"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n", "together"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\n", "more than one"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4, 4\r\n\r\n", "invalid Content-Length"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +4\r\n\r\n", "invalid Content-Length"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "single chunked"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "single chunked"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", "single chunked"),
            (b"GET / HTTP/1.1\r\n\r\n", "missing Host"),
            (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "more than one Host"),
            (b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n", "CONNECT"),
            (b"GET * HTTP/1.1\r\nHost: a\r\n\r\n", "asterisk"),
        ];
        for (bytes, want) in cases {
            let reason = rejected(bytes);
            assert!(
                reason.contains(want),
                "{reason:?} for {:?}",
                String::from_utf8_lossy(bytes)
            );
            // The parser never sees the head's last byte.
            if let Verdict::Reject { keep, .. } = run(bytes) {
                assert_eq!(keep, bytes.len() - 1);
            }
        }
    }

    #[test]
    fn a_bad_second_request_keeps_the_first() {
        let first = b"GET /ok HTTP/1.1\r\nHost: a\r\n\r\n";
        let mut s = first.to_vec();
        s.extend_from_slice(
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx",
        );
        match run(&s) {
            Verdict::Reject { keep, .. } => assert!(keep > first.len()),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn bad_chunk_framing_is_refused() {
        let head = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for (body, want) in [
            (&b"zz\r\n"[..], "invalid chunk-size"),
            (b"0x5\r\nhello\r\n0\r\n\r\n", "invalid chunk-size"),
            (b"-1\r\n", "invalid chunk-size"),
            (b"ffffffffffffffffff\r\n", "too large"),
            (b"5\nhello\r\n0\r\n\r\n", "invalid chunk-size"),
            (b"5\r\nhelloX\r\n", "not followed by CRLF"),
            (b"5;a\x00b\r\n", "invalid chunk-size"),
            (b"\r\n", "invalid chunk-size"),
            (b"0\r\nBad\x01Trailer: x\r\n\r\n", "trailer"),
        ] {
            let mut s = head.clone();
            s.extend_from_slice(body);
            let reason = rejected(&s);
            assert!(
                reason.contains(want),
                "{reason:?} for {:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn malformed_and_oversized_heads_are_refused_too() {
        for bytes in [
            &b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHo\x00st: a\r\n\r\n",
        ] {
            assert!(matches!(
                Guard::new(8192, 100).feed(bytes),
                Verdict::Reject { .. }
            ));
        }
        // Larger than the limit in one read: refused, never passed through.
        let mut big = b"GET / HTTP/1.1\r\nHost: a\r\nX-Pad: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', 20_000));
        big.extend_from_slice(b"\r\n\r\nPOST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert!(matches!(
            Guard::new(8192, 100).feed(&big),
            Verdict::Reject {
                keep: 0,
                reason: "request head too large",
                ..
            }
        ));
        // Too many fields: left to hyper's identical limit (431).
        let many = format!("GET / HTTP/1.1\r\nHost: a\r\n{}\r\n", "X: 1\r\n".repeat(10));
        let mut g = Guard::new(8192, 4);
        assert_eq!(g.feed(many.as_bytes()), Verdict::Pass);
        assert!(g.is_passthrough());
    }

    #[test]
    fn body_refusals_poison_with_a_lone_nul() {
        let s = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0;\x01";
        assert!(matches!(
            Guard::new(8192, 100).feed(s),
            Verdict::Reject { poison: b"\0", .. }
        ));
    }
}
