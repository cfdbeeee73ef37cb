//! Header rewriting at the proxy boundary, both directions.
//!
//! Hop-by-hop headers (RFC 9110 §7.6.1) are removed: the fixed list plus every header the
//! `Connection` header names. Towards the origin rampart adds `X-Forwarded-For` (appended),
//! `X-Forwarded-Proto`, `X-Forwarded-Host`, `X-Forwarded-Port` (replaced: a client must not
//! choose them), `Forwarded` (RFC 7239: replaced, or appended to a trusted proxy's) and `Via`
//! (appended); towards the client it adds `Via`.

use rampart_head::Fields;
use std::net::IpAddr;

use http::header::{
    HeaderName, HeaderValue, CONNECTION, FORWARDED, TE, TRAILER, TRANSFER_ENCODING, UPGRADE, VIA,
};
use http::Version;

pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
pub static X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");
static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// The `Content-Length` value, if present and a valid number.
pub fn content_length(h: &Fields) -> Option<u64> {
    parse_content_length(h.get(http::header::CONTENT_LENGTH)?)
}

/// A `Content-Length` field value as a number (the one parser: requests, responses, the h1
/// writer).
pub fn parse_content_length(v: &HeaderValue) -> Option<u64> {
    // Digits only (RFC 9110 §8.6: `1*DIGIT`; no sign), around optional whitespace.
    let digits = v.as_bytes().trim_ascii();
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &c| {
        c.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(c - b'0')))?
    })
}

/// A gRPC call (`Content-Type: application/grpc`, `application/grpc+proto`, ...).
pub fn is_grpc(h: &Fields) -> bool {
    h.get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// Whether `TE` names `trailers` (the client takes trailer fields; gRPC requires it).
pub fn wants_trailers(h: &Fields) -> bool {
    h.get_all(TE).iter().any(|v| {
        v.as_bytes().split(|&b| b == b',').any(|t| {
            let name = t.split(|&b| b == b';').next().unwrap_or_default();
            name.trim_ascii().eq_ignore_ascii_case(b"trailers")
        })
    })
}

/// The `Host` (and `X-Forwarded-Host`) the origin gets for a routed host: the name the cache
/// key uses, lower case, without its port or a trailing dot (NGINX's `$host`). The origin
/// then sees nothing of the host that the key does not hold: a client cannot make it answer
/// for another host or port under the same key. The port the client connected to
/// goes as `X-Forwarded-Port`, from the connection, not from the client's text.
pub fn origin_host(host: &HeaderValue) -> HeaderValue {
    let raw = host.to_str().unwrap_or_default();
    let name = rampart_cache::key::host_name(raw);
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.len() == raw.len() && !name.bytes().any(|b| b.is_ascii_uppercase()) {
        return host.clone();
    }
    HeaderValue::from_str(&name.to_ascii_lowercase()).unwrap_or_else(|_| host.clone())
}

/// Whether `name` is one of the fixed hop-by-hop fields (RFC 9110 §7.6.1; those a
/// `Connection` field names come on top).
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == CONNECTION
        || name == TE
        || name == TRAILER
        || name == TRANSFER_ENCODING
        || name == UPGRADE
        || name == KEEP_ALIVE
        || name == PROXY_CONNECTION
}

/// Removes hop-by-hop headers, including those listed in `Connection`.
pub fn strip_hop_by_hop(h: &mut Fields) {
    // Most messages carry none: one walk over the names present decides, instead of seven
    // hashed look-ups.
    if !h.iter().any(|(k, _)| is_hop_by_hop(k)) {
        return;
    }
    // Headers named by Connection (collected first: we cannot remove while borrowing).
    if h.contains_key(CONNECTION) {
        let named: Vec<HeaderName> = h
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
            .collect();
        for n in named {
            h.remove(n);
        }
        h.remove(CONNECTION);
    }
    for name in [&KEEP_ALIVE, &PROXY_CONNECTION] {
        if h.contains_key(name) {
            h.remove(name);
        }
    }
    for name in [TE, TRAILER, TRANSFER_ENCODING, UPGRADE] {
        if h.contains_key(&name) {
            h.remove(name);
        }
    }
}

