//! The response transforms and the path normaliser on arbitrary bytes (origin content and
//! request paths are untrusted): the minifiers never panic and never grow a body by more than
//! a line break per input byte; a normalised path is normal (normalising it again changes
//! nothing) and its rule form is computed; `Accept-Encoding` negotiation and the WebP
//! decoders (under their limits) never panic.
#![no_main]

use http::header::HeaderValue;
use libfuzzer_sys::fuzz_target;
use rampart_cache::encoding::{negotiate, Coding};
use rampart_proxy::policy::path;
use rampart_transform::minify::{self, Languages};
use rampart_transform::webp;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    match selector % 5 {
        0 => {
            let out = minify::css(rest);
            assert!(out.len() <= rest.len() + 1);
        }
        1 => {
            let _ = minify::js(rest);
        }
        2 => {
            let langs = Languages {
                html: true,
                css: selector & 0x10 != 0,
                js: selector & 0x20 != 0,
                html_comments: selector & 0x40 != 0,
            };
            let _ = minify::html(rest, langs);
        }
        3 => {
            if let Ok(p) = std::str::from_utf8(rest) {
                if let Ok(Some(normal)) = path::normalize(p) {
                    assert_eq!(path::normalize(&normal), Ok(None), "{p:?} → {normal:?}");
                    assert!(normal.starts_with('/'));
                    let _ = path::match_form(&normal);
                }
            }
            if let Ok(v) = HeaderValue::from_bytes(rest) {
                let _ = negotiate(std::iter::once(&v), &Coding::ALL);
            }
        }
        _ => {
            let source = if selector & 0x10 != 0 {
                webp::Source::Png
            } else {
                webp::Source::Jpeg
            };
            let _ = webp::to_webp(rest, source);
        }
    }
});
