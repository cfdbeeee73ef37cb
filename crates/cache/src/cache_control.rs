//! `Cache-Control` (RFC 9111 §5.2) and request `Pragma` (§5.4) parsing.
//!
//! This module owns the translation of untrusted `Cache-Control` / `Pragma` header bytes into
//! the typed [`ResponseDirectives`] and [`RequestDirectives`], plus the small lexical helpers
//! (token characters, optional whitespace, `delta-seconds`) the other modules of this crate share.
//!
//! Invariants:
//! - Parsing never panics and allocates only for the field list of a qualified `private` /
//!   `no-cache` (`withheld`): every header line is scanned as borrowed bytes,
//!   whatever they contain (obs-text, control characters, unterminated quoted strings).
//! - Directives are comma-separated across all header lines; a quoted string never spans lines,
//!   and commas inside a quoted string do not split directives.
//! - Directive names are compared case-insensitively; unknown directives and elements that do not
//!   start with a token are ignored.
//! - A directive name followed by trailing garbage is still recognised, but its argument is then
//!   invalid. That errs on the safe side: `no-store junk` is still `no-store`, while
//!   `max-age=60 junk` is an invalid freshness directive (stale).
//! - Every `delta-seconds` value is clamped to [`DELTA_SECONDS_MAX`] (2^31, RFC 9111 §1.2.2).

use http::header::{HeaderName, CACHE_CONTROL, PRAGMA};
use rampart_head::Fields;

/// The value a too-large `delta-seconds` is treated as (RFC 9111 §1.2.2: 2^31).
pub(crate) const DELTA_SECONDS_MAX: u64 = 2_147_483_648;

/// Response directives relevant to a shared cache.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ResponseDirectives {
    /// `max-age=N` (§5.2.2.1), in seconds; the first valid value when repeated.
    pub max_age: Option<u64>,
    /// `s-maxage=N` (§5.2.2.10), in seconds; the first valid value when repeated.
    pub s_maxage: Option<u64>,
    /// `no-store` (§5.2.2.5).
    pub no_store: bool,
    /// `no-cache` without field names (§5.2.2.4): never reused without revalidation.
    pub no_cache: bool,
    /// `no-cache="field, …"`: the listed fields are withheld from reuse (rampart stores the
    /// response without them), the rest is reusable.
    pub no_cache_fields: bool,
    /// `private` without field names (§5.2.2.7): a shared cache must not store the response.
    pub private: bool,
    /// `private="field, …"`: a shared cache must not store the listed fields but may store the
    /// rest of the response (rampart does, without them).
    pub private_fields: bool,
    /// `public` (§5.2.2.9).
    pub public: bool,
    /// `must-revalidate` (§5.2.2.2).
    pub must_revalidate: bool,
    /// `proxy-revalidate` (§5.2.2.8).
    pub proxy_revalidate: bool,
    /// `no-transform` (§5.2.2.6).
    pub no_transform: bool,
    /// `immutable` (RFC 8246).
    pub immutable: bool,
    /// `must-understand` (§5.2.2.3).
    pub must_understand: bool,
    /// `stale-while-revalidate=N` (RFC 5861 §3), in seconds; the smallest valid value when
    /// repeated, absent when every occurrence had an invalid value.
    pub stale_while_revalidate: Option<u64>,
    /// `stale-if-error=N` (RFC 5861 §4), in seconds; the smallest valid value when repeated,
    /// absent when every occurrence had an invalid value.
    pub stale_if_error: Option<u64>,
    /// A freshness directive (max-age, s-maxage) was present with an invalid value or more than
    /// once with different values: the response must be treated as stale (RFC 9111 §4.2.1 / §5.2).
    pub invalid_freshness: bool,
    /// The directives came from `CDN-Cache-Control` (RFC 9213), which replaces `Cache-Control`
    /// and `Expires` for rampart's own decisions.
    pub targeted: bool,
    /// The fields named by a qualified `private` / `no-cache` (lower-case): withheld from the
    /// stored copy and from anything shared with other clients. `None` when neither is
    /// qualified (the only case that allocates while parsing).
    pub withheld: Option<std::sync::Arc<[HeaderName]>>,
}

