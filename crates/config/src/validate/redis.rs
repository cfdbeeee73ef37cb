//! Redis shared by several instances: `redis_url` or `redis_cluster`, `redis_key_prefix`,
//! `redis_timeout_ms` and the per-feature switches. Without an address the other keys have no
//! effect (a warning says so) and every instance keeps its own state.

use std::time::Duration;

use super::{error, warn};
use crate::model::{RedisConfig, RedisEndpoint, Secret};
use crate::reader::{At, Section, Sink};

/// `redis_key_prefix` when unset.
pub const DEFAULT_KEY_PREFIX: &str = "rampart:";
/// `redis_timeout_ms` when unset: a loopback or same-rack Redis answers in well under a
/// millisecond; past 5 ms the request goes on with a local decision.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(5);

/// The feature switches, read whether or not an address is given (so a typo is reported).
const SWITCHES: [&str; 3] = ["redis_rate_limits", "redis_purge", "redis_certificates"];

/// `redis_cache_max_object` when unset: larger values slow every command queued behind them
/// on the shared connection.
pub const DEFAULT_CACHE_MAX_OBJECT: u64 = 1 << 20;

/// The Redis keys as read, and where the address was given (for checks that need the rules).
pub(super) struct Settings {
    pub(super) config: Option<RedisConfig>,
    at: Option<(String, Option<std::ops::Range<usize>>)>,
}

