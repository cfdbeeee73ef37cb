//! Response compression (docs/arc2.md, "Compression"): brotli, zstd or gzip by the client's
//! `Accept-Encoding`, for compressible types, never over an encoded body.
//!
//! - **Responses from the origin** are compressed as they stream (`deliver::compress`: the body is
//!   wrapped in a streaming encoder, so memory stays bounded and the first bytes leave before the
//!   last arrive). The cache stores the identity body it collects underneath.
//! - **Stored responses** are minified (HTML, CSS, JS, when the rule says so) and compressed
//!   once, after they are stored ([`transform_stored`], on a
//!   bounded pool of blocking threads): the encoded copies join the object, and hits pick one
//!   (`Object::for_client`) without compressing anything. Until the copies exist, hits get the
//!   identity body.
//!
//! Every compressible response of a compressing rule says `Vary: Accept-Encoding`, encoded or
//! not; an encoded one has a weak `ETag` (`W/"…"`: the same resource, other bytes) and no
//! `Content-Length` while it streams.

use std::sync::Arc;

use http::header::{
    HeaderValue, ACCEPT_ENCODING, ACCEPT_RANGES, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH,
    CONTENT_RANGE, CONTENT_TYPE, ETAG, VARY,
};
use http::{HeaderMap, StatusCode};
use rampart_cache::encoding::{negotiate, Coding};
use rampart_cache::store::Object;
use rampart_config::{Compression, MediaRange};
use rampart_transform::compress::{self as codec, Levels};
use rampart_transform::minify::{self, Languages};
use rampart_transform::webp;
use tokio::sync::Semaphore;

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
    pub fn negotiate(&self, req: &HeaderMap) -> Option<Coding> {
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
fn no_transform(h: &HeaderMap) -> bool {
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
pub fn compressible(status: StatusCode, h: &HeaderMap, c: &Compress) -> bool {
    compressible_status_and_fields(status, h)
        && h.get(CONTENT_TYPE)
            .is_some_and(|v| c.compresses_type(v.as_bytes()))
        && crate::headers::content_length(h).is_none_or(|n| n >= c.min_length)
}

/// Adds `Accept-Encoding` to `Vary` (unless it is there, or `Vary: *`).
pub fn vary_on_accept_encoding(h: &mut HeaderMap) {
    vary_on(h, "Accept-Encoding");
}

/// Adds `field` to `Vary` (unless it is there, or `Vary: *`).
pub fn vary_on(h: &mut HeaderMap, field: &'static str) {
    // One lookup of `Vary` (this runs for every compressible response of a compressing rule).
    match h.entry(VARY) {
        http::header::Entry::Vacant(v) => {
            v.insert(HeaderValue::from_static(field));
        }
        http::header::Entry::Occupied(mut o) => {
            let listed = o.iter().any(|v| {
                v.to_str().is_ok_and(|s| {
                    s.split(',')
                        .any(|t| t.trim() == "*" || t.trim().eq_ignore_ascii_case(field))
                })
            });
            if !listed {
                o.append(HeaderValue::from_static(field));
            }
        }
    }
}

/// A strong validator names exact bytes; a minified or encoded copy is other bytes of the same
/// resource: `"v1"` becomes `W/"v1"`.
fn weaken_etag(h: &mut HeaderMap) {
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
pub fn encoded_headers(h: &mut HeaderMap, coding: Coding, length: Option<usize>) {
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

/// At most this many stored objects wait for the pool; more are left untransformed.
const MAX_QUEUED: usize = 4096;

/// A place in the transform queue, given back when dropped.
struct Queued;

static QUEUED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Queued {
    fn enter() -> Option<Queued> {
        use std::sync::atomic::Ordering::Relaxed;
        QUEUED
            .fetch_update(Relaxed, Relaxed, |n| (n < MAX_QUEUED).then_some(n + 1))
            .ok()
            .map(|_| Queued)
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        QUEUED.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// At most this many stored objects are compressed at once (the rest wait their turn).
/// The memory WebP conversions in flight may take together (their estimated peak, see
/// `webp::working_bytes`): beside the cache's budget, the bound of what WebP adds to the
/// process's memory. A picture that needs more (about 3 megapixels for a lossless PNG, 5 for a
/// JPEG) is served as it is.
pub const WEBP_MEMORY: u64 = 128 << 20;

/// [`WEBP_MEMORY`] in KiB permits.
fn webp_memory() -> &'static Arc<Semaphore> {
    static POOL: std::sync::OnceLock<Arc<Semaphore>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| Arc::new(Semaphore::new((WEBP_MEMORY >> 10) as usize)))
}

fn encoders() -> &'static Semaphore {
    static POOL: std::sync::OnceLock<Semaphore> = std::sync::OnceLock::new();
    POOL.get_or_init(|| Semaphore::new(std::thread::available_parallelism().map_or(1, |n| n.get())))
}

/// What a rule does to the responses it stores, once, after storing them: minify (HTML, CSS,
/// JS) and compress.
#[derive(Debug, Clone, Default)]
pub struct Transforms {
    pub compress: Option<Arc<Compress>>,
    pub minify: Option<Languages>,
    /// WebP copies of pictures stored for longer than this (`webp_transformation_min_age`).
    pub webp: Option<std::time::Duration>,
    /// The rule keeps its responses off the disk tier (`cache_disk = false`).
    pub off_disk: bool,
}

impl Transforms {
    pub fn any(&self) -> bool {
        self.compress.is_some() || self.minify.is_some() || self.webp.is_some()
    }
}

/// The picture format of a response the rule converts to WebP, by its `Content-Type`.
fn picture(h: &HeaderMap) -> Option<webp::Source> {
    let ct = h.get(CONTENT_TYPE)?.as_bytes();
    let ct = ct.split(|&b| b == b';').next()?.trim_ascii();
    if ct.eq_ignore_ascii_case(b"image/png") {
        Some(webp::Source::Png)
    } else if ct.eq_ignore_ascii_case(b"image/jpeg") || ct.eq_ignore_ascii_case(b"image/jpg") {
        Some(webp::Source::Jpeg)
    } else {
        None
    }
}

/// Whether a response stored for `lifetime` gets a WebP copy under rule transforms `t`: a
/// full, untransformed PNG or JPEG of a converting rule, stored for longer than its minimum
/// age (ARC2: pictures of rules whose TTL exceeds it).
pub fn gets_webp(
    t: &Transforms,
    lifetime: std::time::Duration,
    status: StatusCode,
    h: &HeaderMap,
) -> bool {
    t.webp.is_some_and(|min_age| lifetime > min_age)
        && picture(h).is_some()
        && compressible_status_and_fields(status, h)
}

/// The language of a response the rule minifies, by its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    Html,
    Css,
    Js,
}

fn minifiable(h: &HeaderMap, langs: Languages) -> Option<Lang> {
    let ct = h.get(CONTENT_TYPE)?.as_bytes();
    let ct = ct
        .split(|&b| b == b';')
        .next()?
        .trim_ascii()
        .to_ascii_lowercase();
    let lang = match ct.as_slice() {
        // Not XHTML: there `<script/>` closes itself, where in HTML it does not.
        b"text/html" => Lang::Html,
        b"text/css" => Lang::Css,
        b"application/javascript"
        | b"text/javascript"
        | b"application/x-javascript"
        | b"application/ecmascript"
        | b"text/ecmascript" => Lang::Js,
        _ => return None,
    };
    let on = match lang {
        Lang::Html => langs.html,
        Lang::Css => langs.css,
        Lang::Js => langs.js,
    };
    on.then_some(lang)
}

/// Whether a stored response may be transformed at all: a full 200, not encoded, no
/// `no-transform`.
fn transformable(obj: &Object) -> bool {
    compressible_status_and_fields(obj.status, &obj.headers)
}

fn compressible_status_and_fields(status: StatusCode, h: &HeaderMap) -> bool {
    status == StatusCode::OK
        && h.get(CONTENT_ENCODING)
            .is_none_or(|v| v.as_bytes().eq_ignore_ascii_case(b"identity"))
        && !h.contains_key(CONTENT_RANGE)
        && !no_transform(h)
}

/// Minifies and compresses a stored object off the request path (on a bounded pool of blocking
/// threads) and hands the result to `store` (which replaces the entry if the entry still is
/// `obj`). Nothing happens when neither applies.
///
/// A WebP conversion first takes the memory it can need (`webp::working_bytes`, from the
/// picture's header alone) from [`WEBP_MEMORY`], and keeps it until the conversion is over; a
/// picture that needs more than all of it is served as it is. The memory of conversions in
/// flight is thus bounded, not only their count.
pub fn transform_stored(
    t: Transforms,
    obj: &Arc<Object>,
    store: impl FnOnce(&Arc<Object>, Arc<Object>) + Send + 'static,
) {
    if obj.body.is_empty() || !transformable(obj) {
        return;
    }
    let lang = t.minify.and_then(|langs| minifiable(&obj.headers, langs));
    let compress = t
        .compress
        .filter(|c| compressible(obj.status, &obj.headers, c));
    // ARC2: pictures of rules whose TTL exceeds the minimum age (the stored lifetime here).
    let picture = t
        .webp
        .filter(|min_age| obj.lifetime > *min_age)
        .and_then(|_| picture(&obj.headers));
    if lang.is_none() && compress.is_none() && picture.is_none() {
        return;
    }
    let langs = t.minify.unwrap_or(Languages {
        html: false,
        css: false,
        js: false,
        html_comments: false,
    });
    // A waiting job holds the object weakly: one evicted meanwhile is freed, and skipped.
    let Some(queued) = Queued::enter() else {
        tracing::debug!("transform queue full; the stored object keeps its identity body only");
        return;
    };
    let weak = Arc::downgrade(obj);
    tokio::spawn(async move {
        let _queued = queued;
        // The memory first, then an encoder: a conversion waiting for memory holds no encoder
        // another object's compression could use (nor the object: weak while it waits).
        let Some(obj) = weak.upgrade() else { return };
        let picture = picture.and_then(|source| Some((source, webp_memory_for(&obj, source)?)));
        drop(obj);
        // Waits for the memory while other conversions hold it (the queue is bounded).
        let picture = match picture {
            Some((source, bytes)) => {
                let kib = (bytes.div_ceil(1024) as u32).max(1);
                match webp_memory().clone().acquire_many_owned(kib).await {
                    Ok(held) => Some((source, held)),
                    Err(_) => None,
                }
            }
            None => None,
        };
        let Ok(_permit) = encoders().acquire().await else {
            return;
        };
        let Some(obj) = weak.upgrade() else { return };
        let made = tokio::task::spawn_blocking(move || {
            let minified = lang.and_then(|lang| minified(&obj, lang, langs));
            let body = minified.clone().unwrap_or_else(|| obj.body.clone());
            let copies = compress.map_or_else(Vec::new, |c| compressed(&body, &c));
            // `_held` goes back to the budget when the conversion is over.
            let webp = picture.and_then(|(source, _held)| webp_copy(&obj, source));
            (obj, minified, copies, webp)
        })
        .await;
        let Ok((obj, minified, copies, webp)) = made else {
            return;
        };
        if minified.is_none() && copies.is_empty() && webp.is_none() {
            return;
        }
        let new = with_copies(&obj, minified, copies, webp);
        store(&obj, new);
    });
}

/// The memory converting `obj` to WebP takes; `None` (logged) when it cannot be converted
/// or would take more than conversions may use.
fn webp_memory_for(obj: &Object, source: webp::Source) -> Option<u64> {
    let bytes = match webp::working_bytes(&obj.body, source) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, bytes = obj.body.len(), "picture not converted to WebP; the original is served");
            return None;
        }
    };
    if bytes > WEBP_MEMORY {
        tracing::warn!(
            working_bytes = bytes,
            limit = WEBP_MEMORY,
            "picture not converted to WebP: converting it would take more memory than conversions may use; the original is served"
        );
        return None;
    }
    Some(bytes)
}

