//! Response compression (docs/arc2.md, "Compression"): brotli, zstd or gzip by the client's
//! `Accept-Encoding`, for compressible types, never over an encoded body. This file decides which
//! responses are compressed and how their fields change; a response from the origin is
//! compressed as it streams in the respond stage (`pipeline/respond.rs`: a streaming encoder, so
//! memory stays bounded and the first bytes leave before the last arrive), and stored responses
//! get their encoded copies in `transform.rs`.
//!
//! Every compressible response of a compressing rule says `Vary: Accept-Encoding`, encoded or
//! not; an encoded one has a weak `ETag` (`W/"…"`: the same resource, other bytes) and no
//! `Content-Length` while it streams.

use http::header::{
    HeaderValue, ACCEPT_ENCODING, ACCEPT_RANGES, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH,
    CONTENT_RANGE, CONTENT_TYPE, ETAG, VARY,
};
use http::StatusCode;
use rampart_cache::encoding::{negotiate, Coding};
use rampart_config::{Compression, MediaRange};
use rampart_head::Fields;
use rampart_transform::compress::Levels;

/// The highest Brotli level used while a response streams through a worker.
pub const STREAM_MAX_BR: u32 = 6;
/// The highest zstd level used while a response streams through a worker.
pub const STREAM_MAX_ZSTD: i32 = 9;

/// A rule's compression settings, ready for the request path.
#[derive(Debug, Clone)]
pub struct Compress {
    /// The codings offered, in rampart's order of preference.
    pub codings: Vec<Coding>,
    pub levels: Levels,
    pub min_length: u64,
    /// `compression_types`; `None` = [`compressible_type`]'s built-in list (no extra work per
    /// response when the key is absent).
    pub types: Option<Box<[MediaRange]>>,
}

impl Compress {
    pub fn new(c: &Compression) -> Self {
        let d = Levels::default();
        let levels = Levels {
            br: c.br.unwrap_or(d.br),
            zstd: c.zstd.unwrap_or(d.zstd),
            gzip: c.gzip.unwrap_or(d.gzip),
        };
        let codings = [
            (Coding::Br, c.br.is_some()),
            (Coding::Zstd, c.zstd.is_some()),
            (Coding::Gzip, c.gzip.is_some()),
        ]
        .into_iter()
        .filter_map(|(c, on)| on.then_some(c))
        .collect();
        Compress {
            codings,
            levels,
            min_length: c.min_length,
            types: c.types.as_ref().map(|t| t.clone().into_boxed_slice()),
        }
    }

    /// Whether a response of this `Content-Type` is compressed under this rule.
    pub fn compresses_type(&self, content_type: &[u8]) -> bool {
        match &self.types {
            None => compressible_type(content_type),
            Some(types) => listed_type(content_type, types),
        }
    }

    /// The levels for compressing as a response streams: the configured ones, at most
    /// [`STREAM_MAX_BR`] and [`STREAM_MAX_ZSTD`] (a higher level would hold a worker for
    /// milliseconds per chunk; stored copies use the configured levels, off the workers).
    pub fn stream_levels(&self) -> Levels {
        Levels {
            br: self.levels.br.min(STREAM_MAX_BR),
            zstd: self.levels.zstd.min(STREAM_MAX_ZSTD),
            gzip: self.levels.gzip,
        }
    }

    /// The coding to use for a request with these headers (`None` = identity).
    pub fn negotiate(&self, req: &Fields) -> Option<Coding> {
        negotiate(req.get_all(ACCEPT_ENCODING).iter(), &self.codings)
    }
}

/// Media types worth compressing: text, and the structured formats served as `application/`.
/// Images (but SVG), video, audio, archives and fonts in compressed formats are not.
pub fn compressible_type(content_type: &[u8]) -> bool {
    let ct = content_type
        .split(|&b| b == b';')
        .next()
        .unwrap_or(b"")
        .trim_ascii();
    // Case-insensitive without a copy: this runs for every response of a compressing rule.
    let is = |t: &[u8]| ct.eq_ignore_ascii_case(t);
    let ends = |t: &[u8]| ct.len() >= t.len() && ct[ct.len() - t.len()..].eq_ignore_ascii_case(t);
    if is(b"text/event-stream") {
        // Server-sent events: every event must reach the client as it is written.
        return false;
    }
    (ct.len() > 5 && ct[..5].eq_ignore_ascii_case(b"text/"))
        || ends(b"+json")
        || ends(b"+xml")
        || [
            &b"application/javascript"[..],
            b"application/x-javascript",
            b"application/ecmascript",
            b"application/json",
            b"application/xml",
            b"application/wasm",
            b"application/x-font-ttf",
            b"application/vnd.ms-fontobject",
            b"font/ttf",
            b"font/otf",
            b"image/svg+xml",
            b"image/x-icon",
            b"image/vnd.microsoft.icon",
            b"image/bmp",
        ]
        .into_iter()
        .any(is)
}

