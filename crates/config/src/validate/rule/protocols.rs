//! A rule's protocol keys: what it sends to its origins first (`send_proxy_protocol`), which
//! HTTP version it speaks to them (`origin_protocol`, also per routing location), and whether
//! and how long its clients may hold WebSockets (`allow_upgrades`,
//! `websocket_idle_timeout_seconds`).

use crate::model::{OriginProtocol, ProxyProtocolVersion, UpstreamTarget};
use crate::reader::{At, Section, Sink};
use crate::validate::error;

/// `send_proxy_protocol`, `allow_upgrades` and `websocket_idle_timeout_seconds`.
pub(super) fn read(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
) -> (
    Option<ProxyProtocolVersion>,
    bool,
    Option<std::time::Duration>,
) {
    let send = s
        .string(sink, "send_proxy_protocol")
        .and_then(|v| match v.value.trim() {
            "v1" | "1" => Some(ProxyProtocolVersion::V1),
            "v2" | "2" => Some(ProxyProtocolVersion::V2),
            other => {
                error(
                    sink,
                    &v,
                    format!("unknown send_proxy_protocol {other:?}"),
                    "use \"v1\" (text) or \"v2\" (binary), or remove the key",
                );
                None
            }
        });
    let allow_upgrades = s.bool(sink, "allow_upgrades").is_none_or(|b| b.value);
    let idle = s
        .int(sink, "websocket_idle_timeout_seconds", 1, 7 * 86_400)
        .map(|v| std::time::Duration::from_secs(v.value as u64));
    (send, allow_upgrades, idle)
}

/// `origin_protocol` in a rule or a routing location; the `bool` is false when invalid
/// (reported).
pub(super) fn origin_protocol(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
) -> (Option<At<OriginProtocol>>, bool) {
    let Some(v) = s.string(sink, "origin_protocol") else {
        return (None, true);
    };
    let p = match v.value.trim() {
        "http1" | "http/1.1" => OriginProtocol::Http1,
        "h2" => OriginProtocol::H2,
        "h2c" => OriginProtocol::H2c,
        other => {
            error(
                sink,
                &v,
                format!("unknown origin_protocol {other:?}"),
                "use \"http1\" (default), \"h2\" (HTTP/2 over TLS) or \"h2c\" (HTTP/2 without TLS)",
            );
            return (None, false);
        }
    };
    (
        Some(At {
            value: p,
            key: v.key,
            span: v.span,
        }),
        true,
    )
}

/// HTTP/2 over TLS needs an origin reached over TLS only; h2c one reached without TLS.
pub(super) fn check_protocol(
    sink: &mut Sink<'_>,
    p: &At<OriginProtocol>,
    t: &UpstreamTarget,
) -> bool {
    let problem = match p.value {
        OriginProtocol::H2 if !t.https_only => Some((
            format!("origin_protocol \"h2\" is HTTP/2 over TLS, but {} is also reached without TLS", t.authority),
            "set `https_only = true` (or list it as \"https://HOST:PORT\"), or use \"h2c\" for HTTP/2 without TLS",
        )),
        OriginProtocol::H2c if t.tls.is_some() => Some((
            format!("origin_protocol \"h2c\" is HTTP/2 without TLS, but {} is reached over TLS", t.authority),
            "use \"h2\" for HTTP/2 over TLS, or remove `https_only`/`forward_port_https`",
        )),
        _ => None,
    };
    match problem {
        Some((message, hint)) => {
            error(sink, p, message, hint);
            false
        }
        None => true,
    }
}
