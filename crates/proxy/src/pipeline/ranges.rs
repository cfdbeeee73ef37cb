//! Range requests that miss the cache (see docs/configuration.md, "HEAD and byte ranges").
//!
//! A range miss is *widened*: `Range` and `If-Range` are taken off, so the request joins the
//! coalescer as a whole-object fetch that can be stored, and the client's range is cut from the
//! shared body as it streams ([`cut_range`]). Only a coalescing leader's fetch goes on for the
//! store after the client's range is sent, so a request that does not lead is put back as the
//! client sent it ([`Widened::restore`]). When the whole representation turns out not to be
//! storable, the client's request is sent again with its range ([`Widened::request`]) and the URL
//! is remembered for a while ([`Cache::refuse_widening`]).

use http::header::{
    AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH,
    IF_RANGE, IF_UNMODIFIED_SINCE, RANGE,
};
use http::{HeaderMap, HeaderValue, Request, StatusCode, Uri, Version};
use rampart_cache::conditional::{self, RangeAnswer};

use crate::body::{ProxyBody, RequestBody};
use crate::caching::coalesce::InflightBody;
use crate::caching::{Cache, Lookup};

/// A widened range request: the client's own request, to answer it and to send it again.
#[derive(Debug)]
pub struct Widened {
    /// The client's header fields, `Range` and `If-Range` included.
    pub headers: HeaderMap,
    uri: Uri,
    version: Version,
}

impl Widened {
    /// Widens `req` when it is a range miss that another client's whole-object fetch could
    /// answer: `Range` and `If-Range` are removed from it, and the client's request returned.
    pub fn new(
        req: &mut Request<RequestBody>,
        cache: &Cache,
        miss: &Lookup,
    ) -> Option<Box<Widened>> {
        let h = req.headers();
        let fits = !miss.forced
            && h.contains_key(RANGE)
            // Nothing makes a shared answer unfit for it.
            && ![AUTHORIZATION, IF_MATCH, IF_NONE_MATCH, IF_MODIFIED_SINCE, IF_UNMODIFIED_SINCE]
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
        req.headers_mut().remove(RANGE);
        req.headers_mut().remove(IF_RANGE);
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

/// The answer to a widened range request from a whole 200 streaming in `body`: 206 with the
/// range, 416 when it is outside the representation, or the whole 200 when the range does not
/// apply (If-Range not matching, several ranges, another unit). Anything but a 200 is sent as is.
pub fn cut_range(
    client: Option<&HeaderMap>,
    status: StatusCode,
    headers: &mut HeaderMap,
    body: InflightBody,
    length: u64,
) -> (StatusCode, ProxyBody) {
    let Some(client) = client.filter(|_| status == StatusCode::OK) else {
        return (status, ProxyBody::inflight(body));
    };
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
            let mut h = HeaderMap::new();
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
