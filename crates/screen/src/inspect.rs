//! Where SQL-injection screening looks (ARC2-COMPAT §9.2, recommended reading): the decoded
//! path, query parameter names and values, the `Cookie` header, and form-urlencoded and JSON
//! request bodies. Arbitrary other headers are not inspected.
//!
//! Values are percent-decoded once (and `+` is a space in queries and forms); when the decoded
//! value still holds a `%XX` escape it is decoded and checked a second time, since an origin
//! that decodes twice would see that.

use std::borrow::Cow;

use crate::sqli::Detector;

/// Which part of the request carried the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    Path,
    QueryName,
    QueryValue,
    Cookie,
    FormName,
    FormValue,
    Json,
}

impl Location {
    pub fn as_str(self) -> &'static str {
        match self {
            Location::Path => "path",
            Location::QueryName => "query parameter name",
            Location::QueryValue => "query parameter",
            Location::Cookie => "cookie",
            Location::FormName => "form field name",
            Location::FormValue => "form field",
            Location::Json => "JSON value",
        }
    }
}

/// A detected payload: where, under which name, and the engine's fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub location: Location,
    /// The parameter, cookie or JSON key (the path segment for [`Location::Path`]), decoded and
    /// cut to 64 bytes for logging.
    pub name: String,
    pub fingerprint: String,
}

fn finding(location: Location, name: &[u8], fingerprint: String) -> Finding {
    let name = &name[..name.len().min(64)];
    Finding {
        location,
        name: String::from_utf8_lossy(name).into_owned(),
        fingerprint,
    }
}

/// Decodes `%XX` escapes (malformed ones are kept as they are) and, when `plus` is set, `+` as
/// a space. Borrows when there is nothing to decode.
pub fn percent_decode(input: &[u8], plus: bool) -> Cow<'_, [u8]> {
    if !input.iter().any(|&b| b == b'%' || (plus && b == b'+')) {
        return Cow::Borrowed(input);
    }
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        let b = input[i];
        if b == b'%' && i + 2 < input.len() {
            if let (Some(h), Some(l)) = (hex(input[i + 1]), hex(input[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(if plus && b == b'+' { b' ' } else { b });
        i += 1;
    }
    Cow::Owned(out)
}

/// The value of one hexadecimal digit.
pub fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn has_escape(v: &[u8]) -> bool {
    v.windows(3)
        .any(|w| w[0] == b'%' && hex(w[1]).is_some() && hex(w[2]).is_some())
}

/// Runs the detector on a raw (encoded) value: once decoded, and again decoded twice when the
/// first decoding left an escape behind.
fn check_encoded(d: &dyn Detector, raw: &[u8], plus: bool) -> Option<String> {
    let once = percent_decode(raw, plus);
    if let Some(fp) = d.detect(&once) {
        return Some(fp);
    }
    if has_escape(&once) {
        let twice = percent_decode(&once, plus);
        return d.detect(&twice);
    }
    None
}

/// The request path (without query). Each decoded segment is checked; the whole path too when
/// it contains SQL comment markers, which attackers use in place of spaces (`1/**/UNION/**/…`).
pub fn path(d: &dyn Detector, path: &str) -> Option<Finding> {
    let raw = path.as_bytes();
    for seg in raw.split(|&b| b == b'/').filter(|s| !s.is_empty()) {
        if let Some(fp) = check_encoded(d, seg, false) {
            return Some(finding(Location::Path, &percent_decode(seg, false), fp));
        }
    }
    let decoded = percent_decode(raw, false);
    if decoded.windows(2).any(|w| w == b"/*" || w == b"*/") {
        let start = decoded
            .iter()
            .position(|&b| b != b'/')
            .unwrap_or(decoded.len());
        if let Some(fp) = d.detect(&decoded[start..]) {
            return Some(finding(Location::Path, &decoded, fp));
        }
    }
    None
}

/// `a=1&b=2` pairs of a query string or form body: names and values.
fn pairs(
    d: &dyn Detector,
    input: &[u8],
    name_loc: Location,
    value_loc: Location,
) -> Option<Finding> {
    for pair in input.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        let (name, value) = match pair.iter().position(|&b| b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &pair[..0]),
        };
        if let Some(fp) = check_encoded(d, name, true) {
            return Some(finding(name_loc, &percent_decode(name, true), fp));
        }
        if let Some(fp) = check_encoded(d, value, true) {
            return Some(finding(value_loc, &percent_decode(name, true), fp));
        }
    }
    None
}

