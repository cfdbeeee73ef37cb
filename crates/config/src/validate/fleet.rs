//! The cache sharded over a fleet of instances: `cache_peers` (every member's address, this
//! instance's among them) or `cache_peers_from_redis` (the members announce themselves
//! through the Redis the instances share), `cache_peer_self`, `cache_peer_key` /
//! `cache_peer_key_file`, `cache_peer_local_ttl_seconds` and `cache_peer_timeout_ms`. Without
//! either the other keys have no effect (a warning says so) and the instance caches on its own.

use std::net::SocketAddr;
use std::time::Duration;

use super::error;
use crate::model::{FleetConfig, Secret};
use crate::reader::{At, Section, Sink};

/// `cache_peer_local_ttl_seconds` when unset: a non-owner keeps no copy of what the owner sent.
/// Copies spread the hottest keys' load, but they take memory from what each member owns: with
/// 2 s copies the fleet's hit ratio fell from 0.948 to 0.845 (`bench/fleet-hit-ratio.py`).
pub const DEFAULT_LOCAL_TTL: Duration = Duration::ZERO;
/// `cache_peer_timeout_ms` when unset: a peer that has not connected and sent its answer's head
/// by then is skipped (the request goes to the origin).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);

/// The keys as read; [`finish`] names this instance once the listeners are known.
pub(super) struct Settings {
    peers: Option<At<Vec<At<String>>>>,
    /// `cache_peers_from_redis = true`.
    discover: Option<At<bool>>,
    me: Option<At<String>>,
    key: Option<Secret>,
    local_ttl: Duration,
    timeout: Duration,
}

