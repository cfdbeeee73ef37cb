//! The PROXY protocol (HAProxy's spec, versions 1 and 2): the header an L4 balancer puts in
//! front of a connection's first byte to say whose connection it is.
//!
//! accept reads it (on listeners with `proxy_protocol = true`, from `proxy_protocol_from`
//! peers only) before TLS and HTTP; fetch sends it to origins of rules with
//! `send_proxy_protocol`. [`parse`] is a pure function over the bytes read so far (fuzzed in
//! `fuzz/fuzz_targets/proxy_protocol.rs`); [`encode`] writes either version.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::telemetry::metrics::PpRefusal;

/// Version 2's 12-byte signature.
pub const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// Version 1's longest line, CRLF included (the spec's 107 bytes).
const V1_MAX: usize = 107;

/// The longest version-2 header accepted (16 fixed bytes + addresses + TLVs). The format
/// allows 64 KiB; balancers send well under 1 KiB (AWS adds a VPC endpoint id, HAProxy a few
/// TLVs), and a connection must not hold more before it is known to be HTTP.
pub const V2_MAX: usize = 16 + 4096;

/// TLV type of a CRC-32C checksum of the whole header (checked when present).
const PP2_TYPE_CRC32C: u8 = 0x03;

pub use rampart_config::ProxyProtocolVersion as Version;

/// What a header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub version: Version,
    /// The client's and the original destination's addresses; `None` for a v1 `UNKNOWN`, a
    /// v2 `LOCAL` command (a balancer's own health check) or a family without IP addresses
    /// (the connection's own addresses apply).
    pub addresses: Option<(SocketAddr, SocketAddr)>,
    /// Version 2's type-length-value fields, as sent (the checksum one verified).
    pub tlvs: Vec<(u8, Vec<u8>)>,
}

/// Why a header is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("the connection does not start with a PROXY protocol header")]
    NotProxy,
    #[error("version 1 header longer than 107 bytes")]
    V1TooLong,
    #[error("version 1 header: {0}")]
    V1(&'static str),
    #[error("version 2 header: {0}")]
    V2(&'static str),
    #[error("version 2 header longer than the {V2_MAX}-byte limit")]
    V2TooLong,
    #[error("version 2 header: CRC-32C checksum does not match")]
    Checksum,
}

/// Why reading a header failed: what [`PpRefusal`] counts.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error("no complete PROXY protocol header in time")]
    Timeout,
    #[error("the connection closed before a complete PROXY protocol header")]
    Closed,
}

impl ReadError {
    /// The reason the metrics count it under.
    pub fn reason(&self) -> PpRefusal {
        match self {
            ReadError::Malformed(_) | ReadError::Closed => PpRefusal::Malformed,
            ReadError::Timeout => PpRefusal::Timeout,
        }
    }
}

