//! The management API and cache purging (synth responses only; nothing here reaches an origin).
//!
//! - `PURGE <url>` on any host rampart serves: removes that URL (every variant) from the cache.
//!   Allowed from `purge_allow` addresses, or with the `api_key` (`Authorization: Bearer KEY` or
//!   `X-Api-Key: KEY`). Header `X-Purge-Scope: prefix | contains | domain` widens it to the ARC2
//!   scopes (the URL's path is the prefix or substring); `X-Purge-Tag: T1 T2` (or Varnish's
//!   `xkey-purge`, Fastly's `Surrogate-Key`) purges every object tagged so instead; `X-Purge:
//!   soft` marks entries stale instead of removing them (kept for stale-if-error).
//! - `/_rampart/...` on any host, only when `api_key` is set, always with the key:
//!   `GET /_rampart/status` (cache figures as JSON),
//!   `POST /_rampart/purge?scope=exact|prefix|contains|domain&host=H[&path=P][&soft=true]`,
//!   `POST /_rampart/reload` (read the configuration file again), and the rule operations
//!   `GET|POST /_rampart/rules`, `PUT|DELETE /_rampart/rules/{domain}` (a `proxy_rules` entry
//!   as TOML or JSON, validated like the file and written back to it). Reloads and rule
//!   changes are answered by the file's owner through [`crate::admin::commands`].
//!
//! Keys are compared in constant time. A missing or wrong key → 401 (which of the two is said);
//! PURGE from elsewhere without a key → 403; a known endpoint asked with another method → 405
//! with `Allow`.

pub mod commands;
pub mod dashboard;
pub mod exposition;
pub mod figures;
pub mod state;

pub use state::Api;

use http::header::AUTHORIZATION;
use http::{Method, StatusCode};
use rampart_cache::key::CacheKey;
use rampart_cache::store::PurgeScope;
use rampart_config::AdminConfig;
use rampart_head::{Fields, Request, Response};

use crate::body::local::json_of;
use crate::body::{ProxyBody, RequestBody};
use crate::caching::{Cache, DiskTally, Purged};
use crate::error::ProxyError;
use crate::policy::route::Router;

/// Reserved path prefix of the management API.
pub const ADMIN_PREFIX: &str = "/_rampart/";

/// Largest body of a rule operation.
const MAX_RULE_BODY: usize = 1 << 20;

/// Whether a client's request is a reload or a rule operation (answered by [`control`]).
pub fn is_control(admin: &AdminConfig, req: &Request<RequestBody>) -> bool {
    if admin.api_key.is_none() {
        return false;
    }
    let Some(rest) = req.uri().path().strip_prefix(ADMIN_PREFIX) else {
        return false;
    };
    rest == "reload" || rest == "rules" || rest.starts_with("rules/") || rest == "purge"
}

/// `POST /_rampart/reload` and the rule operations: checked here, carried out by the owner of
/// the configuration file. And `POST /_rampart/purge`, which waits for the disk tier.
pub async fn control(
    api: Api<'_>,
    req: Request<RequestBody>,
) -> Result<Response<ProxyBody>, ProxyError> {
    use crate::admin::commands::Request as Ask;
    if !has_key(api.config, req.headers()) {
        return Err(key_refusal(req.headers()));
    }
    let path = req
        .uri()
        .path()
        .strip_prefix(ADMIN_PREFIX)
        .unwrap_or("")
        .to_owned();
    let domain = path
        .strip_prefix("rules/")
        .map(|d| String::from_utf8_lossy(&percent_decode(d)).into_owned());
    let json = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("json"));
    let method = req.method().clone();
    match (&method, path.as_str()) {
        (&Method::POST, "purge") => return purge_api(api.cache, req.uri().query()).await,
        (_, "purge") => return Err(ProxyError::ApiMethod("POST")),
        _ => {}
    }
    let body = || async {
        use http_body_util::BodyExt as _;
        http_body_util::Limited::new(req.into_body(), MAX_RULE_BODY)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .map_err(|_| ProxyError::ApiBadRequest("the rule could not be read (at most 1 MiB)"))
    };
    let ask = match (&method, path.as_str(), domain) {
        (&Method::POST, "reload", _) => Ask::Reload,
        (&Method::GET, "rules", _) => Ask::ListRules,
        (&Method::POST, "rules", _) => Ask::AddRule {
            body: body().await?,
            json,
        },
        (&Method::PUT, _, Some(domain)) => Ask::ReplaceRule {
            domain,
            body: body().await?,
            json,
        },
        (&Method::DELETE, _, Some(domain)) => Ask::RemoveRule { domain },
        (_, "reload", _) => return Err(ProxyError::ApiMethod("POST")),
        (_, "rules", _) => return Err(ProxyError::ApiMethod("GET, POST")),
        (_, _, Some(_)) => return Err(ProxyError::ApiMethod("PUT, DELETE")),
        _ => return Err(ProxyError::ApiNoSuchEndpoint),
    };
    let Some(control) = api.control else {
        return Err(ProxyError::ApiNoSuchEndpoint);
    };
    let answer = control.ask(ask).await;
    Ok(crate::body::local::json(answer.status, answer.body))
}

