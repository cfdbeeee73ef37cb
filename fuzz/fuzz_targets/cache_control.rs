//! Cache-Control / Pragma / CDN-Cache-Control parsing of request and response headers from
//! arbitrary bytes, and the fields a qualified `private` / `no-cache` withholds.
#![no_main]

use http::header::{HeaderValue, CACHE_CONTROL, PRAGMA};
use libfuzzer_sys::fuzz_target;
use rampart_cache::cache_control::{RequestDirectives, ResponseDirectives};
use rampart_cache::targeted::CDN_CACHE_CONTROL;
use rampart_head::Fields;

fuzz_target!(|data: &[u8]| {
    let mut headers = Fields::new();
    let mut targeted = Fields::new();
    for part in data.split(|&b| b == b'\n') {
        if let Ok(v) = HeaderValue::from_bytes(part) {
            headers.append(CACHE_CONTROL, v.clone());
            headers.append(PRAGMA, v.clone());
            targeted.append(&CDN_CACHE_CONTROL, v);
        }
    }
    for h in [&headers, &targeted] {
        let _ = ResponseDirectives::parse(h).withheld();
    }
    let _ = RequestDirectives::parse(&headers);
});