/// Reads the header that starts `io` within `within`: the header and the bytes read past it
/// (the connection's first bytes of TLS or HTTP).
pub async fn read<I: tokio::io::AsyncRead + Unpin>(
    io: &mut I,
    within: std::time::Duration,
) -> Result<(Header, bytes::BytesMut), ReadError> {
    let mut buf = bytes::BytesMut::new();
    let reading = async {
        loop {
            let got = crate::net::read::read_some(io)
                .await
                .map_err(|_| ReadError::Closed)?;
            if got.is_empty() {
                return Err(ReadError::Closed);
            }
            buf.extend_from_slice(&got);
            if let Some((header, n)) = parse(&buf)? {
                let _ = buf.split_to(n);
                return Ok(header);
            }
        }
    };
    match tokio::time::timeout(within, reading).await {
        Ok(Ok(header)) => Ok((header, buf)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(ReadError::Timeout),
    }
}

/// Parses the header at the start of `buf`: `Ok(None)` while more bytes are needed,
/// `Ok(Some((header, length)))` once complete (the connection's own bytes follow `length`).
pub fn parse(buf: &[u8]) -> Result<Option<(Header, usize)>, Malformed> {
    // Decide the version on the bytes there are so far.
    let v1 = b"PROXY ";
    let n = buf.len().min(v1.len());
    if buf[..n] == v1[..n] && !buf.is_empty() {
        return parse_v1(buf);
    }
    let n = buf.len().min(V2_SIGNATURE.len());
    if buf[..n] == V2_SIGNATURE[..n] && !buf.is_empty() {
        return parse_v2(buf);
    }
    if buf.is_empty() {
        return Ok(None);
    }
    Err(Malformed::NotProxy)
}

fn parse_v1(buf: &[u8]) -> Result<Option<(Header, usize)>, Malformed> {
    // CR and LF appear only as the line's end: a bare one is an error as soon as it is seen,
    // so a prefix of the bytes never passes where the whole would fail.
    let window = &buf[..buf.len().min(V1_MAX)];
    let mut end = None;
    for (i, &b) in window.iter().enumerate() {
        match (b, window.get(i + 1)) {
            (b'\r', Some(b'\n')) => {
                end = Some(i);
                break;
            }
            (b'\r', None) => {}
            (b'\r', Some(_)) | (b'\n', _) => return Err(Malformed::V1("bare CR or LF")),
            _ => {}
        }
    }
    let Some(end) = end else {
        // A full-length line without its CRLF cannot become a valid one.
        if buf.len() >= V1_MAX {
            return Err(Malformed::V1TooLong);
        }
        return Ok(None);
    };
    if end + 2 > V1_MAX {
        return Err(Malformed::V1TooLong);
    }
    let line = std::str::from_utf8(&buf[..end]).map_err(|_| Malformed::V1("not ASCII"))?;
    let mut words = line.split(' ');
    let _proxy = words.next();
    let header = |addresses| Header {
        version: Version::V1,
        addresses,
        tlvs: Vec::new(),
    };
    let family = words.next().ok_or(Malformed::V1("no protocol family"))?;
    if family == "UNKNOWN" {
        // The spec lets the rest of the line be anything; the receiver ignores it.
        return Ok(Some((header(None), end + 2)));
    }
    let v6 = match family {
        "TCP4" => false,
        "TCP6" => true,
        _ => {
            return Err(Malformed::V1(
                "protocol family is not TCP4, TCP6 or UNKNOWN",
            ))
        }
    };
    let mut field = || words.next().ok_or(Malformed::V1("missing field"));
    let (src, dst) = (field()?, field()?);
    let (sport, dport) = (field()?, field()?);
    if words.next().is_some() {
        return Err(Malformed::V1("extra fields"));
    }
    let ip = |s: &str| -> Result<IpAddr, Malformed> {
        let ip = if v6 {
            s.parse::<Ipv6Addr>().map(IpAddr::V6)
        } else {
            s.parse::<Ipv4Addr>().map(IpAddr::V4)
        };
        ip.map_err(|_| Malformed::V1("address does not match the family"))
    };
    let port = |s: &str| -> Result<u16, Malformed> {
        let plain = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let canonical = s == "0" || !s.starts_with('0');
        match (plain && canonical, s.parse::<u16>()) {
            (true, Ok(p)) => Ok(p),
            _ => Err(Malformed::V1("port is not a number from 0 to 65535")),
        }
    };
    let addresses = (
        SocketAddr::new(ip(src)?, port(sport)?),
        SocketAddr::new(ip(dst)?, port(dport)?),
    );
    Ok(Some((header(Some(addresses)), end + 2)))
}

fn parse_v2(buf: &[u8]) -> Result<Option<(Header, usize)>, Malformed> {
    if buf.len() < 16 {
        return Ok(None);
    }
    let (ver_cmd, family) = (buf[12], buf[13]);
    if ver_cmd >> 4 != 2 {
        return Err(Malformed::V2("version is not 2"));
    }
    let local = match ver_cmd & 0x0f {
        0 => true,
        1 => false,
        _ => return Err(Malformed::V2("command is neither LOCAL nor PROXY")),
    };
    let len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if 16 + len > V2_MAX {
        return Err(Malformed::V2TooLong);
    }
    if buf.len() < 16 + len {
        return Ok(None);
    }
    let body = &buf[16..16 + len];
    // Address block by family (high nibble) and transport (low nibble).
    let addr_len = match family >> 4 {
        0 => 0,
        1 => 12,
        2 => 36,
        3 => 216,
        _ => return Err(Malformed::V2("unknown address family")),
    };
    if family & 0x0f > 2 {
        return Err(Malformed::V2("unknown transport protocol"));
    }
    if body.len() < addr_len {
        return Err(Malformed::V2("address block shorter than its family needs"));
    }
    let a = &body[..addr_len];
    let addresses = match family >> 4 {
        // A stream (1) or datagram (2) over IPv4 or IPv6; UNSPEC and unix sockets carry no IP.
        1 if !local => {
            let ip = |o: usize| IpAddr::V4(Ipv4Addr::new(a[o], a[o + 1], a[o + 2], a[o + 3]));
            let port = |o: usize| u16::from_be_bytes([a[o], a[o + 1]]);
            Some((
                SocketAddr::new(ip(0), port(8)),
                SocketAddr::new(ip(4), port(10)),
            ))
        }
        2 if !local => {
            let ip = |o: usize| {
                let mut b = [0u8; 16];
                b.copy_from_slice(&a[o..o + 16]);
                IpAddr::V6(Ipv6Addr::from(b))
            };
            let port = |o: usize| u16::from_be_bytes([a[o], a[o + 1]]);
            Some((
                SocketAddr::new(ip(0), port(32)),
                SocketAddr::new(ip(16), port(34)),
            ))
        }
        _ => None,
    };
    // PROXY over UNSPEC is allowed by the spec (the receiver uses the real addresses).
    let mut tlvs = Vec::new();
    let mut rest = &body[addr_len..];
    while !rest.is_empty() {
        if rest.len() < 3 {
            return Err(Malformed::V2("truncated TLV"));
        }
        let (kind, vlen) = (rest[0], usize::from(u16::from_be_bytes([rest[1], rest[2]])));
        if rest.len() < 3 + vlen {
            return Err(Malformed::V2("TLV longer than the header"));
        }
        let value = &rest[3..3 + vlen];
        if kind == PP2_TYPE_CRC32C {
            if vlen != 4 {
                return Err(Malformed::V2("CRC-32C TLV is not 4 bytes"));
            }
            // The checksum covers the whole header with its own value zeroed.
            let at = 16 + (body.len() - rest.len()) + 3;
            let mut copy = buf[..16 + len].to_vec();
            copy[at..at + 4].fill(0);
            if crc32c(&copy).to_be_bytes() != value {
                return Err(Malformed::Checksum);
            }
        }
        tlvs.push((kind, value.to_vec()));
        rest = &rest[3 + vlen..];
    }
    Ok(Some((
        Header {
            version: Version::V2,
            addresses,
            tlvs,
        },
        16 + len,
    )))
}

/// The header to send for a connection from `source` to `destination` (`None`: a connection
/// of rampart's own, such as a health check: v1 `UNKNOWN`, v2 `LOCAL`). Mixed families are
/// sent as IPv6, the IPv4 one mapped.
pub fn encode(version: Version, addresses: Option<(SocketAddr, SocketAddr)>) -> Vec<u8> {
    let addresses = addresses.map(|(s, d)| match (s, d) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) | (SocketAddr::V6(_), SocketAddr::V6(_)) => (s, d),
        _ => (v6(s), v6(d)),
    });
    match version {
        Version::V1 => match addresses {
            None => b"PROXY UNKNOWN\r\n".to_vec(),
            Some((s, d)) => {
                let family = if s.is_ipv4() { "TCP4" } else { "TCP6" };
                format!(
                    "PROXY {family} {} {} {} {}\r\n",
                    s.ip(),
                    d.ip(),
                    s.port(),
                    d.port()
                )
                .into_bytes()
            }
        },
        Version::V2 => {
            let mut out = Vec::with_capacity(16 + 36);
            out.extend_from_slice(V2_SIGNATURE);
            match addresses {
                None => out.extend_from_slice(&[0x20, 0x00, 0, 0]),
                Some((s, d)) => {
                    let mut block = Vec::with_capacity(36);
                    let family = match (s.ip(), d.ip()) {
                        (IpAddr::V4(a), IpAddr::V4(b)) => {
                            block.extend_from_slice(&a.octets());
                            block.extend_from_slice(&b.octets());
                            0x11
                        }
                        (a, b) => {
                            block.extend_from_slice(&v6_octets(a));
                            block.extend_from_slice(&v6_octets(b));
                            0x21
                        }
                    };
                    block.extend_from_slice(&s.port().to_be_bytes());
                    block.extend_from_slice(&d.port().to_be_bytes());
                    out.extend_from_slice(&[0x21, family]);
                    out.extend_from_slice(&(block.len() as u16).to_be_bytes());
                    out.extend_from_slice(&block);
                }
            }
            out
        }
    }
}

