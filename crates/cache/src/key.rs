//! Cache keys.
//!
//! The primary key is the lower-cased host without its port, then the path, then `?query` unless
//! the rule ignores the query string (docs/arc2.md, "Cache keys"). Host and URL are separated by a
//! NUL byte, which cannot occur in either, so two hosts can never share an entry and purges can
//! address an entry by host, by URL prefix or by substring. A stored response that varies (RFC 9111
//! §4.1) lives under the primary key plus a variant key computed from the request.
//!
//! A plain key is the same for HTTP and HTTPS. A rule that keeps the schemes apart
//! (`cache_by_scheme`, or origins that differ by scheme; docs/arc2.md, "Cache keys") gives its
//! HTTPS requests keys marked [`CacheKey::for_https`], which never equal the plain ones. Purges and
//! invalidations address both (the marked key is the same resource: same host, same URL).

use std::fmt;
use std::hash::{Hash, Hasher};

use bytes::{BufMut, Bytes, BytesMut};

/// Host + path (+ query): what identifies a resource.
///
/// Hashing writes the host and the URL as two pieces, so a [`SlotKeyRef`] built from a
/// request's borrowed parts hashes the same without building the key (the hit path allocates
/// nothing for its lookup).
#[derive(Clone)]
pub struct CacheKey {
    bytes: Bytes,
    host_len: usize,
    /// The HTTPS side of a rule whose schemes reach different origins.
    https: bool,
}

impl PartialEq for CacheKey {
    fn eq(&self, other: &Self) -> bool {
        self.https == other.https && self.bytes == other.bytes
    }
}

impl Eq for CacheKey {}

impl Hash for CacheKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_parts(self.host(), self.url(), self.https, state);
    }
}

fn hash_parts<H: Hasher>(host: &[u8], url: &[u8], https: bool, state: &mut H) {
    state.write(host);
    state.write_u8(0xff);
    state.write(url);
    if https {
        state.write_u8(0xfe);
    }
}

/// The host and URL parts of a key, normalised except for the host's case.
fn parts<'a>(host: &'a str, path_and_query: &'a str, ignore_query: bool) -> (&'a str, &'a str) {
    parts_of_name(host_name(host), path_and_query, ignore_query)
}

/// [`parts`] of a host already without its port.
fn parts_of_name<'a>(
    host: &'a str,
    path_and_query: &'a str,
    ignore_query: bool,
) -> (&'a str, &'a str) {
    let host = host.strip_suffix('.').unwrap_or(host);
    let url = if ignore_query {
        path_and_query.split('?').next().unwrap_or(path_and_query)
    } else {
        path_and_query
    };
    (host, url)
}

impl CacheKey {
    /// Builds the key. `host` may carry a port and any case; `path_and_query` is the request
    /// target in origin form.
    pub fn new(host: &str, path_and_query: &str, ignore_query: bool) -> Self {
        let (host, url) = parts(host, path_and_query, ignore_query);
        let mut b = BytesMut::with_capacity(host.len() + 1 + url.len());
        for c in host.bytes() {
            b.put_u8(c.to_ascii_lowercase());
        }
        b.put_u8(0);
        b.put_slice(url.as_bytes());
        CacheKey {
            bytes: b.freeze(),
            host_len: host.len(),
            https: false,
        }
    }

    /// The key made of a host and a URL as [`CacheKey::host`] and [`CacheKey::url`] return
    /// them (from another instance); `None` when the host is not lower case or either holds
    /// a NUL.
    pub fn from_parts(host: &[u8], url: &[u8]) -> Option<Self> {
        if host.contains(&0) || url.contains(&0) || host.iter().any(u8::is_ascii_uppercase) {
            return None;
        }
        let mut b = BytesMut::with_capacity(host.len() + 1 + url.len());
        b.put_slice(host);
        b.put_u8(0);
        b.put_slice(url);
        Some(CacheKey {
            bytes: b.freeze(),
            host_len: host.len(),
            https: false,
        })
    }

    /// The key for the HTTPS side of a rule whose schemes reach different origins (`yes`), or
    /// the shared key.
    pub fn for_https(mut self, yes: bool) -> Self {
        self.https = yes;
        self
    }

    /// Whether this is the HTTPS side's key (see [`CacheKey::for_https`]).
    pub fn is_https(&self) -> bool {
        self.https
    }

    /// Same host and URL, whatever the scheme mark.
    pub fn same_resource(&self, other: &CacheKey) -> bool {
        self.bytes == other.bytes
    }

    /// The lower-cased host.
    pub fn host(&self) -> &[u8] {
        &self.bytes[..self.host_len]
    }

    /// Path and query as stored.
    pub fn url(&self) -> &[u8] {
        &self.bytes[self.host_len + 1..]
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}{}",
            if self.https { "https:" } else { "" },
            String::from_utf8_lossy(self.host()),
            String::from_utf8_lossy(self.url())
        )
    }
}