impl ResponseDirectives {
    /// Parses every `Cache-Control` line of `headers`, ignoring any targeted field.
    pub fn parse_cache_control(headers: &Fields) -> Self {
        let mut d = Self::default();
        for line in headers.get_all(CACHE_CONTROL) {
            for dir in Directives::new(line.as_bytes()) {
                let name = dir.name;
                if eq(name, "max-age") {
                    set_freshness(&mut d.max_age, &mut d.invalid_freshness, dir.arg.delta());
                } else if eq(name, "s-maxage") {
                    set_freshness(&mut d.s_maxage, &mut d.invalid_freshness, dir.arg.delta());
                } else if eq(name, "no-store") {
                    d.no_store = true;
                } else if eq(name, "no-cache") {
                    if dir.arg.field_names().is_some() {
                        d.no_cache_fields = true;
                    } else {
                        d.no_cache = true;
                    }
                } else if eq(name, "private") {
                    if dir.arg.field_names().is_some() {
                        d.private_fields = true;
                    } else {
                        d.private = true;
                    }
                } else if eq(name, "public") {
                    d.public = true;
                } else if eq(name, "must-revalidate") {
                    d.must_revalidate = true;
                } else if eq(name, "proxy-revalidate") {
                    d.proxy_revalidate = true;
                } else if eq(name, "no-transform") {
                    d.no_transform = true;
                } else if eq(name, "immutable") {
                    d.immutable = true;
                } else if eq(name, "must-understand") {
                    d.must_understand = true;
                } else if eq(name, "stale-while-revalidate") {
                    keep_min(&mut d.stale_while_revalidate, dir.arg.delta());
                } else if eq(name, "stale-if-error") {
                    keep_min(&mut d.stale_if_error, dir.arg.delta());
                }
            }
        }
        if d.private_fields || d.no_cache_fields {
            let names = headers
                .get_all(CACHE_CONTROL)
                .iter()
                .flat_map(|line| Directives::new(line.as_bytes()))
                .filter(|dir| eq(dir.name, "private") || eq(dir.name, "no-cache"))
                .filter_map(|dir| dir.arg.field_names())
                .flatten();
            d.withheld = Some(header_names(names));
        }
        d
    }
}

impl ResponseDirectives {
    /// The fields a qualified `private="…"` or `no-cache="…"` withholds from shared reuse.
    pub fn withheld(&self) -> &[HeaderName] {
        self.withheld.as_deref().unwrap_or_default()
    }
}

/// Field names as `HeaderName`s (lower-cased), without duplicates; names that are not valid
/// field names are dropped (such a field cannot be in a response anyway).
pub(crate) fn header_names<'a>(
    names: impl Iterator<Item = &'a [u8]>,
) -> std::sync::Arc<[HeaderName]> {
    let mut out: Vec<HeaderName> = Vec::new();
    for n in names {
        if let Ok(n) = HeaderName::from_bytes(n) {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out.into()
}

/// The field names of a qualified directive's list (`#field-name`): comma-separated, each
/// without surrounding whitespace; empty elements and elements that are not tokens are skipped.
pub(crate) fn field_names(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    list.split(|&b| b == b',')
        .map(trim_ows)
        .filter(|n| !n.is_empty() && n.iter().all(|&b| is_tchar(b)))
}

/// Request directives (RFC 9111 §5.2.1), plus `Pragma: no-cache` (§5.4) when the request has no
/// Cache-Control header at all.
///
/// A directive repeated with different valid values keeps the most restrictive one (smallest
/// `max-age` and `max-stale`, largest `min-fresh`); a directive whose value is invalid is ignored.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RequestDirectives {
    /// `max-age=N` (§5.2.1.1), in seconds.
    pub max_age: Option<u64>,
    /// `max-stale` without a value = any staleness → `Some(u64::MAX)`; with a value → `Some(n)`.
    pub max_stale: Option<u64>,
    /// `min-fresh=N` (§5.2.1.3), in seconds.
    pub min_fresh: Option<u64>,
    /// `no-cache` (§5.2.1.4), or a bare `Pragma: no-cache` when there is no `Cache-Control`.
    pub no_cache: bool,
    /// `no-store` (§5.2.1.5).
    pub no_store: bool,
    /// `only-if-cached` (§5.2.1.7).
    pub only_if_cached: bool,
}

impl RequestDirectives {
    /// Parses every `Cache-Control` line of `headers`; if there is none at all (not even an empty
    /// one), honours a bare `no-cache` element of `Pragma` (§5.4).
    pub fn parse(headers: &Fields) -> Self {
        let mut d = Self::default();
        let mut has_cache_control = false;
        for line in headers.get_all(CACHE_CONTROL) {
            has_cache_control = true;
            for dir in Directives::new(line.as_bytes()) {
                let name = dir.name;
                if eq(name, "max-age") {
                    keep_min(&mut d.max_age, dir.arg.delta());
                } else if eq(name, "max-stale") {
                    let v = match dir.arg {
                        Arg::None => Some(u64::MAX),
                        arg => arg.delta(),
                    };
                    keep_min(&mut d.max_stale, v);
                } else if eq(name, "min-fresh") {
                    if let Some(v) = dir.arg.delta() {
                        d.min_fresh = Some(d.min_fresh.map_or(v, |old| old.max(v)));
                    }
                } else if eq(name, "no-cache") {
                    d.no_cache = true;
                } else if eq(name, "no-store") {
                    d.no_store = true;
                } else if eq(name, "only-if-cached") {
                    d.only_if_cached = true;
                }
            }
        }
        if !has_cache_control {
            // `pragma-directive = "no-cache" / extension-pragma`: only the bare form is the
            // no-cache pragma; `no-cache=x` is an (unknown) extension-pragma.
            d.no_cache = headers.get_all(PRAGMA).iter().any(|line| {
                Directives::new(line.as_bytes())
                    .any(|dir| eq(dir.name, "no-cache") && matches!(dir.arg, Arg::None))
            });
        }
        d
    }
}

/// Records a `max-age` / `s-maxage` occurrence: invalid values and conflicting repeats make the
/// freshness information invalid; the first valid value is kept.
fn set_freshness(slot: &mut Option<u64>, invalid: &mut bool, value: Option<u64>) {
    match (value, *slot) {
        (None, _) => *invalid = true,
        (Some(v), None) => *slot = Some(v),
        (Some(v), Some(old)) => {
            if v != old {
                *invalid = true;
            }
        }
    }
}

/// Keeps the smallest valid value seen; invalid occurrences (`None`) are ignored.
fn keep_min(slot: &mut Option<u64>, value: Option<u64>) {
    if let Some(v) = value {
        *slot = Some(slot.map_or(v, |old| old.min(v)));
    }
}

/// Case-insensitive comparison of a directive name with a lower-case literal.
fn eq(name: &[u8], literal: &str) -> bool {
    name.eq_ignore_ascii_case(literal.as_bytes())
}

/// `tchar` (RFC 9110 §5.6.2).
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

/// `OWS` characters (RFC 9110 §5.6.3).
pub(crate) fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// `bytes` split after its longest prefix whose bytes all satisfy `pred`.
pub(crate) fn split_while(bytes: &[u8], pred: impl Fn(u8) -> bool) -> (&[u8], &[u8]) {
    let n = bytes.iter().position(|&b| !pred(b)).unwrap_or(bytes.len());
    bytes.split_at(n)
}

/// `bytes` without leading and trailing optional whitespace.
pub(crate) fn trim_ows(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|&b| !is_ows(b))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|&b| !is_ows(b))
        .map_or(start, |i| i + 1);
    bytes.get(start..end).unwrap_or_default()
}

