//! Connections: the client side (backlog, buffers, timeouts, head and HTTP/2 limits) and the
//! origin side (timeouts, pool, TLS floor, CA file).

use std::time::Duration;

use super::{clamp, error, file_key, secs, size, warn, I64, U16, U32};
use crate::model::{DownstreamConfig, TlsVersion, UpstreamConfig};
use crate::reader::{Section, Sink};

/// `websocket_idle_timeout_seconds` when unset: long enough for applications that ping every
/// minute or two, short enough that vanished clients do not pile up.
pub(super) const DEFAULT_UPGRADE_IDLE: Duration = Duration::from_secs(300);

/// `client_idle_park_seconds`: longer than the gap of a client that asks once a second (ARC2's
/// benchmark), which parked and woke on every request at 1 s (22.7 µs of CPU a request against
/// 14.0, twice the mean latency, at 10,000 such users); short enough that connections idle
/// for longer (most of a browser's keep-alive time) cost ~300 bytes instead of ~5 KiB.
pub(super) const DEFAULT_PARK_AFTER: Duration = Duration::from_secs(5);

pub(super) fn read_downstream(s: &mut Section<'_>, sink: &mut Sink<'_>) -> DownstreamConfig {
    let max_backlog = match s.int(sink, "max_backlog", i32::MIN as i64, i32::MAX as i64) {
        Some(b) if b.value <= 0 => {
            warn(
                sink,
                &b,
                "a backlog of zero or less is ignored; the default (4096) is used",
                "use a positive number, e.g. 4096",
            );
            None
        }
        Some(b) => Some(b.value as i32),
        None => None,
    };
    if let Some(b) = s.bool(sink, "nonblocking") {
        if !b.value {
            warn(
                sink,
                &b,
                "rampart's sockets are always non-blocking; `nonblocking = false` is ignored",
                "remove the key",
            );
        }
    }
    if let Some(b) = s.bool(sink, "enable_streaming") {
        if !b.value {
            warn(
                sink,
                &b,
                "rampart always streams bodies (whole bodies are never buffered); `enable_streaming = false` is ignored",
                "remove the key",
            );
        }
    }
    DownstreamConfig {
        nodelay: s.bool(sink, "nodelay").is_none_or(|b| b.value),
        max_backlog,
        recv_buffer_size: buffer_size(s, sink, "recv_buffer_size"),
        send_buffer_size: buffer_size(s, sink, "send_buffer_size"),
        ip_ttl: s
            .int(sink, "ip_ttl", 0, U32)
            .and_then(|v| clamp(sink, v, 255, "the largest IP TTL"))
            .map(|v| v as u32),
        tcp_keepalive: s
            .int(sink, "tcp_keep_alive_seconds", 0, I64)
            .filter(|v| v.value > 0)
            .map(|v| secs(v.value)),
        max_connections: s
            .int(sink, "max_connections", 1, 10_000_000)
            .map_or(100_000, |v| v.value as usize),
        header_read_timeout: s
            .int(sink, "client_header_timeout_seconds", 1, 3600)
            .map_or(Duration::from_secs(30), |v| secs(v.value)),
        max_connections_per_ip: s
            .int(sink, "max_connections_per_ip", 0, 10_000_000)
            .filter(|v| v.value > 0)
            .map(|v| v.value as usize),
        body_idle_timeout: s
            .int(sink, "client_body_timeout_seconds", 1, 3600)
            .map_or(Duration::from_secs(60), |v| secs(v.value)),
        body_total_timeout: match s.int(sink, "client_body_total_timeout_seconds", 0, I64) {
            Some(v) if v.value == 0 => None,
            Some(v) => Some(secs(v.value)),
            None => Some(Duration::from_secs(300)),
        },
        send_timeout: s
            .int(sink, "client_send_timeout_seconds", 1, 86_400)
            .map_or(Duration::from_secs(60), |v| secs(v.value)),
        keepalive_timeout: s
            .int(sink, "client_keepalive_timeout_seconds", 1, 86_400)
            .map_or(Duration::from_secs(60), |v| secs(v.value)),
        park_after: match s.int(sink, "client_idle_park_seconds", 0, 86_400) {
            Some(v) if v.value == 0 => None,
            Some(v) => Some(secs(v.value)),
            None => Some(DEFAULT_PARK_AFTER),
        },
        upgrade_idle_timeout: s
            .int(sink, "websocket_idle_timeout_seconds", 1, 7 * 86_400)
            .map_or(DEFAULT_UPGRADE_IDLE, |v| secs(v.value)),
        max_head_bytes: size(s, sink, "max_request_head_size", 64 << 10, 8192).min(16 << 20)
            as usize,
        max_headers: s
            .int(sink, "max_request_headers", 8, 1000)
            .map_or(100, |v| v.value as usize),
        h2_max_concurrent_streams: s
            .int(sink, "h2_max_concurrent_streams", 1, 10_000)
            .map_or(256, |v| v.value as u32),
        h2_max_header_list_bytes: size(s, sink, "h2_max_header_list_size", 64 << 10, 1024)
            .min(16 << 20) as u32,
    }
}

