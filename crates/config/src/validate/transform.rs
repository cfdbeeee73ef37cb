//! Response transforms (docs/arc2.md, "Transforms"): `enable_compression` and `compression_flags`,
//! global and per rule. A rule compresses when both switches are on; its own `compression_flags`,
//! when set, replace the global ones.
//!
//! `compression_types` (NGINX's `gzip_types`; global, a rule's replaces it): media types
//! (`"text/html"`), `"type/*"` wildcards and `"*"`; unset = the built-in list.
//! `compression_min_length` (NGINX's `gzip_min_length`; a size, global and rule): the smallest
//! body compressed. The nearest setting of the threshold wins: the rule's
//! `compression_min_length`, its flags' `min_length=N`, the global `compression_min_length`,
//! the global flags' `min_length=N`, [`DEFAULT_MIN_LENGTH`]. Within one section the key beats
//! the flag (with a warning when both are written).
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

use crate::model::{Compression, MediaRange, Minify, Webp};
use crate::reader::{At, Section, Sink};
use crate::validate::{error, flag, parse_size, toml_string, warn};

/// Bodies shorter than this are not compressed: the framing costs more than it saves.
pub const DEFAULT_MIN_LENGTH: u64 = 256;

/// The global switch and settings.
#[derive(Debug, Default)]
pub(super) struct Global {
    compression: bool,
    settings: Settings,
}

/// The compression keys of one section (the top level or a rule), as written.
#[derive(Debug, Default)]
struct Settings {
    flags: Option<Flags>,
    /// `compression_min_length`.
    min_length: Option<u64>,
    /// `compression_types`.
    types: Option<Vec<MediaRange>>,
}

impl Settings {
    fn read(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Settings {
        let flags = s
            .string(sink, "compression_flags")
            .map(|f| parse_flags(sink, &f));
        let min_length = s.string_or_int(sink, "compression_min_length").and_then(|a| {
            let n = parse_size(&a.value);
            if n.is_none() {
                error(
                    sink,
                    &a,
                    format!("{:?} is not a size", a.value),
                    "write a number of bytes, e.g. `compression_min_length = 1024` or \"1KiB\"",
                );
            }
            if let (Some(_), Some(f)) = (n, flags.as_ref().filter(|f| f.min_length.is_some())) {
                warn(
                    sink,
                    &a,
                    format!(
                        "both `compression_min_length` and `min_length` in {} are set; `compression_min_length` is used",
                        f.at_key
                    ),
                    "remove `min_length=N` from compression_flags",
                );
            }
            n
        });
        let types = s
            .strings(sink, "compression_types")
            .map(|list| media_ranges(sink, &list));
        Settings {
            flags,
            min_length,
            types,
        }
    }

    /// This section's threshold, if it sets one (the key beats the flag).
    fn min_length(&self) -> Option<u64> {
        self.min_length
            .or_else(|| self.flags.as_ref().and_then(|f| f.min_length))
    }
}

pub(super) fn read_global(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Global {
    let compression = s.bool(sink, "enable_compression").is_some_and(|b| b.value);
    let settings = Settings::read(s, sink);
    Global {
        compression,
        settings,
    }
}

/// `compression_types`: each entry a media type (`type/subtype`), `type/*` or `*`, without
/// parameters. Bad entries are errors whose fix is the list with them repaired (parameters
/// dropped, a bare `html` or `json` given its type) or left out; an empty list is a warning
/// (nothing is compressed).
fn media_ranges(sink: &mut Sink<'_>, list: &At<Vec<At<String>>>) -> Vec<MediaRange> {
    let ranges: Vec<Option<MediaRange>> =
        list.value.iter().map(|e| media_range(&e.value)).collect();
    if ranges.iter().any(Option::is_none) {
        let repaired: Vec<String> = list
            .value
            .iter()
            .filter_map(|e| repair(&e.value))
            .map(|t| toml_string(&t))
            .collect();
        let fix = format!("`compression_types = [{}]`", repaired.join(", "));
        for (entry, range) in list.value.iter().zip(&ranges) {
            if range.is_none() {
                error(
                    sink,
                    entry,
                    format!(
                        "{:?} is not a media type (type/subtype, type/* or *, without parameters)",
                        entry.value
                    ),
                    fix.clone(),
                );
            }
        }
    }
    for (entry, range) in list.value.iter().zip(&ranges) {
        if range.as_ref() == Some(&MediaRange::Exact("text/event-stream".into())) {
            warn(
                sink,
                entry,
                "text/event-stream is never compressed (each event must reach the client as it is written)",
                "remove \"text/event-stream\" from compression_types",
            );
        }
    }
    if list.value.is_empty() {
        warn(
            sink,
            list,
            "compression_types is empty, so nothing is compressed",
            "list media types, e.g. `compression_types = [\"text/html\", \"application/json\"]`, or set `enable_compression = false`",
        );
    }
    ranges.into_iter().flatten().collect()
}

/// One `compression_types` entry, if it is well formed.
fn media_range(text: &str) -> Option<MediaRange> {
    let token = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    let text = text.trim().to_ascii_lowercase();
    if text == "*" || text == "*/*" {
        return Some(MediaRange::Any);
    }
    match text.split_once('/')? {
        (t, "*") if token(t) => Some(MediaRange::Type(t.to_owned())),
        (t, sub) if token(t) && token(sub) => Some(MediaRange::Exact(text.clone())),
        _ => None,
    }
}

/// What a bad `compression_types` entry was meant to say, if that can be told: parameters
/// dropped (`text/html; charset=utf-8`), a bare name given its type (`html`, `json`).
fn repair(text: &str) -> Option<String> {
    if media_range(text).is_some() {
        return Some(text.trim().to_owned());
    }
    let bare = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if media_range(&bare).is_some() {
        return Some(bare);
    }
    let typed = match bare.trim_start_matches('.') {
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "txt" | "text" | "plain" => "text/plain",
        "js" | "javascript" => "text/javascript",
        "json" => "application/json",
        "xml" => "application/xml",
        "svg" => "image/svg+xml",
        "wasm" => "application/wasm",
        _ => return None,
    };
    Some(typed.to_owned())
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
    let own = Settings::read(s, sink);
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
    let g = &global.settings;
    let codings = own
        .flags
        .as_ref()
        .or(g.flags.as_ref())
        .map_or_else(Compression::default, |f| f.codings.clone());
    Some(Compression {
        min_length: own
            .min_length()
            .or_else(|| g.min_length())
            .unwrap_or(DEFAULT_MIN_LENGTH),
        types: own.types.or_else(|| g.types.clone()),
        ..codings
    })
}

impl Default for Compression {
    fn default() -> Self {
        Compression {
            br: Some(5),
            zstd: Some(3),
            gzip: Some(6),
            min_length: DEFAULT_MIN_LENGTH,
            types: None,
        }
    }
}

/// `compression_flags` as read: the codings offered (with the default threshold and types),
/// and the threshold, if the flags name one.
#[derive(Debug)]
struct Flags {
    codings: Compression,
    min_length: Option<u64>,
    /// The key's path (for messages).
    at_key: String,
}

fn parse_flags(sink: &mut Sink<'_>, at: &At<String>) -> Flags {
    let mut named = Compression {
        br: None,
        zstd: None,
        gzip: None,
        min_length: DEFAULT_MIN_LENGTH,
        types: None,
    };
    let mut min_length = None;
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
                min_length = Some(n as u64);
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
    Flags {
        codings: if any_named { named } else { defaults },
        min_length,
        at_key: at.key.clone(),
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
