//! Response transforms (ARC2-COMPAT §8): `enable_compression` and `compression_flags`, global
//! and per rule. A rule compresses when both switches are on; its own `compression_flags`, when
//! set, replace the global ones.
//!
//! `compression_flags` (ARC2 leaves the syntax open; rampart's, read leniently): tokens
//! separated by commas, semicolons or spaces, case-insensitive.
//! - `br` (or `brotli`), `zstd`, `gzip`: the codings to offer. Naming any limits the offer to
//!   those named; naming none offers all three.
//! - `br=N` (0–11), `zstd=N` (1–19), `gzip=N` (1–9): a level (and the coding is offered).
//! - `min_length=N` (or `min-length`): bodies shorter than N bytes are sent as they are
//!   (default [`DEFAULT_MIN_LENGTH`]).
//! - Anything else is ignored with a warning.
//!
//! `enable_minification` (per rule) and `minification_flags`: a list of `html`, `css`, `js`
//! (same separators); unset means all three, unknown tokens are ignored with a warning.
//! `comments` also removes HTML comments (kept otherwise: server-rendered frameworks hydrate
//! from comment markers).

use crate::model::{Compression, Minify, Webp};
use crate::reader::{At, Section, Sink};
use crate::validate::{flag, warn};

/// Bodies shorter than this are not compressed: the framing costs more than it saves.
pub const DEFAULT_MIN_LENGTH: u64 = 256;

/// The global switch and flags.
#[derive(Debug, Default)]
pub(super) struct Global {
    compression: bool,
    flags: Option<Compression>,
}

pub(super) fn read_global(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Global {
    let compression = s.bool(sink, "enable_compression").is_some_and(|b| b.value);
    let flags = s
        .string(sink, "compression_flags")
        .map(|f| parse_flags(sink, &f));
    Global { compression, flags }
}

/// A rule's transforms: compression, minification, WebP (each `None` when off).
pub(super) fn read_rule(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    global: &Global,
) -> (Option<Compression>, Option<Minify>, Option<Webp>) {
    let compression_on = if flag(s, sink, "enable_compression", true) {
        s.bool(sink, "enable_compression")
    } else {
        None
    };
    let compression = read_compression(s, sink, compression_on, global);
    let minify_on = flag(s, sink, "enable_minification", true);
    let minify = read_minify(s, sink, minify_on);
    let webp_on = flag(s, sink, "enable_webp_transformation", true);
    (compression, minify, read_webp(s, sink, webp_on))
}

/// The rule's compression: `None` unless the global and the rule switch are both on.
/// `enabled` is the rule's `enable_compression` (already read).
fn read_compression(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    enabled: Option<At<bool>>,
    global: &Global,
) -> Option<Compression> {
    let flags = s
        .string(sink, "compression_flags")
        .map(|f| parse_flags(sink, &f));
    let enabled = enabled?;
    if !enabled.value {
        return None;
    }
    if !global.compression {
        warn(
            sink,
            &enabled,
            "compression is on for this rule but off globally, so nothing is compressed",
            "set `enable_compression = true` at the top of the file too (ARC2 needs both)",
        );
        return None;
    }
    Some(flags.or_else(|| global.flags.clone()).unwrap_or_default())
}

impl Default for Compression {
    fn default() -> Self {
        Compression {
            br: Some(5),
            zstd: Some(3),
            gzip: Some(6),
            min_length: DEFAULT_MIN_LENGTH,
        }
    }
}

fn parse_flags(sink: &mut Sink<'_>, at: &At<String>) -> Compression {
    let mut named = Compression {
        br: None,
        zstd: None,
        gzip: None,
        min_length: DEFAULT_MIN_LENGTH,
    };
    let defaults = Compression::default();
    let mut any_named = false;
    let mut ignored = Vec::new();
    for token in at
        .value
        .split(|c: char| c == ',' || c == ';' || c.is_whitespace())
        .filter(|t| !t.is_empty())
    {
        let (name, value) = match token.split_once('=') {
            Some((n, v)) => (n.trim().to_ascii_lowercase(), Some(v.trim())),
            None => (token.to_ascii_lowercase(), None),
        };
        let number = value.map(|v| v.parse::<i64>().ok());
        match (name.as_str(), number) {
            ("br" | "brotli", None) => named.br = defaults.br,
            ("br" | "brotli", Some(Some(n))) if (0..=11).contains(&n) => named.br = Some(n as u32),
            ("zstd", None) => named.zstd = defaults.zstd,
            ("zstd", Some(Some(n))) if (1..=19).contains(&n) => named.zstd = Some(n as i32),
            ("gzip", None) => named.gzip = defaults.gzip,
            ("gzip", Some(Some(n))) if (1..=9).contains(&n) => named.gzip = Some(n as u32),
            ("min_length" | "min-length", Some(Some(n))) if n >= 0 => {
                named.min_length = n as u64;
                continue;
            }
            _ => {
                ignored.push(token.to_owned());
                continue;
            }
        }
        any_named = true;
    }
    if !ignored.is_empty() {
        warn(
            sink,
            at,
            format!("compression_flags: ignored {}", ignored.join(", ")),
            "use br, zstd, gzip (optionally with a level: br=5, zstd=3, gzip=6) and min_length=N",
        );
    }
    if any_named {
        named
    } else {
        Compression {
            min_length: named.min_length,
            ..defaults
        }
    }
}

/// The rule's minification: `None` unless `enable_minification = true`.
fn read_minify(s: &mut Section<'_>, sink: &mut Sink<'_>, enabled: bool) -> Option<Minify> {
    let flags = s.string(sink, "minification_flags");
    if !enabled {
        return None;
    }
    let Some(flags) = flags else {
        return Some(Minify {
            html: true,
            css: true,
            js: true,
            html_comments: false,
        });
    };
    let mut m = Minify {
        html: false,
        css: false,
        js: false,
        html_comments: false,
    };
    let mut ignored = Vec::new();
    for token in flags
        .value
        .split(|c: char| c == ',' || c == ';' || c.is_whitespace())
        .filter(|t| !t.is_empty())
    {
        match token.to_ascii_lowercase().as_str() {
            "html" | "htm" => m.html = true,
            "css" => m.css = true,
            "js" | "javascript" => m.js = true,
            "comments" | "html-comments" | "html_comments" => m.html_comments = true,
            _ => ignored.push(token.to_owned()),
        }
    }
    if !ignored.is_empty() {
        warn(
            sink,
            &flags,
            format!("minification_flags: ignored {}", ignored.join(", ")),
            "list any of html, css, js, comments (e.g. \"html,css\"); unset minifies all three",
        );
    }
    if !(m.html || m.css || m.js) {
        warn(
            sink,
            &flags,
            "minification_flags names no language, so nothing is minified",
            "list any of html, css, js, or remove the key to minify all three",
        );
        return None;
    }
    Some(m)
}

/// ARC2's documented threshold: pictures of rules with a TTL over 6 hours are converted.
pub const DEFAULT_WEBP_MIN_AGE: u64 = 21_600;

/// The rule's WebP transformation: `None` unless `enable_webp_transformation = true`.
fn read_webp(s: &mut Section<'_>, sink: &mut Sink<'_>, enabled: bool) -> Option<Webp> {
    let min_age = s.int(sink, "webp_transformation_min_age", 0, i64::MAX);
    enabled.then(|| Webp {
        min_age: std::time::Duration::from_secs(
            min_age.map_or(DEFAULT_WEBP_MIN_AGE, |m| m.value as u64),
        ),
    })
}
