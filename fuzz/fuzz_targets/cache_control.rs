//! Cache-Control / Pragma parsing of request and response headers from arbitrary bytes.
#![no_main]

use http::header::{HeaderMap, HeaderValue, CACHE_CONTROL, PRAGMA};
use libfuzzer_sys::fuzz_target;
use rampart_cache::control::{RequestDirectives, ResponseDirectives};

fuzz_target!(|data: &[u8]| {
    let mut headers = HeaderMap::new();
    for part in data.split(|&b| b == b'\n') {
        if let Ok(v) = HeaderValue::from_bytes(part) {
            headers.append(CACHE_CONTROL, v.clone());
            headers.append(PRAGMA, v);
        }
    }
    let _ = ResponseDirectives::parse(&headers);
    let _ = RequestDirectives::parse(&headers);
});
