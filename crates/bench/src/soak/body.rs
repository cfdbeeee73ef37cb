//! The soak's deterministic content. Every body the origins send is a slice of one pool of
//! pseudo-random bytes (splitmix64 seeded by `--seed`), at an offset derived from the URL alone
//! (kind and id, or the request's nonce) and of the length the URL names. Both origins and every
//! client build the same pool, so a client knows the exact bytes a response must hold without
//! asking anybody, and two URLs never share an offset by accident (a body served for the wrong
//! URL, or cut short, or shifted by one byte, differs).
//!
//! `checksum` is the 64-bit sum the origin puts in `x-soak-sum` and answers `/echo` with; the
//! clients compare whole bodies byte for byte (which also locates the first wrong byte).

use bytes::Bytes;

/// Bytes in the pool: every body is `pool[offset..offset + len]` with `offset < POOL - MAX_BODY`.
pub const POOL: usize = 16 << 20;
/// The largest body the origin sends (a larger `size=` is lowered to it).
pub const MAX_BODY: usize = 8 << 20;

/// What a URL asks for; each kind draws its offsets from its own key space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `/obj/ID?size=N`: cacheable.
    Obj,
    /// `/pass/ID?size=N`: `no-store` or `private`; keyed by the request's nonce, not its URL.
    Pass,
    /// `/flaky/ID?size=N`: cacheable, but every other answer is cut mid-body.
    Flaky,
    /// A POST body, keyed by a nonce.
    Post,
    /// A WebSocket message, keyed by a nonce.
    Ws,
}

impl Kind {
    fn tag(self) -> u64 {
        match self {
            Kind::Obj => 1,
            Kind::Pass => 2,
            Kind::Flaky => 3,
            Kind::Post => 4,
            Kind::Ws => 5,
        }
    }
}

/// splitmix64's finaliser: a cheap bijective mix of 64 bits.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A 64-bit checksum of `data` (length included). Not cryptographic: it only has to differ
/// when a proxy changes, drops, adds or reorders bytes.
pub fn checksum(data: &[u8]) -> u64 {
    let mut h = 0x6A09_E667_F3BC_C908 ^ data.len() as u64;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(b))
            .wrapping_mul(0x0000_0100_0000_01B3)
            .rotate_left(29);
    }
    let rest = words.remainder();
    let mut b = [0u8; 8];
    b[..rest.len()].copy_from_slice(rest);
    mix(h ^ u64::from_le_bytes(b))
}

/// The pool every body is cut from.
#[derive(Debug, Clone)]
pub struct Pool {
    bytes: Bytes,
    seed: u64,
}

impl Pool {
    pub fn new(seed: u64) -> Pool {
        let mut v = vec![0u8; POOL];
        let mut s = seed;
        for w in v.chunks_exact_mut(8) {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            w.copy_from_slice(&mix(s).to_le_bytes());
        }
        Pool {
            bytes: Bytes::from(v),
            seed,
        }
    }

    /// Where the body of (`kind`, `key`) starts in the pool.
    pub fn offset(&self, kind: Kind, key: u64) -> usize {
        (mix(self.seed ^ mix(kind.tag() << 56 ^ key)) % (POOL - MAX_BODY) as u64) as usize
    }

    /// The body of (`kind`, `key`) of `len` bytes (at most [`MAX_BODY`]); no copy.
    pub fn body(&self, kind: Kind, key: u64, len: usize) -> Bytes {
        let at = self.offset(kind, key);
        self.bytes.slice(at..at + len.min(MAX_BODY))
    }
}

/// The size of object `id` (the size its URL names): mostly small, one in 25 between 1 and 5 MiB.
pub fn obj_size(seed: u64, id: u64) -> usize {
    let r = mix(seed ^ 0x5157 ^ id);
    if id % 25 == 7 {
        (1 << 20) + (r % (4 << 20)) as usize
    } else if id.is_multiple_of(3) {
        64 + (r % (256 << 10)) as usize
    } else {
        1 + (r % (16 << 10)) as usize
    }
}

/// Whether object `id` is stored with a short lifetime and an `ETag`, so that it is
/// revalidated (304) during the run.
pub fn revalidated(id: u64) -> bool {
    id % 4 == 1
}

/// The `size=` of a URL's query (`None` without one).
pub fn size_of(query: Option<&str>) -> Option<usize> {
    query?
        .split('&')
        .find_map(|p| p.strip_prefix("size="))?
        .parse()
        .ok()
}

/// The id in `/PREFIX/ID` (`None` for another path).
pub fn id_of(path: &str, prefix: &str) -> Option<u64> {
    path.strip_prefix(prefix)?.parse().ok()
}

/// Where two byte strings first differ (`None` when equal).
pub fn first_difference(got: &[u8], want: &[u8]) -> Option<usize> {
    if got == want {
        return None;
    }
    Some(
        got.iter()
            .zip(want)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(want.len())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_depend_on_url_alone() {
        let (a, b) = (Pool::new(7), Pool::new(7));
        assert_eq!(a.body(Kind::Obj, 3, 1000), b.body(Kind::Obj, 3, 1000));
        assert_ne!(a.body(Kind::Obj, 3, 1000), a.body(Kind::Obj, 4, 1000));
        assert_ne!(a.body(Kind::Obj, 3, 1000), a.body(Kind::Flaky, 3, 1000));
        assert_eq!(a.body(Kind::Obj, 9, MAX_BODY + 5).len(), MAX_BODY);
        let big = (0..200).map(|id| obj_size(7, id)).filter(|s| *s > 1 << 20);
        assert_eq!(big.count(), 8);
    }

    #[test]
    fn checksum_sees_every_change() {
        let p = Pool::new(1);
        let body = p.body(Kind::Obj, 1, 4099);
        let sum = checksum(&body);
        assert_eq!(sum, checksum(&body.clone()));
        assert_ne!(sum, checksum(&body[..4098]));
        let mut flipped = body.to_vec();
        flipped[4097] ^= 1;
        assert_ne!(sum, checksum(&flipped));
        assert_eq!(first_difference(&flipped, &body), Some(4097));
        assert_eq!(first_difference(&body[..10], &body), Some(10));
        assert_eq!(first_difference(&body, &body), None);
    }

    #[test]
    fn urls_parse() {
        assert_eq!(size_of(Some("a=1&size=42")), Some(42));
        assert_eq!(size_of(None), None);
        assert_eq!(id_of("/obj/17", "/obj/"), Some(17));
        assert_eq!(id_of("/pass/17", "/obj/"), None);
    }
}
