//! Complete bodies rampart writes itself, as responses that no cache may keep: plain text and
//! JSON. The pipeline's synth stage and the management API build their answers with these.

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use http::StatusCode;
use rampart_head::Response;

use crate::body::ProxyBody;

/// A plain-text response rampart answers itself (not cacheable).
pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<ProxyBody> {
    let body: Bytes = body.into();
    let len = body.len();
    let mut res = Response::new(ProxyBody::full(body));
    *res.status_mut() = status;
    let h = res.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

/// A JSON answer (the management API and `PURGE`), not cacheable: `value` written by
/// `serde_json`, the one JSON writer of these answers, and a line feed.
pub fn json_of<T: serde::Serialize>(status: StatusCode, value: &T) -> Response<ProxyBody> {
    match serde_json::to_string(value) {
        Ok(mut s) => {
            s.push('\n');
            json(status, s)
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot write a JSON answer");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "500 Internal Server Error\n",
            )
        }
    }
}

/// A JSON answer already written (by the owner of the configuration file), not cacheable.
pub fn json(status: StatusCode, body: String) -> Response<ProxyBody> {
    let len = body.len();
    let mut res = Response::new(ProxyBody::full(Bytes::from(body)));
    *res.status_mut() = status;
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}