/// Whether `method` is the PURGE extension method.
pub fn is_purge(method: &Method) -> bool {
    method.as_str() == "PURGE"
}

/// Constant-time equality (no early exit on the first differing byte).
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether the request carries the API key.
pub fn has_key(admin: &AdminConfig, headers: &Fields) -> bool {
    let Some(key) = admin.api_key.as_deref() else {
        return false;
    };
    offered_keys(headers).any(|given| same(given.trim().as_bytes(), key.as_bytes()))
}

/// The request is refused for its key: missing (401), or wrong (401, said so).
fn key_refusal(headers: &Fields) -> ProxyError {
    if offered_keys(headers).next().is_some() {
        ProxyError::ApiWrongKey
    } else {
        ProxyError::ApiKey
    }
}

/// The keys a request offers (`Authorization: Bearer`, `X-Api-Key`).
fn offered_keys(headers: &Fields) -> impl Iterator<Item = &str> {
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    [bearer, x_api_key].into_iter().flatten()
}

/// The token of `Authorization: Bearer <token>`. The scheme is case-insensitive and followed by
/// one or more spaces (RFC 9110 §11.4, `auth-scheme [ 1*SP token68 ]`).
fn bearer_token(credentials: &str) -> Option<&str> {
    let (scheme, token) = credentials.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches(' '))
}

/// Decodes `%XX` escapes and `+` (query values); invalid escapes are kept as they are.
fn percent_decode(s: &str) -> Vec<u8> {
    rampart_screen::inspect::percent_decode(s.as_bytes(), true).into_owned()
}

/// A purge target in the form the cache keys on: the path normalised as recv normalises it
/// (`policy/path.rs`), the query as given. A path that cannot be normalised is kept as given.
fn normal_target(target: &[u8]) -> Vec<u8> {
    let split = target
        .iter()
        .position(|&b| b == b'?')
        .unwrap_or(target.len());
    let (p, query) = target.split_at(split);
    match std::str::from_utf8(p).map(crate::policy::path::normalize) {
        Ok(Ok(Some(normal))) => [normal.as_bytes(), query].concat(),
        _ => target.to_vec(),
    }
}

fn scope_from(kind: &str, host: &str, path: &[u8], ignore_query: bool) -> Option<PurgeScope> {
    let host_key = CacheKey::new(host, "/", false).host().to_vec();
    Some(match kind {
        "exact" | "" => PurgeScope::Exact(CacheKey::new(
            host,
            &String::from_utf8_lossy(&normal_target(path)),
            ignore_query,
        )),
        "prefix" => PurgeScope::Prefix {
            host: host_key,
            prefix: normal_target(path),
        },
        "contains" => PurgeScope::Contains {
            host: host_key,
            needle: path.to_vec(),
        },
        "domain" => PurgeScope::Domain(host_key),
        _ => return None,
    })
}

/// How long a purge's answer waits for the disk tier to have it in its purge log.
const DURABLE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A purge's answer, once the disk tier has it in its log (`{"purged":N,"soft":…}`), or a
/// 503 that says it is in force but would not outlive a restart yet (the log write is tried
/// again; purging again is safe).
async fn purged(cache: Option<&Cache>, p: Purged, soft: bool) -> Response<ProxyBody> {
    #[derive(serde::Serialize)]
    struct Answer {
        purged: usize,
        soft: bool,
        /// With a disk tier, each tier's count apart (`disk` absent and `disk_ban` true when
        /// the disk applies the purge as a ban, uncounted).
        #[serde(skip_serializing_if = "Option::is_none")]
        memory: Option<usize>,
        #[serde(skip_serializing_if = "Option::is_none")]
        disk: Option<usize>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        disk_ban: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        durable: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'static str>,
    }
    let durable = match cache {
        Some(c) => c.durable(p.ticket, DURABLE_WAIT).await,
        None => true,
    };
    let (memory, disk, disk_ban) = match p.disk {
        DiskTally::None => (None, None, false),
        DiskTally::Counted(n) => (Some(p.memory), Some(n), false),
        DiskTally::Ban => (Some(p.memory), None, true),
    };
    if durable {
        return json_of(
            StatusCode::OK,
            &Answer {
                purged: p.count,
                soft,
                memory,
                disk,
                disk_ban,
                durable: None,
                error: None,
            },
        );
    }
    tracing::warn!(
        purged = p.count,
        "a purge is in force but not yet in the disk tier's purge log (it would not outlive a restart); answered 503"
    );
    json_of(
        StatusCode::SERVICE_UNAVAILABLE,
        &Answer {
            purged: p.count,
            soft,
            memory,
            disk,
            disk_ban,
            durable: Some(false),
            error: Some(
                "in force, but the disk cache could not write its purge log yet (tried again); \
                 it would not outlive a restart: purge again, and see rampart_cache_disk_errors",
            ),
        },
    )
}