/// A query string (without the `?`).
pub fn query(d: &dyn Detector, query: &str) -> Option<Finding> {
    pairs(
        d,
        query.as_bytes(),
        Location::QueryName,
        Location::QueryValue,
    )
}

/// One `Cookie` header value: `name=value; name2=value2`. Values are checked (percent-decoded,
/// `+` kept); names are not user-visible input in practice and are skipped.
pub fn cookies(d: &dyn Detector, header: &[u8]) -> Option<Finding> {
    for c in header.split(|&b| b == b';') {
        let c = c.trim_ascii();
        let Some(i) = c.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (name, mut value) = (&c[..i], &c[i + 1..]);
        if value.len() >= 2 && value[0] == b'"' && value[value.len() - 1] == b'"' {
            value = &value[1..value.len() - 1];
        }
        if let Some(fp) = check_encoded(d, value, false) {
            return Some(finding(Location::Cookie, name, fp));
        }
    }
    None
}

/// What kind of body screening understands, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    Form,
    Json,
}

impl BodyKind {
    /// `application/x-www-form-urlencoded` → Form; `application/json` and `+json` types → Json.
    pub fn from_content_type(ct: &[u8]) -> Option<BodyKind> {
        let essence = ct.split(|&b| b == b';').next()?.trim_ascii();
        let lower = essence.to_ascii_lowercase();
        if lower == b"application/x-www-form-urlencoded" {
            Some(BodyKind::Form)
        } else if lower == b"application/json" || lower.ends_with(b"+json") {
            Some(BodyKind::Json)
        } else {
            None
        }
    }
}

/// A complete request body of the given kind.
pub fn body(d: &dyn Detector, kind: BodyKind, body: &[u8]) -> Option<Finding> {
    match kind {
        BodyKind::Form => pairs(d, body, Location::FormName, Location::FormValue),
        BodyKind::Json => json(d, body),
    }
}

/// Every string in a JSON document (object keys and values), unescaped. The scanner does not
/// validate the document: whatever the origin's parser does with broken JSON, every quoted
/// string in it is checked.
pub fn json(d: &dyn Detector, doc: &[u8]) -> Option<Finding> {
    let mut last_key: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < doc.len() {
        if doc[i] != b'"' {
            i += 1;
            continue;
        }
        let (s, end) = json_string(doc, i + 1);
        i = end;
        // A string followed by ':' is an object key.
        let mut j = i;
        while j < doc.len() && doc[j].is_ascii_whitespace() {
            j += 1;
        }
        let is_key = doc.get(j) == Some(&b':');
        if let Some(fp) = d.detect(&s) {
            let name = if is_key { &s } else { &last_key };
            return Some(finding(Location::Json, name, fp));
        }
        if is_key {
            last_key = s;
        }
    }
    None
}