/// The key of one stored slot: the resource, and for varying responses the variant.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SlotKey {
    pub primary: CacheKey,
    /// `None`: the object itself (no Vary) or the Vary marker; `Some`: one variant.
    pub variant: Option<Bytes>,
}

impl Hash for SlotKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.primary.hash(state);
        match &self.variant {
            None => state.write_u8(0),
            Some(v) => {
                state.write_u8(1);
                state.write(v);
            }
        }
    }
}

/// A borrowed primary slot key (`variant: None`) for lookups without allocating.
#[derive(Debug, Clone, Copy)]
pub struct SlotKeyRef<'a> {
    host: &'a str,
    url: &'a str,
    https: bool,
}

impl<'a> SlotKeyRef<'a> {
    pub fn new(host: &'a str, path_and_query: &'a str, ignore_query: bool) -> Self {
        let (host, url) = parts(host, path_and_query, ignore_query);
        SlotKeyRef {
            host,
            url,
            https: false,
        }
    }

    /// [`SlotKeyRef::new`] for a host already without its port ([`host_name`] of it).
    pub fn of_name(name: &'a str, path_and_query: &'a str, ignore_query: bool) -> Self {
        let (host, url) = parts_of_name(name, path_and_query, ignore_query);
        SlotKeyRef {
            host,
            url,
            https: false,
        }
    }

    /// See [`CacheKey::for_https`].
    pub fn for_https(mut self, yes: bool) -> Self {
        self.https = yes;
        self
    }

    /// The owned key (built only on a miss).
    pub fn to_key(&self) -> CacheKey {
        CacheKey::new(self.host, self.url, false).for_https(self.https)
    }
}

impl Hash for SlotKeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let host = self.host.as_bytes();
        if host.iter().any(u8::is_ascii_uppercase) {
            let lower = host.to_ascii_lowercase();
            hash_parts(&lower, self.url.as_bytes(), self.https, state);
        } else {
            hash_parts(host, self.url.as_bytes(), self.https, state);
        }
        state.write_u8(0);
    }
}

impl crate::index::Equivalent<SlotKey> for SlotKeyRef<'_> {
    fn equivalent(&self, key: &SlotKey) -> bool {
        key.variant.is_none()
            && key.primary.https == self.https
            && key.primary.url() == self.url.as_bytes()
            && key
                .primary
                .host()
                .eq_ignore_ascii_case(self.host.as_bytes())
    }
}

/// Some when `host` (a `Host` field or an `:authority`) is one rampart routes and keys on
/// (RFC 9110 §7.2, RFC 3986 §3.2.2): a name of letters, digits, `-`, `.`, `_` and `~` (IPv4
/// addresses are such names) or an IPv6 literal in brackets, then optionally `:` and a port
/// of digits below 65536 (RFC 9112 §3.2: `port = *DIGIT`, so `name:` is allowed). Anything
/// else (userinfo, letters or quotes after the colon, percent escapes, an empty name) is
/// refused: every byte the key ignores is one an attacker could use to make the origin answer
/// differently under the same key.
///
/// When it is: the length of the host's name ([`host_name`] of it, found while checking it).
pub fn valid_host_name(host: &[u8]) -> Option<usize> {
    let (name, port) = if host.first() == Some(&b'[') {
        let end = host.iter().position(|&b| b == b']')?;
        let literal = &host[1..end];
        if literal.len() < 2
            || !literal
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return None;
        }
        match &host[end + 1..] {
            [] => (&host[..=end], None),
            [b':', port @ ..] => (&host[..=end], Some(port)),
            _ => return None,
        }
    } else {
        match host.iter().position(|&b| b == b':') {
            Some(i) => (&host[..i], Some(&host[i + 1..])),
            None => (host, None),
        }
    };
    let name_ok = !name.is_empty()
        && name.len() <= 255
        && (name[0] == b'['
            || name
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')));
    let port_ok = port.is_none_or(|p| {
        p.len() <= 5
            && p.iter().all(u8::is_ascii_digit)
            && p.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0')) <= 65535
    });
    (name_ok && port_ok).then_some(name.len())
}

