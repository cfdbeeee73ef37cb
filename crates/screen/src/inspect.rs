//! Where SQL-injection screening looks (rampart's reading, docs/arc2.md, "SQL injection"): the
//! decoded path (its segments and their `;` parameters), query parameter names and values (split at
//! `&`, and again at `&` and `;`), the `Cookie` header, and form-urlencoded, multipart and JSON
//! request bodies. Arbitrary other headers are not inspected.
//!
//! What an origin's common parsers read is screened, however they read it; what they could read
//! two ways is refused instead ([`ambiguous_content_type`]). Values are percent-decoded (and `+`
//! is a space in queries and forms); while the decoded value still holds a `%XX` escape it is
//! decoded again, up to [`MAX_DECODINGS`] times, and every stage is checked, since an origin
//! that decodes until nothing changes would see the last.

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

/// How many times a value is percent-decoded at most: a value encoded more often than that
/// is not a value any origin reads as SQL.
pub const MAX_DECODINGS: usize = 4;

/// Runs the detector on a raw (encoded) value: decoded, and decoded again while the decoding
/// leaves an escape behind (at most [`MAX_DECODINGS`] times), each stage checked.
fn check_encoded(d: &dyn Detector, raw: &[u8], plus: bool) -> Option<String> {
    let mut value = percent_decode(raw, plus);
    if let Some(fp) = d.detect(&value) {
        return Some(fp);
    }
    for _ in 1..MAX_DECODINGS {
        if !has_escape(&value) {
            return None;
        }
        let next = percent_decode(&value, plus).into_owned();
        if let Some(fp) = d.detect(&next) {
            return Some(fp);
        }
        value = Cow::Owned(next);
    }
    None
}

