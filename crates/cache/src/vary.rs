//! `Vary` (RFC 9111 §4.1): which request headers select a stored response, and the secondary
//! cache key derived from them.
//!
//! This module owns parsing a response's `Vary` lines into a canonical field list, normalising
//! request header values so that semantically equal requests select the same variant, and
//! encoding those values into an unambiguous variant key.
//!
//! Invariants:
//! - [`Vary::Fields`] is never empty, and its names are lower-case, unique and sorted.
//! - A `Vary` member that is not a valid field name makes the whole `Vary` [`Vary::Any`]: a
//!   response whose selecting headers we cannot determine must never be reused.
//! - Normalisation only ever merges values that are equivalent; when a value (or part of one)
//!   is not understood it is kept verbatim, which at worst splits one variant into several.
//! - The variant key is an injective encoding of (field name, absent | present + value) pairs:
//!   each name (token characters only) is followed by `0x00`, then either `A` (absent) or `P`, the
//!   value length as a big-endian `u64`, and the value bytes, so no value content can be confused
//!   with structure.

use bytes::Bytes;
use http::header::{HeaderName, ACCEPT_ENCODING, VARY};
use rampart_head::Fields;
use rampart_head::GetAll;

use crate::cache_control::{is_ows, is_tchar, trim_ows};

/// The request headers a stored response varies on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Vary {
    /// No Vary header (or an empty one).
    #[default]
    None,
    /// `Vary: *` — never matches a later request.
    Any,
    /// Lower-cased, de-duplicated, sorted field names.
    Fields(Vec<HeaderName>),
}

impl Vary {
    /// Parses all `Vary` lines of a response.
    ///
    /// Members are comma-separated across lines, compared case-insensitively; empty members are
    /// ignored. A `*` member, or any member that is not a token (e.g. a quoted string or a name
    /// containing spaces or non-ASCII bytes), yields [`Vary::Any`].
    pub fn parse(headers: &Fields) -> Self {
        let mut fields: Vec<HeaderName> = Vec::new();
        for line in headers.get_all(VARY) {
            for member in line.as_bytes().split(|&b| b == b',') {
                let member = trim_ows(member);
                if member.is_empty() {
                    continue;
                }
                if member == b"*" || !member.iter().all(|&b| is_tchar(b)) {
                    return Vary::Any;
                }
                match HeaderName::from_bytes(member) {
                    Ok(name) => fields.push(name),
                    Err(_) => return Vary::Any,
                }
            }
        }
        if fields.is_empty() {
            return Vary::None;
        }
        fields.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        fields.dedup();
        Vary::Fields(fields)
    }

    /// The secondary key for `request`: for each field, its normalised value(s) from the request
    /// (absent and present-but-empty are different). `None` for `Vary::Any`.
    ///
    /// [`Vary::None`] gives the empty key, which no [`Vary::Fields`] key can equal. An
    /// `Accept-Encoding` that normalises to exactly `identity` is encoded as absent.
    pub fn variant_key(&self, request: &Fields) -> Option<Bytes> {
        let fields = match self {
            Vary::Any => return None,
            Vary::None => return Some(Bytes::new()),
            Vary::Fields(fields) => fields,
        };
        let mut key = Vec::new();
        for name in fields {
            key.extend_from_slice(name.as_str().as_bytes());
            key.push(0);
            let value = request
                .contains_key(name)
                .then(|| normalise(name, request.get_all(name)))
                .filter(|v| !(name == ACCEPT_ENCODING && v.as_ref() == b"identity"));
            match value {
                None => key.push(b'A'),
                Some(value) => {
                    key.push(b'P');
                    key.extend_from_slice(&(value.len() as u64).to_be_bytes());
                    key.extend_from_slice(&value);
                }
            }
        }
        Some(Bytes::from(key))
    }
}