/// Parses `delta-seconds = 1*DIGIT` (RFC 9111 §1.2.2) from an iterator of bytes, clamping values
/// above 2^31 (including those that overflow `u64`) to [`DELTA_SECONDS_MAX`].
///
/// `None` for an empty input or any non-digit (sign, decimal point, whitespace, …).
pub(crate) fn parse_delta_seconds(bytes: impl IntoIterator<Item = u8>) -> Option<u64> {
    let mut value: u64 = 0;
    let mut any = false;
    for b in bytes {
        if !b.is_ascii_digit() {
            return None;
        }
        any = true;
        // Once past the cap the exact value no longer matters; stop growing before u64 overflows.
        if value <= DELTA_SECONDS_MAX {
            value = value * 10 + u64::from(b - b'0');
        }
    }
    any.then_some(value.min(DELTA_SECONDS_MAX))
}

/// A directive's argument, borrowed from the header line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arg<'a> {
    /// No `=`.
    None,
    /// `=token`.
    Token(&'a [u8]),
    /// `="…"`: the bytes between the quotes, backslash escapes still in place.
    Quoted(&'a [u8]),
    /// An `=` without a well-formed value, an unterminated quoted string, or trailing garbage.
    Invalid,
}

impl<'a> Arg<'a> {
    /// The field names of a qualified `private` / `no-cache` (token or quoted form); `None`
    /// when there is no argument, it is invalid, or it names no field (then the directive is
    /// the unqualified one). A quoted list holding escapes is taken as written: field names
    /// never contain a backslash, so such an element is skipped.
    fn field_names(self) -> Option<impl Iterator<Item = &'a [u8]>> {
        let list = match self {
            Arg::Token(t) | Arg::Quoted(t) => t,
            Arg::None | Arg::Invalid => return None,
        };
        let mut names = field_names(list).peekable();
        names.peek()?;
        Some(names)
    }

    /// The argument as `delta-seconds`, accepting both the token and quoted-string forms.
    fn delta(self) -> Option<u64> {
        match self {
            Arg::Token(t) => parse_delta_seconds(t.iter().copied()),
            Arg::Quoted(q) => parse_delta_seconds(Unescape(q)),
            Arg::None | Arg::Invalid => None,
        }
    }
}

/// Iterates the unescaped bytes of a quoted string's content (`quoted-pair` = `\` + byte).
struct Unescape<'a>(&'a [u8]);

