//! Stored copies (docs/arc2.md, "Transforms"): a stored response is minified (HTML, CSS, JS, when the rule says so),
//! compressed once per coding and converted to WebP after it is stored ([`transform_stored`], on
//! a bounded pool of blocking threads): the copies join the object, and hits pick one
//! (`Object::for_client`) without compressing anything. Until the copies exist, hits get the
//! identity body.
//!
//! Which responses are compressed, and the fields of an encoded one, are `coding.rs`'s.

use rampart_head::Fields;
use std::sync::Arc;

use http::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use http::StatusCode;
use rampart_cache::encoding::Coding;
use rampart_cache::store::Object;
use rampart_transform::compress as codec;
use rampart_transform::minify::{self, Languages};
use rampart_transform::webp;
use tokio::sync::Semaphore;

use crate::caching::coding::{
    compressible, compressible_status_and_fields, encoded_headers, vary_on,
    vary_on_accept_encoding, weaken_etag, Compress,
};

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
fn picture(h: &Fields) -> Option<webp::Source> {
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
    h: &Fields,
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

fn minifiable(h: &Fields, langs: Languages) -> Option<Lang> {
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
fn webp_headers(h: &Fields, len: usize) -> Fields {
    let mut w = h.clone();
    w.insert(CONTENT_TYPE, HeaderValue::from_static("image/webp"));
    w.insert(CONTENT_LENGTH, HeaderValue::from(len));
    weaken_etag(&mut w);
    w
}

/// The WebP copy of `stale` for its refreshed fields `headers`.
pub fn reheaded_webp(
    stale: &Object,
    headers: &Fields,
    make: impl Fn(Fields, bytes::Bytes) -> Object,
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
    headers: &Fields,
    make: impl Fn(Fields, bytes::Bytes) -> Object,
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
    headers: Fields,
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
    use crate::caching::coding::*;
    use http::header::*;
    use rampart_config::{Compression, MediaRange};

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
        let mut h = Fields::new();
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
        let mut h = Fields::new();
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
