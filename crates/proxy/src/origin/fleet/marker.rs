//! The marker of a peer's request, `X-Rampart-Peer`: what the request is for, the scheme the
//! client used, the time, the client's address and the port it came to, and an HMAC-SHA256 of
//! those and the request line under `cache_peer_key`; signed by the asking instance and checked
//! by the owner, with the signatures of the current second remembered on both sides.
//!
//! The value reads `PURPOSE SCHEME SECS CLIENT PORT TAG`: `fwd http 1796002258 192.0.2.7 443
//! 5d58…` (64 hex digits; `-` for the client and port of rampart's own requests, and for the tag
//! without a key).

use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::hmac;
use http::header::HeaderValue;

use super::Fleet;
use crate::http1::numbers::itoa;

/// What a peer's request is for, as signed: a client's request it forwards (answered as any
/// request), or one of rampart's own (a probe, a purge: answered only as such).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Forward,
    Control,
}

impl Purpose {
    fn as_str(self) -> &'static str {
        match self {
            Purpose::Forward => "fwd",
            Purpose::Control => "ctl",
        }
    }
}

/// What a marker says, signed: the purpose, the scheme the client used, and (a forwarded
/// request's) client address as the asking instance writes it in `X-Forwarded-For` and the
/// port the client came to (`X-Forwarded-Port`). The owner adds the forwarding fields itself
/// from these on its way to the origin, as the peer would have: a peer sends none of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marked<'a> {
    pub purpose: Purpose,
    pub https: bool,
    pub client: &'a [u8],
    pub port: &'a [u8],
}

impl Marked<'static> {
    /// rampart's own request (a probe, a purge): no client.
    pub fn control() -> Marked<'static> {
        Marked {
            purpose: Purpose::Control,
            https: false,
            client: b"-",
            port: b"-",
        }
    }
}

/// How far a signed request's time may be from this instance's clock (instances keep NTP
/// time; a replay is only useful within it, and replays a cacheable GET).
const MAX_SKEW_SECS: u64 = 300;

/// A signature in lower-case hex, as the marker carries it (compared as such: no decoding).
type Tag = [u8; 64];

impl Fleet {
    /// The `X-Rampart-Peer` value for a request to a peer: `m`, the time, and the signature of
    /// those and the request line.
    pub fn sign(&self, m: &Marked<'_>, method: &str, host: &[u8], target: &str) -> HeaderValue {
        let secs = unix_secs();
        let mut digits = [0u8; 20];
        let secs_text = itoa(secs, &mut digits);
        let mut v = Vec::with_capacity(96 + m.client.len());
        for part in [
            m.purpose.as_str().as_bytes(),
            scheme_name(m.https).as_bytes(),
            secs_text,
            m.client,
            m.port,
        ] {
            v.extend_from_slice(part);
            v.push(b' ');
        }
        match &self.key {
            Some(k) => {
                let message = message(m, secs_text, method, host, target);
                let mut memo = self.signed.lock().unwrap_or_else(|p| p.into_inner());
                match memo.get(secs, &message) {
                    Some(tag) => v.extend_from_slice(tag),
                    None => {
                        let tag = tag_of(k, &message);
                        v.extend_from_slice(&tag);
                        memo.put(secs, message, tag);
                    }
                }
            }
            None => v.push(b'-'),
        }
        // invariant: words, digits, an address as written in a field, and hex are a valid
        // field value.
        HeaderValue::from_maybe_shared(bytes::Bytes::from(v))
            .unwrap_or(HeaderValue::from_static("-"))
    }

    /// Checks a request's `X-Rampart-Peer` (`value`), which came from `from`: what it says,
    /// when it is a member's and (with a key) its signature is valid and recent.
    pub fn verify<'v>(
        &self,
        value: &'v HeaderValue,
        from: IpAddr,
        method: &str,
        host: &[u8],
        target: &str,
    ) -> Option<Marked<'v>> {
        if !self.is_member(from.to_canonical()) {
            return None;
        }
        let mut parts = value.as_bytes().split(|&b| b == b' ');
        let purpose = match parts.next()? {
            b"fwd" => Purpose::Forward,
            b"ctl" => Purpose::Control,
            _ => return None,
        };
        let https = match parts.next()? {
            b"http" => false,
            b"https" => true,
            _ => return None,
        };
        let secs_text = parts.next()?;
        let secs = parse_decimal(secs_text)?;
        let marked = Marked {
            purpose,
            https,
            client: parts.next()?,
            port: parts.next()?,
        };
        let tag = parts.next()?;
        if parts.next().is_some() {
            return None;
        }
        let Some(key) = &self.key else {
            return Some(marked);
        };
        let now = unix_secs();
        if now.abs_diff(secs) > MAX_SKEW_SECS || tag.len() != 64 {
            return None;
        }
        let m = message(&marked, secs_text, method, host, target);
        let mut memo = self.checked.lock().unwrap_or_else(|p| p.into_inner());
        // Compared in constant time, as `hmac::verify` does (the hex of the tags: a tag has
        // one lower-case spelling).
        let same = |t: &[u8]| aws_lc_rs::constant_time::verify_slices_are_equal(t, tag).is_ok();
        if !memo.get(now, &m).is_some_and(|t| same(t)) {
            let expected = tag_of(key, &m);
            if !same(&expected) {
                return None;
            }
            memo.put(now, m, expected);
        }
        Some(marked)
    }
}