/// The host name of an authority, without its port: `example.com:8080` → `example.com`,
/// `[::1]:8080` → `[::1]` (brackets kept), a bare `::1` (more than one colon) as it is. The one
/// port-stripping routine: routing, redirects and cache keys
/// all use it.
pub fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return match host.find(']') {
            Some(i) => &host[..=i],
            None => host,
        };
    }
    // One colon: a port follows it. More: a bare IPv6 address, kept whole. The last colon is
    // found from the end, a port's length away.
    let b = host.as_bytes();
    match b.iter().rposition(|&c| c == b':') {
        Some(last) if !b[..last].contains(&b':') => &host[..last],
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_without_their_port() {
        for (host, name) in [
            ("example.com", "example.com"),
            ("example.com:8080", "example.com"),
            ("example.com:", "example.com"),
            (":80", ""),
            ("::1", "::1"),
            ("fe80::1:2", "fe80::1:2"),
            ("[::1]", "[::1]"),
            ("[::1]:443", "[::1]"),
            ("[::1", "[::1"),
        ] {
            assert_eq!(host_name(host), name, "{host}");
            // A host that routes names the same length of name as it is checked.
            if let Some(len) = valid_host_name(host.as_bytes()) {
                assert_eq!(&host[..len], name, "{host}");
            }
        }
        assert_eq!(valid_host_name(b"a.example:80"), Some(9));
        assert_eq!(valid_host_name(b"[::1]:80"), Some(5));
        assert_eq!(valid_host_name(b"a.example:8o"), None);
    }

    #[test]
    fn hosts_that_route() {
        for ok in [
            "example.com",
            "Example.COM:8080",
            "example.com.",
            "a_b-c~d.test:",
            "127.0.0.1:65535",
            "[::1]",
            "[::1]:443",
            "[::ffff:127.0.0.1]:80",
        ] {
            assert!(valid_host_name(ok.as_bytes()).is_some(), "{ok}");
        }
        for bad in [
            "",
            ":80",
            "localhost:@evil.com",
            "localhost:'\"><script>",
            "localhost:abc",
            "localhost:65536",
            "localhost:000080",
            "user@localhost",
            "local host",
            "localhost:80:80",
            "loc%61lhost",
            "[::1",
            "[::1]x",
            "[]",
            "[::1]:8a",
            "[v1.x]",
        ] {
            assert!(valid_host_name(bad.as_bytes()).is_none(), "{bad}");
        }
    }

    #[test]
    fn key_normalises_host_and_keeps_url() {
        let a = CacheKey::new("Example.COM:8080", "/a?b=1", false);
        let b = CacheKey::new("example.com.", "/a?b=1", false);
        assert_eq!(a, b);
        assert_eq!(a.host(), b"example.com");
        assert_eq!(a.url(), b"/a?b=1");
        assert_ne!(a, CacheKey::new("other.com", "/a?b=1", false));
        assert_ne!(a, CacheKey::new("example.com", "/a?b=2", false));
        assert_eq!(
            CacheKey::new("x", "/a?b=1", true),
            CacheKey::new("x", "/a?c=2", true)
        );
        assert_eq!(CacheKey::new("[::1]:80", "/", false).host(), b"[::1]");
    }

    #[test]
    fn borrowed_keys_hash_and_compare_like_owned_ones() {
        use std::hash::BuildHasher;
        let hasher = std::collections::hash_map::RandomState::new();
        for (host, pq, ignore) in [
            ("Example.COM:8080", "/a?b=1", false),
            ("x", "/a?b=1", true),
            ("[::1]:80", "/", false),
        ] {
            let r = SlotKeyRef::new(host, pq, ignore);
            let owned = SlotKey {
                primary: CacheKey::new(host, pq, ignore),
                variant: None,
            };
            assert_eq!(hasher.hash_one(r), hasher.hash_one(&owned), "{host}{pq}");
            assert!(crate::index::Equivalent::equivalent(&r, &owned));
            assert_eq!(r.to_key(), owned.primary);
        }
        let other = SlotKey {
            primary: CacheKey::new("example.com", "/a?b=2", false),
            variant: None,
        };
        assert!(!crate::index::Equivalent::equivalent(
            &SlotKeyRef::new("example.com", "/a?b=1", false),
            &other
        ));
    }

    #[test]
    fn https_keys_are_apart_but_the_same_resource() {
        use std::hash::BuildHasher;
        let hasher = std::collections::hash_map::RandomState::new();
        let plain = CacheKey::new("example.com", "/a", false);
        let tls = CacheKey::new("example.com", "/a", false).for_https(true);
        assert_ne!(plain, tls);
        assert!(plain.same_resource(&tls));
        assert_eq!(tls.host(), b"example.com");
        assert_eq!(tls.url(), b"/a");
        let r = SlotKeyRef::new("Example.com", "/a", false).for_https(true);
        let owned = |k: &CacheKey| SlotKey {
            primary: k.clone(),
            variant: None,
        };
        assert_eq!(hasher.hash_one(r), hasher.hash_one(owned(&tls)));
        assert!(crate::index::Equivalent::equivalent(&r, &owned(&tls)));
        assert!(!crate::index::Equivalent::equivalent(&r, &owned(&plain)));
        assert_eq!(r.to_key(), tls);
    }

    #[test]
    fn hosts_cannot_collide_through_the_separator() {
        // "a" + "b/x" vs "ab" + "/x": the NUL separator keeps them apart.
        assert_ne!(
            CacheKey::new("a", "b/x", false),
            CacheKey::new("ab", "/x", false)
        );
    }
}
