//! synth: every response rampart generates itself. An error becomes its response here
//! ([`error`], called only by the respond stage, `respond.rs`), with the status from the one map in
//! `error.rs`; plain-text bodies for the pipeline, JSON for the management API and `PURGE`.

use bytes::Bytes;
use http::header::{HeaderValue, RETRY_AFTER};
use http::StatusCode;
use rampart_head::Response;

use crate::body::local::{json_of, text};
use crate::body::ProxyBody;
pub use crate::error::{Chain, ProxyError, Side};
use crate::pipeline::txn::Txn;

impl ProxyError {
    /// The response the client gets.
    pub fn to_response(&self) -> Response<ProxyBody> {
        if self.is_api() {
            #[derive(serde::Serialize)]
            struct Failed {
                error: String,
            }
            let error = self.to_string();
            let mut res = json_of(self.status(), &Failed { error });
            match self {
                ProxyError::ApiKey | ProxyError::ApiWrongKey => {
                    res.headers_mut()
                        .insert("www-authenticate", HeaderValue::from_static("Bearer"));
                }
                ProxyError::ApiMethod(allow) => {
                    res.headers_mut()
                        .insert(http::header::ALLOW, HeaderValue::from_static(allow));
                }
                _ => {}
            }
            return res;
        }
        match self {
            ProxyError::NotCached => synth_with(
                self.status(),
                "504 Gateway Timeout: not in the cache (only-if-cached)\n",
            ),
            ProxyError::RateLimited {
                retry_after, limit, ..
            } => {
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

/// The response that ends a request with `e`, labelled with what the cache did. The pipeline's
/// only error → response point (the respond stage); body refusals and requests refused before
/// routing are logged here, other errors where they were decided.
pub fn error(e: &ProxyError, txn: &Txn) -> Response<ProxyBody> {
    if let ProxyError::ClientBody(_) = e {
        tracing::info!(client = %txn.client, domain = txn.domain(), error = %Chain(e), status = e.status().as_u16(), "request body refused");
    } else if txn.route.is_none() && !e.is_api() {
        tracing::debug!(client = %txn.client, error = %Chain(e), "request refused");
    }
    let mut res = e.to_response();
    if let Some(outcome) = txn.outcome {
        outcome.write(res.headers_mut());
    }
    res
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
    use crate::error::BodyFault;
    use std::time::Duration;

    #[test]
    fn status_map() {
        assert_eq!(ProxyError::NoRoute("x".into()).status(), 404);
        assert_eq!(ProxyError::OriginConnect("refused".into()).status(), 502);
        assert_eq!(ProxyError::OriginTimeout.status(), 504);
        assert_eq!(ProxyError::OriginTimeout.side(), Side::OriginClient);
        assert_eq!(ProxyError::BlockedByPathRule.status(), 403);
        assert_eq!(ProxyError::ClientBody(BodyFault::TooLarge).status(), 413);
        assert_eq!(ProxyError::ClientBody(BodyFault::Timeout).status(), 408);
        let res = ProxyError::RateLimited {
            retry_after: Duration::from_millis(1500),
            limit: 200,
            status: StatusCode::TOO_MANY_REQUESTS,
        }
        .to_response();
        assert_eq!(res.status(), 429);
        assert_eq!(res.headers()["retry-after"], "2");
        assert_eq!(res.headers()["ratelimit-limit"], "200");
        // `rate_limit_status = 503`: the same fields, NGINX's status.
        let res = ProxyError::RateLimited {
            retry_after: Duration::from_millis(1500),
            limit: 200,
            status: StatusCode::SERVICE_UNAVAILABLE,
        }
        .to_response();
        assert_eq!(res.status(), 503);
        assert_eq!(res.headers()["retry-after"], "2");
    }

    #[test]
    fn api_errors_answer_in_json_through_the_same_map() {
        let res = ProxyError::ApiKey.to_response();
        assert_eq!(res.status(), 401);
        assert_eq!(res.headers()["content-type"], "application/json");
        assert_eq!(res.headers()["www-authenticate"], "Bearer");
        assert_eq!(ProxyError::PurgeNotAllowed.status(), 403);
        assert_eq!(ProxyError::ApiNoSuchEndpoint.status(), 404);
        let res = ProxyError::ApiMethod("POST").to_response();
        assert_eq!(res.status(), 405);
        assert_eq!(res.headers()["allow"], "POST");
        assert_eq!(ProxyError::ApiBadRequest("x").side(), Side::Downstream);
    }
}