/// Normalises a request header value for variant matching: combine multiple lines with ", ",
/// collapse whitespace around commas. For `accept-encoding`, additionally lower-case the codings,
/// drop parameters other than q, drop codings with q=0, and sort them, so `gzip, br` and
/// `br,gzip` select the same variant; `identity` alone and absent select the same variant.
///
/// Details:
/// - Each line is trimmed; commas inside quoted strings are left alone, as is the case of
///   everything except `Accept-Encoding` codings.
/// - `Accept-Encoding` weights are canonicalised (`q=1.000` → omitted, `q=0.50` → `q=0.5`) and
///   exact duplicates removed. A member that does not parse (no coding token, a malformed or
///   repeated `q`, trailing garbage) is kept verbatim.
/// - No lines gives the same (empty) result as one empty line; [`Vary::variant_key`] tells
///   absence apart, and maps an `Accept-Encoding` normalised to `identity` to absence.
pub fn normalise(name: &HeaderName, values: GetAll<'_>) -> Bytes {
    if name == ACCEPT_ENCODING {
        return normalise_accept_encoding(values);
    }
    let mut out = Vec::new();
    for (i, line) in values.into_iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        collapse_commas(trim_ows(line.as_bytes()), &mut out);
    }
    Bytes::from(out)
}

/// Appends `line` to `out`, rewriting every comma outside a quoted string (and the whitespace
/// around it) as `", "`.
fn collapse_commas(line: &[u8], out: &mut Vec<u8>) {
    let mut in_quotes = false;
    let mut escaped = false;
    // Skipping the whitespace that follows a comma.
    let mut after_comma = false;
    // Where the run of whitespace that `out` currently ends with started, if it does.
    let mut pending_ws: Option<usize> = None;
    for &b in line {
        if in_quotes {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_quotes = false;
            }
            continue;
        }
        if is_ows(b) {
            if !after_comma {
                pending_ws.get_or_insert(out.len());
                out.push(b);
            }
            continue;
        }
        after_comma = false;
        if b == b',' {
            if let Some(start) = pending_ws.take() {
                out.truncate(start);
            }
            out.extend_from_slice(b", ");
            after_comma = true;
            continue;
        }
        pending_ws = None;
        in_quotes = b == b'"';
        out.push(b);
    }
}

/// See [`normalise`].
fn normalise_accept_encoding(values: GetAll<'_>) -> Bytes {
    let mut members: Vec<Vec<u8>> = Vec::new();
    for line in values {
        for member in split_list(line.as_bytes()) {
            let member = trim_ows(member);
            if member.is_empty() {
                continue;
            }
            match parse_coding(member) {
                Some((_, 0)) => {}
                Some((coding, q)) => {
                    let mut m: Vec<u8> = coding.to_ascii_lowercase();
                    if q < 1000 {
                        m.extend_from_slice(b";q=");
                        push_qvalue(q, &mut m);
                    }
                    members.push(m);
                }
                None => members.push(member.to_vec()),
            }
        }
    }
    members.sort_unstable();
    members.dedup();
    Bytes::from(members.join(&b", "[..]))
}

/// Splits a list at commas outside quoted strings.
fn split_list(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut in_quotes = false;
    let mut escaped = false;
    line.split(move |&b| {
        if in_quotes {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_quotes = false;
            }
            false
        } else {
            if b == b'"' {
                in_quotes = true;
            }
            b == b','
        }
    })
}

/// Parses `codings *( OWS ";" OWS token "=" ( token / quoted-string ) )` (tolerating whitespace
/// around `=`) into the coding and its weight in thousandths (1000 when absent).
///
/// `None` when the member is malformed or its `q` is malformed or repeated.
fn parse_coding(member: &[u8]) -> Option<(&[u8], u16)> {
    let coding_len = member
        .iter()
        .position(|&b| !is_tchar(b))
        .unwrap_or(member.len());
    if coding_len == 0 {
        return None;
    }
    let (coding, mut rest) = member.split_at(coding_len);
    let mut q = None;
    loop {
        rest = trim_start(rest);
        let Some((&b';', after)) = rest.split_first() else {
            return if rest.is_empty() {
                Some((coding, q.unwrap_or(1000)))
            } else {
                None
            };
        };
        rest = trim_start(after);
        let name_len = rest
            .iter()
            .position(|&b| !is_tchar(b))
            .unwrap_or(rest.len());
        if name_len == 0 {
            return None;
        }
        let (name, after) = rest.split_at(name_len);
        let Some((&b'=', after)) = trim_start(after).split_first() else {
            return None;
        };
        rest = trim_start(after);
        let (value, after) = param_value(rest)?;
        rest = after;
        if name.eq_ignore_ascii_case(b"q") {
            if q.is_some() {
                return None;
            }
            q = Some(parse_qvalue(value)?);
        }
    }
}