/// Whether `content_type` is in a `compression_types` list: an exact entry as written; a
/// wildcard (`text/*`, `*`) but for content compressed already. Server-sent events never.
fn listed_type(content_type: &[u8], types: &[MediaRange]) -> bool {
    let ct = content_type
        .split(|&b| b == b';')
        .next()
        .unwrap_or(b"")
        .trim_ascii();
    if ct.eq_ignore_ascii_case(b"text/event-stream") {
        return false;
    }
    let Some(slash) = ct.iter().position(|&b| b == b'/') else {
        return false;
    };
    let main = &ct[..slash];
    types.iter().any(|t| match t {
        MediaRange::Exact(e) => ct.eq_ignore_ascii_case(e.as_bytes()),
        MediaRange::Type(m) => main.eq_ignore_ascii_case(m.as_bytes()) && !compressed_already(ct),
        MediaRange::Any => !compressed_already(ct),
    })
}

/// Content that is compressed in its own format: pictures (but SVG, icons, BMP), video, audio,
/// WOFF fonts, archives. Wildcards in `compression_types` leave it alone.
fn compressed_already(ct: &[u8]) -> bool {
    let starts = |p: &[u8]| ct.len() >= p.len() && ct[..p.len()].eq_ignore_ascii_case(p);
    if starts(b"image/") {
        return !compressible_type(ct);
    }
    starts(b"video/")
        || starts(b"audio/")
        || starts(b"font/woff")
        || [
            &b"application/font-woff"[..],
            b"application/zip",
            b"application/gzip",
            b"application/x-gzip",
            b"application/x-bzip2",
            b"application/x-xz",
            b"application/zstd",
            b"application/x-7z-compressed",
            b"application/vnd.rar",
            b"application/x-rar-compressed",
            b"application/pdf",
        ]
        .into_iter()
        .any(|t| ct.eq_ignore_ascii_case(t))
}

/// `Cache-Control: no-transform` (any case), without a copy.
fn no_transform(h: &Fields) -> bool {
    const NT: &[u8] = b"no-transform";
    h.get_all(CACHE_CONTROL).iter().any(|v| {
        v.as_bytes()
            .windows(NT.len())
            .any(|w| w.eq_ignore_ascii_case(NT))
    })
}

/// Whether this response may be compressed: a 200 of a compressible type, not encoded already,
/// not a range, no `no-transform` (RFC 9110 §7.7), and not shorter than `min_length` when its
/// length is known; its type is one `c` compresses.
pub fn compressible(status: StatusCode, h: &Fields, c: &Compress) -> bool {
    compressible_status_and_fields(status, h)
        && h.get(CONTENT_TYPE)
            .is_some_and(|v| c.compresses_type(v.as_bytes()))
        && crate::headers::content_length(h).is_none_or(|n| n >= c.min_length)
}

/// Adds `Accept-Encoding` to `Vary` (unless it is there, or `Vary: *`).
pub fn vary_on_accept_encoding(h: &mut Fields) {
    vary_on(h, "Accept-Encoding");
}

/// Adds `field` to `Vary` (unless it is there, or `Vary: *`).
pub fn vary_on(h: &mut Fields, field: &'static str) {
    let listed = h.get_all(VARY).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|t| t.trim() == "*" || t.trim().eq_ignore_ascii_case(field))
        })
    });
    if !listed {
        // The two names rampart varies on, as constants (`from_static` checks each byte when
        // it runs outside one).
        let value = match field {
            "Accept-Encoding" => const { HeaderValue::from_static("Accept-Encoding") },
            "Accept" => const { HeaderValue::from_static("Accept") },
            other => HeaderValue::from_static(other),
        };
        h.push(VARY, value);
    }
}

/// A strong validator names exact bytes; a minified or encoded copy is other bytes of the same
/// resource: `"v1"` becomes `W/"v1"`.
pub fn weaken_etag(h: &mut Fields) {
    if let Some(etag) = h.get(ETAG) {
        if !etag.as_bytes().starts_with(b"W/") {
            let mut weak = b"W/".to_vec();
            weak.extend_from_slice(etag.as_bytes());
            if let Ok(v) = HeaderValue::from_bytes(&weak) {
                h.insert(ETAG, v);
            }
        }
    }
}

/// The header fields of the `coding` copy of a response with fields `h`.
pub fn encoded_headers(h: &mut Fields, coding: Coding, length: Option<usize>) {
    h.insert(CONTENT_ENCODING, coding.header_value());
    match length {
        Some(n) => {
            h.insert(CONTENT_LENGTH, HeaderValue::from(n));
        }
        None => {
            h.remove(CONTENT_LENGTH);
        }
    }
    vary_on_accept_encoding(h);
    weaken_etag(h);
    if length.is_none() {
        // Ranges of a stream being compressed cannot be served.
        h.remove(ACCEPT_RANGES);
    }
}

/// A full 200, not encoded, without `no-transform`: what compression may touch.
pub fn compressible_status_and_fields(status: StatusCode, h: &Fields) -> bool {
    status == StatusCode::OK
        && h.get(CONTENT_ENCODING)
            .is_none_or(|v| v.as_bytes().eq_ignore_ascii_case(b"identity"))
        && !h.contains_key(CONTENT_RANGE)
        && !no_transform(h)
}