/// `obj`'s body minified, when that makes it smaller.
fn minified(obj: &Object, lang: Lang, langs: Languages) -> Option<bytes::Bytes> {
    let out = match lang {
        Lang::Html => minify::html(&obj.body, langs),
        Lang::Css => minify::css(&obj.body),
        Lang::Js => minify::js(&obj.body),
    };
    (out.len() < obj.body.len()).then(|| bytes::Bytes::from(out))
}

/// `body` in each coding the rule offers that makes it smaller (already compressed data
/// behind a text type stays identity only).
fn compressed(body: &[u8], c: &Compress) -> Vec<(Coding, Vec<u8>)> {
    c.codings
        .iter()
        .filter_map(|&coding| {
            let out = codec::compress(coding, c.levels, body).ok()?;
            (out.len() < body.len()).then_some((coding, out))
        })
        .collect()
}

/// `obj` converted to WebP, when that makes it smaller.
fn webp_copy(obj: &Object, source: webp::Source) -> Option<Vec<u8>> {
    match webp::to_webp(&obj.body, source) {
        Ok(w) => (w.len() < obj.body.len()).then_some(w),
        Err(e) => {
            tracing::warn!(error = %e, bytes = obj.body.len(), "picture not converted to WebP; the original is served");
            None
        }
    }
}