/// A `PURGE` request for a URL on a routed host: who sent it, and what it names.
#[derive(Debug, Clone, Copy)]
pub struct Purge<'a> {
    /// The TCP peer, as for `purge_allow` (`X-Forwarded-For` is not trusted here).
    pub client: std::net::IpAddr,
    pub host: &'a str,
    /// Path and query as requested.
    pub target: &'a str,
    /// The rule's `ignore_query_string`.
    pub ignore_query: bool,
}

/// `PURGE` for a URL on a routed host (the recv stage's last step).
pub async fn purge_method(
    api: Api<'_>,
    purge: Purge<'_>,
    headers: &Fields,
) -> Result<Response<ProxyBody>, ProxyError> {
    let (admin, client) = (api.config, purge.client);
    let (host, pq, ignore_query) = (purge.host, purge.target, purge.ignore_query);
    if !(admin.purge_allow.iter().any(|c| c.contains(client)) || has_key(admin, headers)) {
        let offered = offered_keys(headers).next().is_some();
        tracing::warn!(%client, host, pq, offered_key = offered, "PURGE refused: not from purge_allow and not with the api_key");
        return Err(match (offered, admin.api_key.is_some()) {
            (true, true) => ProxyError::ApiWrongKey,
            (true, false) => ProxyError::PurgeNoKeyConfigured,
            (false, _) => ProxyError::PurgeNotAllowed,
        });
    }
    let Some(cache) = api.cache else {
        let soft = headers
            .get("x-purge")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"soft"));
        return Ok(purged(None, Purged::default(), soft).await);
    };
    let kind = headers
        .get("x-purge-scope")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("exact")
        .trim()
        .to_ascii_lowercase();
    let soft = headers
        .get("x-purge")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"soft"));
    let tags = purge_tag_fields(headers);
    if !tags.is_empty() {
        let p = purge_tags(Some(cache), &tags, soft);
        tracing::info!(%client, host, tags = tags.len(), soft, purged = p.count, "tag purge");
        return Ok(purged(Some(cache), p, soft).await);
    }
    let path = if kind == "exact" {
        pq
    } else {
        pq.split('?').next().unwrap_or(pq)
    };
    let Some(scope) = scope_from(&kind, host, path.as_bytes(), ignore_query) else {
        return Err(ProxyError::ApiBadRequest(
            "X-Purge-Scope must be exact, prefix, contains or domain",
        ));
    };
    let p = cache.purge(&scope, soft);
    tracing::info!(%client, host, pq, scope = kind, soft, purged = p.count, "purge");
    Ok(purged(Some(cache), p, soft).await)
}

/// `/_rampart/...`; `None` when the API is off (the path is then proxied like any other).
///
/// With `metrics_allow` alone (no `api_key`), only the metrics and the dashboard are answered
/// here, to those addresses; every other path is proxied.
pub fn admin_request<B>(
    api: Api<'_>,
    client: std::net::IpAddr,
    req: &Request<B>,
) -> Option<Result<Response<ProxyBody>, ProxyError>> {
    let admin = api.config;
    let method = req.method();
    let rest = req.uri().path().strip_prefix(ADMIN_PREFIX).unwrap_or("");
    if method == Method::GET || method == Method::HEAD {
        if let Some(answer) = readable(api, client, req, rest) {
            return Some(answer);
        }
    }
    admin.api_key.as_ref()?;
    if !has_key(admin, req.headers()) {
        return Some(Err(key_refusal(req.headers())));
    }
    Some(match (method, rest) {
        (&Method::GET, "status") => Ok(status(api.cache, api.router, api.fleet)),
        (_, "status" | "metrics" | "dashboard/events") => Err(ProxyError::ApiMethod("GET, HEAD")),
        _ => Err(ProxyError::ApiNoSuchEndpoint),
    })
}

