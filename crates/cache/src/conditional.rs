//! Conditional and range requests answered from the cache (RFC 9110 §13 and §14, RFC 9111
//! §4.3).
//!
//! This module owns:
//! - detecting a client's preconditions ([`client_has_conditionals`]);
//! - evaluating `If-None-Match` / `If-Modified-Since` against a stored response to decide on a
//!   304 ([`not_modified`]), and the header fields of that 304 ([`not_modified_headers`]);
//! - the validators a cache sends when it revalidates on its own behalf ([`validators`]), and
//!   merging a 304 from upstream into the stored header fields ([`freshen`]);
//! - answering a single `bytes` range, possibly guarded by `If-Range`, from a complete stored
//!   representation ([`range`]);
//! - the entity-tag grammar (RFC 9110 §8.8.3) and its weak and strong comparisons.
//!
//! Invariants:
//! - Nothing here panics, whatever bytes the header fields hold (non-UTF-8, unbalanced quotes,
//!   numbers that overflow `u64`, any number of lines).
//! - Whenever input is malformed or ambiguous, the answer falls back to the one that is always
//!   correct: a full 200 response rather than a 304 ([`not_modified`] returns `false`) and the
//!   whole representation rather than a part ([`RangeAnswer::Full`]). In particular a malformed
//!   entity-tag matches nothing, and a stored `ETag` or `Last-Modified` given on several lines
//!   that disagree counts as absent.
//! - A [`RangeAnswer::Partial`] always satisfies `start <= end < len`.
//! - Entity-tags are compared as bytes, exactly as received (no case folding, no decoding).

use rampart_head::Fields;
use std::cmp::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{
    CACHE_CONTROL, CONNECTION, CONTENT_LOCATION, DATE, ETAG, EXPIRES, IF_MATCH, IF_MODIFIED_SINCE,
    IF_NONE_MATCH, IF_RANGE, IF_UNMODIFIED_SINCE, LAST_MODIFIED, RANGE, VARY,
};
use http::{HeaderName, HeaderValue};

use crate::cache_control::{is_ows, trim_ows};
use crate::freshness::http_date;

/// How far a `Last-Modified` must precede the stored `Date` for a cache to treat it as a strong
/// validator (RFC 9110 §8.8.2.2).
const STRONG_LAST_MODIFIED_MARGIN: Duration = Duration::from_secs(60);

/// The precondition header fields of RFC 9110 §13.1.
const PRECONDITIONS: [HeaderName; 5] = [
    IF_NONE_MATCH,
    IF_MODIFIED_SINCE,
    IF_MATCH,
    IF_UNMODIFIED_SINCE,
    IF_RANGE,
];

/// The header fields a 304 carries over from the stored response (RFC 9110 §15.4.5), plus
/// `Last-Modified`.
const NOT_MODIFIED_FIELDS: [HeaderName; 7] = [
    CACHE_CONTROL,
    CONTENT_LOCATION,
    DATE,
    ETAG,
    EXPIRES,
    VARY,
    LAST_MODIFIED,
];

/// Header fields of a 304 that never update a stored response: its own framing, the hop-by-hop
/// fields (RFC 9110 §7.6.1) and the representation's encoding and type.
const NOT_FRESHENED: [&str; 11] = [
    "content-length",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-encoding",
    "content-type",
    "content-range",
];

/// Whether the request carries any precondition (If-None-Match, If-Modified-Since, If-Match,
/// If-Unmodified-Since, If-Range). A cache that revalidates on its own behalf must not mix its
/// validators with a client's.
///
/// A field counts as present as soon as it has a line, even an empty or malformed one.
pub fn client_has_conditionals(req: &Fields) -> bool {
    // One walk over the (few) names present: cheaper than five hashed look-ups, and these are
    // all standard names, which compare as small integers.
    req.iter().any(|(k, _)| PRECONDITIONS.contains(k))
}

/// For a GET/HEAD answered from a stored 200 response: true when the client should get 304 Not
/// Modified (RFC 9110 §13.2.2 evaluation order for a cache: If-None-Match, when present, decides
/// alone using WEAK comparison against the stored ETag, `*` matches any stored representation;
/// otherwise If-Modified-Since is compared with the stored Last-Modified, or, without one, with
/// `stored_date` (the stored Date header or when it was received) — not modified when the
/// validator date is <= the IMS date. An invalid IMS date is ignored. If-Match /
/// If-Unmodified-Since are not evaluated here (return false is fine).)
///
/// The caller checks the method: preconditions other than these two are never evaluated here.
///
/// Details:
/// - `If-None-Match` is present as soon as it has a line; then `If-Modified-Since` is ignored
///   (§13.1.3) even if no element of `If-None-Match` parses.
/// - `*` matches only when it is the field's sole (non-empty) list element; within a list it is
///   a malformed element and matches nothing. Elements are gathered across all lines.
/// - `If-Modified-Since` is ignored (no 304) unless it has exactly one line holding a valid
///   HTTP-date (§13.1.3: "more than one member").
/// - A stored `Last-Modified` that is invalid, or given on several lines that disagree, counts
///   as absent, so `stored_date` is used instead: a representation was never modified after the
///   moment it was sent, so that is always a sound bound.
/// - `stored_date` is truncated to whole seconds, the resolution of HTTP-dates: a client whose
///   `If-Modified-Since` echoes a `Date` formatted from that instant must get its 304.
pub fn not_modified(req: &Fields, stored: &Fields, stored_date: SystemTime) -> bool {
    if req.contains_key(IF_NONE_MATCH) {
        return if_none_match_matches(req, stored);
    }
    let Some(since) = single_line_date(req, &IF_MODIFIED_SINCE) else {
        return false;
    };
    let modified =
        consistent_date(stored, &LAST_MODIFIED).unwrap_or_else(|| whole_seconds(stored_date));
    modified <= since
}

/// For a request answered from a stored response: true when its `If-Match` or
/// `If-Unmodified-Since` precondition fails, so the answer is 412 Precondition Failed
/// (RFC 9110 §13.2.2, steps 1–2, which come before If-None-Match and Range).
///
/// - `If-Match`, when it has a line, decides alone: `*` (as the sole element) holds for any
///   stored representation; otherwise some element must match the stored `ETag` by STRONG
///   comparison (a weak tag on either side never matches, nor does a stored response without
///   a valid `ETag`). Malformed elements match nothing.
/// - Otherwise `If-Unmodified-Since` fails when the stored `Last-Modified` is later than its
///   date. It is ignored when it is not exactly one line with a valid HTTP-date, and when the
///   stored response has no (consistent, valid) `Last-Modified` (§13.1.4: "MUST ignore … if the
///   resource does not have a modification date available").
pub fn precondition_failed(req: &Fields, stored: &Fields) -> bool {
    if req.contains_key(IF_MATCH) {
        return !tag_list_matches(req, &IF_MATCH, stored, |a, b| a.strong_eq(b));
    }
    match (
        single_line_date(req, &IF_UNMODIFIED_SINCE),
        consistent_date(stored, &LAST_MODIFIED),
    ) {
        (Some(since), Some(modified)) => modified > since,
        _ => false,
    }
}

/// The stored validators to send when the cache revalidates: the ETag value and the
/// Last-Modified value, each if present (first line only; invalid Last-Modified dates dropped).
///
/// The values are returned without surrounding whitespace. An `ETag` whose first line is not
/// exactly one entity-tag (e.g. unquoted) is dropped too: it could not be sent as a valid
/// `If-None-Match`.
pub fn validators(stored: &Fields) -> (Option<HeaderValue>, Option<HeaderValue>) {
    let etag = stored.get(ETAG).and_then(|line| {
        let bytes = trim_ows(line.as_bytes());
        single_entity_tag(bytes)?;
        HeaderValue::from_bytes(bytes).ok()
    });
    let last_modified = stored.get(LAST_MODIFIED).and_then(|line| {
        http_date(line)?;
        HeaderValue::from_bytes(trim_ows(line.as_bytes())).ok()
    });
    (etag, last_modified)
}

