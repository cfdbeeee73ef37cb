//! `CDN-Cache-Control` (RFC 9213): cache directives targeted at CDN caches, which rampart is.
//!
//! A targeted field is a Structured Fields Dictionary (RFC 8941 §3.2), not a `Cache-Control`
//! list: keys are lower-case, `max-age` must be an Integer, and a parse error anywhere makes the
//! whole field be ignored (RFC 9213 §2.1). When the field is present, valid and non-empty, its
//! directives replace those of `Cache-Control` *and* `Expires` for rampart's own decisions
//! (§2.2); otherwise rampart falls back to `Cache-Control`.
//!
//! Invariants:
//! - Parsing never panics, whatever the bytes; a field on several lines is parsed as the lines
//!   joined with commas (RFC 9110 §5.3), so an empty line between two others is a parse error.
//! - Dictionary semantics: a key given twice keeps its last value.
//! - A directive with a value of the wrong type is not trusted: a restrictive directive
//!   (`no-store`, `no-cache`, `private`, `must-revalidate`, `proxy-revalidate`) counts unless its
//!   value is the Boolean false; a permissive one (`public`, `immutable`) only counts when true;
//!   a lifetime (`max-age`, `s-maxage`) that is not a non-negative Integer makes the response
//!   stale.

use rampart_head::Fields;
use std::borrow::Cow;

use http::header::HeaderName;

use crate::cache_control::{split_while, ResponseDirectives, DELTA_SECONDS_MAX};

/// The targeted field rampart implements (its whole target list).
pub static CDN_CACHE_CONTROL: HeaderName = HeaderName::from_static("cdn-cache-control");

/// A member's value, as far as cache directives care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value<'a> {
    Integer(i64),
    /// A Decimal, Token, Byte Sequence or Inner List: never a valid cache directive value here.
    Other,
    /// A String's content, escapes still in place (they are validated).
    String(&'a [u8]),
    Boolean(bool),
}

/// Parses `CDN-Cache-Control` into directives; `None` when the field is absent, empty or
/// invalid (then `Cache-Control` and `Expires` apply).
pub fn parse(headers: &Fields) -> Option<ResponseDirectives> {
    let field = field(headers)?;
    let mut seen = Seen::default();
    let mut any = false;
    for member in Dictionary::new(&field) {
        let (key, value) = member.ok()?;
        any = true;
        seen.record(key, value);
    }
    any.then(|| seen.directives())
}

/// The field's value: its only line, or its lines joined with commas (RFC 9110 §5.3).
fn field(headers: &Fields) -> Option<Cow<'_, [u8]>> {
    let mut lines = headers.get_all(&CDN_CACHE_CONTROL).iter();
    let first = lines.next()?;
    let Some(second) = lines.next() else {
        return Some(Cow::Borrowed(first.as_bytes()));
    };
    let mut all = first.as_bytes().to_vec();
    for line in std::iter::once(second).chain(lines) {
        all.push(b',');
        all.extend_from_slice(line.as_bytes());
    }
    Some(Cow::Owned(all))
}

/// The last value of each directive rampart knows.
#[derive(Default)]
struct Seen<'a> {
    max_age: Option<Value<'a>>,
    s_maxage: Option<Value<'a>>,
    no_store: Option<Value<'a>>,
    no_cache: Option<Value<'a>>,
    private: Option<Value<'a>>,
    public: Option<Value<'a>>,
    must_revalidate: Option<Value<'a>>,
    proxy_revalidate: Option<Value<'a>>,
    no_transform: Option<Value<'a>>,
    immutable: Option<Value<'a>>,
    must_understand: Option<Value<'a>>,
    stale_while_revalidate: Option<Value<'a>>,
    stale_if_error: Option<Value<'a>>,
}

impl<'a> Seen<'a> {
    fn record(&mut self, key: &[u8], value: Value<'a>) {
        let slot = match key {
            b"max-age" => &mut self.max_age,
            b"s-maxage" => &mut self.s_maxage,
            b"no-store" => &mut self.no_store,
            b"no-cache" => &mut self.no_cache,
            b"private" => &mut self.private,
            b"public" => &mut self.public,
            b"must-revalidate" => &mut self.must_revalidate,
            b"proxy-revalidate" => &mut self.proxy_revalidate,
            b"no-transform" => &mut self.no_transform,
            b"immutable" => &mut self.immutable,
            b"must-understand" => &mut self.must_understand,
            b"stale-while-revalidate" => &mut self.stale_while_revalidate,
            b"stale-if-error" => &mut self.stale_if_error,
            _ => return,
        };
        *slot = Some(value);
    }

