//! Range requests and `If-Match` / `If-Unmodified-Since` requests that miss the cache (see
//! docs/configuration.md, "HEAD and byte ranges" and "Validation").
//!
//! Such a miss is *widened*: `Range`, `If-Range`, `If-Match` and `If-Unmodified-Since` are
//! taken off, so the request joins the coalescer as a whole-object fetch that can be stored, and
//! the client's preconditions and range are applied to the shared response as it streams
//! ([`cut_range`]: 412, then 206/416, as a hit would answer). An origin never answers a fill
//! with a 412 meant for one client's precondition. Only a coalescing leader's fetch goes on for
//! the store after the client's answer is sent, so a request that does not lead is put back as
//! the client sent it ([`Widened::restore`]). When the whole representation turns out not to be
//! storable, the client's request is sent again as it was ([`Widened::request`]) and the URL is
//! remembered for a while ([`Cache::refuse_widening`]).

use http::header::{
    AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH,
    IF_RANGE, IF_UNMODIFIED_SINCE, RANGE,
};
use http::{HeaderValue, StatusCode, Uri, Version};
use rampart_cache::conditional::{self, RangeAnswer};
use rampart_head::{Fields, Request};

use crate::body::{ProxyBody, RequestBody};
use crate::caching::coalesce::InflightBody;
use crate::caching::{Cache, Missed};

/// A widened request: the client's own request, to answer it and to send it again.
#[derive(Debug)]
pub struct Widened {
    /// The client's header fields, `Range`, `If-Range` and its preconditions included.
    pub headers: Fields,
    uri: Uri,
    version: Version,
}

impl Widened {
    /// Widens `req` when it is a miss with a range or an `If-Match` / `If-Unmodified-Since`
    /// precondition that another client's whole-object fetch could answer: those fields (and
    /// `If-Range`) are removed from it, and the client's request returned.
    pub fn new(
        req: &mut Request<RequestBody>,
        cache: &Cache,
        miss: &Missed,
    ) -> Option<Box<Widened>> {
        let h = req.headers();
        let fits = !miss.forced
            && WIDENED.iter().any(|n| h.contains_key(n))
            // Nothing makes a shared answer unfit for it (`If-None-Match` and
            // `If-Modified-Since` ask for a 304, which a fill does not bring).
            && ![AUTHORIZATION, IF_NONE_MATCH, IF_MODIFIED_SINCE]
                .iter()
                .any(|n| h.contains_key(n))
            && matches!(req.body(), RequestBody::Empty)
            // Not while an earlier try found the whole representation unstorable.
            && cache.may_widen(&miss.key);
        if !fits {
            return None;
        }
        // Boxed: it travels in every request's `Txn`, and is rarely there.
        let w = Box::new(Widened {
            headers: h.clone(),
            uri: req.uri().clone(),
            version: req.version(),
        });
        for name in [RANGE, IF_RANGE, IF_MATCH, IF_UNMODIFIED_SINCE] {
            req.headers_mut().remove(name);
        }
        Some(w)
    }

    /// Puts the client's header fields back: the request goes on as the client sent it.
    pub fn restore(self, req: &mut Request<RequestBody>) {
        *req.headers_mut() = self.headers;
    }

    /// The client's request again, range included.
    pub fn request(self) -> Request<RequestBody> {
        let mut again = Request::new(RequestBody::Empty);
        *again.uri_mut() = self.uri;
        *again.version_mut() = self.version;
        *again.headers_mut() = self.headers;
        again
    }
}

/// The answer to a widened request whose `If-Match` / `If-Unmodified-Since` fails against
/// the origin's 2xx head (`headers`, replaced with the 412's): 412 with an empty body.
pub fn precondition_failed(
    client: Option<&Fields>,
    status: StatusCode,
    headers: &mut Fields,
) -> Option<(StatusCode, ProxyBody)> {
    let client = client.filter(|_| status.is_success())?;
    if !conditional::precondition_failed(client, headers) {
        return None;
    }
    let mut h = Fields::new();
    h.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
    *headers = h;
    Some((
        StatusCode::PRECONDITION_FAILED,
        ProxyBody::full(bytes::Bytes::new()),
    ))
}

/// The fields that make a miss widened: what a whole-object fill must not carry.
const WIDENED: [http::HeaderName; 3] = [RANGE, IF_MATCH, IF_UNMODIFIED_SINCE];

/// Whether a request with `h` would be widened (a range or `If-Match` /
/// `If-Unmodified-Since`), the URL's refusal aside.
pub fn would_widen(h: &Fields) -> bool {
    WIDENED.iter().any(|n| h.contains_key(n))
}

/// The answer to a widened request from a whole response streaming in `body`: 412 when the
/// client's `If-Match` / `If-Unmodified-Since` fails against a 2xx (RFC 9110 §13.2.2, before
/// the range); for a 200, 206 with the range, 416 when it is outside the representation, or the
/// whole 200 when the range does not apply (If-Range not matching, several ranges, another
/// unit). Anything else is sent as is (§13.2.1: preconditions apply only to a 2xx answer).
pub fn cut_range(
    client: Option<&Fields>,
    status: StatusCode,
    headers: &mut Fields,
    body: InflightBody,
    length: u64,
) -> (StatusCode, ProxyBody) {
    let Some(client) = client.filter(|_| status.is_success()) else {
        return (status, ProxyBody::inflight(body));
    };
    // The fill goes on for the store without this reader (its pump is a task of its own).
    if let Some(failed) = precondition_failed(Some(client), status, headers) {
        return failed;
    }
    if status != StatusCode::OK {
        return (status, ProxyBody::inflight(body));
    }
    let content_range = |s: String| {
        HeaderValue::from_str(&s).unwrap_or_else(|_| HeaderValue::from_static("bytes */0"))
    };
    match conditional::range(client, headers, length) {
        RangeAnswer::Full => (status, ProxyBody::inflight(body)),
        RangeAnswer::Partial { start, end } => {
            headers.insert(
                CONTENT_RANGE,
                content_range(format!("bytes {start}-{end}/{length}")),
            );
            headers.insert(CONTENT_LENGTH, HeaderValue::from(end - start + 1));
            (
                StatusCode::PARTIAL_CONTENT,
                ProxyBody::inflight(body.range(start, end)),
            )
        }
        RangeAnswer::Unsatisfiable => {
            let mut h = Fields::new();
            h.insert(CONTENT_RANGE, content_range(format!("bytes */{length}")));
            h.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
            *headers = h;
            (
                StatusCode::RANGE_NOT_SATISFIABLE,
                ProxyBody::full(bytes::Bytes::new()),
            )
        }
    }
}
