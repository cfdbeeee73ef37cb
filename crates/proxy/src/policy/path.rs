//! Request paths made safe to match: the one normalisation behind path rules.
//!
//! A deny rule on `/admin` must hold against `/%61dmin`, `/./admin`, `/x/../admin` and
//! `//admin`, which an origin serves as `/admin`. recv therefore rewrites the request's path
//! into its [`normalize`]d form before anything reads it: that form is what path rules see
//! (through [`match_form`]), what the cache keys on and what is forwarded, so the origin is
//! never sent a spelling the rules did not check.
//!
//! The forwarded form changes only what RFC 3986 §6.2.2 calls equivalent, plus merged slashes
//! (as NGINX's `merge_slashes`): percent-encoded unreserved characters decoded (`%61` → `a`),
//! other percent-encodings in upper case (`%2f` → `%2F`), `.` and `..` segments removed
//! (§5.2.4), runs of `/` merged. Reserved characters stay encoded there (`%2F` is not `/` to an
//! origin), but path rules match against [`match_form`], which decodes them too and normalises
//! again, so `/%2Fadmin` is `/admin` to a rule. A `%` not followed by two hex digits is refused
//! (400): no origin reads it the same way as another.

use std::borrow::Cow;

use rampart_screen::inspect::{hex, percent_decode};

/// A `%` not followed by two hexadecimal digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadPercentEncoding;

/// The normalised form of `path` (without query), or `None` when it already is normal (the
/// common case, which allocates nothing).
pub fn normalize(path: &str) -> Result<Option<String>, BadPercentEncoding> {
    if is_normal(path.as_bytes()) {
        return Ok(None);
    }
    let decoded = decode_unreserved(path.as_bytes())?;
    let out = remove_dot_segments(&decoded);
    if out == path.as_bytes() {
        // Percent-encodings that were normal already (`/a%2Fb`): nothing to rewrite.
        return Ok(None);
    }
    // invariant: only ASCII unreserved bytes were decoded, so the bytes are still ASCII.
    Ok(Some(String::from_utf8_lossy(&out).into_owned()))
}