    fn directives(self) -> ResponseDirectives {
        let restrictive = |v: Option<Value<'_>>| v.is_some_and(|v| v != Value::Boolean(false));
        let permissive = |v: Option<Value<'_>>| v == Some(Value::Boolean(true));
        let seconds = |v: Option<Value<'_>>| match v {
            Some(Value::Integer(n)) if n >= 0 => Some((n as u64).min(DELTA_SECONDS_MAX)),
            _ => None,
        };
        let qualified = |v: Option<Value<'_>>| matches!(v, Some(Value::String(s)) if crate::cache_control::field_names(s).next().is_some());
        let mut d = ResponseDirectives {
            targeted: true,
            ..ResponseDirectives::default()
        };
        for (slot, value) in [
            (&mut d.max_age, self.max_age),
            (&mut d.s_maxage, self.s_maxage),
        ] {
            if value.is_some() {
                *slot = seconds(value);
                d.invalid_freshness |= slot.is_none();
            }
        }
        d.no_store = restrictive(self.no_store);
        d.no_cache_fields = qualified(self.no_cache);
        d.no_cache = restrictive(self.no_cache) && !d.no_cache_fields;
        d.private_fields = qualified(self.private);
        d.private = restrictive(self.private) && !d.private_fields;
        if d.private_fields || d.no_cache_fields {
            let names = [self.private, self.no_cache]
                .into_iter()
                .filter_map(|v| match v {
                    Some(Value::String(s)) => Some(crate::cache_control::field_names(s)),
                    _ => None,
                })
                .flatten();
            d.withheld = Some(crate::cache_control::header_names(names));
        }
        d.public = permissive(self.public);
        d.must_revalidate = restrictive(self.must_revalidate);
        d.proxy_revalidate = restrictive(self.proxy_revalidate);
        d.no_transform = restrictive(self.no_transform);
        d.immutable = permissive(self.immutable);
        d.must_understand = permissive(self.must_understand);
        d.stale_while_revalidate = seconds(self.stale_while_revalidate);
        d.stale_if_error = seconds(self.stale_if_error);
        d
    }
}

/// The members of a Dictionary (RFC 8941 §4.2.2), each `Err` on the first parse error.
struct Dictionary<'a> {
    rest: &'a [u8],
    started: bool,
    failed: bool,
}

#[derive(Debug)]
struct ParseError;

impl<'a> Dictionary<'a> {
    fn new(field: &'a [u8]) -> Self {
        let mut d = Dictionary {
            rest: field,
            started: false,
            failed: false,
        };
        d.eat(|b| b == b' ');
        // Trailing spaces are discarded too (§4.2).
        while d.rest.last() == Some(&b' ') {
            d.rest = d.rest.get(..d.rest.len() - 1).unwrap_or_default();
        }
        d
    }

    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    fn bump(&mut self) {
        self.rest = self.rest.get(1..).unwrap_or_default();
    }

    fn eat(&mut self, pred: impl Fn(u8) -> bool) {
        self.rest = split_while(self.rest, pred).1;
    }