/// The `Via` entry for a message received with `version`. (Constants: `from_static` checks
/// every byte when it runs outside a constant, on every request.)
pub fn via_value(version: Version) -> HeaderValue {
    const V10: HeaderValue = HeaderValue::from_static("1.0 rampart");
    const V11: HeaderValue = HeaderValue::from_static("1.1 rampart");
    const V2: HeaderValue = HeaderValue::from_static("2 rampart");
    const V3: HeaderValue = HeaderValue::from_static("3 rampart");
    match version {
        Version::HTTP_10 => V10,
        Version::HTTP_2 => V2,
        Version::HTTP_3 => V3,
        _ => V11,
    }
}

/// Appends a `Via` entry (RFC 9110 §7.6.3).
pub fn append_via(h: &mut Fields, version: Version) {
    h.append(VIA, via_value(version));
}

/// The `X-Forwarded-For` a request bound for the origin carries: the client's list, if it
/// sent one, with the client's address after it. Several lines form one list (RFC 9110
/// §5.3): all are kept, in order, in one value. The other forwarding fields replace the
/// client's (a client must not choose them).
pub fn forwarded_for(client: &Fields, client_ip: &HeaderValue) -> HeaderValue {
    let mut prev = client.get_all(&X_FORWARDED_FOR).iter().peekable();
    if prev.peek().is_none() {
        return client_ip.clone();
    }
    let mut v = Vec::new();
    for p in prev {
        v.extend_from_slice(p.as_bytes());
        v.extend_from_slice(b", ");
    }
    v.extend_from_slice(client_ip.as_bytes());
    HeaderValue::from_bytes(&v).unwrap_or_else(|_| client_ip.clone())
}

/// rampart's element of `Forwarded` (RFC 7239 §4): `for=` the client (the TCP peer, as
/// `X-Forwarded-For` has it), `proto=` the scheme it used, `host=` the host the origin gets
/// (`host` is [`origin_host`]'s). An IPv6 address, and a host that is not a token, are
/// quoted (`for="[::1]"`, §6).
/// `client_text` is the address as the connection wrote it once (`X-Forwarded-For`'s), so no
/// request formats it again: the element goes on every request to the origin, passes
/// included, in one allocation.
pub fn forwarded_element(
    client_ip: IpAddr,
    client_text: &HeaderValue,
    scheme: &str,
    host: &HeaderValue,
) -> Vec<u8> {
    let mut v = Vec::with_capacity(32 + client_text.len() + host.len());
    match client_ip {
        IpAddr::V4(_) => {
            v.extend_from_slice(b"for=");
            v.extend_from_slice(client_text.as_bytes());
        }
        IpAddr::V6(_) => {
            v.extend_from_slice(b"for=\"[");
            v.extend_from_slice(client_text.as_bytes());
            v.extend_from_slice(b"]\"");
        }
    }
    v.extend_from_slice(b";proto=");
    v.extend_from_slice(scheme.as_bytes());
    v.extend_from_slice(b";host=");
    let host = host.as_bytes();
    if !host.is_empty()
        && host
            .iter()
            .all(|&b| rampart_cache::cache_control::is_tchar(b))
    {
        v.extend_from_slice(host);
    } else {
        // A checked host holds no `"` or `\` (see `valid_host_name`): nothing to escape.
        v.push(b'"');
        v.extend_from_slice(host);
        v.push(b'"');
    }
    v
}

