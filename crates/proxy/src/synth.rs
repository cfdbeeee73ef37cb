//! synth: every response rampart generates itself, and the one map from error to status.
//!
//! "What happens on a 502?" is answered here: [`ProxyError::status`] is the only place an error
//! becomes a status code, and [`ProxyError::side`] records whose fault it was (downstream client,
//! upstream origin, or rampart itself) for logs and metrics. Bodies are short static text.

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};

use crate::body::{BodyFault, ProxyBody};

/// Where a failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Downstream,
    Upstream,
    Internal,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Downstream => "downstream",
            Side::Upstream => "upstream",
            Side::Internal => "internal",
        }
    }
}

/// Everything that can end a request with a synthetic response.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("no rule for host {0:?}")]
    NoRoute(String),
    #[error("request has no Host header")]
    MissingHost,
    #[error("malformed request: {0}")]
    BadRequest(&'static str),
    #[error("request head over the size or field-count limit")]
    HeadTooLarge,
    #[error("HTTP version other than 1.0 or 1.1")]
    VersionNotSupported,
    #[error("blocked by path rule")]
    BlockedByPathRule,
    #[error("could not connect to origin: {0}")]
    UpstreamConnect(String),
    #[error("origin connect timed out after {0:?}")]
    UpstreamConnectTimeout(Duration),
    #[error("origin did not answer within proxy_timeout")]
    UpstreamTimeout,
    #[error("origin connection failed: {0}")]
    UpstreamProtocol(String),
    #[error("{0}")]
    UpstreamTls(String),
    #[error("only-if-cached and nothing usable is stored")]
    NotCached,
    #[error("blocked: {0}")]
    Blocked(&'static str),
    #[error("rate limited")]
    RateLimited { retry_after: Duration, limit: u32 },
    #[error("request body: {0:?}")]
    ClientBody(BodyFault),
    #[error("too busy to screen the request body")]
    Busy,
}

impl ProxyError {
    /// The one error → status map.
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::NoRoute(_) => StatusCode::NOT_FOUND,
            ProxyError::MissingHost | ProxyError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ProxyError::HeadTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ProxyError::VersionNotSupported => StatusCode::HTTP_VERSION_NOT_SUPPORTED,
            ProxyError::BlockedByPathRule | ProxyError::Blocked(_) => StatusCode::FORBIDDEN,
            ProxyError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ProxyError::ClientBody(BodyFault::TooLarge) => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::ClientBody(BodyFault::Timeout) => StatusCode::REQUEST_TIMEOUT,
            ProxyError::ClientBody(BodyFault::Broken) => StatusCode::BAD_REQUEST,
            ProxyError::Busy => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::UpstreamConnect(_)
            | ProxyError::UpstreamProtocol(_)
            | ProxyError::UpstreamTls(_) => StatusCode::BAD_GATEWAY,
            // RFC 9111 §5.2.1.7: only-if-cached with nothing stored → 504.
            ProxyError::UpstreamConnectTimeout(_)
            | ProxyError::UpstreamTimeout
            | ProxyError::NotCached => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    pub fn side(&self) -> Side {
        match self {
            ProxyError::NoRoute(_)
            | ProxyError::MissingHost
            | ProxyError::BadRequest(_)
            | ProxyError::HeadTooLarge
            | ProxyError::VersionNotSupported
            | ProxyError::BlockedByPathRule
            | ProxyError::Blocked(_)
            | ProxyError::RateLimited { .. }
            | ProxyError::ClientBody(_)
            | ProxyError::NotCached => Side::Downstream,
            ProxyError::UpstreamConnect(_)
            | ProxyError::UpstreamConnectTimeout(_)
            | ProxyError::UpstreamTimeout
            | ProxyError::UpstreamProtocol(_)
            | ProxyError::UpstreamTls(_) => Side::Upstream,
            ProxyError::Busy => Side::Internal,
        }
    }

    /// Whether another upstream may be tried (nothing was sent to this one).
    pub fn may_fail_over(&self) -> bool {
        matches!(
            self,
            ProxyError::UpstreamConnect(_)
                | ProxyError::UpstreamConnectTimeout(_)
                | ProxyError::UpstreamTls(_)
        )
    }

    /// The response the client gets.
    pub fn to_response(&self) -> Response<ProxyBody> {
        match self {
            ProxyError::NotCached => synth_with(
                self.status(),
                "504 Gateway Timeout: not in the cache (only-if-cached)\n",
            ),
            ProxyError::RateLimited { retry_after, limit } => {
                let mut res = synth(self.status());
                // Whole seconds, rounded up, at least 1 (RFC 9110 §10.2.3).
                let secs = retry_after.as_nanos().div_ceil(1_000_000_000).max(1) as u64;
                let h = res.headers_mut();
                h.insert(RETRY_AFTER, HeaderValue::from(secs));
                // draft-ietf-httpapi-ratelimit-headers: the burst is the limit of the window.
                h.insert("ratelimit-limit", HeaderValue::from(*limit));
                h.insert("ratelimit-remaining", HeaderValue::from_static("0"));
                h.insert("ratelimit-reset", HeaderValue::from(secs));
                res
            }
            _ => synth(self.status()),
        }
    }
}

/// Short plain-text body for a status rampart generates.
fn body_for(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "400 Bad Request\n",
        StatusCode::FORBIDDEN => "403 Forbidden: blocked by policy\n",
        StatusCode::REQUEST_TIMEOUT => "408 Request Timeout: the request body stopped arriving\n",
        StatusCode::PAYLOAD_TOO_LARGE => {
            "413 Content Too Large: the request body exceeds the limit\n"
        }
        StatusCode::TOO_MANY_REQUESTS => "429 Too Many Requests: slow down\n",
        StatusCode::NOT_FOUND => "404 Not Found: no site is configured for this host\n",
        StatusCode::BAD_GATEWAY => "502 Bad Gateway: the origin could not be reached\n",
        StatusCode::SERVICE_UNAVAILABLE => "503 Service Unavailable\n",
        StatusCode::GATEWAY_TIMEOUT => "504 Gateway Timeout: the origin did not answer in time\n",
        _ => "error\n",
    }
}