    fn take(&mut self, pred: impl Fn(u8) -> bool) -> &'a [u8] {
        let (taken, rest) = split_while(self.rest, pred);
        self.rest = rest;
        taken
    }

    /// `key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`
    fn key(&mut self) -> Result<&'a [u8], ParseError> {
        match self.peek() {
            Some(b) if b.is_ascii_lowercase() || b == b'*' => Ok(self.take(|b| {
                b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || matches!(b, b'_' | b'-' | b'.' | b'*')
            })),
            _ => Err(ParseError),
        }
    }

    fn bare_item(&mut self) -> Result<Value<'a>, ParseError> {
        match self.peek().ok_or(ParseError)? {
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => self.string(),
            b'?' => {
                self.bump();
                let v = match self.peek() {
                    Some(b'0') => false,
                    Some(b'1') => true,
                    _ => return Err(ParseError),
                };
                self.bump();
                Ok(Value::Boolean(v))
            }
            b':' => {
                self.bump();
                self.eat(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
                if self.peek() != Some(b':') {
                    return Err(ParseError);
                }
                self.bump();
                Ok(Value::Other)
            }
            b if b.is_ascii_alphabetic() || b == b'*' => {
                self.eat(|b| crate::cache_control::is_tchar(b) || b == b':' || b == b'/');
                Ok(Value::Other)
            }
            _ => Err(ParseError),
        }
    }

    /// Integer or Decimal (§4.2.4).
    fn number(&mut self) -> Result<Value<'a>, ParseError> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.bump();
        }
        let int = self.take(|b| b.is_ascii_digit());
        if int.is_empty() {
            return Err(ParseError);
        }
        if self.peek() == Some(b'.') {
            self.bump();
            let frac = self.take(|b| b.is_ascii_digit());
            if int.len() > 12 || frac.is_empty() || frac.len() > 3 {
                return Err(ParseError);
            }
            return Ok(Value::Other);
        }
        if int.len() > 15 {
            return Err(ParseError);
        }
        let n = int.iter().fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
        Ok(Value::Integer(if negative { -n } else { n }))
    }

    /// String (§4.2.5): printable ASCII, `\"` and `\\` the only escapes.
    fn string(&mut self) -> Result<Value<'a>, ParseError> {
        self.bump();
        let start = self.rest;
        let mut i = 0;
        loop {
            match *self.rest.get(i).ok_or(ParseError)? {
                b'\\' => match self.rest.get(i + 1) {
                    Some(b'"' | b'\\') => i += 2,
                    _ => return Err(ParseError),
                },
                b'"' => break,
                0x20..=0x7e => i += 1,
                _ => return Err(ParseError),
            }
        }
        self.rest = self.rest.get(i + 1..).unwrap_or_default();
        Ok(Value::String(start.get(..i).unwrap_or_default()))
    }

    /// `*( ";" *SP key [ "=" bare-item ] )`: parameters are ignored (RFC 9213 §2.1).
    fn parameters(&mut self) -> Result<(), ParseError> {
        while self.peek() == Some(b';') {
            self.bump();
            self.eat(|b| b == b' ');
            self.key()?;
            if self.peek() == Some(b'=') {
                self.bump();
                self.bare_item()?;
            }
        }
        Ok(())
    }

    /// An Inner List (§4.2.1.2), which no cache directive takes.
    fn inner_list(&mut self) -> Result<Value<'a>, ParseError> {
        self.bump();
        loop {
            self.eat(|b| b == b' ');
            if self.peek() == Some(b')') {
                self.bump();
                self.parameters()?;
                return Ok(Value::Other);
            }
            self.bare_item()?;
            self.parameters()?;
            match self.peek() {
                Some(b' ' | b')') => {}
                _ => return Err(ParseError),
            }
        }
    }

    fn member(&mut self) -> Result<(&'a [u8], Value<'a>), ParseError> {
        let key = self.key()?;
        let value = if self.peek() == Some(b'=') {
            self.bump();
            if self.peek() == Some(b'(') {
                self.inner_list()?
            } else {
                self.bare_item()?
            }
        } else {
            Value::Boolean(true)
        };
        self.parameters()?;
        // Between members: OWS "," OWS, and no trailing comma.
        self.eat(|b| b == b' ' || b == b'\t');
        if !self.rest.is_empty() {
            if self.peek() != Some(b',') {
                return Err(ParseError);
            }
            self.bump();
            self.eat(|b| b == b' ' || b == b'\t');
            if self.rest.is_empty() {
                return Err(ParseError);
            }
        }
        Ok((key, value))
    }
}

impl<'a> Iterator for Dictionary<'a> {
    type Item = Result<(&'a [u8], Value<'a>), ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || (self.started && self.rest.is_empty()) || self.rest.is_empty() {
            return None;
        }
        self.started = true;
        let m = self.member();
        self.failed = m.is_err();
        Some(m)
    }
}