/// The dashboard's page (to anyone: it holds no figures), and the metrics and the dashboard's
/// stream (with the key, or to `metrics_allow`); `None` for other paths.
fn readable<B>(
    api: Api<'_>,
    client: std::net::IpAddr,
    req: &Request<B>,
    rest: &str,
) -> Option<Result<Response<ProxyBody>, ProxyError>> {
    if let Some(page) = crate::admin::dashboard::asset(rest) {
        return Some(Ok(page));
    }
    if rest != "metrics" && rest != "dashboard/events" {
        return None;
    }
    // The TCP peer, as for purge_allow: X-Forwarded-For is not trusted here.
    let admin = api.config;
    let allowed = admin.metrics_allow.iter().any(|c| c.contains(client));
    if !allowed && !has_key(admin, req.headers()) {
        return Some(Err(key_refusal(req.headers())));
    }
    Some(Ok(if rest == "metrics" {
        metrics_response(api, req)
    } else {
        crate::admin::dashboard::events()
    }))
}

/// `GET /_rampart/status`.
#[derive(serde::Serialize)]
struct Status<'a> {
    cache: Option<CacheFigures>,
    /// The process's resident memory beside the cache's weight, so a mismatch shows.
    process: Option<ProcessMemory>,
    upstreams: Vec<OriginHealth<'a>>,
    /// The fleet's members (`cache_peers`), as the dashboard lists them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    peers: Vec<serde_json::Value>,
}

#[derive(serde::Serialize)]
struct CacheFigures {
    entries: usize,
    weight_bytes: u64,
    reserved_bytes: u64,
    pinned_bytes: u64,
    capacity_bytes: u64,
    evictions: u64,
    in_flight: usize,
    /// The disk tier, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    disk: Option<serde_json::Value>,
}

#[derive(serde::Serialize)]
struct ProcessMemory {
    rss_bytes: u64,
    peak_rss_bytes: u64,
}

/// An origin of a rule with its health: `healthy` is the active checks' verdict (true without
/// checks), `refused_lately` the passive one, `latency_ms` the `Performance` average.
#[derive(serde::Serialize)]
struct OriginHealth<'a> {
    domain: &'a str,
    origin: &'a str,
    method: String,
    health_checks: bool,
    healthy: bool,
    refused_lately: bool,
    latency_ms: Option<f64>,
}

/// `GET /_rampart/status`: the cache's figures, the process's memory, the origins.
fn status(
    cache: Option<&Cache>,
    router: &Router,
    fleet: Option<&std::sync::Arc<crate::origin::fleet::Fleet>>,
) -> Response<ProxyBody> {
    let cache = cache.map(|c| {
        let s = c.store().stats();
        CacheFigures {
            entries: s.entries,
            weight_bytes: s.weight,
            reserved_bytes: s.reserved,
            pinned_bytes: s.pinned,
            capacity_bytes: c.store().capacity(),
            evictions: s.evictions,
            in_flight: c.coalescer().len(),
            disk: c.disk().map(figures::disk),
        }
    });
    let process = crate::admin::exposition::process_memory().map(|(rss, peak)| ProcessMemory {
        rss_bytes: rss,
        peak_rss_bytes: peak,
    });
    let mut upstreams = Vec::new();
    for rule in router.rules() {
        let set = &rule.origins;
        for m in set.members() {
            upstreams.push(OriginHealth {
                domain: &rule.config.domain_text,
                origin: m.target.authority.as_str(),
                method: format!("{:?}", set.method()),
                health_checks: rule.config.health_check.is_some(),
                healthy: m.healthy(),
                refused_lately: set.refused_lately(m),
                // Milliseconds to the microsecond.
                latency_ms: m
                    .latency()
                    .map(|d| (d.as_secs_f64() * 1_000_000.0).round() / 1000.0),
            });
        }
    }
    let status = Status {
        cache,
        process,
        upstreams,
        peers: fleet.map_or_else(Vec::new, |f| {
            crate::admin::dashboard::peer_rows(std::slice::from_ref(f))
        }),
    };
    json_of(StatusCode::OK, &status)
}

