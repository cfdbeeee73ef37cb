//! A request's header block → the request head (RFC 9113 §8.2–§8.3): the pseudo-header
//! fields checked (each once, all before the regular ones, the ones the method needs), field
//! names lowercase, values without NUL, CR or LF, `cookie` fields joined for an HTTP/1.1
//! origin (§8.2.3), `content-length` read once for the DATA it must match.
//!
//! Connection-specific fields (and `TE` other than `trailers`) reset the stream here, as
//! RFC 9113 §8.2.2 asks. Whatever else makes a head malformed and is common to HTTP/2 and
//! HTTP/3 (a `:path` not starting with `/`, a second `host`, whitespace around a value) is
//! `transport/malformed.rs`, which the connection runs on every head it makes here: those are
//! answered 400 (§8.1.1 allows a response before the stream closes).

use rampart_head::{Fields, Request};
use std::ops::Range;

use bytes::BytesMut;
use http::header::{
    HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, COOKIE, TE, TRANSFER_ENCODING, UPGRADE,
};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Method, Uri, Version};

use crate::http2::hpack::{Decoder, HpackError};

/// Why a header block did not make a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// The block does not decode: a connection error (COMPRESSION_ERROR).
    Compression(HpackError),
    /// Decoded, but over the header list limit: answered 431.
    TooLarge,
    /// A malformed request (RFC 9113 §8.1.1): the stream is reset with PROTOCOL_ERROR.
    Malformed(&'static str),
}

/// A request head as the pipeline gets it, and what the connection checks its body against.
#[derive(Debug)]
pub struct Head {
    pub req: Request<()>,
    /// The declared `content-length`.
    pub length: Option<u64>,
    /// An extended CONNECT (RFC 8441) for `websocket`.
    pub websocket: bool,
}

/// Where each pseudo-header field's value lies in the head's buffer.
#[derive(Default)]
struct Pseudo {
    method: Option<Range<usize>>,
    scheme: Option<Range<usize>>,
    authority: Option<Range<usize>>,
    path: Option<Range<usize>>,
    protocol: Option<Range<usize>>,
}

/// What the fields of a block add up to while it is decoded: every value copied once into
/// one buffer, whose slices the head's values become.
struct Collect {
    buf: BytesMut,
    pseudo: Pseudo,
    fields: Vec<(HeaderName, Range<usize>)>,
    cookies: Vec<Range<usize>>,
    regular: bool,
    error: Option<&'static str>,
}

impl Collect {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        if self.error.is_some() {
            return;
        }
        if let Err(why) = self.add(name, value) {
            self.error = Some(why);
        }
    }

    fn keep(&mut self, value: &[u8]) -> Range<usize> {
        let start = self.buf.len();
        self.buf.extend_from_slice(value);
        start..self.buf.len()
    }

    fn add(&mut self, name: &[u8], value: &[u8]) -> Result<(), &'static str> {
        if value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
            return Err("NUL, CR or LF in a field value");
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.regular {
                return Err("a pseudo-header field after a regular field");
            }
            let taken = match pseudo {
                b"method" => self.pseudo.method.is_some(),
                b"scheme" => self.pseudo.scheme.is_some(),
                b"authority" => self.pseudo.authority.is_some(),
                b"path" => self.pseudo.path.is_some(),
                b"protocol" => self.pseudo.protocol.is_some(),
                _ => return Err("an unknown or response pseudo-header field"),
            };
            if taken {
                return Err("a pseudo-header field twice");
            }
            let r = Some(self.keep(value));
            match pseudo {
                b"method" => self.pseudo.method = r,
                b"scheme" => self.pseudo.scheme = r,
                b"authority" => self.pseudo.authority = r,
                b"path" => self.pseudo.path = r,
                _ => self.pseudo.protocol = r,
            }
            return Ok(());
        }
        self.regular = true;
        if name.iter().any(u8::is_ascii_uppercase) {
            return Err("an uppercase field name");
        }
        let name = HeaderName::from_bytes(name).map_err(|_| "an invalid field name")?;
        // RFC 9113 §8.2.2: connection-specific fields, and TE other than `trailers`.
        if name == CONNECTION
            || name == TRANSFER_ENCODING
            || name == UPGRADE
            || name.as_str() == "keep-alive"
            || name.as_str() == "proxy-connection"
        {
            return Err("a connection-specific field");
        }
        if name == TE && !value.eq_ignore_ascii_case(b"trailers") {
            return Err("TE other than trailers");
        }
        let r = self.keep(value);
        if name == COOKIE {
            self.cookies.push(r);
        } else {
            self.fields.push((name, r));
        }
        Ok(())
    }
}