pub(super) fn read(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Settings {
    let peers = s.strings(sink, "cache_peers");
    let discover = s.bool(sink, "cache_peers_from_redis").filter(|d| d.value);
    let me = s.string(sink, "cache_peer_self");
    let key = s.string(sink, "cache_peer_key");
    let key_file = s.string(sink, "cache_peer_key_file");
    let local_ttl = s.int(sink, "cache_peer_local_ttl_seconds", 0, 3600);
    let timeout = s.int(sink, "cache_peer_timeout_ms", 10, 60_000);
    if peers.is_none() && discover.is_none() {
        let unused = me
            .iter()
            .chain(key.iter())
            .chain(key_file.iter())
            .map(|a| (&a.key, &a.span))
            .chain(local_ttl.iter().map(|a| (&a.key, &a.span)))
            .chain(timeout.iter().map(|a| (&a.key, &a.span)));
        for (k, span) in unused {
            sink.push(
                crate::diag::Severity::Warning,
                k,
                span.clone(),
                "has no effect without `cache_peers` or `cache_peers_from_redis`",
                "list every instance's address in `cache_peers = [\"10.0.0.1:80\", \"10.0.0.2:80\"]` (or set `cache_peers_from_redis = true`), or remove the key",
            );
        }
    }
    Settings {
        key: secret(sink, key, key_file),
        peers,
        discover,
        me,
        local_ttl: local_ttl.map_or(DEFAULT_LOCAL_TTL, |t| Duration::from_secs(t.value as u64)),
        timeout: timeout.map_or(DEFAULT_TIMEOUT, |t| Duration::from_millis(t.value as u64)),
    }
}

/// The members and this instance among them (`cache_peer_self`, else the one the HTTP
/// listener's address names).
pub(super) fn finish(
    sink: &mut Sink<'_>,
    read: Settings,
    listen_http: &[SocketAddr],
    redis: bool,
) -> Option<FleetConfig> {
    if let Some(d) = &read.discover {
        return discovered(sink, &read, d, listen_http, redis);
    }
    let peers = read.peers?;
    let mut members: Vec<SocketAddr> = Vec::with_capacity(peers.value.len());
    let mut ok = true;
    for p in &peers.value {
        match p.value.trim().parse::<SocketAddr>() {
            Ok(a) if members.contains(&a) => {
                error(
                    sink,
                    p,
                    format!("{a} is listed twice"),
                    "list each instance once",
                );
                ok = false;
            }
            Ok(a) if a.ip().is_unspecified() || a.port() == 0 => {
                error(
                    sink,
                    p,
                    format!("{a} is not an address another instance can reach"),
                    "give the address and HTTP port the instance listens on, e.g. \"10.0.0.2:80\"",
                );
                ok = false;
            }
            Ok(a) => members.push(a),
            Err(_) => {
                error(
                    sink,
                    p,
                    format!("{:?} is not an IP address and port", p.value),
                    "write each instance as \"10.0.0.2:80\" or \"[2001:db8::2]:80\" (its HTTP listener)",
                );
                ok = false;
            }
        }
    }
    if members.is_empty() && ok {
        error(
            sink,
            &peers,
            "`cache_peers` is empty",
            "list every instance's address, this one's among them, or remove the key",
        );
        return None;
    }
    let me = match &read.me {
        Some(m) => match m.value.trim().parse::<SocketAddr>() {
            Ok(a) if members.contains(&a) => Some(a),
            Ok(a) => {
                error(
                    sink,
                    m,
                    format!("{a} is not in `cache_peers`"),
                    "name this instance's own entry of `cache_peers`",
                );
                None
            }
            Err(_) => {
                error(
                    sink,
                    m,
                    format!("{:?} is not an IP address and port", m.value),
                    "write this instance's entry of `cache_peers`, e.g. \"10.0.0.2:80\"",
                );
                None
            }
        },
        None => {
            let found = members.iter().find(|m| listen_http.contains(m)).copied();
            if found.is_none() && ok {
                error(
                    sink,
                    &peers,
                    "none of `cache_peers` is this instance's HTTP listener",
                    "set `cache_peer_self` to this instance's entry, e.g. `cache_peer_self = \"10.0.0.2:80\"`",
                );
            }
            found
        }
    };
    // A peer's request skips screening and may purge: it must prove where it comes from.
    if read.key.is_none() && ok {
        error(
            sink,
            &peers,
            "peers' requests would be recognised by their address alone",
            "set `cache_peer_key_file` (or `cache_peer_key`) to a secret the instances share, e.g. from `openssl rand -hex 32`",
        );
        ok = false;
    }
    // Connections to peers leave from this instance's own address.
    // (Each entry was valid when `ok` holds: they line up with `members`.)
    if let (Some(me), true) = (me, ok) {
        for (p, a) in peers.value.iter().zip(&members) {
            if a.is_ipv4() != me.is_ipv4() {
                error(
                    sink,
                    p,
                    format!("{a} and this instance ({me}) are not of one IP version"),
                    "list every instance by addresses of the version this one listens on",
                );
                ok = false;
            }
        }
    }
    Some(FleetConfig {
        members,
        me: me?,
        discover: false,
        key: read.key,
        local_ttl: read.local_ttl,
        timeout: read.timeout,
    })
    .filter(|_| ok)
}

/// `cache_peers_from_redis`: this instance's address (`cache_peer_self`, else the HTTP
/// listener's when it names one address), and Redis to announce it through.
fn discovered(
    sink: &mut Sink<'_>,
    read: &Settings,
    d: &At<bool>,
    listen_http: &[SocketAddr],
    redis: bool,
) -> Option<FleetConfig> {
    let mut ok = true;
    if let Some(p) = &read.peers {
        error(
            sink,
            p,
            "`cache_peers` and `cache_peers_from_redis` both name the members",
            "keep one: remove `cache_peers` to find the members through Redis, or remove `cache_peers_from_redis`",
        );
        ok = false;
    }
    if !redis {
        error(
            sink,
            d,
            "the members are found through Redis, and no Redis is set",
            "set `redis_url = \"redis://10.0.0.9:6379\"` (or `redis_cluster`) on every instance, or list the members in `cache_peers`",
        );
        ok = false;
    }
    let me = match &read.me {
        Some(m) => match m.value.trim().parse::<SocketAddr>() {
            Ok(a) if !a.ip().is_unspecified() && a.port() != 0 => Some(a),
            _ => {
                error(
                    sink,
                    m,
                    format!("{:?} is not an address another instance can reach", m.value),
                    "give the IP address and HTTP port the others reach this instance at, e.g. \"10.0.0.2:80\"",
                );
                None
            }
        },
        None => match listen_http {
            [a] if !a.ip().is_unspecified() && a.port() != 0 => Some(*a),
            _ => {
                error(
                    sink,
                    d,
                    "the other instances need this instance's address, and the HTTP listener does not name one",
                    "set `cache_peer_self` to the address and HTTP port the others reach this instance at, e.g. `cache_peer_self = \"10.0.0.2:80\"`",
                );
                None
            }
        },
    };
    if read.key.is_none() {
        error(
            sink,
            d,
            "peers' requests would be recognised by their address alone",
            "set `cache_peer_key_file` (or `cache_peer_key`) to a secret the instances share, e.g. from `openssl rand -hex 32`",
        );
        ok = false;
    }
    let me = me?;
    Some(FleetConfig {
        members: vec![me],
        me,
        discover: true,
        key: read.key.clone(),
        local_ttl: read.local_ttl,
        timeout: read.timeout,
    })
    .filter(|_| ok)
}

/// `cache_peer_key` (at least 16 characters) or `cache_peer_key_file` (a file holding one).
fn secret(
    sink: &mut Sink<'_>,
    key: Option<At<String>>,
    file: Option<At<String>>,
) -> Option<Secret> {
    super::secret(
        sink,
        key,
        file,
        "the peer key is too short to authenticate peers",
    )
}