/// The request path (without query). Each decoded segment is checked, and each of its `;`
/// parameters (`/x;id=1`: Java servers and Rails read them), name and value; the whole path too
/// when it contains SQL comment markers, which attackers use in place of spaces
/// (`1/**/UNION/**/…`).
pub fn path(d: &dyn Detector, path: &str) -> Option<Finding> {
    let raw = path.as_bytes();
    for seg in raw.split(|&b| b == b'/').filter(|s| !s.is_empty()) {
        if let Some(fp) = check_encoded(d, seg, false) {
            return Some(finding(Location::Path, &percent_decode(seg, false), fp));
        }
        if !seg.contains(&b';') {
            continue;
        }
        for param in seg.split(|&b| b == b';').skip(1) {
            let (name, value) = split_pair(param);
            for part in [name, value] {
                if let Some(fp) = check_encoded(d, part, false) {
                    return Some(finding(Location::Path, &percent_decode(name, false), fp));
                }
            }
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

/// `name=value` (a bare `name` has an empty value).
fn split_pair(pair: &[u8]) -> (&[u8], &[u8]) {
    match pair.iter().position(|&b| b == b'=') {
        Some(i) => (&pair[..i], &pair[i + 1..]),
        None => (pair, &pair[..0]),
    }
}

/// `a=1&b=2` pairs of a query string or form body: names and values. When it holds a `;`, the
/// pairs are read a second time split at `;` as well: some frameworks take `;` for `&`
/// (`a=1;id=…`), the others read `1;id=…` as the value of `a`.
fn pairs(
    d: &dyn Detector,
    input: &[u8],
    name_loc: Location,
    value_loc: Location,
) -> Option<Finding> {
    let by_amp = input.split(|&b| b == b'&');
    let found = pairs_in(d, by_amp, name_loc, value_loc);
    if found.is_some() || !input.contains(&b';') {
        return found;
    }
    let by_both = input.split(|&b| b == b'&' || b == b';');
    pairs_in(d, by_both, name_loc, value_loc)
}

fn pairs_in<'a>(
    d: &dyn Detector,
    pairs: impl Iterator<Item = &'a [u8]>,
    name_loc: Location,
    value_loc: Location,
) -> Option<Finding> {
    for pair in pairs.filter(|p| !p.is_empty()) {
        let (name, value) = split_pair(pair);
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
    /// `multipart/form-data`: PHP, Django, Rails and ASP.NET read its fields as parameters.
    Multipart,
}

impl BodyKind {
    /// `application/x-www-form-urlencoded` → Form; every JSON media type an application reads
    /// as JSON (`application/json`, `text/json`, `application/x-json`, `text/x-json` and any
    /// `+json` type: ASP.NET Core reads `text/json` and `application/*+json`) → Json;
    /// `multipart/form-data` → Multipart.
    pub fn from_content_type(ct: &[u8]) -> Option<BodyKind> {
        let essence = ct.split(|&b| b == b';').next()?.trim_ascii();
        let lower = essence.to_ascii_lowercase();
        match &lower[..] {
            b"application/x-www-form-urlencoded" => Some(BodyKind::Form),
            b"multipart/form-data" => Some(BodyKind::Multipart),
            b"application/json" | b"text/json" | b"application/x-json" | b"text/x-json" => {
                Some(BodyKind::Json)
            }
            l if l.ends_with(b"+json") => Some(BodyKind::Json),
            _ => None,
        }
    }
}

/// A complete request body of the given kind; `content_type` is the request's (a multipart
/// body's boundary is there).
pub fn body(d: &dyn Detector, kind: BodyKind, content_type: &[u8], body: &[u8]) -> Option<Finding> {
    match kind {
        BodyKind::Form => pairs(d, body, Location::FormName, Location::FormValue),
        BodyKind::Json => json(d, body),
        BodyKind::Multipart => multipart(d, content_type, body),
    }
}

/// Why a request's `Content-Type` could be read two ways, for a body screening reads: a
/// parameter given twice (`multipart/form-data; boundary=Z; boundary=B`: rampart would split
/// the body at one boundary, the origin's parser perhaps at the other). The request is refused
/// (400) rather than screened one way.
pub fn ambiguous_content_type(ct: &[u8]) -> Option<&'static str> {
    let mut seen: Vec<&[u8]> = Vec::new();
    for (name, _) in params(ct) {
        if seen.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            return Some("a Content-Type parameter given twice");
        }
        seen.push(name);
    }
    None
}

/// A `multipart/form-data` body (RFC 7578): each part's field names, and the content of every
/// part that is not a file (files are uploads, not parameters; their file names are checked).
/// A part is a file only when every common parser reads it as one: one `Content-Disposition`
/// line, with a `filename` parameter (PHP, Django and Rails read a part with `filename*` alone
/// as a field). A part with a JSON type is scanned as JSON too. Parsed leniently, as the
/// applications behind rampart do: LF line ends are accepted, and without a `boundary`
/// parameter the body's first `--` line is taken as the delimiter.
pub fn multipart(d: &dyn Detector, content_type: &[u8], body: &[u8]) -> Option<Finding> {
    let boundary = match param(content_type, b"boundary") {
        Some(b) if !b.is_empty() => b,
        _ => {
            let start = body.iter().position(|&b| b != b'\r' && b != b'\n')?;
            let line = body[start..].split(|&b| b == b'\n').next()?;
            line.strip_prefix(b"--")?.trim_ascii_end().to_vec()
        }
    };
    let delimiter = [&b"--"[..], &boundary].concat();
    for part in split_on(body, &delimiter).skip(1) {
        if part.starts_with(b"--") {
            break;
        }
        // Transport padding, then the line end that ends the delimiter line.
        let Some(nl) = part.iter().position(|&b| b == b'\n') else {
            continue;
        };
        let part = &part[nl + 1..];
        let (head, content) = match find(part, b"\r\n\r\n") {
            Some(i) => (&part[..i], &part[i + 4..]),
            None => match find(part, b"\n\n") {
                Some(i) => (&part[..i], &part[i + 2..]),
                None => (part, &part[..0]),
            },
        };
        // The line end before the next delimiter belongs to it.
        let content = content.strip_suffix(b"\n").unwrap_or(content);
        let content = content.strip_suffix(b"\r").unwrap_or(content);
        let mut name: Vec<u8> = Vec::new();
        let mut dispositions = 0;
        let mut filename = false;
        let mut json_part = false;
        for line in head.split(|&b| b == b'\n') {
            let line = line.trim_ascii();
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let (field, value) = (line[..colon].trim_ascii(), &line[colon + 1..]);
            if field.eq_ignore_ascii_case(b"content-disposition") {
                dispositions += 1;
                for (key, v) in params(value) {
                    let is = |k: &[u8]| key.eq_ignore_ascii_case(k);
                    if is(b"name") || is(b"name*") {
                        if let Some(fp) = check_encoded(d, &v, false) {
                            return Some(finding(Location::FormName, &v, fp));
                        }
                        if name.is_empty() {
                            name = v;
                        }
                    } else if is(b"filename") || is(b"filename*") {
                        filename |= is(b"filename");
                        if let Some(fp) = check_encoded(d, &v, false) {
                            return Some(finding(Location::FormValue, &name, fp));
                        }
                    }
                }
            } else if field.eq_ignore_ascii_case(b"content-type") {
                json_part |= BodyKind::from_content_type(value) == Some(BodyKind::Json);
            }
        }
        if dispositions == 1 && filename {
            continue;
        }
        if json_part {
            if let Some(f) = json(d, content) {
                return Some(f);
            }
        }
        if let Some(fp) = check_encoded(d, content, false) {
            return Some(finding(Location::FormValue, &name, fp));
        }
    }
    None
}

/// The value of parameter `key` (case-insensitive; the first when it is given twice) in a
/// header value such as `form-data; name="a"` or `multipart/form-data; boundary=x`, unquoted.
fn param(header: &[u8], key: &[u8]) -> Option<Vec<u8>> {
    params(header)
        .find(|(name, _)| name.eq_ignore_ascii_case(key))
        .map(|(_, value)| value)
}

/// The parameters of a header value such as `form-data; name="a"; filename=b` (those after
/// its first `;`), in order: each name, and its value unquoted (`\` escapes taken off). A `;`
/// or `=` inside a quoted value is part of the value, as RFC 9110 §5.6.4 reads it.
fn params(header: &[u8]) -> impl Iterator<Item = (&[u8], Vec<u8>)> + '_ {
    let start = header
        .iter()
        .position(|&b| b == b';')
        .map_or(header.len(), |i| i + 1);
    let mut rest = &header[start..];
    std::iter::from_fn(move || loop {
        if rest.is_empty() {
            return None;
        }
        let end = rest
            .iter()
            .position(|&b| b == b'=' || b == b';')
            .unwrap_or(rest.len());
        let name = rest[..end].trim_ascii();
        if rest.get(end) != Some(&b'=') {
            // A parameter without a value.
            rest = rest.get(end + 1..).unwrap_or_default();
            if name.is_empty() {
                continue;
            }
            return Some((name, Vec::new()));
        }
        let v = rest[end + 1..].trim_ascii_start();
        let value = match v.strip_prefix(b"\"") {
            Some(quoted) => {
                let mut out = Vec::new();
                let mut i = 0;
                while i < quoted.len() && quoted[i] != b'"' {
                    if quoted[i] == b'\\' && i + 1 < quoted.len() {
                        i += 1;
                    }
                    out.push(quoted[i]);
                    i += 1;
                }
                let tail = quoted.get(i + 1..).unwrap_or_default();
                let next = tail
                    .iter()
                    .position(|&b| b == b';')
                    .map_or(tail.len(), |j| j + 1);
                rest = &tail[next..];
                out
            }
            None => {
                let end = v.iter().position(|&b| b == b';').unwrap_or(v.len());
                rest = v.get(end + 1..).unwrap_or_default();
                v[..end].trim_ascii().to_vec()
            }
        };
        if name.is_empty() {
            continue;
        }
        return Some((name, value));
    })
}