/// The HMAC-SHA256 of `message` under `key`, in lower-case hex.
fn tag_of(key: &hmac::Key, message: &[u8]) -> Tag {
    let mut out = [0u8; 64];
    hex_to(hmac::sign(key, message).as_ref(), &mut out);
    out
}

/// Signatures made or checked within the current second, each made or checked once, then
/// looked up. Each entry holds the whole message it is for (the client, the time, the request
/// line), so a look-up matches only the same client's request for the same key within the
/// second (a client asking again, a page's repeated requests); any other is signed and checked
/// anew, an HMAC-SHA256 of about 100 bytes (~0.2 µs on each side with SHA instructions). The
/// memo empties when this instance's second changes, and at [`MEMO_MAX`] entries.
#[derive(Debug, Default)]
pub(super) struct Memo {
    /// The second (this instance's clock) the entries were made in.
    secs: u64,
    tags: std::collections::HashMap<Vec<u8>, Tag, foldhash::quality::RandomState>,
}

/// Signatures a [`Memo`] holds at most.
const MEMO_MAX: usize = 4096;
/// The longest message a [`Memo`] keeps (bytes).
const MEMO_MESSAGE_MAX: usize = 512;

impl Memo {
    /// The tag of `message`, remembered within second `now`.
    fn get(&self, now: u64, message: &[u8]) -> Option<&Tag> {
        if now != self.secs {
            return None;
        }
        self.tags.get(message)
    }

    fn put(&mut self, now: u64, message: Vec<u8>, tag: Tag) {
        // Hot keys' request lines are short; long ones are signed every time (the memo holds
        // MEMO_MAX × MEMO_MESSAGE_MAX bytes at most).
        if message.len() > MEMO_MESSAGE_MAX {
            return;
        }
        if now != self.secs || self.tags.len() >= MEMO_MAX {
            self.tags.clear();
            self.secs = now;
        }
        self.tags.insert(message, tag);
    }
}

/// What a peer signs: the marker's words before the tag, then the request line's parts.
fn message(m: &Marked<'_>, secs: &[u8], method: &str, host: &[u8], target: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(64 + m.client.len() + host.len() + target.len());
    v.extend_from_slice(b"rampart-peer/2\n");
    for part in [
        m.purpose.as_str().as_bytes(),
        scheme_name(m.https).as_bytes(),
        secs,
        m.client,
        m.port,
        method.as_bytes(),
        host,
    ] {
        v.extend_from_slice(part);
        v.push(b'\n');
    }
    v.extend_from_slice(target.as_bytes());
    v
}

/// The client's scheme as the marker writes it.
fn scheme_name(https: bool) -> &'static str {
    if https {
        "https"
    } else {
        "http"
    }
}

pub(super) fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub(super) fn hex(b: &[u8]) -> String {
    let mut v = vec![0; b.len() * 2];
    hex_to(b, &mut v);
    String::from_utf8(v).unwrap_or_default()
}

/// `b` in lower-case hex, into `out` (twice `b`'s length; the rest is left as it is).
fn hex_to(b: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, &x) in out.chunks_exact_mut(2).zip(b) {
        pair[0] = DIGITS[usize::from(x >> 4)];
        pair[1] = DIGITS[usize::from(x & 0xf)];
    }
}

pub(super) fn unhex(s: impl AsRef<[u8]>) -> Option<Vec<u8>> {
    let s = s.as_ref();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    s.chunks_exact(2)
        .map(|p| Some(nibble(p[0])? << 4 | nibble(p[1])?))
        .collect()
}

/// Decimal digits (at most 19, no sign) as a number.
fn parse_decimal(d: &[u8]) -> Option<u64> {
    if d.is_empty() || d.len() > 19 {
        return None;
    }
    d.iter().try_fold(0u64, |n, &c| {
        c.is_ascii_digit().then(|| n * 10 + u64::from(c - b'0'))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        let b: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(hex(&b)).unwrap(), b);
        assert!(unhex("abc").is_none() && unhex("zz").is_none());
    }

    #[test]
    fn decimals_round_trip() {
        let mut buf = [0u8; 20];
        for n in [0, 7, 10, 1_764_450_000, u64::MAX / 10] {
            assert_eq!(itoa(n, &mut buf), n.to_string().as_bytes());
            assert_eq!(parse_decimal(n.to_string().as_bytes()), Some(n));
        }
        assert_eq!(parse_decimal(b""), None);
        assert_eq!(parse_decimal(b"12a"), None);
        assert_eq!(parse_decimal(b"+1"), None);
        assert_eq!(parse_decimal(b"99999999999999999999"), None);
    }
}