/// `POST /_rampart/purge?scope=…&host=…&path=…&soft=…`.
async fn purge_api(
    cache: Option<&Cache>,
    query: Option<&str>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let params: Vec<(String, Vec<u8>)> = query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                String::from_utf8_lossy(&percent_decode(k)).into_owned(),
                percent_decode(v),
            )
        })
        .collect();
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    };
    // `tag=T` (repeated, or several in one value): every object tagged so, on any host.
    let tags: Vec<&[u8]> = params
        .iter()
        .filter(|(k, _)| k == "tag")
        .flat_map(|(_, v)| rampart_cache::object::tags_in(std::iter::once(v.as_slice())))
        .collect();
    if !tags.is_empty() || param("tag").is_some() {
        if tags.is_empty() {
            return Err(ProxyError::ApiBadRequest("tag= names no tag"));
        }
        let soft = param("soft").is_some_and(|v| v == b"true" || v == b"1");
        let p = purge_tags(cache, &tags, soft);
        tracing::info!(
            tags = tags.len(),
            soft,
            purged = p.count,
            "tag purge via API"
        );
        return Ok(purged(cache, p, soft).await);
    }
    let Some(host) = param("host").map(|h| String::from_utf8_lossy(h).into_owned()) else {
        return Err(ProxyError::ApiBadRequest("purge needs host= (or tag=)"));
    };
    let kind = param("scope")
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
        .unwrap_or_else(|| "exact".into());
    let path = param("path").unwrap_or(b"/");
    let soft = param("soft").is_some_and(|v| v == b"true" || v == b"1");
    if kind != "domain" && param("path").is_none() {
        return Err(ProxyError::ApiBadRequest("this scope needs path="));
    }
    let Some(scope) = scope_from(&kind, &host, path, false) else {
        return Err(ProxyError::ApiBadRequest(
            "scope must be exact, prefix, contains or domain",
        ));
    };
    let p = cache.map_or(Purged::default(), |c| c.purge(&scope, soft));
    tracing::info!(host, scope = kind, soft, purged = p.count, "purge via API");
    Ok(purged(cache, p, soft).await)
}

/// Purges every object tagged with one of `tags`; how many went (or were marked stale).
fn purge_tags(cache: Option<&Cache>, tags: &[&[u8]], soft: bool) -> Purged {
    let mut all = Purged::default();
    if let Some(cache) = cache {
        for t in tags {
            all += cache.purge(&PurgeScope::Tag(rampart_cache::object::tag_hash(t)), soft);
        }
    }
    all
}

/// The tags a `PURGE` names: `X-Purge-Tag` (rampart), `xkey-purge` (Varnish's xkey) or
/// `Surrogate-Key` (Fastly's purge API), space- or comma-separated.
fn purge_tag_fields(headers: &Fields) -> Vec<&[u8]> {
    ["x-purge-tag", "xkey-purge", "surrogate-key"]
        .into_iter()
        .flat_map(|n| headers.get_all(n).iter().map(|v| v.as_bytes()))
        .flat_map(|v| rampart_cache::object::tags_in(std::iter::once(v)))
        .collect()
}

/// `GET /_rampart/metrics`: OpenMetrics when the scraper asks for it, else Prometheus text.
fn metrics_response<B>(api: Api<'_>, req: &Request<B>) -> Response<ProxyBody> {
    use crate::admin::exposition;
    let openmetrics = req
        .headers()
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/openmetrics-text"));
    let body = exposition::render(crate::telemetry::metrics::get(), &api, openmetrics);
    let mut res = crate::body::local::text(StatusCode::OK, body);
    let kind = if openmetrics {
        exposition::OPENMETRICS_TEXT
    } else {
        exposition::PROMETHEUS_TEXT
    };
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(kind),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn constant_time_compare_and_decoding() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
        assert_eq!(
            percent_decode("%2Fblog%2F+x%zz%4"),
            b"/blog/ x%zz%4".to_vec()
        );
    }

    #[test]
    fn keys_from_bearer_or_header() {
        let admin = AdminConfig {
            api_key: Some("k".repeat(32)),
            purge_allow: vec![],
            metrics_allow: vec![],
        };
        let mut h = Fields::new();
        assert!(!has_key(&admin, &h));
        h.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {}", "k".repeat(32)))
                .unwrap_or(HeaderValue::from_static("x")),
        );
        assert!(has_key(&admin, &h));
        let mut h = Fields::new();
        h.insert("x-api-key", HeaderValue::from_static("wrong"));
        assert!(!has_key(&admin, &h));
    }

    #[test]
    fn the_bearer_scheme_is_matched_in_any_case() {
        for (credentials, token) in [
            ("Bearer abc", Some("abc")),
            ("BEARER abc", Some("abc")),
            ("bEaReR   abc", Some("abc")),
            ("Basic abc", None),
            ("Bearerabc", None),
            ("Bearer", None),
            ("Bearers abc", None),
        ] {
            assert_eq!(bearer_token(credentials), token, "{credentials:?}");
        }
    }
}