/// The path as path rules see it: a [`normalize`]d path with every percent-encoding decoded,
/// `\` read as `/` (IIS-style origins do) and `;parameters` cut from each segment (Tomcat-style
/// origins serve `/a/..;/admin` as `/admin`), then normalised again: `%2F..%2F` and `..;` are
/// `..` segments too. Bytes that are not UTF-8 become U+FFFD.
pub fn match_form(normalised: &str) -> Cow<'_, str> {
    if !normalised.bytes().any(|b| matches!(b, b'%' | b';' | b'\\')) {
        return Cow::Borrowed(normalised);
    }
    let decoded = percent_decode(normalised.as_bytes(), false);
    let mut plain = Vec::with_capacity(decoded.len());
    let mut in_params = false;
    for &b in decoded.iter() {
        match b {
            b'/' | b'\\' => {
                in_params = false;
                plain.push(b'/');
            }
            b';' => in_params = true,
            _ if in_params => {}
            _ => plain.push(b),
        }
    }
    let out = remove_dot_segments(&plain);
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// No `%`, no `//`, no `.` or `..` segment: nothing to do.
fn is_normal(p: &[u8]) -> bool {
    let mut prev = 0u8;
    for (i, &b) in p.iter().enumerate() {
        match b {
            b'%' => return false,
            b'/' if prev == b'/' => return false,
            b'.' if prev == b'/' => {
                // `/.` starts a dot segment when followed by `/`, the end, or `./`/`.` + end.
                let rest = &p[i + 1..];
                if rest.is_empty()
                    || rest[0] == b'/'
                    || (rest[0] == b'.' && (rest.len() == 1 || rest[1] == b'/'))
                {
                    return false;
                }
            }
            _ => {}
        }
        prev = b;
    }
    true
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Decodes the percent-encodings of unreserved characters; the others are kept with upper-case
/// hex digits.
fn decode_unreserved(p: &[u8]) -> Result<Vec<u8>, BadPercentEncoding> {
    let mut out = Vec::with_capacity(p.len());
    let mut i = 0;
    while i < p.len() {
        if p[i] == b'%' {
            let (Some(hi), Some(lo)) = (
                p.get(i + 1).copied().and_then(hex),
                p.get(i + 2).copied().and_then(hex),
            ) else {
                return Err(BadPercentEncoding);
            };
            let byte = hi << 4 | lo;
            if is_unreserved(byte) {
                out.push(byte);
            } else {
                out.push(b'%');
                out.extend_from_slice(&[
                    p[i + 1].to_ascii_uppercase(),
                    p[i + 2].to_ascii_uppercase(),
                ]);
            }
            i += 3;
        } else {
            out.push(p[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// RFC 3986 §5.2.4 over segments, with empty segments (runs of `/`) dropped. Always starts with
/// `/`; keeps a trailing `/` (also the one a final `.` or `..` segment leaves).
fn remove_dot_segments(p: &[u8]) -> Vec<u8> {
    let mut segments: Vec<&[u8]> = Vec::new();
    let mut trailing_slash = false;
    for seg in p.split(|&b| b == b'/') {
        trailing_slash = false;
        match seg {
            b"" => trailing_slash = true,
            b"." => trailing_slash = true,
            b".." => {
                segments.pop();
                trailing_slash = true;
            }
            s => segments.push(s),
        }
    }
    let mut out = Vec::with_capacity(p.len());
    for s in &segments {
        out.push(b'/');
        out.extend_from_slice(s);
    }
    if trailing_slash || segments.is_empty() {
        out.push(b'/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(p: &str) -> String {
        match normalize(p) {
            Ok(Some(s)) => s,
            Ok(None) => p.to_owned(),
            Err(_) => "<400>".to_owned(),
        }
    }

    #[test]
    fn normal_paths_are_left_alone() {
        for p in [
            "/",
            "/admin",
            "/a/b/",
            "/a.b/c..d/.e",
            "/a/..b",
            "/x?",
            "/a%2Fb",
            "/%C3%A9",
        ] {
            assert_eq!(normalize(p), Ok(None), "{p}");
        }
    }

    #[test]
    fn the_bypass_spellings_become_the_plain_path() {
        assert_eq!(n("/%61dmin"), "/admin");
        assert_eq!(n("/./admin"), "/admin");
        assert_eq!(n("/x/../admin"), "/admin");
        assert_eq!(n("//admin"), "/admin");
        assert_eq!(n("/%2e/admin"), "/admin");
        assert_eq!(n("/%2E%2E/admin"), "/admin");
        assert_eq!(n("/a/b/../../../admin"), "/admin");
        assert_eq!(n("/.%2e/admin/"), "/admin/");
    }

    #[test]
    fn dot_segments_and_slashes() {
        assert_eq!(n("/a/."), "/a/");
        assert_eq!(n("/a/.."), "/");
        assert_eq!(n("/.."), "/");
        assert_eq!(n("/a//b///c"), "/a/b/c");
        assert_eq!(n("/a/b/"), "/a/b/");
        assert_eq!(n("/a/./b/./"), "/a/b/");
    }

    #[test]
    fn reserved_characters_stay_encoded_in_upper_case() {
        assert_eq!(n("/a%2fb"), "/a%2Fb");
        assert_eq!(n("/q%3F%3d"), "/q%3F%3D");
        assert_eq!(n("/caf%c3%a9"), "/caf%C3%A9");
        assert_eq!(n("/%7euser"), "/~user");
    }

    #[test]
    fn malformed_percent_encoding_is_refused() {
        for p in ["/%", "/%4", "/%zz", "/a%g1"] {
            assert_eq!(normalize(p), Err(BadPercentEncoding), "{p}");
        }
    }

    #[test]
    fn rules_see_encoded_slashes_and_dots_decoded() {
        assert_eq!(match_form(&n("/%2Fadmin")), "/admin");
        assert_eq!(match_form(&n("/x%2F..%2Fadmin")), "/admin");
        assert_eq!(match_form(&n("/caf%C3%A9")), "/café");
        assert_eq!(match_form("/plain"), "/plain");
        // Path parameters and backslashes, as Tomcat- and IIS-style origins read them.
        assert_eq!(match_form(&n("/public/..;/admin")), "/admin");
        assert_eq!(match_form(&n("/admin;jsessionid=1/x")), "/admin/x");
        assert_eq!(match_form(&n("/x\\..\\admin")), "/admin");
        assert_eq!(match_form(&n("/x%5C..%5Cadmin")), "/admin");
    }
}