impl Iterator for Unescape<'_> {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        let (&first, rest) = self.0.split_first()?;
        if first == b'\\' {
            let (&escaped, rest) = rest.split_first()?;
            self.0 = rest;
            Some(escaped)
        } else {
            self.0 = rest;
            Some(first)
        }
    }
}

/// One `cache-directive = token [ "=" ( token / quoted-string ) ]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Directive<'a> {
    name: &'a [u8],
    arg: Arg<'a>,
}

/// Iterates the directives of one header line (`#cache-directive`, also used for `Pragma`).
///
/// Tolerates empty list elements, whitespace around `=`, and skips elements that do not start
/// with a token up to the next comma outside a quoted string.
struct Directives<'a> {
    rest: &'a [u8],
}

impl<'a> Directives<'a> {
    fn new(line: &'a [u8]) -> Self {
        Self { rest: line }
    }

    fn skip_while(&mut self, pred: impl Fn(u8) -> bool) {
        self.rest = split_while(self.rest, pred).1;
    }

    fn take_token(&mut self) -> &'a [u8] {
        let (token, rest) = split_while(self.rest, is_tchar);
        self.rest = rest;
        token
    }

    /// With `rest` just after an opening quote: the quoted content, or `None` if unterminated
    /// (in which case the rest of the line is consumed).
    fn take_quoted(&mut self) -> Option<&'a [u8]> {
        let mut i = 0;
        while let Some(&b) = self.rest.get(i) {
            match b {
                b'\\' => i += 2,
                b'"' => {
                    let content = self.rest.get(..i).unwrap_or_default();
                    self.rest = self.rest.get(i + 1..).unwrap_or_default();
                    return Some(content);
                }
                _ => i += 1,
            }
        }
        self.rest = &[];
        None
    }

    /// Skips to just after the next comma that is not inside a quoted string (or to the end).
    fn skip_element(&mut self) {
        let mut in_quotes = false;
        let mut i = 0;
        while let Some(&b) = self.rest.get(i) {
            match b {
                b'\\' if in_quotes => i += 1,
                b'"' => in_quotes = !in_quotes,
                b',' if !in_quotes => break,
                _ => {}
            }
            i += 1;
        }
        self.rest = self.rest.get(i + 1..).unwrap_or_default();
    }

    fn parse_arg(&mut self) -> Arg<'a> {
        if self.rest.first() != Some(&b'=') {
            return Arg::None;
        }
        self.rest = self.rest.get(1..).unwrap_or_default();
        self.skip_while(is_ows);
        match self.rest.first() {
            Some(b'"') => {
                self.rest = self.rest.get(1..).unwrap_or_default();
                self.take_quoted().map_or(Arg::Invalid, Arg::Quoted)
            }
            Some(&b) if is_tchar(b) => Arg::Token(self.take_token()),
            _ => Arg::Invalid,
        }
    }
}

impl<'a> Iterator for Directives<'a> {
    type Item = Directive<'a>;

    fn next(&mut self) -> Option<Directive<'a>> {
        loop {
            self.skip_while(|b| is_ows(b) || b == b',');
            let &first = self.rest.first()?;
            if !is_tchar(first) {
                self.skip_element();
                continue;
            }
            let name = self.take_token();
            self.skip_while(is_ows);
            let mut arg = self.parse_arg();
            self.skip_while(is_ows);
            match self.rest.first() {
                None => {}
                Some(b',') => self.rest = self.rest.get(1..).unwrap_or_default(),
                Some(_) => {
                    arg = Arg::Invalid;
                    self.skip_element();
                }
            }
            return Some(Directive { name, arg });
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::HeaderValue;

    /// Pseudo-random header lines biased towards this syntax's special bytes.
    fn arbitrary_lines(seed: u64, count: usize) -> Vec<HeaderValue> {
        crate::testutil::arbitrary_lines(seed, count, b"abcgzipmx-=,;\" \t\\0123456789*.\x80\xff")
    }

    fn map(name: http::HeaderName, lines: &[&[u8]]) -> Fields {
        let mut h = Fields::new();
        for l in lines {
            h.append(name.clone(), HeaderValue::from_bytes(l).unwrap());
        }
        h
    }

    fn resp(lines: &[&str]) -> ResponseDirectives {
        let lines: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
        ResponseDirectives::parse(&map(CACHE_CONTROL, &lines))
    }

    fn req(lines: &[&str]) -> RequestDirectives {
        let lines: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
        RequestDirectives::parse(&map(CACHE_CONTROL, &lines))
    }

    fn directives(line: &str) -> Vec<Directive<'_>> {
        Directives::new(line.as_bytes()).collect()
    }

    // --- lexer ---------------------------------------------------------------------------------

