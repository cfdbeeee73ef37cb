//! Screening (rate limits, trusted proxies, body limits, SQL-injection screening) and the
//! management API's access (`api_key`, `purge_allow`).

use super::{
    body_size, cidrs, error, rate_limit, rate_limit_status, warn, DEFAULT_RATE_LIMIT_STATUS,
};
use crate::model::{AdminConfig, Cidr, RateLimit, ScreenConfig};
use crate::reader::{Section, Sink};

/// The default request body limit, 2 MiB (docs/arc2.md, "Request body limit").
pub const DEFAULT_BODY_LIMIT: u64 = 2 << 20;

pub(super) fn read_screen(s: &mut Section<'_>, sink: &mut Sink<'_>) -> ScreenConfig {
    // Rate limiting is on when the key is omitted, ARC2's production default (docs/arc2.md,
    // "Defaults").
    let on = s.bool(sink, "add_rate_limiting").is_none_or(|b| b.value);
    let default = RateLimit {
        per_second: 100,
        burst: 200,
    };
    let configured = rate_limit(s, sink, Some(default));
    let rate_limit = on.then_some(configured).flatten();
    let rate_limit_status = rate_limit_status(s, sink).unwrap_or(DEFAULT_RATE_LIMIT_STATUS);
    let rate_limit_exempt = cidrs(s, sink, "rate_limit_exempt")
        .map(|c| c.value)
        .unwrap_or_else(|| {
            ["127.0.0.0/8", "::1"]
                .iter()
                .filter_map(|c| Cidr::parse(c))
                .collect()
        });
    let rate_limit_max_clients = s
        .int(sink, "rate_limit_max_clients", 1024, 100_000_000)
        .map_or(100_000, |v| v.value as usize);
    let trusted_proxies = cidrs(s, sink, "trusted_proxies")
        .map(|c| c.value)
        .unwrap_or_default();
    let disabled = s
        .bool(sink, "disable_default_body_limit")
        .is_some_and(|b| b.value);
    let body_limit = if s.has("max_body_size") {
        body_size(s, sink)
    } else if disabled {
        None
    } else {
        Some(DEFAULT_BODY_LIMIT)
    };
    ScreenConfig {
        sql_injection: s
            .bool(sink, "add_sql_injection_protection")
            .is_some_and(|b| b.value),
        rate_limit,
        rate_limit_status,
        rate_limit_exempt,
        rate_limit_max_clients,
        trusted_proxies,
        body_limit,
    }
}

pub(super) fn read_admin(s: &mut Section<'_>, sink: &mut Sink<'_>) -> AdminConfig {
    let api_key = match s.string(sink, "api_key") {
        Some(k) if k.value.trim().is_empty() => {
            error(
                sink,
                &k,
                "the api_key is empty, which would let anyone use the management API",
                "set a long random secret (e.g. `openssl rand -hex 32`) or remove the key",
            );
            None
        }
        Some(k) if k.value.len() < 16 => {
            warn(
                sink,
                &k,
                "the api_key is short and guessable",
                "use at least 32 random characters (e.g. `openssl rand -hex 32`)",
            );
            Some(k.value)
        }
        Some(k) => Some(k.value),
        None => None,
    };
    let purge_allow = cidrs(s, sink, "purge_allow")
        .map(|c| c.value)
        .unwrap_or_default();
    let metrics_allow = cidrs(s, sink, "metrics_allow")
        .map(|c| c.value)
        .unwrap_or_default();
    AdminConfig {
        api_key,
        purge_allow,
        metrics_allow,
    }
}