/// The `Forwarded` a request bound for the origin carries: rampart's element alone, or, when
/// the client is a trusted proxy (`extend`), its list with rampart's element after it (the
/// last element is the one an origin that trusts rampart reads). A client that is not trusted
/// could otherwise name the host or scheme an origin builds its page for, and have that page
/// stored for everyone.
pub fn forwarded(client: &Fields, own: Vec<u8>, extend: bool) -> HeaderValue {
    if extend {
        let mut prev = client.get_all(FORWARDED).iter().peekable();
        if prev.peek().is_some() {
            let mut v = Vec::new();
            for p in prev {
                v.extend_from_slice(p.as_bytes());
                v.extend_from_slice(b", ");
            }
            v.extend_from_slice(&own);
            if let Ok(v) = HeaderValue::from_bytes(&v) {
                return v;
            }
        }
    }
    // The usual case: rampart's element, taken as it is (no copy).
    HeaderValue::from_maybe_shared(bytes::Bytes::from(own))
        // invariant: rampart's element is an address, a scheme and a checked host: visible
        // ASCII.
        .unwrap_or_else(|_| HeaderValue::from_static("for=unknown"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn te_trailers_is_found_among_other_codings() {
        for (te, wants) in [
            ("trailers", true),
            ("gzip, Trailers", true),
            ("trailers;q=1", true),
            ("gzip", false),
            ("trailersx", false),
            ("", false),
        ] {
            let mut h = Fields::new();
            h.insert(TE, HeaderValue::from_str(te).expect("test value"));
            assert_eq!(wants_trailers(&h), wants, "{te:?}");
        }
        assert!(!wants_trailers(&Fields::new()));
    }

    #[test]
    fn strips_fixed_and_connection_named() {
        let mut h = Fields::new();
        h.insert(CONNECTION, HeaderValue::from_static("keep-alive, X-Secret"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(TE, HeaderValue::from_static("trailers"));
        h.insert(UPGRADE, HeaderValue::from_static("websocket"));
        h.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
        h.insert("x-keep", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key("x-keep"));
    }

    #[test]
    fn content_lengths() {
        for (v, n) in [
            ("0", Some(0)),
            ("2057", Some(2057)),
            (" 12\t", Some(12)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            ("+5", None),
            ("-1", None),
            ("1 2", None),
            ("", None),
            ("  ", None),
            ("0x10", None),
        ] {
            let got = parse_content_length(&HeaderValue::from_static(v));
            assert_eq!(got, n, "{v:?}");
        }
    }

    #[test]
    fn forwarded_for_extends_the_clients_list() {
        let ip = HeaderValue::from_static("127.0.0.1");
        let mut h = Fields::new();
        assert_eq!(forwarded_for(&h, &ip), "127.0.0.1");
        h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        h.append("x-forwarded-for", HeaderValue::from_static("10.0.0.2"));
        assert_eq!(forwarded_for(&h, &ip), "10.0.0.1, 10.0.0.2, 127.0.0.1");
    }

    #[test]
    fn forwarded_names_ramparts_client_and_extends_only_a_trusted_list() {
        let host = HeaderValue::from_static("shop.example");
        let element = |ip: &str, scheme, host: &HeaderValue| {
            let text = HeaderValue::from_str(ip).expect("text");
            forwarded_element(ip.parse().expect("address"), &text, scheme, host)
        };
        let v4 = element("192.0.2.7", "https", &host);
        assert_eq!(v4, b"for=192.0.2.7;proto=https;host=shop.example");
        let v6 = element("::1", "http", &HeaderValue::from_static("[::1]"));
        assert_eq!(v6, b"for=\"[::1]\";proto=http;host=\"[::1]\"");
        let mut h = Fields::new();
        assert_eq!(forwarded(&h, v4.clone(), true), &v4[..]);
        h.append(FORWARDED, HeaderValue::from_static("host=evil.com"));
        h.append(FORWARDED, HeaderValue::from_static("for=10.0.0.1"));
        assert_eq!(forwarded(&h, v4.clone(), false), &v4[..]);
        assert_eq!(
            forwarded(&h, v4, true),
            "host=evil.com, for=10.0.0.1, for=192.0.2.7;proto=https;host=shop.example"
        );
    }

    #[test]
    fn the_origin_gets_the_name_the_key_uses() {
        for (sent, origin) in [
            ("a.example", "a.example"),
            ("A.Example:8080", "a.example"),
            ("a.example.:80", "a.example"),
            ("a.example:", "a.example"),
            ("[::1]:8443", "[::1]"),
        ] {
            assert_eq!(
                origin_host(&HeaderValue::from_static(sent)),
                origin,
                "{sent}"
            );
        }
    }
}