/// `recv_buffer_size` / `send_buffer_size`: bytes, up to what the kernel accepts (`i32`).
fn buffer_size(s: &mut Section<'_>, sink: &mut Sink<'_>, key: &'static str) -> Option<usize> {
    s.int(sink, key, 0, I64)
        .and_then(|v| {
            clamp(
                sink,
                v,
                i32::MAX as i64,
                "the kernel's largest socket buffer request",
            )
        })
        .map(|v| v as usize)
}

pub(super) fn read_upstream(s: &mut Section<'_>, sink: &mut Sink<'_>) -> UpstreamConfig {
    let mut proxy_tls_min = TlsVersion::Tls13;
    if let Some(v) = s.string(sink, "proxy_min_tls_version") {
        if v.value == "TLS_1_3" {
            proxy_tls_min = TlsVersion::Tls13;
        } else if v.value == "TLS_1_2" {
            proxy_tls_min = TlsVersion::Tls12;
        } else if ["TLS_1_0", "TLS_1_1"].contains(&v.value.as_str()) {
            proxy_tls_min = TlsVersion::Tls12;
            warn(
                sink,
                &v,
                format!(
                    "{} is raised to TLS_1_2: rampart's TLS stack (rustls) offers no older versions",
                    v.value
                ),
                "use \"TLS_1_2\" to say what is in force",
            );
        } else {
            error(
                sink,
                &v,
                format!("Invalid TLS value: {:?}", v.value),
                "use exactly one of \"TLS_1_0\", \"TLS_1_1\", \"TLS_1_2\", \"TLS_1_3\"",
            );
        }
    }
    let timeout = match s.int(sink, "proxy_timeout", 0, U16) {
        Some(t) if t.value == 0 => {
            warn(
                sink,
                &t,
                "0 disables the origin timeout: a silent origin holds the request forever",
                "use a number of seconds, e.g. 45",
            );
            None
        }
        Some(t) => Some(secs(t.value)),
        None => Some(Duration::from_secs(45)),
    };
    UpstreamConfig {
        nodelay: s.bool(sink, "proxy_nodelay").is_none_or(|b| b.value),
        keepalive: s
            .int(sink, "proxy_keepalive_sec", 0, U32)
            .map_or(Duration::from_secs(120), |v| secs(v.value)),
        timeout,
        connect_timeout: s
            .int(sink, "proxy_connect_timeout_seconds", 1, 3600)
            .map_or(Duration::from_secs(5), |v| secs(v.value)),
        max_idle_per_origin: s
            .int(sink, "proxy_max_idle_per_origin", 0, 100_000)
            .map_or(256, |v| v.value as usize),
        tls_min_version: proxy_tls_min,
        ca_file: file_key(s, sink, "proxy_ca_file"),
    }
}
