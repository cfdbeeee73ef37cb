//! What makes an HTTP/2 or HTTP/3 request head malformed (RFC 9113 §8.2–§8.3, RFC 9114
//! §4.2–§4.3) beyond what the HTTP/2 server (`http2/server/head.rs`) and the `h3` crate refuse
//! themselves. Such a request is answered 400 by its transport and never reaches the pipeline.
//!
//! - a `:path` that does not start with `/` (`?k1`, or `*` for anything but `OPTIONS`): the
//!   origin would get a target the rules never saw (they see `/`);
//! - more than one `host` field: without `:authority` rampart routes by `Host`, and an origin
//!   could read the other one (HTTP/1.1 refuses the same);
//! - a field value with leading or trailing space or tab (RFC 9113 §8.2.1; HTTP/1.1 drops
//!   such whitespace as it parses, HTTP/2 and HTTP/3 carry it as part of the value);
//! - connection-specific fields (`Connection`, `Keep-Alive`, `Proxy-Connection`,
//!   `Transfer-Encoding`, `Upgrade`; `TE` other than `trailers`: RFC 9113 §8.2.2, RFC 9114
//!   §4.2). rampart's HTTP/2 server resets such streams itself
//!   (`http2/server/head.rs`); HTTP/3 relies on this check.
//!
//! One walk over the fields, no allocation: it runs for every request, hits included.

use http::header::{CONNECTION, HOST, TE, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderName, Method};
use rampart_head::Request;

static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Why an HTTP/2 or HTTP/3 request head is malformed, if it is.
pub fn malformed<B>(req: &Request<B>) -> Option<&'static str> {
    if let Some(target) = req.uri().path_and_query().map(|p| p.as_str()) {
        let asterisk = target == "*" && req.method() == Method::OPTIONS;
        if !target.starts_with('/') && !asterisk {
            return Some(":path does not start with /");
        }
    }
    let mut hosts = 0;
    for (name, value) in req.headers() {
        let v = value.as_bytes();
        if matches!(v.first(), Some(b' ' | b'\t')) || matches!(v.last(), Some(b' ' | b'\t')) {
            return Some("whitespace around a field value");
        }
        if *name == HOST {
            hosts += 1;
            if hosts > 1 {
                return Some("more than one host field");
            }
        } else if *name == CONNECTION
            || *name == TRANSFER_ENCODING
            || *name == UPGRADE
            || *name == KEEP_ALIVE
            || *name == PROXY_CONNECTION
        {
            return Some("a connection-specific field");
        } else if *name == TE && !v.eq_ignore_ascii_case(b"trailers") {
            return Some("TE other than trailers");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(method: &str, target: &str, fields: &[(&'static str, &'static str)]) -> Request<()> {
        let mut b = Request::builder().method(method).uri(target);
        for (n, v) in fields {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap_or_default()
    }

    #[test]
    fn malformed_heads_are_found() {
        for (why, req) in [
            ("query only", head("GET", "http://t?k1", &[])),
            ("asterisk for GET", head("GET", "*", &[])),
            (
                "two hosts",
                head("GET", "/", &[("host", "a"), ("host", "b")]),
            ),
            ("leading space", head("GET", "/", &[("x-a", " v")])),
            ("trailing tab", head("GET", "/", &[("x-a", "v\t")])),
            ("connection", head("GET", "/", &[("connection", "close")])),
            ("keep-alive", head("GET", "/", &[("keep-alive", "5")])),
            ("te", head("GET", "/", &[("te", "gzip")])),
        ] {
            assert!(malformed(&req).is_some(), "{why}");
        }
        for (why, req) in [
            (
                "plain",
                head("GET", "/a?b", &[("host", "t"), ("x-a", "v w")]),
            ),
            ("absolute", head("GET", "http://t/?k1", &[])),
            ("OPTIONS *", head("OPTIONS", "*", &[])),
            ("te trailers", head("POST", "/", &[("te", "trailers")])),
            ("empty value", head("GET", "/", &[("x-a", "")])),
        ] {
            assert_eq!(malformed(&req), None, "{why}");
        }
    }
}
