//! upgrade: a request to switch to WebSocket — HTTP/1.1 `Connection: upgrade` + `Upgrade:
//! websocket` (RFC 6455), or HTTP/2 extended CONNECT with `:protocol = websocket` (RFC 8441)
//! — is checked ([`handshake`]) and passes (never cached) to the origin as an HTTP/1.1 upgrade;
//! [`switch`] reads the answer. A `101` from the origin
//! becomes a tunnel: over HTTP/1.1 the server writes the `101` and splices the connection
//! (`http1::server::serve`, [`Tunnel`] in the response); over HTTP/2 the stream is answered
//! `200` and the HTTP/2 server splices the stream (`http2::server`, the same [`Tunnel`]). Any
//! other answer goes to the client as usual.
//!
//! Screening (allow/deny, user agent, rate limits, SQL injection on the handshake's target and
//! headers) has run before, in recv. Only `websocket` is tunnelled: other `Upgrade` tokens
//! (`h2c`, TLS) are hop-by-hop fields the request loses, as every request does.

use http::header::{HeaderName, HeaderValue, CONNECTION, UPGRADE};
use http::{Method, StatusCode, Version};
use rampart_head::{Request, Response};

use crate::body::{ProxyBody, RequestBody};
use crate::error::ProxyError;
use crate::net::tunnel::{OriginSide, Tunnel};
use crate::outcome::{CacheLabel, CacheOutcome};
use crate::pipeline::fetch::{Fetched, Plan};
use crate::pipeline::txn::Txn;
use crate::pipeline::worker_state::Worker;

static SEC_WEBSOCKET_KEY: HeaderName = HeaderName::from_static("sec-websocket-key");
static SEC_WEBSOCKET_VERSION: HeaderName = HeaderName::from_static("sec-websocket-version");
static SEC_WEBSOCKET_ACCEPT: HeaderName = HeaderName::from_static("sec-websocket-accept");

/// How the client asked to switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// HTTP/1.1 `Upgrade: websocket`.
    H1,
    /// HTTP/2 extended CONNECT (RFC 8441).
    H2,
}

/// Whether `req` asks to switch to WebSocket. Cheap for every other request: a method
/// comparison, then a look for the `Upgrade` field.
#[inline]
pub fn wants<B>(req: &Request<B>) -> Option<Kind> {
    if req.method() == Method::CONNECT {
        let protocol = req.extensions().get::<hyper::ext::Protocol>()?;
        return protocol
            .as_str()
            .eq_ignore_ascii_case("websocket")
            .then_some(Kind::H2);
    }
    let upgrade = req.headers().get(UPGRADE)?;
    if req.version() != Version::HTTP_11 {
        return None;
    }
    let has = |v: &HeaderValue, token: &str| {
        v.to_str().is_ok_and(|s| {
            s.split(',').any(|t| {
                t.trim()
                    .split('/')
                    .next()
                    .unwrap_or("")
                    .eq_ignore_ascii_case(token)
            })
        })
    };
    let connection = req
        .headers()
        .get_all(CONNECTION)
        .iter()
        .any(|v| has(v, "upgrade"));
    (connection && has(upgrade, "websocket")).then_some(Kind::H1)
}

/// A checked handshake on its way to the origin (`Step::Upgrade`).
#[derive(Debug)]
pub struct Upgrade {
    kind: Kind,
}

/// The origin's answer to the handshake.
#[derive(Debug)]
pub enum Switched {
    /// A `101`: the answer that makes the connection (or HTTP/2 stream) a tunnel.
    Tunnel(Response<ProxyBody>),
    /// Refused by the origin (or not a WebSocket endpoint): its answer, passed on as any
    /// response is (never stored).
    Refused(Fetched),
}