/// Decodes `block` (a whole header block) into a request head. `max_list`: the decoded size
/// the block may have (SETTINGS_MAX_HEADER_LIST_SIZE); `connect_protocol`: extended CONNECT
/// was announced.
pub fn request(
    dec: &mut Decoder,
    block: &[u8],
    max_list: usize,
    connect_protocol: bool,
) -> Result<Head, HeadError> {
    let mut c = Collect {
        // Decoded fields are larger than their block (Huffman, indexed entries).
        buf: BytesMut::with_capacity((block.len() * 4).max(512)),
        pseudo: Pseudo::default(),
        fields: Vec::new(),
        cookies: Vec::new(),
        regular: false,
        error: None,
    };
    match dec.decode(block, max_list, |n, v| c.field(n, v)) {
        Ok(()) => {}
        Err(HpackError::ListTooLarge) => return Err(HeadError::TooLarge),
        Err(e) => return Err(HeadError::Compression(e)),
    }
    if let Some(why) = c.error {
        return Err(HeadError::Malformed(why));
    }
    // RFC 9113 §8.2.3: cookie crumbs joined with "; " for an HTTP/1.1 origin.
    let mut cookie = None;
    if !c.cookies.is_empty() {
        let start = c.buf.len();
        for (i, r) in c.cookies.iter().enumerate() {
            if i > 0 {
                c.buf.extend_from_slice(b"; ");
            }
            c.buf.extend_from_within(r.clone());
        }
        cookie = Some(start..c.buf.len());
    }
    let buf = c.buf.freeze();
    let malformed = HeadError::Malformed;
    let value = |r: &Range<usize>| {
        HeaderValue::from_maybe_shared(buf.slice(r.clone()))
            .map_err(|_| malformed("an invalid field value"))
    };
    let mut headers = Fields::new();
    for (name, r) in c.fields {
        headers.append(name, value(&r)?);
    }
    if let Some(r) = &cookie {
        headers.insert(COOKIE, value(r)?);
    }
    let p = c.pseudo;
    let method = p.method.clone().ok_or(malformed("no :method"))?;
    let method = Method::from_bytes(&buf[method]).map_err(|_| malformed("an invalid :method"))?;
    let websocket = match &p.protocol {
        Some(_) if !connect_protocol || method != Method::CONNECT => {
            return Err(malformed(":protocol outside an extended CONNECT"))
        }
        Some(proto) => buf[proto.clone()].eq_ignore_ascii_case(b"websocket"),
        None => false,
    };
    let uri = target(&buf, p, &method)?;
    let length = content_length(&headers)?;
    let mut req = Request::new(());
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.version_mut() = Version::HTTP_2;
    *req.headers_mut() = headers;
    if websocket {
        req.extensions_mut()
            .insert(hyper::ext::Protocol::from_static("websocket"));
    }
    Ok(Head {
        req,
        length,
        websocket,
    })
}

/// The request target from the pseudo-header fields: `:authority` alone for CONNECT (RFC 9113
/// §8.5), else `:scheme`, `:path` and `:authority` when there is one.
fn target(buf: &bytes::Bytes, p: Pseudo, method: &Method) -> Result<Uri, HeadError> {
    let malformed = HeadError::Malformed;
    let authority = |r: Range<usize>| {
        Authority::from_maybe_shared(buf.slice(r)).map_err(|_| malformed("an invalid :authority"))
    };
    let mut parts = http::uri::Parts::default();
    if *method == Method::CONNECT && p.protocol.is_none() {
        // RFC 9113 §8.5: only `:authority`.
        if p.scheme.is_some() || p.path.is_some() {
            return Err(malformed("CONNECT with :scheme or :path"));
        }
        let a = p.authority.ok_or(malformed("CONNECT without :authority"))?;
        parts.authority = Some(authority(a)?);
    } else {
        let scheme = p.scheme.ok_or(malformed("no :scheme"))?;
        let path = p.path.ok_or(malformed("no :path"))?;
        if path.is_empty() {
            return Err(malformed("an empty :path"));
        }
        parts.scheme = Some(match &buf[scheme] {
            b"https" => Scheme::HTTPS,
            b"http" => Scheme::HTTP,
            other => Scheme::try_from(other).map_err(|_| malformed("an invalid :scheme"))?,
        });
        parts.path_and_query = Some(
            PathAndQuery::from_maybe_shared(buf.slice(path))
                .map_err(|_| malformed("an invalid :path"))?,
        );
        // RFC 9113 §8.3.1 lets a server refuse a `host` that differs from `:authority` (a
        // SHOULD); rampart routes by `:authority` (recv), as an absolute-form target wins
        // over `Host` in HTTP/1.1, and the origin gets the routed host.
        if let Some(a) = p.authority {
            parts.authority = Some(authority(a)?);
        }
    }
    if parts.authority.is_none() && parts.scheme.is_some() {
        // A URI with a scheme needs an authority: the target alone, as HTTP/1.1 has it.
        parts.scheme = None;
    }
    Uri::from_parts(parts).map_err(|_| malformed("an invalid request target"))
}

/// The `content-length` fields: all the same number, or malformed.
fn content_length(h: &Fields) -> Result<Option<u64>, HeadError> {
    let mut length = None;
    for v in h.get_all(CONTENT_LENGTH) {
        let n = crate::headers::parse_content_length(v)
            .ok_or(HeadError::Malformed("an invalid content-length"))?;
        if length.is_some_and(|l| l != n) {
            return Err(HeadError::Malformed("content-length fields differ"));
        }
        length = Some(n);
    }
    Ok(length)
}