/// RFC 9111 §4.3.4 / §3.2: the stored header fields updated by a 304 response. Every field in
/// the 304 replaces the stored field of the same name (all its lines), except Content-Length,
/// hop-by-hop fields (Connection and the fields it names, Keep-Alive, Proxy-Connection, TE,
/// Trailer, Transfer-Encoding, Upgrade), and Content-Encoding/Content-Type/Content-Range (a
/// 304 cannot change the representation's encoding or type). Fields only in the stored
/// response are kept.
///
/// The fields named by `Connection` are read from the 304's own `Connection` lines
/// (comma-separated, case-insensitive, whitespace-tolerant); a member that is not a valid field
/// name is ignored. Choosing which stored response the 304 applies to (matching validators) is
/// the caller's business.
pub fn freshen(stored: &Fields, not_modified: &Fields) -> Fields {
    let connection_named: Vec<HeaderName> = not_modified
        .get_all(CONNECTION)
        .iter()
        .flat_map(|line| line.as_bytes().split(|&b| b == b','))
        .filter_map(|member| HeaderName::from_bytes(trim_ows(member)).ok())
        .collect();
    let mut updated = stored.clone();
    for name in not_modified.keys() {
        if NOT_FRESHENED.contains(&name.as_str()) || connection_named.contains(name) {
            continue;
        }
        updated.remove(name);
        for line in not_modified.get_all(name) {
            updated.append(name.clone(), line.clone());
        }
    }
    updated
}

/// The header fields of a 304 built from a stored response (RFC 9110 §15.4.5): those among
/// Cache-Control, Content-Location, Date, ETag, Expires, Vary, and Last-Modified that the stored
/// response has; nothing else.
///
/// Every line of each field is copied, in order. Adding `Age` (and refreshing `Date`, if
/// wanted) is the caller's business.
pub fn not_modified_headers(stored: &Fields) -> Fields {
    let mut headers = Fields::new();
    for name in &NOT_MODIFIED_FIELDS {
        for line in stored.get_all(name) {
            headers.append(name.clone(), line.clone());
        }
    }
    headers
}

/// How to answer a Range request from a stored, complete representation of `len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeAnswer {
    /// No (usable) Range: send the whole representation with 200.
    Full,
    /// 206 with bytes `start..=end`.
    Partial {
        /// The first byte sent (zero-based).
        start: u64,
        /// The last byte sent, inclusive; always `< len`.
        end: u64,
    },
    /// 416 (the range is syntactically valid but outside `0..len`).
    Unsatisfiable,
}

/// RFC 9110 §14.1–14.4 and §13.1.5 (If-Range): only the `bytes` unit; exactly one range
/// (`a-b`, `a-`, `-n`; `b` beyond the end is clamped to len-1; `-0` or a first-byte-pos >= len
/// → Unsatisfiable, except that for len == 0 any range is Unsatisfiable); several ranges → Full
/// (a server may ignore Range); any syntax error, another unit, or several Range header lines →
/// Full. If-Range present: the range applies only when it matches — an entity-tag must match
/// the stored ETag by STRONG comparison (a weak tag never matches), an HTTP-date must equal the
/// stored Last-Modified exactly; otherwise Full.
///
/// Details:
/// - The unit is case-insensitive (`Bytes=0-1` is fine); whitespace is allowed around the whole
///   value and around list commas, and empty list elements are skipped, but not inside a
///   range-spec nor around `=`.
/// - `a-b` with `b < a` is invalid (§14.1.1), hence Full. Numbers of any length are compared
///   exactly; positions beyond `u64` are simply "beyond the end".
/// - If-Range must have exactly one line. A date matches only if, besides equalling the stored
///   `Last-Modified`, it is a strong validator for a cache (§13.1.5 step 1, §8.8.2.2): the stored
///   response has a valid `Date` at least 60 seconds after that `Last-Modified`.
pub fn range(req: &Fields, stored: &Fields, len: u64) -> RangeAnswer {
    let mut lines = req.get_all(RANGE).iter();
    let (Some(line), None) = (lines.next(), lines.next()) else {
        return RangeAnswer::Full;
    };
    let Some(spec) = parse_single_byte_range(line.as_bytes()) else {
        return RangeAnswer::Full;
    };
    if !if_range_holds(req, stored) {
        return RangeAnswer::Full;
    }
    spec.resolve(len)
}

// --- entity-tags -------------------------------------------------------------------------------

/// `entity-tag = [ weak ] opaque-tag` (RFC 9110 §8.8.3), borrowing the bytes between the quotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EntityTag<'a> {
    weak: bool,
    opaque: &'a [u8],
}

impl EntityTag<'_> {
    /// Weak comparison (§8.8.3.2): the opaque-tags match, whatever their weakness.
    fn weak_eq(&self, other: &EntityTag<'_>) -> bool {
        self.opaque == other.opaque
    }

    /// Strong comparison (§8.8.3.2): both strong and the opaque-tags match.
    fn strong_eq(&self, other: &EntityTag<'_>) -> bool {
        !self.weak && !other.weak && self.opaque == other.opaque
    }
}

/// `etagc = %x21 / %x23-7E / obs-text`.
fn is_etagc(b: u8) -> bool {
    b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80
}

/// Parses the entity-tag at the very start of `bytes`, returning it and the bytes after its
/// closing quote. The weak indicator `W/` is case-sensitive.
fn parse_entity_tag(bytes: &[u8]) -> Option<(EntityTag<'_>, &[u8])> {
    let (weak, rest) = match bytes.strip_prefix(b"W/") {
        Some(rest) => (true, rest),
        None => (false, bytes),
    };
    let rest = rest.strip_prefix(b"\"")?;
    let close = rest.iter().position(|&b| b == b'"')?;
    let opaque = rest.get(..close)?;
    let after = rest.get(close + 1..)?;
    opaque
        .iter()
        .all(|&b| is_etagc(b))
        .then_some((EntityTag { weak, opaque }, after))
}

/// `bytes` (surrounding whitespace aside) as exactly one entity-tag.
fn single_entity_tag(bytes: &[u8]) -> Option<EntityTag<'_>> {
    match parse_entity_tag(trim_ows(bytes))? {
        (tag, []) => Some(tag),
        _ => None,
    }
}

/// The stored response's entity-tag: every `ETag` line must hold the same single entity-tag.
fn stored_etag(stored: &Fields) -> Option<EntityTag<'_>> {
    let mut result = None;
    for line in stored.get_all(ETAG) {
        let tag = single_entity_tag(line.as_bytes())?;
        match result {
            None => result = Some(tag),
            Some(first) if first == tag => {}
            Some(_) => return None,
        }
    }
    result
}

/// A non-empty element of an `If-None-Match` / `If-Match` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListElement<'a> {
    Tag(EntityTag<'a>),
    Wildcard,
    Malformed,
}

/// The non-empty elements of one line of an entity-tag list (`1#entity-tag` or `*`), skipping
/// empty elements and whitespace around commas.
///
/// Recovery from a malformed element: it is reported once as [`ListElement::Malformed`], and
/// parsing resumes after the next comma that follows its start (or, when only trailing garbage
/// follows a well-formed tag, after the next comma that follows the tag).
struct TagList<'a> {
    rest: &'a [u8],
}

impl<'a> TagList<'a> {
    fn new(line: &'a [u8]) -> Self {
        TagList { rest: line }
    }

    /// Drops everything up to the next comma (kept, so the next call skips it as a separator).
    fn skip_to_comma(&mut self, from: &'a [u8]) {
        let at = from.iter().position(|&b| b == b',').unwrap_or(from.len());
        self.rest = from.get(at..).unwrap_or_default();
    }
}

/// Whether `bytes` (after leading whitespace) ends a list element: nothing, or a comma.
fn ends_element(bytes: &[u8]) -> bool {
    matches!(bytes.iter().find(|&&b| !is_ows(b)), None | Some(&b','))
}

impl<'a> Iterator for TagList<'a> {
    type Item = ListElement<'a>;