/// `obj` with its minified body (if any), `Vary: Accept-Encoding` and its encoded copies.
fn with_copies(
    obj: &Object,
    minified: Option<bytes::Bytes>,
    copies: Vec<(Coding, Vec<u8>)>,
    webp: Option<Vec<u8>>,
) -> Arc<Object> {
    let mut headers = obj.headers.clone();
    let body = match minified.clone() {
        Some(m) => {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(m.len()));
            weaken_etag(&mut headers);
            m
        }
        None => obj.body.clone(),
    };
    if !copies.is_empty() {
        vary_on_accept_encoding(&mut headers);
    }
    let webp = webp.map(|w| {
        vary_on(&mut headers, "Accept");
        Arc::new(copy_of(
            obj,
            webp_headers(&headers, w.len()),
            bytes::Bytes::from(w),
            Box::default(),
        ))
    });
    let encoded = copies
        .into_iter()
        .map(|(coding, body)| {
            let mut h = headers.clone();
            encoded_headers(&mut h, coding, Some(body.len()));
            (
                coding,
                Arc::new(copy_of(obj, h, bytes::Bytes::from(body), Box::default())),
            )
        })
        .collect();
    let mut identity = copy_of(obj, headers, body, encoded);
    identity.webp = webp;
    if minified.is_none() {
        // The stored body itself: charged where it was (see `Residency`).
        identity.residency = obj.residency.clone();
    }
    Arc::new(identity)
}