pub(super) fn read(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Settings {
    let url = s.string(sink, "redis_url");
    let cluster = s.strings(sink, "redis_cluster");
    let at = url
        .as_ref()
        .map(|u| (u.key.clone(), u.span.clone()))
        .or_else(|| cluster.as_ref().map(|c| (c.key.clone(), c.span.clone())));
    Settings {
        config: read_config(s, sink, url, cluster),
        at,
    }
}

fn read_config(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    url: Option<At<String>>,
    cluster: Option<At<Vec<At<String>>>>,
) -> Option<RedisConfig> {
    let prefix = s.string(sink, "redis_key_prefix");
    let timeout = s.int(sink, "redis_timeout_ms", 1, 60_000);
    let switches = SWITCHES.map(|k| s.bool(sink, k));
    let cache = s.bool(sink, "redis_cache");
    let cache_max_object = super::size(
        s,
        sink,
        "redis_cache_max_object",
        DEFAULT_CACHE_MAX_OBJECT,
        1,
    );
    let key = s.string(sink, "redis_encryption_key");
    let key_file = s.string(sink, "redis_encryption_key_file");

    let endpoint = match (url, cluster) {
        (Some(u), Some(c)) => {
            error(
                sink,
                &c,
                "both `redis_url` and `redis_cluster` are set",
                "keep `redis_url` for one Redis server, or `redis_cluster` for a Redis Cluster",
            );
            cluster_nodes(sink, c);
            check_url(sink, &u, false);
            None
        }
        (Some(u), None) => check_url(sink, &u, false).map(|_| RedisEndpoint::Node(u.value)),
        (None, Some(c)) => cluster_nodes(sink, c),
        (None, None) => {
            let unused = prefix
                .iter()
                .map(|a| (&a.key, &a.span))
                .chain(timeout.iter().map(|a| (&a.key, &a.span)))
                .chain(switches.iter().flatten().map(|a| (&a.key, &a.span)))
                .chain(cache.iter().map(|a| (&a.key, &a.span)))
                .chain(key.iter().chain(key_file.iter()).map(|a| (&a.key, &a.span)));
            for (key, span) in unused {
                sink.push(
                    crate::diag::Severity::Warning,
                    key,
                    span.clone(),
                    "has no effect without `redis_url` or `redis_cluster`",
                    "set `redis_url = \"redis://host:6379\"` (or `redis_cluster`), or remove the key",
                );
            }
            return None;
        }
    }?;
    let key_prefix = match prefix {
        Some(p)
            if p.value
                .contains(|c: char| c.is_whitespace() || c.is_control()) =>
        {
            error(
                sink,
                &p,
                format!("{:?} has white space or control characters", p.value),
                "use letters, digits and punctuation, e.g. \"rampart:\" or \"site-a:\"",
            );
            DEFAULT_KEY_PREFIX.to_owned()
        }
        Some(p) => p.value,
        None => DEFAULT_KEY_PREFIX.to_owned(),
    };
    let [rate_limits, purge, certificates] = switches.map(|b| b.is_none_or(|b| b.value));
    let encryption_key = encryption_key(sink, key, key_file);
    Some(RedisConfig {
        endpoint,
        key_prefix,
        timeout: timeout.map_or(DEFAULT_TIMEOUT, |t| Duration::from_millis(t.value as u64)),
        rate_limits,
        purge,
        certificates,
        encryption_key,
        cache: cache.is_some_and(|b| b.value),
        cache_max_object,
    })
}

/// `redis_encryption_key` (a passphrase of at least 16 characters) or
/// `redis_encryption_key_file` (a file holding one).
fn encryption_key(
    sink: &mut Sink<'_>,
    key: Option<At<String>>,
    file: Option<At<String>>,
) -> Option<Secret> {
    super::secret(
        sink,
        key,
        file,
        "the encryption key is too short to protect private keys",
    )
}

/// With ACME in use and `redis_certificates` on, the encryption key must be there. Called once
/// the rules are read.
pub(super) fn finish(
    sink: &mut Sink<'_>,
    read: Settings,
    acme_in_use: bool,
) -> Option<RedisConfig> {
    let mut redis = read.config;
    let r = redis.as_mut()?;
    if !acme_in_use {
        r.certificates = false;
        return redis;
    }
    if r.certificates && r.encryption_key.is_none() {
        let (key, span) = read.at.unwrap_or_default();
        sink.push(
            crate::diag::Severity::Error,
            &key,
            span,
            "ACME keys would be kept in Redis unencrypted",
            "set `redis_encryption_key` (or `redis_encryption_key_file`) to a secret shared by the instances, e.g. from `openssl rand -hex 32`, or `redis_certificates = false` to keep certificates per instance",
        );
    }
    redis
}

fn cluster_nodes(sink: &mut Sink<'_>, list: At<Vec<At<String>>>) -> Option<RedisEndpoint> {
    if list.value.is_empty() {
        error(
            sink,
            &list,
            "`redis_cluster` lists no nodes",
            "name at least one node, e.g. [\"10.0.0.1:7000\", \"10.0.0.2:7000\"]",
        );
        return None;
    }
    let mut nodes = Vec::with_capacity(list.value.len());
    let mut schemes = Vec::new();
    for node in &list.value {
        // A bare `host:port` is a plain-TCP node.
        let url = if node.value.contains("://") {
            node.value.clone()
        } else {
            format!("redis://{}", node.value)
        };
        let at = At {
            value: url,
            key: node.key.clone(),
            span: node.span.clone(),
        };
        if let Some(scheme) = check_url(sink, &at, true) {
            schemes.push(scheme);
            nodes.push(at.value);
        }
    }
    if schemes.windows(2).any(|w| w[0] != w[1]) {
        error(
            sink,
            &list,
            "the cluster's nodes mix `redis://` and `rediss://`",
            "a Redis Cluster speaks TLS on every node or on none: use one scheme",
        );
        return None;
    }
    (nodes.len() == schemes.len() && !nodes.is_empty()).then_some(RedisEndpoint::Cluster(nodes))
}

/// Checks a Redis URL's shape; returns its scheme. `cluster`: no database number, no socket.
fn check_url(sink: &mut Sink<'_>, at: &At<String>, cluster: bool) -> Option<&'static str> {
    let hint = if cluster {
        "write \"host:port\", \"redis://[user:password@]host:port\" or \"rediss://...\" for TLS"
    } else {
        "write \"redis://[user:password@]host[:port][/db]\", \"rediss://...\" for TLS or \"redis+unix:///path/to/redis.sock\""
    };
    let bad = |sink: &mut Sink<'_>, why: String| {
        error(sink, at, why, hint);
        None
    };
    let url = at.value.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return bad(
            sink,
            format!("{:?} is not a Redis URL", crate::model::redact_url(url)),
        );
    };
    let scheme = match scheme {
        "redis" => "redis",
        "rediss" => "rediss",
        "redis+unix" | "unix" if !cluster => {
            if rest.is_empty() || !rest.starts_with('/') {
                return bad(
                    sink,
                    "a `redis+unix://` URL needs an absolute socket path".into(),
                );
            }
            return Some("unix");
        }
        other => {
            return bad(
                sink,
                format!("unknown scheme {other:?} (Redis URLs start with redis:// or rediss://)"),
            )
        }
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':')),
            None => return bad(sink, format!("{host_port:?}: unclosed IPv6 bracket")),
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return bad(sink, "the URL names no host".into());
    }
    if let Some(p) = port {
        if p.parse::<u16>().map_or(true, |p| p == 0) {
            return bad(sink, format!("{p:?} is not a port"));
        }
    } else if cluster {
        return bad(sink, format!("{host_port:?} names no port"));
    }
    let db = path.split('?').next().unwrap_or("");
    if !db.is_empty() {
        if cluster {
            return bad(sink, "a Redis Cluster has no database numbers".into());
        }
        if db.parse::<u32>().is_err() {
            return bad(sink, format!("{db:?} is not a database number"));
        }
    }
    if !cluster && scheme == "redis" && authority.contains('@') && !is_loopback(host) {
        warn(
            sink,
            at,
            "the password goes to Redis unencrypted",
            "use `rediss://` (TLS) when Redis is not on this machine",
        );
    }
    Some(scheme)
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
