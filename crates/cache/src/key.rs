//! Cache keys.
//!
//! The primary key is the lower-cased host without its port, then the path, then `?query` unless
//! the rule ignores the query string (ARC2-COMPAT §7.3). Host and URL are separated by a NUL byte,
//! which cannot occur in either, so two hosts can never share an entry and purges can address an
//! entry by host, by URL prefix or by substring. A stored response that varies (RFC 9111 §4.1)
//! lives under the primary key plus a variant key computed from the request.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

/// Host + path (+ query): what identifies a resource.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CacheKey(Bytes);

impl CacheKey {
    /// Builds the key. `host` may carry a port and any case; `path_and_query` is the request
    /// target in origin form.
    pub fn new(host: &str, path_and_query: &str, ignore_query: bool) -> Self {
        let host = strip_port(host);
        let host = host.strip_suffix('.').unwrap_or(host);
        let url = if ignore_query {
            path_and_query.split('?').next().unwrap_or(path_and_query)
        } else {
            path_and_query
        };
        let mut b = BytesMut::with_capacity(host.len() + 1 + url.len());
        for c in host.bytes() {
            b.put_u8(c.to_ascii_lowercase());
        }
        b.put_u8(0);
        b.put_slice(url.as_bytes());
        CacheKey(b.freeze())
    }

    /// The lower-cased host.
    pub fn host(&self) -> &[u8] {
        let i = self.0.iter().position(|&c| c == 0).unwrap_or(self.0.len());
        &self.0[..i]
    }

    /// Path and query as stored.
    pub fn url(&self) -> &[u8] {
        let i = self
            .0
            .iter()
            .position(|&c| c == 0)
            .map_or(self.0.len(), |i| i + 1);
        &self.0[i..]
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}",
            String::from_utf8_lossy(self.host()),
            String::from_utf8_lossy(self.url())
        )
    }
}

/// The key of one stored slot: the resource, and for varying responses the variant.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct SlotKey {
    pub primary: CacheKey,
    /// `None`: the object itself (no Vary) or the Vary marker; `Some`: one variant.
    pub variant: Option<Bytes>,
}

/// `example.com:8080` → `example.com`; `[::1]:8080` → `[::1]`.
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return match host.find(']') {
            Some(i) => &host[..=i],
            None => host,
        };
    }
    match host.rfind(':') {
        Some(i) if !host[..i].contains(':') => &host[..i],
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn hosts_cannot_collide_through_the_separator() {
        // "a" + "b/x" vs "ab" + "/x": the NUL separator keeps them apart.
        assert_ne!(
            CacheKey::new("a", "b/x", false),
            CacheKey::new("ab", "/x", false)
        );
    }
}