/// The fields of the WebP copy of a picture with fields `h` (which vary on `Accept`).
fn webp_headers(h: &HeaderMap, len: usize) -> HeaderMap {
    let mut w = h.clone();
    w.insert(CONTENT_TYPE, HeaderValue::from_static("image/webp"));
    w.insert(CONTENT_LENGTH, HeaderValue::from(len));
    weaken_etag(&mut w);
    w
}

/// The WebP copy of `stale` for its refreshed fields `headers`.
pub fn reheaded_webp(
    stale: &Object,
    headers: &HeaderMap,
    make: impl Fn(HeaderMap, bytes::Bytes) -> Object,
) -> Option<Arc<Object>> {
    let w = stale.webp.as_ref()?;
    Some(Arc::new(make(
        webp_headers(headers, w.body.len()),
        w.body.clone(),
    )))
}

/// The encoded copies of `stale` for its refreshed identity headers `headers` (a 304 updated
/// the fields; the bodies are the same).
pub fn reheaded_copies(
    stale: &Object,
    headers: &HeaderMap,
    make: impl Fn(HeaderMap, bytes::Bytes) -> Object,
) -> Box<[(Coding, Arc<Object>)]> {
    stale
        .encoded
        .iter()
        .map(|(coding, o)| {
            let mut h = headers.clone();
            encoded_headers(&mut h, *coding, Some(o.body.len()));
            (*coding, Arc::new(make(h, o.body.clone())))
        })
        .collect()
}