/// Splits a parameter value (token or quoted string, including the quotes) off the front of
/// `rest`.
fn param_value(rest: &[u8]) -> Option<(&[u8], &[u8])> {
    if rest.first() == Some(&b'"') {
        let mut i = 1;
        while let Some(&b) = rest.get(i) {
            match b {
                b'\\' => i += 2,
                b'"' => return Some(rest.split_at(i + 1)),
                _ => i += 1,
            }
        }
        return None;
    }
    let len = rest
        .iter()
        .position(|&b| !is_tchar(b))
        .unwrap_or(rest.len());
    (len > 0).then(|| rest.split_at(len))
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )` (RFC 9110 §12.4.2), in
/// thousandths.
fn parse_qvalue(v: &[u8]) -> Option<u16> {
    let (&int, rest) = v.split_first()?;
    let frac = match rest.split_first() {
        None => &[][..],
        Some((&b'.', frac)) if frac.len() <= 3 => frac,
        Some(_) => return None,
    };
    let mut thousandths: u16 = 0;
    let mut scale = 100;
    for &d in frac {
        if !d.is_ascii_digit() {
            return None;
        }
        thousandths += u16::from(d - b'0') * scale;
        scale /= 10;
    }
    match int {
        b'0' => Some(thousandths),
        b'1' if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Appends `0.xyz` for a weight below 1000, without trailing zeros (`0` for zero).
fn push_qvalue(q: u16, out: &mut Vec<u8>) {
    out.push(b'0');
    if q == 0 {
        return;
    }
    out.push(b'.');
    let digits = [
        b'0' + (q / 100 % 10) as u8,
        b'0' + (q / 10 % 10) as u8,
        b'0' + (q % 10) as u8,
    ];
    let mut len = digits.len();
    while len > 1 && digits.get(len - 1) == Some(&b'0') {
        len -= 1;
    }
    out.extend_from_slice(digits.get(..len).unwrap_or_default());
}

fn trim_start(bytes: &[u8]) -> &[u8] {
    let n = bytes
        .iter()
        .position(|&b| !is_ows(b))
        .unwrap_or(bytes.len());
    bytes.get(n..).unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::header::{HeaderValue, ACCEPT, ACCEPT_LANGUAGE, COOKIE, USER_AGENT};

    /// Pseudo-random header lines biased towards this syntax's special bytes.
    fn arbitrary_lines(seed: u64, count: usize) -> Vec<HeaderValue> {
        crate::testutil::arbitrary_lines(seed, count, b"abcgzipmx-=,;\" \t\\0123456789*.\x80\xff")
    }

    fn hm(pairs: &[(&str, &str)]) -> Fields {
        let mut h = Fields::new();
        for (n, v) in pairs {
            h.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn vary(lines: &[&str]) -> Vary {
        let pairs: Vec<(&str, &str)> = lines.iter().map(|l| ("vary", *l)).collect();
        Vary::parse(&hm(&pairs))
    }

    fn fields(names: &[&str]) -> Vary {
        Vary::Fields(
            names
                .iter()
                .map(|n| HeaderName::from_bytes(n.as_bytes()).unwrap())
                .collect(),
        )
    }

    fn norm(name: &HeaderName, lines: &[&str]) -> Bytes {
        let pairs: Vec<(&str, &str)> = lines.iter().map(|l| (name.as_str(), *l)).collect();
        normalise(name, hm(&pairs).get_all(name))
    }

    fn ae(lines: &[&str]) -> Bytes {
        norm(&ACCEPT_ENCODING, lines)
    }

    fn key(v: &Vary, request: &[(&str, &str)]) -> Option<Bytes> {
        v.variant_key(&hm(request))
    }

    // --- parse ---------------------------------------------------------------------------------

    #[test]
    fn parse_absent_and_empty() {
        assert_eq!(Vary::parse(&Fields::new()), Vary::None);
        assert_eq!(vary(&[""]), Vary::None);
        assert_eq!(vary(&[" , ,\t", ""]), Vary::None);
    }

    #[test]
    fn parse_star() {
        assert_eq!(vary(&["*"]), Vary::Any);
        assert_eq!(vary(&[" * "]), Vary::Any);
        assert_eq!(vary(&["accept, *"]), Vary::Any);
        assert_eq!(vary(&["accept", "*"]), Vary::Any);
        assert_eq!(vary(&["*, accept"]), Vary::Any);
    }

    #[test]
    fn parse_fields_lowercased_sorted_deduplicated() {
        assert_eq!(
            vary(&[
                "User-Agent, Accept-Encoding",
                "accept-encoding,ACCEPT",
                " accept \t"
            ]),
            fields(&["accept", "accept-encoding", "user-agent"])
        );
        assert_eq!(vary(&["X-Custom"]), fields(&["x-custom"]));
        assert_eq!(vary(&[",,Origin,,"]), fields(&["origin"]));
    }

    #[test]
    fn parse_invalid_member_is_any() {
        for l in [
            "accept, \"quoted\"",
            "accept encoding",
            "accept;q=1",
            "accept/x",
            "a=b",
            "(comment)",
        ] {
            assert_eq!(vary(&[l]), Vary::Any, "{l:?}");
        }
        let mut h = Fields::new();
        h.append(VARY, HeaderValue::from_bytes(b"accept, \xc3\xa9").unwrap());
        assert_eq!(Vary::parse(&h), Vary::Any);
        let mut h = Fields::new();
        h.append(VARY, HeaderValue::from_bytes(b"\xff").unwrap());
        assert_eq!(Vary::parse(&h), Vary::Any);
    }

    // --- variant_key ---------------------------------------------------------------------------

    #[test]
    fn key_for_any_and_none() {
        assert_eq!(key(&Vary::Any, &[("accept", "x")]), None);
        assert_eq!(key(&Vary::None, &[("accept", "x")]), Some(Bytes::new()));
        assert_eq!(key(&Vary::None, &[]), Some(Bytes::new()));
    }

    #[test]
    fn key_absent_differs_from_empty() {
        let v = fields(&["cookie"]);
        let absent = key(&v, &[]).unwrap();
        let empty = key(&v, &[("cookie", "")]).unwrap();
        let blank = key(&v, &[("cookie", "   ")]).unwrap();
        assert_ne!(absent, empty);
        assert_eq!(empty, blank);
        assert_eq!(&absent[..], b"cookie\0A");
        assert_eq!(&empty[..], b"cookie\0P\0\0\0\0\0\0\0\0");
        assert_ne!(absent, key(&Vary::None, &[]).unwrap());
    }

    #[test]
    fn key_encoding_layout() {
        let v = fields(&["accept", "user-agent"]);
        let k = key(&v, &[("user-agent", "x/1"), ("other", "ignored")]).unwrap();
        assert_eq!(&k[..], b"accept\0Auser-agent\0P\0\0\0\0\0\0\0\x03x/1");
    }

    #[test]
    fn key_depends_only_on_listed_fields() {
        let v = fields(&["accept-language"]);
        assert_eq!(
            key(&v, &[("accept-language", "en"), ("user-agent", "a")]),
            key(&v, &[("accept-language", "en"), ("user-agent", "b")]),
        );
        assert_ne!(
            key(&v, &[("accept-language", "en")]),
            key(&v, &[("accept-language", "de")]),
        );
        // Values are case-sensitive in general.
        assert_ne!(
            key(&v, &[("accept-language", "en")]),
            key(&v, &[("accept-language", "EN")]),
        );
    }

    #[test]
    fn key_is_unambiguous() {
        // Same bytes if values were simply concatenated.
        let v = fields(&["a", "b"]);
        assert_ne!(key(&v, &[("a", "xy")]), key(&v, &[("a", "x"), ("b", "y")]));
        assert_ne!(key(&v, &[("a", "A")]), key(&v, &[]));
        assert_ne!(key(&v, &[("b", "A")]), key(&v, &[]));
        // A value that spells out the encoding of a following field.
        assert_ne!(key(&v, &[("a", "x, b A")]), key(&v, &[("a", "x")]),);
        assert_ne!(key(&v, &[("a", ""), ("b", "")]), key(&v, &[("a", "")]));
        // Different Vary lists never share keys.
        assert_ne!(
            key(&fields(&["a"]), &[("a", "1")]),
            key(&fields(&["b"]), &[("b", "1")]),
        );
        assert_ne!(key(&fields(&["ab"]), &[]), key(&fields(&["a", "b"]), &[]));
    }

    #[test]
    fn key_combines_lines_like_a_single_list() {
        let v = fields(&["accept"]);
        assert_eq!(
            key(
                &v,
                &[("accept", "text/html"), ("accept", "application/json")]
            ),
            key(&v, &[("accept", "text/html,application/json")]),
        );
        assert_eq!(
            key(&v, &[("accept", " text/html ,\tapplication/json ")]),
            key(&v, &[("accept", "text/html, application/json")]),
        );
        // Order matters outside Accept-Encoding.
        assert_ne!(
            key(&v, &[("accept", "a, b")]),
            key(&v, &[("accept", "b, a")]),
        );
    }

    #[test]
    fn key_accept_encoding_equivalences() {
        let v = fields(&["accept-encoding"]);
        let k = |s: &str| key(&v, &[("accept-encoding", s)]);
        assert_eq!(k("gzip, br"), k("br,gzip"));
        assert_eq!(k("GZIP, Br"), k("br, gzip"));
        assert_eq!(k("gzip;q=1.0, br;q=1"), k("br, gzip"));
        assert_eq!(k("gzip;level=9"), k("gzip"));
        assert_eq!(k("gzip;q=0, br"), k("br"));
        assert_eq!(k("br;q=0.50"), k("br;Q=0.5"));
        assert_ne!(k("br;q=0.5"), k("br"));
        assert_ne!(k("gzip"), k("br"));
        // Multiple lines.
        assert_eq!(
            key(
                &v,
                &[("accept-encoding", "gzip"), ("accept-encoding", "br")]
            ),
            k("br, gzip")
        );
    }

    #[test]
    fn key_accept_encoding_identity_is_absent() {
        let v = fields(&["accept-encoding"]);
        let absent = key(&v, &[]);
        assert_eq!(key(&v, &[("accept-encoding", "identity")]), absent);
        assert_eq!(key(&v, &[("accept-encoding", " IDENTITY ")]), absent);
        assert_eq!(key(&v, &[("accept-encoding", "identity;q=1")]), absent);
        assert_eq!(
            key(&v, &[("accept-encoding", "identity, gzip;q=0")]),
            absent
        );
        assert_eq!(
            key(
                &v,
                &[
                    ("accept-encoding", "identity"),
                    ("accept-encoding", "identity")
                ]
            ),
            absent
        );
        // Present-but-empty stays distinct from absent.
        assert_ne!(key(&v, &[("accept-encoding", "")]), absent);
        assert_ne!(key(&v, &[("accept-encoding", "identity, gzip")]), absent);
        assert_ne!(key(&v, &[("accept-encoding", "identity;q=0.5")]), absent);
        // The identity rule is specific to Accept-Encoding.
        let te = fields(&["te"]);
        assert_ne!(key(&te, &[("te", "identity")]), key(&te, &[]));
    }

    #[test]
    fn key_with_several_fields() {
        let v = vary(&["Accept-Encoding, Accept-Language"]);
        assert_eq!(
            key(
                &v,
                &[("accept-language", "en"), ("accept-encoding", "br, gzip")]
            ),
            key(
                &v,
                &[("accept-encoding", "gzip,br"), ("accept-language", "en")]
            ),
        );
        assert_ne!(
            key(
                &v,
                &[("accept-language", "en"), ("accept-encoding", "gzip")]
            ),
            key(&v, &[("accept-language", "en")]),
        );
    }

    #[test]
    fn key_with_non_ascii_values() {
        let v = fields(&["x-name"]);
        let mut h = Fields::new();
        h.append(
            "x-name",
            HeaderValue::from_bytes(b"caf\xc3\xa9 , \xff").unwrap(),
        );
        let k = v.variant_key(&h).unwrap();
        assert!(k.ends_with(b"caf\xc3\xa9, \xff"));
    }

    // --- normalise -----------------------------------------------------------------------------

    #[test]
    fn normalise_general_whitespace_and_lines() {
        assert_eq!(norm(&ACCEPT, &["a ,  b,c"]), "a, b, c");
        assert_eq!(norm(&ACCEPT, &["  a  "]), "a");
        assert_eq!(norm(&ACCEPT, &["a", "b"]), "a, b");
        assert_eq!(norm(&ACCEPT, &["a ", " b, c"]), "a, b, c");
        assert_eq!(norm(&ACCEPT, &["a,,b"]), "a, , b");
        assert_eq!(norm(&ACCEPT, &["a", ",b"]), norm(&ACCEPT, &["a,,b"]));
        assert_eq!(norm(&ACCEPT, &["a", ""]), "a, ");
        assert_eq!(norm(&ACCEPT, &[""]), "");
        assert_eq!(norm(&ACCEPT, &[]), "");
        // Whitespace not next to a comma is preserved, and so is case.
        assert_eq!(
            norm(&USER_AGENT, &["Mozilla/5.0  (X11; Linux)"]),
            "Mozilla/5.0  (X11; Linux)"
        );
        assert_eq!(norm(&COOKIE, &["a=1; b=2"]), "a=1; b=2");
    }

    #[test]
    fn normalise_respects_quoted_strings() {
        assert_eq!(
            norm(&ACCEPT, &[r#"text/x; p="a , b" ,  c"#]),
            r#"text/x; p="a , b", c"#
        );
        assert_eq!(
            norm(&ACCEPT, &[r#"x; p="a\" , b" , c"#]),
            r#"x; p="a\" , b", c"#
        );
        // An unterminated quote swallows the rest of its line only.
        assert_eq!(norm(&ACCEPT, &[r#"x="a , b"#, "c ,d"]), r#"x="a , b, c, d"#);
    }

    #[test]
    fn normalise_accept_encoding() {
        assert_eq!(ae(&["gzip, deflate, br"]), "br, deflate, gzip");
        assert_eq!(ae(&["GZip;Q=0.8, BR"]), "br, gzip;q=0.8");
        assert_eq!(ae(&["gzip ; q = 0.5 ; level=9"]), "gzip;q=0.5");
        assert_eq!(ae(&["gzip;level=\"9, 8\";q=0.250"]), "gzip;q=0.25");
        assert_eq!(ae(&["gzip;q=0.001, br;q=0.010"]), "br;q=0.01, gzip;q=0.001");
        assert_eq!(ae(&["gzip;q=0, br;q=0.000, zstd;q=0."]), "");
        assert_eq!(ae(&["*;q=0.1, identity"]), "*;q=0.1, identity");
        assert_eq!(ae(&["gzip, gzip, GZIP"]), "gzip");
        assert_eq!(ae(&[",, gzip ,,"]), "gzip");
        assert_eq!(ae(&["", "br"]), "br");
        assert_eq!(ae(&[]), "");
        assert_eq!(ae(&[""]), "");
    }

    #[test]
    fn normalise_accept_encoding_keeps_unparsable_members_verbatim() {
        // Invalid qvalues.
        assert_eq!(ae(&["gzip;q=2"]), "gzip;q=2");
        assert_eq!(ae(&["gzip;q=1.5"]), "gzip;q=1.5");
        assert_eq!(ae(&["gzip;q=0.1234"]), "gzip;q=0.1234");
        assert_eq!(ae(&["gzip;q=-1"]), "gzip;q=-1");
        assert_eq!(ae(&["gzip;q="]), "gzip;q=");
        assert_eq!(ae(&["gzip;q"]), "gzip;q");
        assert_eq!(ae(&["gzip;q=\"0.5\""]), "gzip;q=\"0.5\"");
        assert_eq!(ae(&["gzip;q=0.5;q=0.5"]), "gzip;q=0.5;q=0.5");
        // Structural garbage.
        assert_eq!(ae(&["gzip x"]), "gzip x");
        assert_eq!(ae(&["\"gzip\""]), "\"gzip\"");
        assert_eq!(ae(&[";q=1"]), ";q=1");
        assert_eq!(ae(&["gzip;"]), "gzip;");
        assert_eq!(ae(&["gzip;x=\"open"]), "gzip;x=\"open");
        assert_ne!(ae(&["gzip;q=2"]), ae(&["gzip"]));
        // Mixed with valid members, still sorted.
        assert_eq!(ae(&["br, Gzip;q=x"]), "Gzip;q=x, br");
    }

    #[test]
    fn normalise_accept_encoding_non_ascii() {
        let mut h = Fields::new();
        h.append(
            ACCEPT_ENCODING,
            HeaderValue::from_bytes(b"gzip, \xff\xfe;q=0, br;x=\xc3").unwrap(),
        );
        let n = normalise(&ACCEPT_ENCODING, h.get_all(ACCEPT_ENCODING));
        assert_eq!(&n[..], b"br;x=\xc3, gzip, \xff\xfe;q=0");
    }

    #[test]
    fn normalise_accept_language_is_not_reordered() {
        assert_eq!(norm(&ACCEPT_LANGUAGE, &["de, en;q=0.5"]), "de, en;q=0.5");
        assert_ne!(
            norm(&ACCEPT_LANGUAGE, &["en, de"]),
            norm(&ACCEPT_LANGUAGE, &["de, en"])
        );
    }

    #[test]
    fn qvalue_parsing() {
        let q = |s: &str| parse_qvalue(s.as_bytes());
        assert_eq!(q("0"), Some(0));
        assert_eq!(q("0."), Some(0));
        assert_eq!(q("0.5"), Some(500));
        assert_eq!(q("0.05"), Some(50));
        assert_eq!(q("0.999"), Some(999));
        assert_eq!(q("1"), Some(1000));
        assert_eq!(q("1.000"), Some(1000));
        assert_eq!(q("1."), Some(1000));
        for bad in [
            "", "1.001", "2", "0.1234", ".5", "0,5", "00.5", "0.a", "-0", "1.0a",
        ] {
            assert_eq!(q(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn qvalue_formatting() {
        let f = |q: u16| {
            let mut v = Vec::new();
            push_qvalue(q, &mut v);
            String::from_utf8(v).unwrap()
        };
        assert_eq!(f(0), "0");
        assert_eq!(f(1), "0.001");
        assert_eq!(f(10), "0.01");
        assert_eq!(f(500), "0.5");
        assert_eq!(f(999), "0.999");
        assert_eq!(f(120), "0.12");
    }

    #[test]
    fn arbitrary_bytes_do_not_panic() {
        let lines = arbitrary_lines(3, 12_000);
        for pair in lines.chunks(2) {
            let mut h = Fields::new();
            for line in pair {
                h.append(VARY, line.clone());
                h.append(ACCEPT_ENCODING, line.clone());
                h.append(ACCEPT, line.clone());
            }
            let v = Vary::parse(&h);
            if let Vary::Fields(f) = &v {
                assert!(!f.is_empty());
            }
            let _ = v.variant_key(&h);
            let _ = fields(&["accept", "accept-encoding"]).variant_key(&h);
        }
    }
}