/// The handshake stage: checked (RFC 6455 §4.1 over HTTP/1.1, RFC 8441 §5 over HTTP/2) and
/// made the HTTP/1.1 handshake the origin expects; next `Step::Upgrade` with it.
pub fn handshake(
    txn: &mut Txn,
    req: &mut Request<RequestBody>,
    kind: Kind,
) -> Result<Upgrade, ProxyError> {
    if !txn.route().rule.config.allow_upgrades {
        return Err(ProxyError::UpgradeRefused);
    }
    txn.outcome = Some(CacheOutcome::fetched(CacheLabel::Bypass, false));
    if !matches!(req.body(), RequestBody::Empty) {
        return Err(ProxyError::BadRequest("a WebSocket handshake has no body"));
    }
    match kind {
        Kind::H1 => {
            // RFC 6455 §4.1: a GET with the key and the version.
            let h = req.headers();
            let key_ok = h.get(&SEC_WEBSOCKET_KEY).is_some_and(|k| k.len() == 24);
            if req.method() != Method::GET || !key_ok || !h.contains_key(&SEC_WEBSOCKET_VERSION) {
                return Err(ProxyError::BadRequest("WebSocket handshake"));
            }
        }
        Kind::H2 => {
            // RFC 8441 §5: the HTTP/1.1 handshake the origin expects, with a key of our own
            // (HTTP/2 has none) and the version the client named (13 when it named none).
            *req.method_mut() = Method::GET;
            req.extensions_mut().remove::<hyper::ext::Protocol>();
            let h = req.headers_mut();
            h.insert(SEC_WEBSOCKET_KEY.clone(), new_key());
            if !h.contains_key(&SEC_WEBSOCKET_VERSION) {
                h.push(
                    SEC_WEBSOCKET_VERSION.clone(),
                    HeaderValue::from_static("13"),
                );
            }
        }
    }
    Ok(Upgrade { kind })
}

/// What fetch asks of the origin for a handshake: `Connection: upgrade`, `Upgrade:
/// websocket`, over HTTP/1.1 whatever the origin's protocol.
pub fn plan() -> Plan<'static> {
    Plan {
        upgrade: true,
        ..Plan::default()
    }
}

/// The switch stage: the origin's `101` becomes a tunnel (see the module notes); any other
/// answer is [`Switched::Refused`].
pub fn switch(
    w: &Worker,
    txn: &Txn,
    up: Upgrade,
    mut fetched: Fetched,
) -> Result<Switched, ProxyError> {
    if fetched.res.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(Switched::Refused(fetched));
    }
    let rule = &txn.route().rule.config;
    let idle = rule.upgrade_idle_timeout.unwrap_or(w.upgrade_idle);
    // invariant: the origin client puts the connection in every 101 it returns.
    let Some(origin) = fetched.res.extensions_mut().remove::<OriginSide>() else {
        return Err(ProxyError::OriginProtocol(
            "a 101 without its connection".into(),
        ));
    };
    let (mut head, _) = fetched.res.into_parts();
    crate::headers::strip_hop_by_hop(&mut head.headers);
    let mut out = Response::new(ProxyBody::full(bytes::Bytes::new()));
    *out.headers_mut() = head.headers;
    let tunnel = Tunnel { origin, idle };
    match up.kind {
        Kind::H2 => {
            // RFC 8441 §5: the stream is accepted with 200; the key's answer is ours alone.
            // The HTTP/2 server splices the stream with the tunnel it finds in the answer.
            out.headers_mut().remove(&SEC_WEBSOCKET_ACCEPT);
            out.extensions_mut().insert(tunnel);
        }
        Kind::H1 => {
            *out.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            out.headers_mut()
                .insert(UPGRADE, HeaderValue::from_static("websocket"));
            out.extensions_mut().insert(tunnel);
        }
    }
    Ok(Switched::Tunnel(out))
}

/// A `Sec-WebSocket-Key`: 16 random bytes in base64 (RFC 6455 §4.1), from the standard
/// library's per-process random hash keys.
fn new_key() -> HeaderValue {
    use std::hash::{BuildHasher, Hasher};
    let mut bytes = [0u8; 16];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(i);
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    let text = base64(&bytes);
    // invariant: base64 is visible ASCII.
    HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="))
}

fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= c.len() {
                out.push(ABC[(n >> shift & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_keys() {
        assert_eq!(base64(b"the sample nonce"), "dGhlIHNhbXBsZSBub25jZQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        let (a, b) = (new_key(), new_key());
        assert_eq!(a.len(), 24);
        assert_ne!(a, b);
    }

    #[test]
    fn only_websocket_upgrades_are_wanted() {
        let req = |conn: &str, up: &str| {
            Request::get("/")
                .header("connection", conn)
                .header("upgrade", up)
                .body(())
                .unwrap_or_default()
        };
        assert_eq!(wants(&req("Upgrade", "websocket")), Some(Kind::H1));
        assert_eq!(
            wants(&req("keep-alive, upgrade", "WebSocket")),
            Some(Kind::H1)
        );
        assert_eq!(wants(&req("keep-alive", "websocket")), None);
        assert_eq!(wants(&req("upgrade", "h2c")), None);
        let mut r = req("Upgrade", "websocket");
        *r.version_mut() = Version::HTTP_10;
        assert_eq!(wants(&r), None);
        assert_eq!(wants(&Request::get("/").body(()).unwrap_or_default()), None);
    }
}