/// Reads a JSON string starting after its opening quote; returns the unescaped bytes and the
/// index after the closing quote (or the end of input).
fn json_string(doc: &[u8], mut i: usize) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    while i < doc.len() {
        match doc[i] {
            b'"' => return (out, i + 1),
            b'\\' if i + 1 < doc.len() => {
                let e = doc[i + 1];
                i += 2;
                match e {
                    b'n' => out.push(b'\n'),
                    b't' => out.push(b'\t'),
                    b'r' => out.push(b'\r'),
                    b'b' => out.push(8),
                    b'f' => out.push(12),
                    b'u' => {
                        let code = doc
                            .get(i..i + 4)
                            .and_then(|h| std::str::from_utf8(h).ok())
                            .and_then(|h| u32::from_str_radix(h, 16).ok());
                        match code {
                            Some(c) => {
                                i += 4;
                                let ch = char::from_u32(c).unwrap_or('\u{fffd}');
                                let mut buf = [0u8; 4];
                                out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                            }
                            None => out.push(b'u'),
                        }
                    }
                    other => out.push(other),
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    (out, i)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::sqli::Libinjection;

    #[test]
    fn decoding() {
        assert_eq!(&*percent_decode(b"a%20b+c", true), b"a b c");
        assert_eq!(&*percent_decode(b"a%20b+c", false), b"a b+c");
        assert_eq!(&*percent_decode(b"%zz%4", false), b"%zz%4");
        assert_eq!(&*percent_decode(b"100%", true), b"100%");
        assert_eq!(&*percent_decode(b"%2527", false), b"%27");
    }

    #[test]
    fn finds_payloads_where_they_hide() {
        let d = &Libinjection;
        let f = query(d, "q=shoes&id=1%27%20OR%20%271%27%3D%271").unwrap();
        assert_eq!((f.location, f.name.as_str()), (Location::QueryValue, "id"));
        assert!(query(d, "q=running+shoes&page=2&sort=price").is_none());
        let f = query(d, "q=1+union+select+1,2,3--").unwrap();
        assert_eq!(f.name, "q");
        // Double-encoded quote.
        assert!(query(d, "id=1%2527%20OR%20%25271%2527%3D%25271").is_some());
        let f = cookies(d, b"session=abc; pref=1' OR '1'='1").unwrap();
        assert_eq!((f.location, f.name.as_str()), (Location::Cookie, "pref"));
        assert!(cookies(d, b"session=abc123; lang=en-US").is_none());
        let f = path(d, "/item/1%27%20OR%20%271%27=%271").unwrap();
        assert_eq!(f.location, Location::Path);
        assert!(path(d, "/1/**/UNION/**/SELECT/**/password/**/FROM/**/users").is_some());
        assert!(path(d, "/static/app.v2.js").is_none());
        let f = body(d, BodyKind::Form, b"user=admin%27--&pass=x").unwrap();
        assert_eq!((f.location, f.name.as_str()), (Location::FormValue, "user"));
        let f = json(d, br#"{"a":{"user":"admin' OR '1'='1' --"}}"#).unwrap();
        assert_eq!((f.location, f.name.as_str()), (Location::Json, "user"));
        let f = json(d, br#"{"list":["ok","1\u0027 or 1=1 --"]}"#).unwrap();
        assert_eq!(f.name, "list");
        assert!(json(
            d,
            br#"{"query":"running shoes","page":2,"note":"it's fine"}"#
        )
        .is_none());
    }

    #[test]
    fn content_types() {
        assert_eq!(
            BodyKind::from_content_type(b"application/x-www-form-urlencoded; charset=utf-8"),
            Some(BodyKind::Form)
        );
        assert_eq!(
            BodyKind::from_content_type(b"Application/JSON"),
            Some(BodyKind::Json)
        );
        assert_eq!(
            BodyKind::from_content_type(b"application/vnd.api+json"),
            Some(BodyKind::Json)
        );
        assert_eq!(BodyKind::from_content_type(b"image/png"), None);
    }

    #[test]
    fn broken_input_never_panics() {
        let d = &Libinjection;
        for s in [
            &b"\""[..],
            b"\"\\",
            b"\"\\u12",
            b"{\"a\":\"\\u00e9\"",
            b"%",
            b"%%",
            b"=&=&",
        ] {
            let _ = json(d, s);
            let _ = body(d, BodyKind::Form, s);
            let _ = cookies(d, s);
        }
    }
}