/// The first index of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `hay` cut at every occurrence of `sep` (the separators left out).
fn split_on<'a>(hay: &'a [u8], sep: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut rest = Some(hay);
    std::iter::from_fn(move || {
        let r = rest?;
        match find(r, sep) {
            Some(i) => {
                rest = Some(&r[i + sep.len()..]);
                Some(&r[..i])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
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
    use crate::sqli::Sqli;

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
        let d = &Sqli;
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
        let f = body(d, BodyKind::Form, b"", b"user=admin%27--&pass=x").unwrap();
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
    fn multipart_fields_are_screened_and_files_are_not() {
        let d = &Sqli;
        let ct = b"multipart/form-data; boundary=\"----x1\"";
        let form = |value: &str| {
            format!(
                "------x1\r\nContent-Disposition: form-data; name=\"q\"\r\n\r\nshoes\r\n\
                 ------x1\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\n{value}\r\n\
                 ------x1\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.sql\"\r\n\
                 Content-Type: text/plain\r\n\r\n1' OR '1'='1' --\r\n------x1--\r\n"
            )
        };
        let f = multipart(d, ct, form("admin' OR '1'='1' --").as_bytes()).unwrap();
        assert_eq!((f.location, f.name.as_str()), (Location::FormValue, "user"));
        // The same payload in an uploaded file's content is not a parameter.
        assert!(multipart(d, ct, form("admin").as_bytes()).is_none());
        // LF line ends, and no boundary parameter: the first `--` line is the delimiter.
        let lf = "--b\nContent-Disposition: form-data; name=id\n\n1 UNION SELECT password FROM users --\n--b--\n";
        assert!(multipart(d, b"multipart/form-data", lf.as_bytes()).is_some());
        // A JSON part is read as JSON.
        let js = "--b\r\nContent-Disposition: form-data; name=\"j\"\r\nContent-Type: application/json\r\n\r\n{\"u\":\"1\\u0027 or 1=1 --\"}\r\n--b--";
        let f = multipart(d, b"multipart/form-data; boundary=b", js.as_bytes()).unwrap();
        assert_eq!(f.location, Location::Json);
        // A file name is checked.
        let name = "--b\r\nContent-Disposition: form-data; name=\"f\"; filename=\"x' OR '1'='1' --\"\r\n\r\nhello\r\n--b--";
        assert!(multipart(d, b"multipart/form-data; boundary=b", name.as_bytes()).is_some());
    }

    /// each of these passed the screen while a common parser read the payload.
    #[test]
    fn payloads_past_parser_differences_are_found() {
        let d = &Sqli;
        let union = "1%20UNION%20SELECT%20password%20FROM%20users";
        assert!(path(d, &format!("/x/{union}")).is_some());
        // Path parameters, as Java servers and Rails read them.
        let f = path(d, &format!("/x;id={union}")).unwrap();
        assert_eq!((f.location, f.name.as_str()), (Location::Path, "id"));
        assert!(path(d, &format!("/a;{union}/b")).is_some());
        assert!(path(d, "/x;jsessionid=abc123/y;v=2").is_none());
        // `;` as a query separator; the `&` reading is still screened.
        let f = query(d, &format!("a=1;id={union}")).unwrap();
        assert_eq!(f.name, "id");
        assert!(query(d, "a=1%27%20OR%20%271%27%3D%271;b=2").is_some());
        assert!(query(d, "a=1;b=2&q=running+shoes").is_none());
        assert!(body(d, BodyKind::Form, b"", format!("a=1;id={union}").as_bytes()).is_some());
        // Encoded three and four times; five is past the bound.
        let mut v = String::from("1' OR '1'='1");
        for times in 1..=5 {
            v = v
                .bytes()
                .map(|b| match b {
                    b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => (b as char).to_string(),
                    _ => format!("%{b:02X}"),
                })
                .collect();
            let found = query(d, &format!("id={v}")).is_some();
            assert_eq!(found, times <= MAX_DECODINGS, "encoded {times} times: {v}");
        }
    }

    #[test]
    fn multipart_parts_are_fields_unless_every_parser_reads_a_file() {
        let d = &Sqli;
        let ct = b"multipart/form-data; boundary=B";
        let part = |disposition: &str| {
            format!("--B\r\n{disposition}\r\n\r\nadmin' OR '1'='1' --\r\n--B--\r\n")
        };
        for field in [
            "Content-Disposition: form-data; name=\"id\"; filename*=UTF-8''a.txt",
            "Content-Disposition: form-data; name=\"id; filename=a.txt\"",
            "Content-Disposition: form-data; name=\"id\"\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.txt\"",
            "Content-Type: text/plain",
        ] {
            assert!(multipart(d, ct, part(field).as_bytes()).is_some(), "{field}");
        }
        for file in [
            "Content-Disposition: form-data; name=\"f\"; filename=\"a.txt\"",
            "Content-Disposition: form-data; name=\"f\"; filename=a.txt; filename*=UTF-8''a.txt",
            "Content-Disposition: form-data; filename=\"a;b.txt\"; name=f",
        ] {
            assert!(multipart(d, ct, part(file).as_bytes()).is_none(), "{file}");
        }
        // A second name is screened too.
        let names = "--B\r\nContent-Disposition: form-data; name=ok; name=\"x' OR '1'='1' --\"\r\n\r\nv\r\n--B--";
        assert!(multipart(d, ct, names.as_bytes()).is_some());
    }

    #[test]
    fn parameters_are_read_with_their_quotes_and_ambiguity_is_found() {
        let got: Vec<(String, String)> =
            params(b"form-data; name=\"a;b=c\"; x ; filename=\"q\\\"z\" ;empty=; bare")
                .map(|(n, v)| {
                    (
                        String::from_utf8_lossy(n).into_owned(),
                        String::from_utf8_lossy(&v).into_owned(),
                    )
                })
                .collect();
        let want = [
            ("name", "a;b=c"),
            ("x", ""),
            ("filename", "q\"z"),
            ("empty", ""),
            ("bare", ""),
        ];
        assert_eq!(got.len(), want.len(), "{got:?}");
        for ((n, v), (wn, wv)) in got.iter().zip(want) {
            assert_eq!((n.as_str(), v.as_str()), (wn, wv));
        }
        for ambiguous in [
            &b"multipart/form-data; boundary=Z; boundary=B"[..],
            b"multipart/form-data; boundary=\"B\"; BOUNDARY=Z",
            b"application/json; charset=utf-8; Charset=utf-16",
        ] {
            assert!(
                ambiguous_content_type(ambiguous).is_some(),
                "{}",
                String::from_utf8_lossy(ambiguous)
            );
        }
        for clear in [
            &b"multipart/form-data; boundary=B"[..],
            b"multipart/form-data; boundary=\"a; boundary=b\"",
            b"application/json",
        ] {
            assert!(ambiguous_content_type(clear).is_none());
        }
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
        for json in [
            &b"text/json"[..],
            b"application/x-json",
            b"application/problem+json; charset=utf-8",
        ] {
            assert_eq!(BodyKind::from_content_type(json), Some(BodyKind::Json));
        }
        assert_eq!(
            BodyKind::from_content_type(b"multipart/form-data; boundary=x"),
            Some(BodyKind::Multipart)
        );
    }

    #[test]
    fn broken_input_never_panics() {
        let d = &Sqli;
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
            let _ = body(d, BodyKind::Form, b"", s);
            let _ = multipart(d, b"multipart/form-data; boundary=b", s);
            let _ = multipart(d, b"multipart/form-data", s);
            let _ = cookies(d, s);
        }
    }
}