/// An object like `obj` with other fields, body and copies (same freshness and timing).
fn copy_of(
    obj: &Object,
    headers: HeaderMap,
    body: bytes::Bytes,
    encoded: Box<[(Coding, Arc<Object>)]>,
) -> Object {
    let f = rampart_cache::store::fields(&headers, &[]);
    Object {
        status: obj.status,
        headers_charge: f.charge,
        wire: f.wire,
        headers: f.headers,
        body,
        request_time: obj.request_time,
        response_time: obj.response_time,
        initial_age: obj.initial_age,
        lifetime: obj.lifetime,
        directives: obj.directives.clone(),
        vary: obj.vary.clone(),
        invalidated: Default::default(),
        refreshing: std::sync::atomic::AtomicBool::new(
            obj.refreshing.load(std::sync::atomic::Ordering::Relaxed),
        ),
        encoded,
        webp: None,
        residency: None,
        disk: Default::default(),
        extent: None,
        tags: obj.tags.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types() {
        for t in [
            "text/html; charset=utf-8",
            "TEXT/CSS",
            "application/javascript",
            "application/ld+json",
            "image/svg+xml",
        ] {
            assert!(compressible_type(t.as_bytes()), "{t}");
        }
        for t in [
            "image/png",
            "video/mp4",
            "application/zip",
            "text/event-stream",
            "font/woff2",
        ] {
            assert!(!compressible_type(t.as_bytes()), "{t}");
        }
    }

    #[test]
    fn compression_types_replace_the_built_in_list() {
        let types = |t: Vec<MediaRange>| {
            Compress::new(&Compression {
                types: Some(t),
                ..Compression::default()
            })
        };
        let c = types(vec![
            MediaRange::Type("text".into()),
            MediaRange::Exact("image/png".into()),
        ]);
        assert!(c.compresses_type(b"Text/HTML; charset=utf-8"));
        assert!(!c.compresses_type(b"application/json"), "not listed");
        assert!(c.compresses_type(b"image/png"), "listed exactly");
        assert!(!c.compresses_type(b"text/event-stream"));
        let any = types(vec![MediaRange::Any]);
        assert!(any.compresses_type(b"application/octet-stream"));
        assert!(any.compresses_type(b"image/svg+xml"));
        for t in [
            "image/jpeg",
            "video/mp4",
            "font/woff2",
            "application/zip",
            "nonsense",
        ] {
            assert!(!any.compresses_type(t.as_bytes()), "{t}");
        }
        assert!(!types(vec![MediaRange::Type("image".into())]).compresses_type(b"image/webp"));
    }

    #[test]
    fn what_is_compressed() {
        let c = &Compress::new(&Compression::default());
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("text/html"));
        assert!(compressible(StatusCode::OK, &h, c));
        assert!(!compressible(StatusCode::PARTIAL_CONTENT, &h, c));
        h.insert(CONTENT_LENGTH, HeaderValue::from_static("100"));
        assert!(!compressible(StatusCode::OK, &h, c), "too short");
        h.insert(CONTENT_LENGTH, HeaderValue::from_static("1000"));
        h.insert(
            CACHE_CONTROL,
            HeaderValue::from_static("max-age=60, No-Transform"),
        );
        assert!(!compressible(StatusCode::OK, &h, c));
        h.remove(CACHE_CONTROL);
        h.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        assert!(!compressible(StatusCode::OK, &h, c), "never re-encoded");
    }

    #[test]
    fn streaming_levels_are_capped_and_stored_ones_are_not() {
        let c = Compress::new(&Compression {
            br: Some(11),
            zstd: Some(19),
            gzip: Some(9),
            min_length: 0,
            types: None,
        });
        assert_eq!((c.levels.br, c.levels.zstd, c.levels.gzip), (11, 19, 9));
        let s = c.stream_levels();
        assert_eq!((s.br, s.zstd, s.gzip), (STREAM_MAX_BR, STREAM_MAX_ZSTD, 9));
    }

    #[test]
    fn encoded_fields() {
        let mut h = HeaderMap::new();
        h.insert(ETAG, HeaderValue::from_static("\"v1\""));
        h.insert(VARY, HeaderValue::from_static("Cookie"));
        h.insert(CONTENT_LENGTH, HeaderValue::from_static("1000"));
        encoded_headers(&mut h, Coding::Br, Some(300));
        assert_eq!(h[ETAG], "W/\"v1\"");
        assert_eq!(h[CONTENT_ENCODING], "br");
        assert_eq!(h[CONTENT_LENGTH], "300");
        let vary: Vec<_> = h.get_all(VARY).iter().collect();
        assert_eq!(vary, ["Cookie", "Accept-Encoding"]);
        // Idempotent.
        encoded_headers(&mut h, Coding::Br, None);
        assert_eq!(h[ETAG], "W/\"v1\"");
        assert_eq!(h.get_all(VARY).iter().count(), 2);
        assert!(h.get(CONTENT_LENGTH).is_none());
    }
}
