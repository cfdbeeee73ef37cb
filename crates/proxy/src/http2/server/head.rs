//! A request's header block → the request head (RFC 9113 §8.2–§8.3): the pseudo-header
//! fields checked (each once, all before the regular ones, the ones the method needs), field
//! names lowercase, values without NUL, CR or LF, `cookie` fields joined for an HTTP/1.1
//! origin (§8.2.3), `content-length` read once for the DATA it must match.
//!
//! Whatever else makes a head malformed and is common to HTTP/2 and HTTP/3 (a `:path` not
//! starting with `/`, connection-specific fields, a second `host`) is `transport/malformed.rs`,
//! which the connection runs on every head it makes here.

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue, CONTENT_LENGTH, COOKIE};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Method, Request, Uri, Version};

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

#[derive(Default)]
struct Pseudo {
    method: Option<Bytes>,
    scheme: Option<Bytes>,
    authority: Option<Bytes>,
    path: Option<Bytes>,
    protocol: Option<Bytes>,
}

/// What the fields of a block add up to while it is decoded.
struct Collect {
    pseudo: Pseudo,
    headers: HeaderMap,
    cookies: Option<BytesMut>,
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

    fn add(&mut self, name: &[u8], value: &[u8]) -> Result<(), &'static str> {
        if value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
            return Err("NUL, CR or LF in a field value");
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.regular {
                return Err("a pseudo-header field after a regular field");
            }
            let slot = match pseudo {
                b"method" => &mut self.pseudo.method,
                b"scheme" => &mut self.pseudo.scheme,
                b"authority" => &mut self.pseudo.authority,
                b"path" => &mut self.pseudo.path,
                b"protocol" => &mut self.pseudo.protocol,
                _ => return Err("an unknown or response pseudo-header field"),
            };
            if slot.is_some() {
                return Err("a pseudo-header field twice");
            }
            *slot = Some(Bytes::copy_from_slice(value));
            return Ok(());
        }
        self.regular = true;
        if name.iter().any(u8::is_ascii_uppercase) {
            return Err("an uppercase field name");
        }
        let name = HeaderName::from_bytes(name).map_err(|_| "an invalid field name")?;
        if name == COOKIE {
            // RFC 9113 §8.2.3: crumbs joined with "; " for an HTTP/1.1 origin.
            let c = self.cookies.get_or_insert_with(BytesMut::new);
            if !c.is_empty() {
                c.extend_from_slice(b"; ");
            }
            c.extend_from_slice(value);
            return Ok(());
        }
        let value = HeaderValue::from_bytes(value).map_err(|_| "an invalid field value")?;
        self.headers.append(name, value);
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
        pseudo: Pseudo::default(),
        headers: HeaderMap::new(),
        cookies: None,
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
    let Collect {
        pseudo: p,
        mut headers,
        cookies,
        ..
    } = c;
    if let Some(cookies) = cookies {
        let v = HeaderValue::from_maybe_shared(cookies.freeze())
            .map_err(|_| HeadError::Malformed("an invalid cookie"))?;
        headers.insert(COOKIE, v);
    }
    let malformed = HeadError::Malformed;
    let method = p.method.ok_or(malformed("no :method"))?;
    let method = Method::from_bytes(&method).map_err(|_| malformed("an invalid :method"))?;
    let websocket = match &p.protocol {
        Some(_) if !connect_protocol || method != Method::CONNECT => {
            return Err(malformed(":protocol outside an extended CONNECT"))
        }
        Some(proto) => proto.eq_ignore_ascii_case(b"websocket"),
        None => false,
    };
    let mut parts = http::uri::Parts::default();
    if method == Method::CONNECT && p.protocol.is_none() {
        // RFC 9113 §8.5: only `:authority`.
        if p.scheme.is_some() || p.path.is_some() {
            return Err(malformed("CONNECT with :scheme or :path"));
        }
        let a = p.authority.ok_or(malformed("CONNECT without :authority"))?;
        parts.authority =
            Some(Authority::from_maybe_shared(a).map_err(|_| malformed("an invalid :authority"))?);
    } else {
        let scheme = p.scheme.ok_or(malformed("no :scheme"))?;
        let path = p.path.ok_or(malformed("no :path"))?;
        if path.is_empty() {
            return Err(malformed("an empty :path"));
        }
        parts.scheme =
            Some(Scheme::try_from(&scheme[..]).map_err(|_| malformed("an invalid :scheme"))?);
        parts.path_and_query =
            Some(PathAndQuery::from_maybe_shared(path).map_err(|_| malformed("an invalid :path"))?);
        if let Some(a) = p.authority {
            // RFC 9113 §8.3.1 lets a server refuse a `host` that differs from `:authority`
            // (a SHOULD); rampart routes by `:authority` (recv), as an absolute-form target
            // wins over `Host` in HTTP/1.1, and the origin gets the routed host.
            parts.authority = Some(
                Authority::from_maybe_shared(a).map_err(|_| malformed("an invalid :authority"))?,
            );
        }
    }
    if parts.authority.is_none() && parts.scheme.is_some() {
        // A URI with a scheme needs an authority: the target alone, as HTTP/1.1 has it.
        parts.scheme = None;
    }
    let uri = Uri::from_parts(parts).map_err(|_| malformed("an invalid request target"))?;
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

/// The `content-length` fields: all the same number, or malformed.
fn content_length(h: &HeaderMap) -> Result<Option<u64>, HeadError> {
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