    fn next(&mut self) -> Option<ListElement<'a>> {
        let start = self.rest.iter().position(|&b| !is_ows(b) && b != b',')?;
        let element = self.rest.get(start..).unwrap_or_default();
        if let Some(after) = element.strip_prefix(b"*") {
            if ends_element(after) {
                self.rest = after;
                return Some(ListElement::Wildcard);
            }
        } else if let Some((tag, after)) = parse_entity_tag(element) {
            if ends_element(after) {
                self.rest = after;
                return Some(ListElement::Tag(tag));
            }
            self.skip_to_comma(after);
            return Some(ListElement::Malformed);
        }
        self.skip_to_comma(element);
        Some(ListElement::Malformed)
    }
}

/// Whether `If-None-Match` matches the stored representation (weak comparison), i.e. its
/// condition is false and a GET/HEAD gets 304.
fn if_none_match_matches(req: &Fields, stored: &Fields) -> bool {
    tag_list_matches(req, &IF_NONE_MATCH, stored, |a, b| a.weak_eq(b))
}

/// Whether the entity-tag list in the request's `name` field (all its lines) matches the stored
/// representation: `*` as the sole element matches any; otherwise some element must equal the
/// stored `ETag` by `eq` (a stored response without a valid `ETag` matches no tag).
fn tag_list_matches(
    req: &Fields,
    name: &HeaderName,
    stored: &Fields,
    eq: fn(&EntityTag<'_>, &EntityTag<'_>) -> bool,
) -> bool {
    let elements: Vec<ListElement<'_>> = req
        .get_all(name)
        .iter()
        .flat_map(|line| TagList::new(line.as_bytes()))
        .collect();
    if let [ListElement::Wildcard] = elements.as_slice() {
        return true;
    }
    let Some(current) = stored_etag(stored) else {
        return false;
    };
    elements
        .iter()
        .any(|element| matches!(element, ListElement::Tag(tag) if eq(tag, &current)))
}

// --- dates -------------------------------------------------------------------------------------

/// A date field that must have exactly one line, holding a valid HTTP-date.
fn single_line_date(headers: &Fields, name: &HeaderName) -> Option<SystemTime> {
    let mut lines = headers.get_all(name).iter();
    match (lines.next(), lines.next()) {
        (Some(line), None) => http_date(line),
        _ => None,
    }
}

/// A date field that may (wrongly) be repeated: valid only when every line parses to the same
/// instant.
fn consistent_date(headers: &Fields, name: &HeaderName) -> Option<SystemTime> {
    let mut result = None;
    for line in headers.get_all(name) {
        let date = http_date(line)?;
        match result {
            None => result = Some(date),
            Some(first) if first == date => {}
            Some(_) => return None,
        }
    }
    result
}

/// `t` rounded down to a whole second since the epoch (unchanged before the epoch).
fn whole_seconds(t: SystemTime) -> SystemTime {
    t.duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|since| UNIX_EPOCH.checked_add(Duration::from_secs(since.as_secs())))
        .unwrap_or(t)
}

// --- ranges ------------------------------------------------------------------------------------

/// One `range-spec` of the `bytes` unit, numbers kept as their (non-empty) ASCII digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ByteRange<'a> {
    /// `first-pos "-" last-pos`, with `first <= last`.
    Bounded { first: &'a [u8], last: &'a [u8] },
    /// `first-pos "-"`.
    From { first: &'a [u8] },
    /// `"-" suffix-length`.
    Suffix { length: &'a [u8] },
}

impl ByteRange<'_> {
    /// The answer for a representation of `len` bytes.
    fn resolve(self, len: u64) -> RangeAnswer {
        let Some(last_byte) = len.checked_sub(1) else {
            return RangeAnswer::Unsatisfiable;
        };
        let (start, end) = match self {
            ByteRange::Bounded { first, last } => {
                (saturating_decimal(first), saturating_decimal(last))
            }
            ByteRange::From { first } => (saturating_decimal(first), last_byte),
            ByteRange::Suffix { length } => match saturating_decimal(length) {
                0 => return RangeAnswer::Unsatisfiable,
                n => (len.saturating_sub(n), last_byte),
            },
        };
        if start > last_byte {
            return RangeAnswer::Unsatisfiable;
        }
        RangeAnswer::Partial {
            start,
            end: end.min(last_byte),
        }
    }
}

/// `1*DIGIT`.
fn digits(bytes: &[u8]) -> Option<&[u8]> {
    (!bytes.is_empty() && bytes.iter().all(u8::is_ascii_digit)).then_some(bytes)
}

/// The value of ASCII digits, saturating at `u64::MAX`.
fn saturating_decimal(digits: &[u8]) -> u64 {
    digits.iter().fold(0u64, |value, &b| {
        value
            .saturating_mul(10)
            .saturating_add(u64::from(b.wrapping_sub(b'0')))
    })
}

/// Exact numeric comparison of two strings of ASCII digits, whatever their length.
fn cmp_decimal(a: &[u8], b: &[u8]) -> Ordering {
    let significant = |d: &[u8]| -> usize { d.iter().position(|&b| b != b'0').unwrap_or(d.len()) };
    let a = a.get(significant(a)..).unwrap_or_default();
    let b = b.get(significant(b)..).unwrap_or_default();
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// Parses a `Range` line as `bytes=<one range-spec>`; `None` for a syntax error, another unit,
/// or more than one range-spec.
fn parse_single_byte_range(value: &[u8]) -> Option<ByteRange<'_>> {
    let value = trim_ows(value);
    let eq = value.iter().position(|&b| b == b'=')?;
    if !value.get(..eq)?.eq_ignore_ascii_case(b"bytes") {
        return None;
    }
    let mut specs = value
        .get(eq + 1..)?
        .split(|&b| b == b',')
        .map(trim_ows)
        .filter(|spec| !spec.is_empty());
    let (Some(spec), None) = (specs.next(), specs.next()) else {
        return None;
    };
    if let Some(length) = spec.strip_prefix(b"-") {
        return Some(ByteRange::Suffix {
            length: digits(length)?,
        });
    }
    let dash = spec.iter().position(|&b| b == b'-')?;
    let first = digits(spec.get(..dash)?)?;
    let last = spec.get(dash + 1..)?;
    if last.is_empty() {
        return Some(ByteRange::From { first });
    }
    let last = digits(last)?;
    (cmp_decimal(first, last) != Ordering::Greater).then_some(ByteRange::Bounded { first, last })
}