impl ResponseDirectives {
    /// The directives rampart follows for a response: a valid, non-empty `CDN-Cache-Control`
    /// (this module), else every `Cache-Control` line (`cache_control.rs`).
    ///
    /// Never fails: malformed parts are ignored, except that a malformed or conflicting
    /// `max-age` / `s-maxage` sets [`invalid_freshness`](Self::invalid_freshness).
    pub fn parse(headers: &Fields) -> Self {
        parse(headers).unwrap_or_else(|| Self::parse_cache_control(headers))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn cdn(lines: &[&str]) -> Option<ResponseDirectives> {
        let mut h = Fields::new();
        for l in lines {
            h.append(&CDN_CACHE_CONTROL, HeaderValue::from_str(l).unwrap());
        }
        parse(&h)
    }

    #[test]
    fn basic_directives() {
        let d = cdn(&["max-age=600"]).unwrap();
        assert_eq!(d.max_age, Some(600));
        assert!(d.targeted && !d.invalid_freshness && !d.no_store);
        let d = cdn(&["no-store"]).unwrap();
        assert!(d.no_store);
        let d = cdn(&["max-age=60, must-revalidate, public, stale-if-error=30"]).unwrap();
        assert_eq!((d.max_age, d.stale_if_error), (Some(60), Some(30)));
        assert!(d.must_revalidate && d.public);
        // `none` is not a directive but makes the field non-empty: nothing restricts storing.
        let d = cdn(&["none"]).unwrap();
        assert_eq!(
            d,
            ResponseDirectives {
                targeted: true,
                ..Default::default()
            }
        );
    }

    #[test]
    fn absent_empty_or_invalid_field_is_ignored() {
        assert_eq!(cdn(&[]), None);
        assert_eq!(cdn(&[""]), None);
        assert_eq!(cdn(&["   "]), None);
        for bad in [
            "Max-Age=60",               // keys are lower-case
            "max-age=60,",              // trailing comma
            "max-age=60,,public",       // empty member
            "max-age=\"60",             // unterminated string
            "max-age=1234567890123456", // 16-digit integer
            "max-age=60 public",        // no comma
            "no-store=?2",
            "private=\"a\\x\"", // bad escape
            "max-age=6.0001",   // 4 fractional digits
            "=60",
        ] {
            assert_eq!(cdn(&[bad]), None, "{bad:?}");
        }
        // Two lines, one of them empty: the joined field has an empty member.
        assert_eq!(cdn(&["max-age=60", ""]), None);
    }

    #[test]
    fn several_lines_join_and_last_value_wins() {
        let d = cdn(&["max-age=60", "max-age=120"]).unwrap();
        assert_eq!(d.max_age, Some(120));
        assert!(!d.invalid_freshness);
        let d = cdn(&["no-store, no-store=?0"]).unwrap();
        assert!(!d.no_store);
    }

    #[test]
    fn wrong_types_err_on_the_safe_side() {
        for v in [
            "max-age=6.5",
            "max-age=\"60\"",
            "max-age=-1",
            "max-age=abc",
            "max-age",
        ] {
            let d = cdn(&[v]).unwrap();
            assert!(d.invalid_freshness && d.max_age.is_none(), "{v:?}");
        }
        let d = cdn(&["no-store=1, private=abc, public=1, immutable=\"yes\""]).unwrap();
        assert!(d.no_store && d.private && !d.public && !d.immutable);
        let d = cdn(&["max-age=99999999999999"]).unwrap();
        assert_eq!(d.max_age, Some(DELTA_SECONDS_MAX));
    }

    #[test]
    fn qualified_private_and_no_cache() {
        let d = cdn(&["max-age=60, private=\"set-cookie, x-user\""]).unwrap();
        assert!(!d.private && d.private_fields);
        let d =
            cdn(&["max-age=60, private=\"set-cookie, x-user\", no-cache=\"x-a, x-user\""]).unwrap();
        assert_eq!(d.withheld(), ["set-cookie", "x-user", "x-a"]);
        // An empty list is the unqualified form.
        let d = cdn(&["private=\"\""]).unwrap();
        assert!(d.private && !d.private_fields);
    }

    #[test]
    fn parameters_inner_lists_and_other_items_parse() {
        let d =
            cdn(&["max-age=60;a=1;b, x=(1 2 \"s\");q=?0, y=:aGk=:, z=tok/en, w=1.5, *k"]).unwrap();
        assert_eq!(d.max_age, Some(60));
        let d = cdn(&["  max-age=60 ,\tpublic  "]).unwrap();
        assert!(d.public);
    }

    #[test]
    fn arbitrary_bytes_do_not_panic() {
        for line in crate::testutil::arbitrary_lines(9, 20_000, b"max-ge=?01\"\\(); ,:*.prvt") {
            let mut h = Fields::new();
            h.append(&CDN_CACHE_CONTROL, line.clone());
            h.append(&CDN_CACHE_CONTROL, line);
            let _ = parse(&h);
        }
    }
}