fn v6(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(IpAddr::V6(mapped(a.ip())), a.port())
}

fn mapped(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

fn v6_octets(ip: IpAddr) -> [u8; 16] {
    mapped(ip).octets()
}

/// CRC-32C (Castagnoli), bit by bit: headers are short and the TLV is rare.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0x82F6_3B78 & mask);
        }
    }
    !crc
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn v1_lines() {
        let line = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET / HTTP/1.1\r\n";
        let (h, n) = parse(line).unwrap().unwrap();
        assert_eq!(n, 45);
        assert_eq!(
            h.addresses,
            Some((sa("192.0.2.1:56324"), sa("198.51.100.2:443")))
        );
        let (h, _) = parse(b"PROXY TCP6 2001:db8::1 ::1 1 2\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.addresses, Some((sa("[2001:db8::1]:1"), sa("[::1]:2"))));
        let (h, n) = parse(b"PROXY UNKNOWN ffff::1 whatever\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.addresses, n), (None, 32));
        // Partial input waits for more.
        for cut in [1, 5, 6, 20, 42] {
            assert_eq!(parse(&line[..cut]), Ok(None), "{cut}");
        }
        for bad in [
            &b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443 x\r\n"[..],
            b"PROXY TCP4 2001:db8::1 198.51.100.2 1 2\r\n",
            b"PROXY TCP6 192.0.2.1 ::1 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 1.2.3.4 65536 1\r\n",
            b"PROXY TCP4 1.2.3.4 1.2.3.4 01 1\r\n",
            b"PROXY TCP4 1.2.3.4 1.2.3.4 -1 1\r\n",
            b"PROXY TCP4  1.2.3.4 1.2.3.4 1 1\r\n",
            b"PROXY UDP4 1.2.3.4 1.2.3.4 1 1\r\n",
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1\n",
            b"GET / HTTP/1.1\r\n",
            b"proxy TCP4",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let long = format!("PROXY UNKNOWN {}\r\n", "x".repeat(100));
        assert_eq!(parse(long.as_bytes()), Err(Malformed::V1TooLong));
        assert_eq!(parse(&[b'P'; 1][..]), Ok(None));
    }

    #[test]
    fn v2_round_trips_both_families_and_local() {
        for (s, d) in [
            ("192.0.2.1:56324", "198.51.100.2:443"),
            ("[2001:db8::1]:1", "[2001:db8::2]:65535"),
        ] {
            let a = Some((sa(s), sa(d)));
            for v in [Version::V1, Version::V2] {
                let bytes = encode(v, a);
                let (h, n) = parse(&bytes).unwrap().unwrap();
                assert_eq!((h.version, h.addresses, n), (v, a, bytes.len()));
                // Every prefix is incomplete, never an error.
                for cut in 0..bytes.len() {
                    assert_eq!(parse(&bytes[..cut]), Ok(None), "{v:?} {cut}");
                }
            }
        }
        // Mixed families go as IPv6 with the IPv4 address mapped.
        let (h, _) = parse(&encode(Version::V2, Some((sa("1.2.3.4:5"), sa("[::1]:6")))))
            .unwrap()
            .unwrap();
        assert_eq!(h.addresses, Some((sa("[::ffff:1.2.3.4]:5"), sa("[::1]:6"))));
        let local = encode(Version::V2, None);
        assert_eq!(local.len(), 16);
        assert_eq!(parse(&local).unwrap().unwrap().0.addresses, None);
    }

    /// A v2 header as HAProxy writes one, with TLVs (ALPN, authority, a checksum).
    fn with_tlvs(crc_ok: bool) -> Vec<u8> {
        let mut h = encode(Version::V2, Some((sa("10.1.2.3:4000"), sa("10.0.0.1:80"))));
        let mut tlvs = Vec::new();
        for (t, v) in [
            (0x01u8, &b"h2"[..]),
            (0x02, b"example.com"),
            (0x03, &[0; 4]),
        ] {
            tlvs.push(t);
            tlvs.extend_from_slice(&(v.len() as u16).to_be_bytes());
            tlvs.extend_from_slice(v);
        }
        let len = 12 + tlvs.len();
        h[14..16].copy_from_slice(&(len as u16).to_be_bytes());
        h.extend_from_slice(&tlvs);
        let crc = crc32c(&h).to_be_bytes();
        let at = h.len() - 4;
        h[at..].copy_from_slice(&crc);
        if !crc_ok {
            h[at] ^= 1;
        }
        h
    }

    #[test]
    fn v2_tlvs_and_checksum() {
        let h = with_tlvs(true);
        let (parsed, n) = parse(&h).unwrap().unwrap();
        assert_eq!(n, h.len());
        assert_eq!(parsed.tlvs.len(), 3);
        assert_eq!(parsed.tlvs[1], (0x02, b"example.com".to_vec()));
        assert_eq!(parse(&with_tlvs(false)), Err(Malformed::Checksum));
        // The CRC-32C check value.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn v2_malformed() {
        let good = encode(Version::V2, Some((sa("1.2.3.4:5"), sa("5.6.7.8:9"))));
        let mut bad_version = good.clone();
        bad_version[12] = 0x11;
        let mut bad_command = good.clone();
        bad_command[12] = 0x22;
        let mut bad_family = good.clone();
        bad_family[13] = 0x41;
        let mut short_block = good.clone();
        short_block[15] = 4;
        short_block.truncate(20);
        let mut truncated_tlv = good.clone();
        truncated_tlv[15] = 14;
        truncated_tlv.extend_from_slice(&[1, 0]);
        let mut long_tlv = good.clone();
        long_tlv[15] = 15;
        long_tlv.extend_from_slice(&[1, 0, 9]);
        for (name, b) in [
            ("version", bad_version),
            ("command", bad_command),
            ("family", bad_family),
            ("address block", short_block),
            ("truncated TLV", truncated_tlv),
            ("TLV length", long_tlv),
        ] {
            assert!(
                matches!(parse(&b), Err(Malformed::V2(_))),
                "{name}: {:?}",
                parse(&b)
            );
        }
        let mut huge = V2_SIGNATURE.to_vec();
        huge.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        assert_eq!(parse(&huge), Err(Malformed::V2TooLong));
    }
}