    #[test]
    fn lexer_splits_names_and_args() {
        assert_eq!(
            directives(r#"a, b=1, c="x, y", d = e , f="#),
            vec![
                Directive {
                    name: b"a",
                    arg: Arg::None
                },
                Directive {
                    name: b"b",
                    arg: Arg::Token(b"1")
                },
                Directive {
                    name: b"c",
                    arg: Arg::Quoted(b"x, y")
                },
                Directive {
                    name: b"d",
                    arg: Arg::Token(b"e")
                },
                Directive {
                    name: b"f",
                    arg: Arg::Invalid
                },
            ]
        );
    }

    #[test]
    fn lexer_skips_garbage_and_empty_elements() {
        assert_eq!(
            directives(r#" ,, ;;, "q,uoted", =5, @x, ok ,"#),
            vec![Directive {
                name: b"ok",
                arg: Arg::None
            }]
        );
        assert_eq!(directives(""), vec![]);
        assert_eq!(directives(" \t "), vec![]);
        assert_eq!(directives(",,,"), vec![]);
    }

    #[test]
    fn lexer_trailing_garbage_invalidates_argument_only() {
        assert_eq!(
            directives(r#"a junk, b=1 2, c="x"y, d"#),
            vec![
                Directive {
                    name: b"a",
                    arg: Arg::Invalid
                },
                Directive {
                    name: b"b",
                    arg: Arg::Invalid
                },
                Directive {
                    name: b"c",
                    arg: Arg::Invalid
                },
                Directive {
                    name: b"d",
                    arg: Arg::None
                },
            ]
        );
        // Garbage containing a quoted comma does not split.
        assert_eq!(
            directives(r#"a "x,y", b"#),
            vec![
                Directive {
                    name: b"a",
                    arg: Arg::Invalid
                },
                Directive {
                    name: b"b",
                    arg: Arg::None
                },
            ]
        );
    }

    #[test]
    fn lexer_escapes_and_unterminated_quotes() {
        assert_eq!(
            directives(r#"a="x\"y, z", b"#),
            vec![
                Directive {
                    name: b"a",
                    arg: Arg::Quoted(br#"x\"y, z"#)
                },
                Directive {
                    name: b"b",
                    arg: Arg::None
                },
            ]
        );
        assert_eq!(
            directives(r#"a="never closed, b=2"#),
            vec![Directive {
                name: b"a",
                arg: Arg::Invalid
            }]
        );
        // A trailing lone backslash inside quotes.
        assert_eq!(
            directives(r#"a="x\"#),
            vec![Directive {
                name: b"a",
                arg: Arg::Invalid
            }]
        );
    }

    #[test]
    fn unescape_handles_quoted_pairs() {
        assert_eq!(Unescape(br"a\bc\\d").collect::<Vec<_>>(), b"abc\\d");
        assert_eq!(Unescape(br"x\").collect::<Vec<_>>(), b"x");
    }

    #[test]
    fn delta_seconds() {
        let p = |s: &str| parse_delta_seconds(s.bytes());
        assert_eq!(p("0"), Some(0));
        assert_eq!(p("60"), Some(60));
        assert_eq!(p("007"), Some(7));
        assert_eq!(p("2147483647"), Some(2_147_483_647));
        assert_eq!(p("2147483648"), Some(DELTA_SECONDS_MAX));
        assert_eq!(p("2147483649"), Some(DELTA_SECONDS_MAX));
        assert_eq!(p("18446744073709551615"), Some(DELTA_SECONDS_MAX));
        assert_eq!(
            p("99999999999999999999999999999999"),
            Some(DELTA_SECONDS_MAX)
        );
        assert_eq!(p(""), None);
        assert_eq!(p("-1"), None);
        assert_eq!(p("+1"), None);
        assert_eq!(p("1.5"), None);
        assert_eq!(p(" 1"), None);
        assert_eq!(p("1 "), None);
        assert_eq!(p("1e3"), None);
        assert_eq!(p("0x10"), None);
        assert_eq!(p("١"), None); // non-ASCII digit
    }

    #[test]
    fn trim_ows_edges() {
        assert_eq!(trim_ows(b""), b"");
        assert_eq!(trim_ows(b" \t "), b"");
        assert_eq!(trim_ows(b" a b\t"), b"a b");
        assert_eq!(trim_ows(b"x"), b"x");
    }

    // --- response directives -------------------------------------------------------------------

    #[test]
    fn response_basic() {
        let d = resp(&["public, max-age=60, s-maxage=30, must-revalidate"]);
        assert_eq!(
            d,
            ResponseDirectives {
                public: true,
                max_age: Some(60),
                s_maxage: Some(30),
                must_revalidate: true,
                ..Default::default()
            }
        );
    }

    #[test]
    fn response_all_flags() {
        let d = resp(&[
            "no-store, no-cache, private, public, must-revalidate, proxy-revalidate",
            "no-transform, immutable, must-understand",
            "stale-while-revalidate=5, stale-if-error=10",
        ]);
        assert!(d.no_store && d.no_cache && d.private && d.public);
        assert!(d.must_revalidate && d.proxy_revalidate && d.no_transform);
        assert!(d.immutable && d.must_understand);
        assert_eq!(d.stale_while_revalidate, Some(5));
        assert_eq!(d.stale_if_error, Some(10));
        assert!(!d.invalid_freshness);
        assert_eq!((d.max_age, d.s_maxage), (None, None));
    }

    #[test]
    fn response_no_header_or_empty() {
        assert_eq!(
            ResponseDirectives::parse(&Fields::new()),
            ResponseDirectives::default()
        );
        assert_eq!(resp(&[""]), ResponseDirectives::default());
        assert_eq!(resp(&["  ,  ,"]), ResponseDirectives::default());
    }

    #[test]
    fn response_names_are_case_insensitive() {
        let d = resp(&["MAX-AGE=60, No-Store, PRIVATE, S-MaxAge=5, Stale-While-Revalidate=3"]);
        assert_eq!(d.max_age, Some(60));
        assert_eq!(d.s_maxage, Some(5));
        assert_eq!(d.stale_while_revalidate, Some(3));
        assert!(d.no_store && d.private);
    }

    #[test]
    fn response_whitespace() {
        let d = resp(&["  max-age=60 ,\tno-store\t,public  "]);
        assert_eq!(d.max_age, Some(60));
        assert!(d.no_store && d.public);
        // Whitespace around "=" is tolerated.
        let d = resp(&["max-age = 60"]);
        assert_eq!(d.max_age, Some(60));
        assert!(!d.invalid_freshness);
        // ... but not inside the number.
        let d = resp(&["max-age=6 0"]);
        assert!(d.invalid_freshness);
    }

    #[test]
    fn response_multiple_lines_combine() {
        let d = resp(&["max-age=60", "no-cache", "", "s-maxage=10, public"]);
        assert_eq!(d.max_age, Some(60));
        assert_eq!(d.s_maxage, Some(10));
        assert!(d.no_cache && d.public);
    }

    #[test]
    fn response_quoted_values() {
        let d = resp(&[r#"max-age="60", s-maxage="5""#]);
        assert_eq!((d.max_age, d.s_maxage), (Some(60), Some(5)));
        assert!(!d.invalid_freshness);
        // A quoted-pair escaping a digit is still that digit.
        assert_eq!(resp(&[r#"max-age="6\0""#]).max_age, Some(60));
        let d = resp(&[r#"max-age="""#]);
        assert!(d.invalid_freshness);
        assert_eq!(d.max_age, None);
        assert!(resp(&[r#"max-age=" 60""#]).invalid_freshness);
    }

    #[test]
    fn response_qualified_no_cache_and_private() {
        let h = map(
            CACHE_CONTROL,
            &[br#"no-cache="Set-Cookie, Authorization", max-age=5"#],
        );
        let d = ResponseDirectives::parse(&h);
        assert!(d.no_cache_fields && !d.no_cache);
        assert_eq!(d.max_age, Some(5));
        assert!(!d.invalid_freshness);
        assert_eq!(d.withheld(), ["set-cookie", "authorization"]);
        // Elements that are not field names are skipped; one name is enough to qualify it.
        let h = map(
            CACHE_CONTROL,
            &[br#"private="a,b\"c, max-age=9", max-age=7"#],
        );
        let d = ResponseDirectives::parse(&h);
        assert!(d.private_fields && !d.private);
        assert_eq!(d.max_age, Some(7));
        assert_eq!(d.withheld(), ["a"]);
        // The token form is accepted too.
        let d = resp(&["private=set-cookie, no-cache=x"]);
        assert!(d.private_fields && d.no_cache_fields && !d.private && !d.no_cache);
        // An empty or invalid list is the unqualified directive (the safe reading).
        for v in [
            r#"private="""#,
            r#"private=" , ""#,
            "private=",
            r#"private="=""#,
        ] {
            let d = resp(&[v]);
            assert!(d.private && !d.private_fields, "{v}");
        }
        assert!(resp(&["no-cache="]).no_cache);
        // Unqualified, nothing is withheld.
        let h = map(CACHE_CONTROL, &[b"private, no-cache"]);
        assert!(ResponseDirectives::parse(&h).withheld().is_empty());
    }

    #[test]
    fn response_unterminated_quote_stays_on_its_line() {
        let d = resp(&[r#"no-cache="abc, max-age=5"#, "max-age=9"]);
        assert!(d.no_cache);
        assert_eq!(d.max_age, Some(9));
        assert!(!d.invalid_freshness);
    }

    #[test]
    fn response_invalid_freshness_values() {
        for v in [
            "max-age=abc",
            "max-age=-1",
            "max-age=",
            "max-age",
            "max-age=1.5",
            "max-age=60s",
            "max-age=0x3c",
            "max-age=60 junk",
            "max-age==60",
            r#"max-age="60"x"#,
            r#"max-age="60"#,
            "s-maxage=abc",
            "s-maxage",
            "s-maxage=-5",
        ] {
            let d = resp(&[v]);
            assert!(d.invalid_freshness, "{v}");
            assert_eq!((d.max_age, d.s_maxage), (None, None), "{v}");
        }
    }

    #[test]
    fn response_invalid_plus_valid_max_age() {
        let d = resp(&["max-age=abc, max-age=60"]);
        assert!(d.invalid_freshness);
        assert_eq!(d.max_age, Some(60));
    }

    #[test]
    fn response_duplicates() {
        let d = resp(&["max-age=60, max-age=60", "max-age=060"]);
        assert_eq!(d.max_age, Some(60));
        assert!(!d.invalid_freshness);

        let d = resp(&["max-age=60", "max-age=120"]);
        assert!(d.invalid_freshness);
        assert_eq!(d.max_age, Some(60), "first value kept");

        let d = resp(&["s-maxage=1, s-maxage=2"]);
        assert!(d.invalid_freshness);

        // Both clamp to 2^31: same value.
        let d = resp(&["max-age=3000000000, max-age=4000000000"]);
        assert!(!d.invalid_freshness);

        // Repeated boolean directives are harmless.
        let d = resp(&["no-store, no-store, NO-STORE"]);
        assert!(d.no_store && !d.invalid_freshness);
    }

    #[test]
    fn response_overflow_clamps() {
        let d = resp(&["max-age=99999999999999999999999, s-maxage=2147483648"]);
        assert_eq!(d.max_age, Some(DELTA_SECONDS_MAX));
        assert_eq!(d.s_maxage, Some(DELTA_SECONDS_MAX));
        assert!(!d.invalid_freshness);
        assert_eq!(
            resp(&["stale-if-error=184467440737095516150"]).stale_if_error,
            Some(DELTA_SECONDS_MAX)
        );
    }

    #[test]
    fn response_stale_extensions_invalid_or_repeated() {
        let d = resp(&["stale-while-revalidate=abc, stale-if-error"]);
        assert_eq!(d.stale_while_revalidate, None);
        assert_eq!(d.stale_if_error, None);
        assert!(!d.invalid_freshness);

        let d = resp(&[
            "stale-while-revalidate=30, stale-while-revalidate=10",
            r#"stale-if-error="20", stale-if-error=-1"#,
        ]);
        assert_eq!(d.stale_while_revalidate, Some(10));
        assert_eq!(d.stale_if_error, Some(20));
    }

    #[test]
    fn response_unknown_and_garbage_ignored() {
        let d =
            resp(&[r#"community="UCI", foo=bar, x-y, ;;, "max-age=5", =3, no-store, max-agex=5"#]);
        assert_eq!(
            d,
            ResponseDirectives {
                no_store: true,
                ..Default::default()
            }
        );
        // Prefixes and near-misses are not directives.
        let d = resp(&["no-stor, private-x, publicity, max-age-x=5"]);
        assert_eq!(d, ResponseDirectives::default());
    }

    #[test]
    fn response_restrictive_flags_survive_garbage() {
        let d = resp(&["no-store junk, private ?, no-cache=, public=1"]);
        assert!(d.no_store && d.private && d.no_cache && d.public);
    }

    #[test]
    fn response_non_ascii_bytes_do_not_panic() {
        let h = map(
            CACHE_CONTROL,
            &[
                b"max-age=60, \xff\xfe, no-store",
                b"\x80max-age=5",
                b"no-cache=\"\xe2\x98\x83, x\", must-revalidate",
                b"max-age=\xd9\xa1",
                b"\t\t",
            ],
        );
        let d = ResponseDirectives::parse(&h);
        assert_eq!(d.max_age, Some(60));
        // `no-cache="☃, x"`: the non-token element is skipped, `x` qualifies it.
        assert!(d.no_store && d.no_cache_fields && !d.no_cache && d.must_revalidate);
        assert!(
            d.invalid_freshness,
            "max-age with a non-ASCII digit is invalid"
        );
    }

    #[test]
    fn response_ignores_pragma() {
        let h = map(PRAGMA, &[b"no-cache"]);
        assert_eq!(ResponseDirectives::parse(&h), ResponseDirectives::default());
    }

    // --- request directives --------------------------------------------------------------------

    #[test]
    fn request_basic() {
        let d = req(&["max-age=10, min-fresh=5, no-cache, no-store, only-if-cached"]);
        assert_eq!(
            d,
            RequestDirectives {
                max_age: Some(10),
                max_stale: None,
                min_fresh: Some(5),
                no_cache: true,
                no_store: true,
                only_if_cached: true,
            }
        );
    }

    #[test]
    fn request_max_stale_forms() {
        assert_eq!(req(&["max-stale"]).max_stale, Some(u64::MAX));
        assert_eq!(req(&["MAX-STALE = 30"]).max_stale, Some(30));
        assert_eq!(req(&[r#"max-stale="30""#]).max_stale, Some(30));
        assert_eq!(req(&["max-stale=abc"]).max_stale, None);
        assert_eq!(req(&["max-stale="]).max_stale, None);
        assert_eq!(req(&["max-stale=-1"]).max_stale, None);
        assert_eq!(req(&["max-stale=1e9"]).max_stale, None);
        assert_eq!(
            req(&["max-stale=99999999999999999999"]).max_stale,
            Some(DELTA_SECONDS_MAX)
        );
        // Most restrictive wins.
        assert_eq!(req(&["max-stale", "max-stale=5"]).max_stale, Some(5));
        assert_eq!(req(&["max-stale=9, max-stale=abc"]).max_stale, Some(9));
    }

    #[test]
    fn request_invalid_and_duplicate_values() {
        let d = req(&["max-age=abc, min-fresh=-3"]);
        assert_eq!((d.max_age, d.min_fresh), (None, None));
        let d = req(&["max-age", "min-fresh"]);
        assert_eq!((d.max_age, d.min_fresh), (None, None));
        let d = req(&[
            "max-age=10, max-age=5, max-age=x",
            "min-fresh=1, min-fresh=7",
        ]);
        assert_eq!(d.max_age, Some(5));
        assert_eq!(d.min_fresh, Some(7));
        let d = req(&["max-age=0"]);
        assert_eq!(d.max_age, Some(0));
        assert_eq!(
            req(&["max-age=123456789012345678901234567890"]).max_age,
            Some(DELTA_SECONDS_MAX)
        );
    }

    #[test]
    fn request_garbage_and_odd_case() {
        let d = req(&["  NO-CACHE ,, \"x\", Only-If-Cached junk, ;"]);
        assert!(d.no_cache && d.only_if_cached && !d.no_store);
    }

    #[test]
    fn request_pragma_only_without_cache_control() {
        let d = RequestDirectives::parse(&map(PRAGMA, &[b"no-cache"]));
        assert!(d.no_cache);
        let d = RequestDirectives::parse(&map(PRAGMA, &[b"  No-Cache  "]));
        assert!(d.no_cache);
        let d = RequestDirectives::parse(&map(PRAGMA, &[b"foo=bar", b"x, no-cache"]));
        assert!(d.no_cache);
        for v in [
            &b"no-cache=1"[..],
            b"no-cachex",
            b"foo",
            b"",
            b"\"no-cache\"",
        ] {
            let d = RequestDirectives::parse(&map(PRAGMA, &[v]));
            assert!(!d.no_cache, "{v:?}");
        }

        let mut h = map(PRAGMA, &[b"no-cache"]);
        h.append(CACHE_CONTROL, HeaderValue::from_static("max-age=5"));
        let d = RequestDirectives::parse(&h);
        assert!(!d.no_cache);
        assert_eq!(d.max_age, Some(5));

        // An empty Cache-Control line is still a Cache-Control header.
        let mut h = map(PRAGMA, &[b"no-cache"]);
        h.append(CACHE_CONTROL, HeaderValue::from_static(""));
        assert!(!RequestDirectives::parse(&h).no_cache);
    }

    #[test]
    fn request_ignores_response_only_directives() {
        let d = req(&["s-maxage=5, private, public, must-revalidate"]);
        assert_eq!(d, RequestDirectives::default());
    }

    #[test]
    fn request_non_ascii_does_not_panic() {
        let h = map(
            CACHE_CONTROL,
            &[b"\xff, max-age=\xff, no-store, min-fresh=\"\xc3\xa9\""],
        );
        let d = RequestDirectives::parse(&h);
        assert!(d.no_store);
        assert_eq!((d.max_age, d.min_fresh), (None, None));
    }

    #[test]
    fn arbitrary_bytes_do_not_panic() {
        for (i, line) in arbitrary_lines(1, 20_000).into_iter().enumerate() {
            let mut h = Fields::new();
            h.append(CACHE_CONTROL, line.clone());
            h.append(PRAGMA, line);
            let r = ResponseDirectives::parse(&h);
            let q = RequestDirectives::parse(&h);
            for v in [r.max_age, r.s_maxage, q.max_age, q.min_fresh] {
                assert!(v.is_none_or(|v| v <= DELTA_SECONDS_MAX), "{i}");
            }
        }
    }
}