/// Whether `If-Range` lets the range apply: absent, or exactly one line that matches the stored
/// representation.
fn if_range_holds(req: &Fields, stored: &Fields) -> bool {
    let mut lines = req.get_all(IF_RANGE).iter();
    let line = match (lines.next(), lines.next()) {
        (None, _) => return true,
        (Some(line), None) => line,
        (Some(_), Some(_)) => return false,
    };
    let bytes = trim_ows(line.as_bytes());
    if bytes.starts_with(b"\"") || bytes.starts_with(b"W/") {
        return match (single_entity_tag(bytes), stored_etag(stored)) {
            (Some(tag), Some(current)) => tag.strong_eq(&current),
            _ => false,
        };
    }
    let (Some(date), Some(modified), Some(sent)) = (
        http_date(line),
        consistent_date(stored, &LAST_MODIFIED),
        consistent_date(stored, &DATE),
    ) else {
        return false;
    };
    date == modified
        && modified
            .checked_add(STRONG_LAST_MODIFIED_MARGIN)
            .is_some_and(|strong_before| strong_before <= sent)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::header::{ACCEPT_RANGES, AGE, SERVER, SET_COOKIE};

    /// Pseudo-random header lines biased towards this syntax's special bytes.
    fn arbitrary_lines(seed: u64, count: usize) -> Vec<HeaderValue> {
        crate::testutil::arbitrary_lines(
            seed,
            count,
            b"aAbW/\"*,-= \t0123456789bytes\x80\xff\x21\x7e",
        )
    }

    const T0: u64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn date(secs: u64) -> Vec<u8> {
        httpdate::fmt_http_date(at(secs)).into_bytes()
    }

    /// A header map from (name, raw value) pairs; repeated names become several lines.
    fn map(pairs: &[(&str, &[u8])]) -> Fields {
        let mut h = Fields::new();
        for (name, value) in pairs {
            h.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value).unwrap(),
            );
        }
        h
    }

    fn lines<'a>(h: &'a Fields, name: &str) -> Vec<&'a [u8]> {
        h.get_all(name).iter().map(HeaderValue::as_bytes).collect()
    }

    fn tags(line: &[u8]) -> Vec<ListElement<'_>> {
        TagList::new(line).collect()
    }

    fn strong(opaque: &[u8]) -> ListElement<'_> {
        ListElement::Tag(EntityTag {
            weak: false,
            opaque,
        })
    }

    fn weak(opaque: &[u8]) -> ListElement<'_> {
        ListElement::Tag(EntityTag { weak: true, opaque })
    }

    // --- client_has_conditionals ---------------------------------------------------------------

    #[test]
    fn conditionals_detected() {
        for name in [
            "if-none-match",
            "If-Modified-Since",
            "IF-MATCH",
            "if-unmodified-since",
            "if-range",
        ] {
            assert!(client_has_conditionals(&map(&[(name, b"x")])), "{name}");
            assert!(
                client_has_conditionals(&map(&[(name, b"")])),
                "{name} empty"
            );
            assert!(client_has_conditionals(&map(&[(name, b"\xff")])), "{name}");
        }
    }

    #[test]
    fn no_conditionals() {
        assert!(!client_has_conditionals(&Fields::new()));
        let req = map(&[
            ("range", b"bytes=0-1"),
            ("cache-control", b"no-cache"),
            ("if", b"<x>"),
            ("if-none-match-x", b"\"a\""),
        ]);
        assert!(!client_has_conditionals(&req));
    }

    // --- precondition_failed -------------------------------------------------------------------

    #[test]
    fn if_match_uses_strong_comparison() {
        let stored = map(&[("etag", b"\"v1\""), ("last-modified", &date(T0))]);
        let fails = |pairs: &[(&str, &[u8])]| precondition_failed(&map(pairs), &stored);
        assert!(!fails(&[]));
        assert!(!fails(&[("if-match", b"\"v1\"")]));
        assert!(!fails(&[("if-match", b"\"v0\", \"v1\"")]));
        assert!(!fails(&[("if-match", b"\"v0\""), ("if-match", b"\"v1\"")]));
        assert!(!fails(&[("if-match", b"*")]));
        assert!(fails(&[("if-match", b"\"v2\"")]));
        assert!(fails(&[("if-match", b"W/\"v1\"")]));
        assert!(fails(&[("if-match", b"v1")]));
        assert!(fails(&[("if-match", b"")]));
        assert!(fails(&[("if-match", b"*, \"v2\"")]));
        // If-Match decides alone: a satisfied If-Unmodified-Since does not rescue it.
        assert!(fails(&[
            ("if-match", b"\"v2\""),
            ("if-unmodified-since", &date(T0 + 10))
        ]));
        assert!(!fails(&[
            ("if-match", b"\"v1\""),
            ("if-unmodified-since", &date(T0 - 10))
        ]));
        // A weak or missing stored ETag matches no tag, only `*`.
        let weak_stored = map(&[("etag", b"W/\"v1\"")]);
        assert!(precondition_failed(
            &map(&[("if-match", b"W/\"v1\"")]),
            &weak_stored
        ));
        assert!(precondition_failed(
            &map(&[("if-match", b"\"v1\"")]),
            &Fields::new()
        ));
        assert!(!precondition_failed(
            &map(&[("if-match", b"*")]),
            &Fields::new()
        ));
    }

    #[test]
    fn if_unmodified_since_compares_last_modified() {
        let stored = map(&[("last-modified", &date(T0))]);
        let fails = |pairs: &[(&str, &[u8])]| precondition_failed(&map(pairs), &stored);
        assert!(!fails(&[("if-unmodified-since", &date(T0))]));
        assert!(!fails(&[("if-unmodified-since", &date(T0 + 1))]));
        assert!(fails(&[("if-unmodified-since", &date(T0 - 1))]));
        // Invalid or repeated dates are ignored.
        assert!(!fails(&[("if-unmodified-since", b"yesterday")]));
        assert!(!fails(&[
            ("if-unmodified-since", &date(T0 - 1)),
            ("if-unmodified-since", &date(T0 - 1)),
        ]));
        // No modification date: ignored.
        let req = map(&[("if-unmodified-since", &date(T0 - 1))]);
        assert!(!precondition_failed(&req, &map(&[("date", &date(T0))])));
    }

    // --- entity-tag lists ----------------------------------------------------------------------

    #[test]
    fn entity_tag_grammar() {
        assert_eq!(tags(b"\"xyz\""), [strong(b"xyz")]);
        assert_eq!(tags(b"W/\"xyz\""), [weak(b"xyz")]);
        assert_eq!(tags(b"\"\""), [strong(b"")]);
        assert_eq!(tags(b"W/\"\""), [weak(b"")]);
        assert_eq!(tags(b"\"a,b\""), [strong(b"a,b")]);
        assert_eq!(tags(b"\"\x80\xff!~\""), [strong(b"\x80\xff!~")]);
        // `w/` is not the weak indicator; spaces and controls are not etagc.
        assert_eq!(tags(b"w/\"x\""), [ListElement::Malformed]);
        assert_eq!(tags(b"W /\"x\""), [ListElement::Malformed]);
        assert_eq!(tags(b"W/ \"x\""), [ListElement::Malformed]);
        assert_eq!(tags(b"\"a b\""), [ListElement::Malformed]);
        assert_eq!(tags(b"\"a\tb\""), [ListElement::Malformed]);
        assert_eq!(tags(b"\"a\x7fb\""), [ListElement::Malformed]);
        assert_eq!(tags(b"xyz"), [ListElement::Malformed]);
        assert_eq!(tags(b"'xyz'"), [ListElement::Malformed]);
        assert_eq!(tags(b"W/"), [ListElement::Malformed]);
        assert_eq!(tags(b"\""), [ListElement::Malformed]);
        assert_eq!(tags(b"\"abc"), [ListElement::Malformed]);
    }

    #[test]
    fn entity_tag_lists() {
        assert_eq!(tags(b""), []);
        assert_eq!(tags(b" , ,\t,"), []);
        assert_eq!(
            tags(b" \"a\" ,W/\"b\",\t\"c\"\t"),
            [strong(b"a"), weak(b"b"), strong(b"c")]
        );
        assert_eq!(tags(b",,\"a\",,,\"b\",,"), [strong(b"a"), strong(b"b")]);
        assert_eq!(tags(b"*"), [ListElement::Wildcard]);
        assert_eq!(tags(b" * "), [ListElement::Wildcard]);
        assert_eq!(tags(b"*, \"a\""), [ListElement::Wildcard, strong(b"a")]);
        // Separators are required between tags.
        assert_eq!(tags(b"\"a\"\"b\""), [ListElement::Malformed]);
        assert_eq!(tags(b"\"a\" \"b\""), [ListElement::Malformed]);
        assert_eq!(tags(b"**"), [ListElement::Malformed]);
        assert_eq!(tags(b"*x"), [ListElement::Malformed]);
    }

    #[test]
    fn malformed_list_elements_are_skipped_up_to_the_next_comma() {
        assert_eq!(tags(b"junk, \"a\""), [ListElement::Malformed, strong(b"a")]);
        assert_eq!(
            tags(b"\"a\"junk, \"b\""),
            [ListElement::Malformed, strong(b"b")]
        );
        assert_eq!(
            tags(b"\"a b\", \"c\""),
            [ListElement::Malformed, strong(b"c")]
        );
        assert_eq!(
            tags(b"\"a\", \"unterminated"),
            [strong(b"a"), ListElement::Malformed]
        );
        assert_eq!(
            tags(b"\xff\xfe, W/\"\xff\""),
            [ListElement::Malformed, weak(b"\xff")]
        );
    }

    #[test]
    fn weak_and_strong_comparison() {
        // RFC 9110 §8.8.3.2's table.
        let w1 = EntityTag {
            weak: true,
            opaque: b"1",
        };
        let w2 = EntityTag {
            weak: true,
            opaque: b"2",
        };
        let s1 = EntityTag {
            weak: false,
            opaque: b"1",
        };
        assert!(!w1.strong_eq(&w1));
        assert!(w1.weak_eq(&w1));
        assert!(!w1.strong_eq(&w2));
        assert!(!w1.weak_eq(&w2));
        assert!(!w1.strong_eq(&s1));
        assert!(w1.weak_eq(&s1));
        assert!(s1.strong_eq(&s1));
        assert!(s1.weak_eq(&s1));
    }

    #[test]
    fn stored_etag_lines() {
        let one = map(&[("etag", b" W/\"v1\" ")]);
        assert_eq!(
            stored_etag(&one),
            Some(EntityTag {
                weak: true,
                opaque: b"v1"
            })
        );
        let same = map(&[("etag", b"\"v1\""), ("etag", b"\"v1\"")]);
        assert!(stored_etag(&same).is_some());
        for bad in [
            map(&[]),
            map(&[("etag", b"\"v1\""), ("etag", b"\"v2\"")]),
            map(&[("etag", b"\"v1\""), ("etag", b"W/\"v1\"")]),
            map(&[("etag", b"\"v1\", \"v2\"")]),
            map(&[("etag", b"v1")]),
            map(&[("etag", b"")]),
            map(&[("etag", b"\"v1\""), ("etag", b"junk")]),
        ] {
            assert_eq!(stored_etag(&bad), None, "{bad:?}");
        }
    }

    // --- not_modified: If-None-Match -----------------------------------------------------------

    #[test]
    fn if_none_match_weak_comparison() {
        let stored = map(&[("etag", b"\"v1\"")]);
        let weak_stored = map(&[("etag", b"W/\"v1\"")]);
        for inm in [
            &b"\"v1\""[..],
            b"W/\"v1\"",
            b"\"v0\", \"v1\"",
            b" \"v0\" ,W/\"v1\" ",
            b"junk, \"v1\"",
            b"\"v1\", junk",
        ] {
            let req = map(&[("if-none-match", inm)]);
            assert!(not_modified(&req, &stored, at(T0)), "{inm:?}");
            assert!(not_modified(&req, &weak_stored, at(T0)), "{inm:?} weak");
        }
        for inm in [
            &b"\"v2\""[..],
            b"\"V1\"",
            b"\"v1 \"",
            b"v1",
            b"\"v1",
            b"w/\"v1\"",
            b"\"v1\"x",
            b"",
            b",",
            b"\xff",
        ] {
            let req = map(&[("if-none-match", inm)]);
            assert!(!not_modified(&req, &stored, at(T0)), "{inm:?}");
        }
    }

    #[test]
    fn if_none_match_across_lines() {
        let stored = map(&[("etag", b"\"v3\"")]);
        let req = map(&[
            ("if-none-match", b"\"v1\", \"v2\""),
            ("if-none-match", b"\xff\xfe"),
            ("if-none-match", b"W/\"v3\""),
        ]);
        assert!(not_modified(&req, &stored, at(T0)));
        let req = map(&[("if-none-match", b"\"v1\""), ("if-none-match", b"\"v2\"")]);
        assert!(!not_modified(&req, &stored, at(T0)));
    }

    #[test]
    fn if_none_match_wildcard() {
        for stored in [map(&[("etag", b"\"v1\"")]), map(&[])] {
            for inm in [&b"*"[..], b" * ", b"*,", b", *"] {
                let req = map(&[("if-none-match", inm)]);
                assert!(not_modified(&req, &stored, at(T0)), "{inm:?}");
            }
            let req = map(&[("if-none-match", b"*"), ("if-none-match", b"")]);
            assert!(not_modified(&req, &stored, at(T0)));
            // `*` is only valid alone.
            for inm in [&b"*, \"v0\""[..], b"*, *", b"**", b"\"*\""] {
                let req = map(&[("if-none-match", inm)]);
                assert!(!not_modified(&req, &stored, at(T0)), "{inm:?}");
            }
            let req = map(&[("if-none-match", b"*"), ("if-none-match", b"\"v0\"")]);
            assert!(!not_modified(&req, &stored, at(T0)));
        }
        // A listed tag still matches even next to a misplaced `*`.
        let req = map(&[("if-none-match", b"*, \"v1\"")]);
        assert!(not_modified(&req, &map(&[("etag", b"\"v1\"")]), at(T0)));
    }

    #[test]
    fn if_none_match_without_usable_stored_etag() {
        let req = map(&[("if-none-match", b"\"v1\"")]);
        for stored in [
            map(&[]),
            map(&[("etag", b"v1")]),
            map(&[("etag", b"\"v1\""), ("etag", b"\"v2\"")]),
            map(&[("last-modified", &date(T0))]),
        ] {
            assert!(!not_modified(&req, &stored, at(T0)), "{stored:?}");
        }
    }

    #[test]
    fn if_none_match_decides_alone() {
        // A non-matching If-None-Match wins over a matching If-Modified-Since...
        let stored = map(&[("etag", b"\"v1\""), ("last-modified", &date(T0))]);
        let ims = date(T0 + 10);
        let req = map(&[("if-none-match", b"\"v2\""), ("if-modified-since", &ims)]);
        assert!(!not_modified(&req, &stored, at(T0)));
        // ...even when it is empty or malformed...
        let req = map(&[("if-none-match", b""), ("if-modified-since", &ims)]);
        assert!(!not_modified(&req, &stored, at(T0)));
        let req = map(&[("if-none-match", b"garbage"), ("if-modified-since", &ims)]);
        assert!(!not_modified(&req, &stored, at(T0)));
        // ...and a matching one wins over a failing If-Modified-Since.
        let old = date(T0 - 10);
        let req = map(&[("if-none-match", b"\"v1\""), ("if-modified-since", &old)]);
        assert!(not_modified(&req, &stored, at(T0)));
    }

    #[test]
    fn other_preconditions_are_ignored() {
        let stored = map(&[("etag", b"\"v1\""), ("last-modified", &date(T0))]);
        let old = date(T0 - 10);
        for req in [
            map(&[("if-match", b"\"v1\"")]),
            map(&[("if-match", b"*")]),
            map(&[("if-unmodified-since", &date(T0 + 10))]),
            map(&[("if-range", b"\"v1\"")]),
            map(&[]),
        ] {
            assert!(!not_modified(&req, &stored, at(T0)), "{req:?}");
        }
        let req = map(&[("if-match", b"\"v2\""), ("if-none-match", b"\"v1\"")]);
        assert!(not_modified(&req, &stored, at(T0)));
        let req = map(&[
            ("if-unmodified-since", &old),
            ("if-modified-since", &date(T0)),
        ]);
        assert!(not_modified(&req, &stored, at(T0)));
    }

    // --- not_modified: If-Modified-Since -------------------------------------------------------

    #[test]
    fn if_modified_since_against_last_modified() {
        let stored = map(&[("last-modified", &date(T0)), ("date", &date(T0 + 100))]);
        let check = |ims: u64| {
            let req = map(&[("if-modified-since", &date(ims))]);
            not_modified(&req, &stored, at(T0 + 100))
        };
        assert!(check(T0));
        assert!(check(T0 + 1));
        assert!(check(T0 + 1_000_000));
        assert!(!check(T0 - 1));
        assert!(!check(0));
    }

    #[test]
    fn if_modified_since_formats_and_whitespace() {
        let stored = map(&[("last-modified", &date(T0))]);
        for ims in [
            &b"Sun, 06 Nov 1994 08:49:37 GMT"[..],
            b"Sunday, 06-Nov-94 08:49:37 GMT",
            b"Sun Nov  6 08:49:37 1994",
            b" \tSun, 06 Nov 1994 08:49:37 GMT\t ",
        ] {
            let req = map(&[("if-modified-since", ims)]);
            assert!(not_modified(&req, &stored, at(T0)), "{ims:?}");
        }
    }

    #[test]
    fn if_modified_since_without_last_modified_uses_stored_date() {
        let stored = map(&[("etag", b"\"v1\"")]);
        let req = map(&[("if-modified-since", &date(T0))]);
        assert!(not_modified(&req, &stored, at(T0)));
        assert!(not_modified(&req, &stored, at(T0 - 5)));
        assert!(!not_modified(&req, &stored, at(T0 + 1)));
        // Sub-second precision of the stored date is below HTTP-date resolution.
        assert!(not_modified(
            &req,
            &stored,
            at(T0) + Duration::from_millis(999)
        ));
        assert!(!not_modified(
            &req,
            &stored,
            at(T0 + 1) + Duration::from_millis(1)
        ));
    }

    #[test]
    fn invalid_or_conflicting_last_modified_falls_back_to_stored_date() {
        let req = map(&[("if-modified-since", &date(T0))]);
        for stored in [
            map(&[("last-modified", b"yesterday")]),
            map(&[("last-modified", b"\xff")]),
            map(&[
                ("last-modified", &date(T0 - 100)),
                ("last-modified", &date(T0 + 100)),
            ]),
        ] {
            assert!(not_modified(&req, &stored, at(T0 - 1)), "{stored:?}");
            assert!(!not_modified(&req, &stored, at(T0 + 1)), "{stored:?}");
        }
        // Repeated identical lines are fine.
        let stored = map(&[
            ("last-modified", &date(T0 - 100)),
            ("last-modified", &date(T0 - 100)),
        ]);
        assert!(not_modified(&req, &stored, at(T0 + 1)));
    }

    #[test]
    fn invalid_if_modified_since_is_ignored() {
        let stored = map(&[("last-modified", &date(T0))]);
        for ims in [
            &b""[..],
            b"0",
            b"-1",
            b"now",
            b"784111777",
            b"sun, 06 nov 1994 08:49:37 gmt",
            b"Sun, 06 Nov 1994 08:49:37 GMT\xff",
            b"\xff\xfe",
            b"Fri, 31 Dec 9999 23:59:59 GMT, Fri, 31 Dec 9999 23:59:59 GMT",
        ] {
            let req = map(&[("if-modified-since", ims)]);
            assert!(!not_modified(&req, &stored, at(T0)), "{ims:?}");
        }
        // Several lines: more than one member.
        let later = date(T0 + 10);
        let req = map(&[("if-modified-since", &later), ("if-modified-since", &later)]);
        assert!(!not_modified(&req, &stored, at(T0)));
    }

    #[test]
    fn not_modified_at_time_extremes() {
        let req = map(&[("if-modified-since", b"Fri, 31 Dec 9999 23:59:59 GMT")]);
        assert!(not_modified(&req, &map(&[]), UNIX_EPOCH));
        assert!(not_modified(
            &req,
            &map(&[]),
            UNIX_EPOCH - Duration::from_secs(1)
        ));
        let req = map(&[("if-modified-since", b"Thu, 01 Jan 1970 00:00:00 GMT")]);
        assert!(!not_modified(&req, &map(&[]), at(T0)));
        assert!(not_modified(&req, &map(&[]), UNIX_EPOCH));
    }

    // --- validators ----------------------------------------------------------------------------

    #[test]
    fn validators_present() {
        let lm = date(T0);
        let stored = map(&[("etag", b"W/\"v1\""), ("last-modified", &lm)]);
        let (etag, last_modified) = validators(&stored);
        assert_eq!(etag.unwrap().as_bytes(), b"W/\"v1\"");
        assert_eq!(last_modified.unwrap().as_bytes(), &lm[..]);
    }

    #[test]
    fn validators_absent_or_invalid() {
        assert_eq!(validators(&map(&[])), (None, None));
        let stored = map(&[("etag", b"v1"), ("last-modified", b"0")]);
        assert_eq!(validators(&stored), (None, None));
        let stored = map(&[("etag", b"\"v1\", \"v2\""), ("last-modified", b"\xff")]);
        assert_eq!(validators(&stored), (None, None));
    }

    #[test]
    fn validators_first_line_trimmed() {
        let lm = date(T0);
        let mut padded = b" \t".to_vec();
        padded.extend_from_slice(&lm);
        padded.push(b' ');
        let stored = map(&[
            ("etag", b" \"v1\"\t"),
            ("etag", b"\"v2\""),
            ("last-modified", &padded),
            ("last-modified", &date(T0 + 5)),
        ]);
        let (etag, last_modified) = validators(&stored);
        assert_eq!(etag.unwrap().as_bytes(), b"\"v1\"");
        assert_eq!(last_modified.unwrap().as_bytes(), &lm[..]);
        // An invalid first line is not replaced by a later valid one.
        let stored = map(&[("last-modified", b"bad"), ("last-modified", &lm)]);
        assert_eq!(validators(&stored).1, None);
    }

    // --- freshen -------------------------------------------------------------------------------

    #[test]
    fn freshen_replaces_and_keeps() {
        let stored = map(&[
            ("date", &date(T0)),
            ("cache-control", b"max-age=10"),
            ("cache-control", b"public"),
            ("etag", b"\"v1\""),
            ("x-kept", b"1"),
            ("set-cookie", b"a=1"),
            ("set-cookie", b"b=2"),
        ]);
        let update = map(&[
            ("date", &date(T0 + 60)),
            ("cache-control", b"max-age=600"),
            ("x-new", b"a"),
            ("x-new", b"b"),
            ("age", b"3"),
        ]);
        let h = freshen(&stored, &update);
        assert_eq!(lines(&h, "date"), [&date(T0 + 60)[..]]);
        assert_eq!(lines(&h, "cache-control"), [&b"max-age=600"[..]]);
        assert_eq!(lines(&h, "etag"), [&b"\"v1\""[..]]);
        assert_eq!(lines(&h, "x-kept"), [&b"1"[..]]);
        assert_eq!(lines(&h, "set-cookie"), [&b"a=1"[..], b"b=2"]);
        assert_eq!(lines(&h, "x-new"), [&b"a"[..], b"b"]);
        assert_eq!(lines(&h, AGE.as_str()), [&b"3"[..]]);
        assert_eq!(h.len(), 9);
    }

    #[test]
    fn freshen_does_not_touch_framing_hop_by_hop_or_representation() {
        let stored = map(&[
            ("content-length", b"1234"),
            ("content-type", b"text/html"),
            ("content-encoding", b"gzip"),
            ("etag", b"\"v1\""),
        ]);
        let update = map(&[
            ("content-length", b"0"),
            ("content-type", b"text/plain"),
            ("content-encoding", b"br"),
            ("content-range", b"bytes 0-1/2"),
            ("connection", b"close"),
            ("keep-alive", b"timeout=5"),
            ("proxy-connection", b"keep-alive"),
            ("te", b"trailers"),
            ("trailer", b"x-checksum"),
            ("transfer-encoding", b"chunked"),
            ("upgrade", b"h2c"),
            ("etag", b"\"v1\""),
        ]);
        let h = freshen(&stored, &update);
        let want = map(&[
            ("content-length", b"1234"),
            ("content-type", b"text/html"),
            ("content-encoding", b"gzip"),
            ("etag", b"\"v1\""),
        ]);
        assert_eq!(h, want);
    }

    #[test]
    fn freshen_skips_fields_named_by_connection() {
        let stored = map(&[("x-hop", b"old"), ("server", b"a")]);
        let update = map(&[
            ("connection", b" X-Hop ,\tx-other, , keep-alive"),
            ("connection", b"\xff, Server"),
            ("x-hop", b"new"),
            ("x-other", b"1"),
            ("server", b"b"),
            ("x-end", b"e"),
        ]);
        let h = freshen(&stored, &update);
        assert_eq!(lines(&h, "x-hop"), [&b"old"[..]]);
        assert_eq!(lines(&h, "x-other"), Vec::<&[u8]>::new());
        assert_eq!(lines(&h, SERVER.as_str()), [&b"a"[..]]);
        assert_eq!(lines(&h, "x-end"), [&b"e"[..]]);
        assert!(!h.contains_key(CONNECTION));
        assert!(!h.contains_key("keep-alive"));
    }

    #[test]
    fn freshen_with_empty_sides() {
        let stored = map(&[("etag", b"\"v1\""), ("accept-ranges", b"bytes")]);
        assert_eq!(freshen(&stored, &Fields::new()), stored);
        let update = map(&[("expires", b"0"), ("content-length", b"5")]);
        assert_eq!(freshen(&Fields::new(), &update), map(&[("expires", b"0")]));
        let h = freshen(&stored, &map(&[("accept-ranges", b"none")]));
        assert_eq!(lines(&h, ACCEPT_RANGES.as_str()), [&b"none"[..]]);
    }

    // --- not_modified_headers ------------------------------------------------------------------

    #[test]
    fn not_modified_headers_selects_fields() {
        let stored = map(&[
            ("cache-control", b"max-age=60"),
            ("cache-control", b"public"),
            ("content-location", b"/a.en"),
            ("date", &date(T0)),
            ("etag", b"\"v1\""),
            ("expires", &date(T0 + 60)),
            ("vary", b"accept-encoding"),
            ("vary", b"accept-language"),
            ("last-modified", &date(T0 - 60)),
            ("content-type", b"text/html"),
            ("content-length", b"10"),
            ("content-encoding", b"gzip"),
            ("set-cookie", b"a=1"),
            ("age", b"5"),
            ("x-custom", b"1"),
        ]);
        let h = not_modified_headers(&stored);
        let want = map(&[
            ("cache-control", b"max-age=60"),
            ("cache-control", b"public"),
            ("content-location", b"/a.en"),
            ("date", &date(T0)),
            ("etag", b"\"v1\""),
            ("expires", &date(T0 + 60)),
            ("vary", b"accept-encoding"),
            ("vary", b"accept-language"),
            ("last-modified", &date(T0 - 60)),
        ]);
        assert_eq!(h, want);
        assert!(!h.contains_key(SET_COOKIE));
    }

    #[test]
    fn not_modified_headers_only_what_exists() {
        assert!(not_modified_headers(&Fields::new()).is_empty());
        let h = not_modified_headers(&map(&[("etag", b"\xff"), ("server", b"x")]));
        assert_eq!(h, map(&[("etag", b"\xff")]));
    }

    // --- range ---------------------------------------------------------------------------------

    fn partial(start: u64, end: u64) -> RangeAnswer {
        RangeAnswer::Partial { start, end }
    }

    fn ranged(value: &[u8], len: u64) -> RangeAnswer {
        range(&map(&[("range", value)]), &Fields::new(), len)
    }

    #[test]
    fn range_absent() {
        assert_eq!(
            range(&Fields::new(), &Fields::new(), 100),
            RangeAnswer::Full
        );
        // If-Range without Range is ignored.
        let req = map(&[("if-range", b"\"v1\"")]);
        assert_eq!(range(&req, &Fields::new(), 100), RangeAnswer::Full);
    }

    #[test]
    fn range_forms() {
        assert_eq!(ranged(b"bytes=0-0", 100), partial(0, 0));
        assert_eq!(ranged(b"bytes=0-99", 100), partial(0, 99));
        assert_eq!(ranged(b"bytes=10-19", 100), partial(10, 19));
        assert_eq!(ranged(b"bytes=10-", 100), partial(10, 99));
        assert_eq!(ranged(b"bytes=99-", 100), partial(99, 99));
        assert_eq!(ranged(b"bytes=-1", 100), partial(99, 99));
        assert_eq!(ranged(b"bytes=-30", 100), partial(70, 99));
        assert_eq!(ranged(b"bytes=-100", 100), partial(0, 99));
        assert_eq!(ranged(b"bytes=007-0010", 100), partial(7, 10));
    }

    #[test]
    fn range_clamped_past_the_end() {
        assert_eq!(ranged(b"bytes=50-100", 100), partial(50, 99));
        assert_eq!(ranged(b"bytes=0-1000000", 100), partial(0, 99));
        assert_eq!(ranged(b"bytes=-101", 100), partial(0, 99));
        assert_eq!(
            ranged(b"bytes=-99999999999999999999999", 100),
            partial(0, 99)
        );
        assert_eq!(
            ranged(b"bytes=1-99999999999999999999999", 100),
            partial(1, 99)
        );
        assert_eq!(ranged(b"bytes=0-", 1), partial(0, 0));
        assert_eq!(ranged(b"bytes=-5", 1), partial(0, 0));
    }

    #[test]
    fn range_unsatisfiable() {
        for value in [
            &b"bytes=100-"[..],
            b"bytes=100-200",
            b"bytes=100-100",
            b"bytes=1000-",
            b"bytes=-0",
            b"bytes=-000",
            b"bytes=18446744073709551615-",
            b"bytes=18446744073709551616-",
            b"bytes=99999999999999999999999-99999999999999999999999",
            b"bytes=99999999999999999999998-99999999999999999999999",
        ] {
            assert_eq!(ranged(value, 100), RangeAnswer::Unsatisfiable, "{value:?}");
        }
        // Nothing is satisfiable in an empty representation.
        for value in [
            &b"bytes=0-"[..],
            b"bytes=0-0",
            b"bytes=-1",
            b"bytes=-0",
            b"bytes=5-9",
        ] {
            assert_eq!(ranged(value, 0), RangeAnswer::Unsatisfiable, "{value:?}");
        }
    }

    #[test]
    fn range_at_u64_max() {
        let max = u64::MAX;
        assert_eq!(
            ranged(b"bytes=18446744073709551614-", max),
            partial(max - 1, max - 1)
        );
        assert_eq!(
            ranged(b"bytes=18446744073709551615-", max),
            RangeAnswer::Unsatisfiable
        );
        assert_eq!(ranged(b"bytes=-1", max), partial(max - 1, max - 1));
        assert_eq!(
            ranged(b"bytes=0-99999999999999999999", max),
            partial(0, max - 1)
        );
    }

    #[test]
    fn range_syntax_errors_are_full() {
        for value in [
            &b""[..],
            b"bytes",
            b"bytes=",
            b"bytes= ",
            b"bytes=,",
            b"bytes=-",
            b"bytes=--1",
            b"bytes=a-b",
            b"bytes=1",
            b"bytes=1-2-3",
            b"bytes=+1-2",
            b"bytes=1-+2",
            b"bytes=1 -2",
            b"bytes=1- 2",
            b"bytes=0x10-",
            b"bytes=1.5-2",
            b"bytes=10-9",
            b"bytes=99999999999999999999999-99999999999999999999998",
            b"bytes=\xff-1",
            b"bytes =0-1",
            b"bytes= =0-1",
            b"=0-1",
            b"items=0-1",
            b"byte=0-1",
            b"bytesx=0-1",
            b"0-1",
            b"\xff\xfe",
        ] {
            assert_eq!(ranged(value, 100), RangeAnswer::Full, "{value:?}");
            assert_eq!(ranged(value, 0), RangeAnswer::Full, "{value:?} len 0");
        }
    }

    #[test]
    fn range_lenient_where_the_grammar_allows() {
        assert_eq!(ranged(b"Bytes=0-1", 100), partial(0, 1));
        assert_eq!(ranged(b"BYTES=0-1", 100), partial(0, 1));
        assert_eq!(ranged(b" \tbytes=0-1\t ", 100), partial(0, 1));
        assert_eq!(ranged(b"bytes= 0-1 ", 100), partial(0, 1));
        assert_eq!(ranged(b"bytes=,, 0-1 ,", 100), partial(0, 1));
    }

    #[test]
    fn several_ranges_are_full() {
        for value in [
            &b"bytes=0-1,5-9"[..],
            b"bytes=0-1, 0-1",
            b"bytes=-1,0-",
            b"bytes=0-1,junk",
            b"bytes=200-300,400-",
        ] {
            assert_eq!(ranged(value, 100), RangeAnswer::Full, "{value:?}");
        }
        let req = map(&[("range", b"bytes=0-1"), ("range", b"bytes=0-1")]);
        assert_eq!(range(&req, &Fields::new(), 100), RangeAnswer::Full);
        let req = map(&[("range", b"bytes=0-1"), ("range", b"")]);
        assert_eq!(range(&req, &Fields::new(), 100), RangeAnswer::Full);
    }

    // --- range: If-Range -----------------------------------------------------------------------

    fn if_ranged(if_range: &[u8], stored: &Fields) -> RangeAnswer {
        let req = map(&[("range", b"bytes=0-9"), ("if-range", if_range)]);
        range(&req, stored, 100)
    }

    #[test]
    fn if_range_entity_tag_strong_comparison() {
        let stored = map(&[("etag", b"\"v1\"")]);
        assert_eq!(if_ranged(b"\"v1\"", &stored), partial(0, 9));
        assert_eq!(if_ranged(b" \"v1\" ", &stored), partial(0, 9));
        for value in [
            &b"W/\"v1\""[..],
            b"\"v2\"",
            b"\"V1\"",
            b"\"v1\", \"v2\"",
            b"\"v2\", \"v1\"",
            b"\"v1",
            b"\"v1\"x",
            b"*",
            b"W/",
            b"\"\xff\"",
        ] {
            assert_eq!(if_ranged(value, &stored), RangeAnswer::Full, "{value:?}");
        }
        // A weak stored tag never matches.
        let weak_stored = map(&[("etag", b"W/\"v1\"")]);
        assert_eq!(if_ranged(b"\"v1\"", &weak_stored), RangeAnswer::Full);
        assert_eq!(if_ranged(b"W/\"v1\"", &weak_stored), RangeAnswer::Full);
        // No stored ETag, or an ambiguous one.
        assert_eq!(if_ranged(b"\"v1\"", &map(&[])), RangeAnswer::Full);
        let ambiguous = map(&[("etag", b"\"v1\""), ("etag", b"\"v2\"")]);
        assert_eq!(if_ranged(b"\"v1\"", &ambiguous), RangeAnswer::Full);
    }

    #[test]
    fn if_range_date_exact_and_strong() {
        let stored = map(&[("last-modified", &date(T0)), ("date", &date(T0 + 60))]);
        assert_eq!(if_ranged(&date(T0), &stored), partial(0, 9));
        assert_eq!(
            if_ranged(b"Sunday, 06-Nov-94 08:49:37 GMT", &stored),
            partial(0, 9)
        );
        assert_eq!(if_ranged(&date(T0 + 1), &stored), RangeAnswer::Full);
        assert_eq!(if_ranged(&date(T0 - 1), &stored), RangeAnswer::Full);
        for value in [&b"yesterday"[..], b"", b"\xff", b"0"] {
            assert_eq!(if_ranged(value, &stored), RangeAnswer::Full, "{value:?}");
        }
    }

    #[test]
    fn if_range_date_must_be_a_strong_validator() {
        // Last-Modified less than 60 s before Date is weak (RFC 9110 §8.8.2.2).
        let weak_lm = map(&[("last-modified", &date(T0)), ("date", &date(T0 + 59))]);
        assert_eq!(if_ranged(&date(T0), &weak_lm), RangeAnswer::Full);
        // No (valid) Date: cannot tell.
        let no_date = map(&[("last-modified", &date(T0))]);
        assert_eq!(if_ranged(&date(T0), &no_date), RangeAnswer::Full);
        let bad_date = map(&[("last-modified", &date(T0)), ("date", b"now")]);
        assert_eq!(if_ranged(&date(T0), &bad_date), RangeAnswer::Full);
        // No or conflicting Last-Modified.
        let no_lm = map(&[("date", &date(T0 + 600))]);
        assert_eq!(if_ranged(&date(T0), &no_lm), RangeAnswer::Full);
        let conflicting = map(&[
            ("last-modified", &date(T0)),
            ("last-modified", &date(T0 - 1)),
            ("date", &date(T0 + 600)),
        ]);
        assert_eq!(if_ranged(&date(T0), &conflicting), RangeAnswer::Full);
    }

    #[test]
    fn if_range_mismatch_hides_unsatisfiable() {
        let stored = map(&[("etag", b"\"v1\"")]);
        let req = map(&[("range", b"bytes=500-"), ("if-range", b"\"v1\"")]);
        assert_eq!(range(&req, &stored, 100), RangeAnswer::Unsatisfiable);
        let req = map(&[("range", b"bytes=500-"), ("if-range", b"\"v2\"")]);
        assert_eq!(range(&req, &stored, 100), RangeAnswer::Full);
    }

    #[test]
    fn if_range_several_lines_is_full() {
        let stored = map(&[("etag", b"\"v1\"")]);
        let req = map(&[
            ("range", b"bytes=0-9"),
            ("if-range", b"\"v1\""),
            ("if-range", b"\"v1\""),
        ]);
        assert_eq!(range(&req, &stored, 100), RangeAnswer::Full);
    }

    // --- helpers -------------------------------------------------------------------------------

    #[test]
    fn decimal_helpers() {
        assert_eq!(saturating_decimal(b"0"), 0);
        assert_eq!(saturating_decimal(b"18446744073709551615"), u64::MAX);
        assert_eq!(saturating_decimal(b"18446744073709551616"), u64::MAX);
        assert_eq!(cmp_decimal(b"0", b"000"), Ordering::Equal);
        assert_eq!(cmp_decimal(b"010", b"9"), Ordering::Greater);
        assert_eq!(cmp_decimal(b"99", b"100"), Ordering::Less);
        assert_eq!(
            cmp_decimal(b"100000000000000000000001", b"100000000000000000000000"),
            Ordering::Greater
        );
        assert_eq!(whole_seconds(at(T0) + Duration::from_nanos(1)), at(T0));
        let before = UNIX_EPOCH - Duration::from_millis(1500);
        assert_eq!(whole_seconds(before), before);
    }

    #[test]
    fn arbitrary_bytes_do_not_panic() {
        let stored_variants = [
            map(&[]),
            map(&[
                ("etag", b"\"a\""),
                ("last-modified", &date(T0)),
                ("date", &date(T0 + 60)),
            ]),
            map(&[("etag", b"W/\"a\"")]),
        ];
        for seed in 0..300 {
            let values = arbitrary_lines(seed, 8);
            let names = [
                IF_NONE_MATCH,
                IF_MODIFIED_SINCE,
                RANGE,
                IF_RANGE,
                ETAG,
                CONNECTION,
            ];
            let mut req = Fields::new();
            for (i, value) in values.iter().enumerate() {
                let name = names.get((seed as usize + i) % names.len()).unwrap();
                req.append(name.clone(), value.clone());
            }
            for stored in &stored_variants {
                let _ = not_modified(&req, stored, at(T0));
                let _ = client_has_conditionals(&req);
                let _ = validators(&req);
                let _ = freshen(stored, &req);
                let _ = not_modified_headers(&req);
                for len in [0, 1, 7, 100, u64::MAX] {
                    match range(&req, stored, len) {
                        RangeAnswer::Partial { start, end } => {
                            assert!(start <= end && end < len, "{req:?} {len}");
                        }
                        RangeAnswer::Full | RangeAnswer::Unsatisfiable => {}
                    }
                }
            }
            for value in &values {
                // A list never yields more elements than it has commas, plus one.
                let commas = value.as_bytes().iter().filter(|&&b| b == b',').count();
                assert!(TagList::new(value.as_bytes()).count() <= commas + 1);
                let _ = parse_single_byte_range(value.as_bytes());
            }
        }
    }
}
