//! The marker of a peer's request, `X-Rampart-Peer`: what the request is for, the scheme the
//! client used, the time, and an HMAC-SHA256 of those and the request line under
//! `cache_peer_key`; signed by the asking instance and checked by the owner, with the
//! signatures of the current second remembered on both sides.

use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::hmac;
use http::header::HeaderValue;

use super::Fleet;

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

/// How far a signed request's time may be from this instance's clock (instances keep NTP
/// time; a replay is only useful within it, and replays a cacheable GET).
const MAX_SKEW_SECS: u64 = 300;

impl Fleet {
    /// The `X-Rampart-Peer` value for a request to a peer: what it is for, the scheme, the time
    /// and the signature of those and the request line.
    pub fn sign(
        &self,
        purpose: Purpose,
        https: bool,
        method: &str,
        host: &[u8],
        target: &str,
    ) -> HeaderValue {
        let secs = unix_secs();
        let mut digits = [0u8; 20];
        let mut v = Vec::with_capacity(96);
        v.extend_from_slice(purpose.as_str().as_bytes());
        v.push(b' ');
        v.extend_from_slice(scheme_name(https).as_bytes());
        v.push(b' ');
        v.extend_from_slice(decimal(secs, &mut digits));
        v.push(b' ');
        match &self.key {
            Some(k) => {
                let m = message(purpose, https, secs, method, host, target);
                let mut memo = self.signed.lock().unwrap_or_else(|p| p.into_inner());
                let tag = memo.get_or_make(secs, m, |m| hmac::sign(k, m).as_ref().to_vec());
                hex_into(&tag, &mut v);
            }
            None => v.push(b'-'),
        }
        // invariant: words, digits and hex are a valid field value.
        HeaderValue::from_maybe_shared(bytes::Bytes::from(v))
            .unwrap_or(HeaderValue::from_static("-"))
    }

    /// Checks a request's `X-Rampart-Peer` (`value`), which came from `from`: what it is for
    /// and the scheme the peer's client used, when it is a member's and (with a key) its
    /// signature is valid and recent.
    pub fn verify(
        &self,
        value: &HeaderValue,
        from: IpAddr,
        method: &str,
        host: &[u8],
        target: &str,
    ) -> Option<(Purpose, bool)> {
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
        let secs = parse_decimal(parts.next()?)?;
        let tag = parts.next()?;
        if parts.next().is_some() {
            return None;
        }
        let Some(key) = &self.key else {
            return Some((purpose, https));
        };
        if unix_secs().abs_diff(secs) > MAX_SKEW_SECS {
            return None;
        }
        let tag = unhex(tag)?;
        let m = message(purpose, https, secs, method, host, target);
        let now = unix_secs();
        let mut memo = self.checked.lock().unwrap_or_else(|p| p.into_inner());
        // Compared in constant time, as `hmac::verify` does.
        let known = memo
            .get(now, &m)
            .is_some_and(|t| aws_lc_rs::constant_time::verify_slices_are_equal(t, &tag).is_ok());
        if !known {
            hmac::verify(key, &m, &tag).ok()?;
            memo.put(now, m, tag);
        }
        Some((purpose, https))
    }
}

/// Signatures made or checked within the current second (the marker's time is in seconds, so
/// a hot key's requests within a second are signed alike): each made or checked once, then
/// looked up. Each entry holds the whole message it is for (the time in it), so a look-up
/// matches only the very same request line and time; the memo empties when this instance's
/// second changes, and at [`MEMO_MAX`] entries.
#[derive(Debug, Default)]
pub(super) struct Memo {
    /// The second (this instance's clock) the entries were made in.
    secs: u64,
    tags: std::collections::HashMap<Vec<u8>, Vec<u8>>,
}

/// Signatures a [`Memo`] holds at most.
const MEMO_MAX: usize = 4096;
/// The longest message a [`Memo`] keeps (bytes).
const MEMO_MESSAGE_MAX: usize = 512;

impl Memo {
    /// The tag of `message`, remembered within second `now`.
    fn get(&mut self, now: u64, message: &[u8]) -> Option<&[u8]> {
        if now != self.secs {
            return None;
        }
        self.tags.get(message).map(Vec::as_slice)
    }

    fn put(&mut self, now: u64, message: Vec<u8>, tag: Vec<u8>) {
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

    fn get_or_make(
        &mut self,
        secs: u64,
        message: Vec<u8>,
        make: impl FnOnce(&[u8]) -> Vec<u8>,
    ) -> Vec<u8> {
        if let Some(t) = self.get(secs, &message) {
            return t.to_vec();
        }
        let tag = make(&message);
        self.put(secs, message, tag.clone());
        tag
    }
}

/// What a peer signs: what the request is for, the scheme, the time and the request line's
/// parts.
fn message(
    purpose: Purpose,
    https: bool,
    secs: u64,
    method: &str,
    host: &[u8],
    target: &str,
) -> Vec<u8> {
    let mut m = Vec::with_capacity(48 + host.len() + target.len());
    let mut digits = [0u8; 20];
    m.extend_from_slice(b"rampart-peer/1\n");
    for part in [
        purpose.as_str().as_bytes(),
        scheme_name(https).as_bytes(),
        decimal(secs, &mut digits),
        method.as_bytes(),
        host,
    ] {
        m.extend_from_slice(part);
        m.push(b'\n');
    }
    m.extend_from_slice(target.as_bytes());
    m
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
    let mut v = Vec::with_capacity(b.len() * 2);
    hex_into(b, &mut v);
    String::from_utf8(v).unwrap_or_default()
}

/// `b` in lower-case hex, appended to `out`.
fn hex_into(b: &[u8], out: &mut Vec<u8>) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &x in b {
        out.push(DIGITS[usize::from(x >> 4)]);
        out.push(DIGITS[usize::from(x & 0xf)]);
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

/// `n` in decimal, written at the end of `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
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
            assert_eq!(decimal(n, &mut buf), n.to_string().as_bytes());
            assert_eq!(parse_decimal(n.to_string().as_bytes()), Some(n));
        }
        assert_eq!(parse_decimal(b""), None);
        assert_eq!(parse_decimal(b"12a"), None);
        assert_eq!(parse_decimal(b"+1"), None);
        assert_eq!(parse_decimal(b"99999999999999999999"), None);
    }
}