/// A complete synthetic response: status, short body, no caching by anyone.
pub fn synth(status: StatusCode) -> Response<ProxyBody> {
    synth_with(status, body_for(status))
}

fn synth_with(status: StatusCode, body: &'static str) -> Response<ProxyBody> {
    text(status, Bytes::from_static(body.as_bytes()))
}

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

/// A redirect to `location` (`redirect_to_https`).
pub fn redirect(status: StatusCode, location: &str) -> Response<ProxyBody> {
    let mut res = text(status, format!("{} {location}\n", status.as_u16()));
    if let Ok(v) = HeaderValue::from_str(location) {
        res.headers_mut().insert(http::header::LOCATION, v);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_map() {
        assert_eq!(ProxyError::NoRoute("x".into()).status(), 404);
        assert_eq!(ProxyError::UpstreamConnect("refused".into()).status(), 502);
        assert_eq!(ProxyError::UpstreamTimeout.status(), 504);
        assert_eq!(ProxyError::UpstreamTimeout.side(), Side::Upstream);
        assert_eq!(ProxyError::BlockedByPathRule.status(), 403);
        assert_eq!(ProxyError::ClientBody(BodyFault::TooLarge).status(), 413);
        assert_eq!(ProxyError::ClientBody(BodyFault::Timeout).status(), 408);
        let res = ProxyError::RateLimited {
            retry_after: Duration::from_millis(1500),
            limit: 200,
        }
        .to_response();
        assert_eq!(res.status(), 429);
        assert_eq!(res.headers()["retry-after"], "2");
        assert_eq!(res.headers()["ratelimit-limit"], "200");
    }
}
