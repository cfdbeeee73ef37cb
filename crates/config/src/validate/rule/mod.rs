//! `[[proxy_rules]]`: one rule per domain, with its paths and path rules ([`paths`]), its
//! origins ([`origins`]) and its certificate ([`tls`]).

mod domain;
mod http;
mod origins;
mod paths;
mod protocols;
mod tls;

use crate::validate::{
    body_size, cache_heuristic, cache_statuses, cidrs, error, flag, lenient, rate_limit,
    rate_limit_status, transform, warn, I64,
};
use std::collections::HashSet;

use crate::model::*;
use crate::reader::{At, Section, Sink};
use crate::validate::pages::PagesDir;
use crate::Severity;

/// What the global keys give every rule: defaults and where error pages are read from.
pub(super) struct Globals<'a> {
    /// The global `strict_path_rules`, when written.
    pub(super) strict_default: Option<bool>,
    pub(super) cache: &'a CacheConfig,
    pub(super) tls_default: Option<&'a CertSource>,
    pub(super) transforms: &'a transform::Global,
    pub(super) pages: &'a PagesDir,
}

/// Every `[[proxy_rules]]` that is valid (the others are reported).
pub(super) fn read_rules(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    globals: &Globals<'_>,
) -> Vec<RuleConfig> {
    let mut rules = Vec::new();
    match s.tables(sink, "proxy_rules") {
        Some(sections) => {
            let mut domains = HashSet::new();
            for section in sections {
                if let Some(rule) = read_rule(section, sink, globals, &mut domains) {
                    rules.push(rule);
                }
            }
        }
        None => sink.push(
            Severity::Warning,
            "proxy_rules",
            None,
            "no [[proxy_rules]]: every request will be answered 404",
            "add a [[proxy_rules]] section with a `domain` and an origin (`forward_ipv4` + `forward_port_http`)",
        ),
    }
    rules
}

fn read_rule(
    mut s: Section<'_>,
    sink: &mut Sink<'_>,
    globals: &Globals<'_>,
    domains: &mut HashSet<DomainPattern>,
) -> Option<RuleConfig> {
    let first_diag = sink.diags.len();
    let head = Head::read(&mut s, sink, globals.strict_default, domains);
    let mut ok = head.ok;
    let enable_logging = flag(&mut s, sink, "enable_logging", true);
    let ignore_query_string = flag(&mut s, sink, "ignore_query_string", true);
    let sql_injection = flag(&mut s, sink, "enable_sql_injection_protection", true);
    let (compression, minify, webp) = transform::read_rule(&mut s, sink, globals.transforms);
    let disallowed_user_agents = user_agents(&mut s, sink);
    ok &= disallowed_user_agents.is_some();
    let strict_path_rules = read_strict(&mut s, sink, globals.strict_default);
    let caching = CacheKeys::read(&mut s, sink, globals.cache);
    let (allow_ips, deny_ips, rate_limit, rate_limit_status, body_limit) =
        read_access(&mut s, sink);
    let (cert, tls_ok) =
        tls::read_rule_tls(&mut s, sink, head.domain.as_ref(), globals.tls_default);
    ok &= tls_ok;
    let (redirect_to_https, redirect_to_https_status, hsts) =
        tls::read_https(&mut s, sink, cert.is_some());
    let (names, names_ok) = origins::TlsNames::read(&mut s, sink, head.domain.as_ref());
    ok &= names_ok;
    let (send_proxy_protocol, allow_upgrades, upgrade_idle_timeout) = protocols::read(&mut s, sink);
    let path_rules =
        paths::read_path_rules(&mut s, sink, head.max_age_seconds, head.blacklist_note);
    let request_headers = http::header_rules(&mut s, sink, "request_headers");
    let response_headers = http::header_rules(&mut s, sink, "response_headers");
    let expires = s.seconds_or_off(sink, "expires").and_then(|e| e.value);
    let redirects = http::redirects(&mut s, sink);
    let rewrites = http::rewrites(&mut s, sink);
    let error_pages = http::error_pages(&mut s, sink, globals.pages);
    ok &= path_rules.is_some();
    let origins = origins::read(&mut s, sink, &names, ok);
    ok &= origins.is_some();
    mute_if_unused(sink, s.path(), first_diag, head.unused);
    s.finish(sink);
    let (
        true,
        Some(domain),
        Some(disallowed_user_agents),
        Some(path_rules),
        Some((upstreams, routing_method, health_check)),
    ) = (ok, head.domain, disallowed_user_agents, path_rules, origins)
    else {
        return None;
    };
    Some(RuleConfig {
        domain_text: head.domain_at.map(|d| d.value).unwrap_or_default(),
        domain,
        max_age_seconds: head.max_age_seconds,
        max_age_by_status: head.max_age_by_status,
        paths: head.paths,
        rule_type: head.rule_type,
        path_rules,
        upstreams,
        routing_method,
        health_check,
        compression,
        minify,
        webp,
        enable_logging,
        ignore_query_string,
        strict_path_rules,
        max_age_overrides_origin: caching.max_age_overrides_origin,
        cache_heuristic: caching.heuristic,
        store_set_cookie: caching.store_set_cookie,
        cache_by_scheme: caching.by_scheme,
        cache_disk: caching.disk,
        cache_statuses: caching.statuses,
        stale_while_revalidate: caching.stale_while_revalidate,
        stale_if_error: caching.stale_if_error,
        request_headers,
        response_headers,
        expires,
        redirects,
        rewrites,
        error_pages,
        sql_injection,
        disallowed_user_agents,
        allow_ips,
        deny_ips,
        rate_limit,
        rate_limit_status,
        body_limit,
        cert,
        redirect_to_https,
        redirect_to_https_status,
        hsts,
        send_proxy_protocol,
        allow_upgrades,
        upgrade_idle_timeout,
    })
}
/// A rule's first keys: its domain, max age, paths and type.
struct Head {
    domain_at: Option<At<String>>,
    domain: Option<DomainPattern>,
    /// An earlier rule has the same domain: this one is never used.
    unused: bool,
    max_age_seconds: u64,
    max_age_by_status: std::sync::Arc<[(u16, u64)]>,
    paths: Vec<String>,
    /// `Blacklist` without a word on `strict_path_rules` is said to mean "not cached" each time.
    blacklist_note: bool,
    rule_type: RuleType,
    /// No error in these keys.
    ok: bool,
}

impl Head {
    fn read(
        s: &mut Section<'_>,
        sink: &mut Sink<'_>,
        strict_default: Option<bool>,
        domains: &mut HashSet<DomainPattern>,
    ) -> Head {
        let mut ok = true;
        let domain_at = s.string(sink, "domain");
        let (domain, unused) = domain::read_domain(s, sink, domain_at.as_ref(), domains);
        ok &= domain.is_some();
        let max_age_seconds = read_max_age(s, sink);
        let max_age_by_status =
            max_age_by_status(s, sink).unwrap_or_else(|| std::sync::Arc::new([]));
        let paths = paths::read_paths(s, sink);
        let blacklist_note = strict_default.is_none() && !s.has("strict_path_rules");
        let rule_type = read_rule_type(s, sink, &mut ok, blacklist_note);
        Head {
            domain_at,
            domain,
            unused,
            max_age_seconds,
            max_age_by_status,
            paths,
            blacklist_note,
            rule_type,
            ok,
        }
    }
}

/// A rule's client access keys: addresses allowed and denied, its rate limit and body limit.
#[allow(clippy::type_complexity)]
fn read_access(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
) -> (
    Vec<Cidr>,
    Vec<Cidr>,
    Option<RateLimit>,
    Option<u16>,
    Option<Option<u64>>,
) {
    let allow_ips = cidrs(s, sink, "allow_ips")
        .map(|c| c.value)
        .unwrap_or_default();
    let deny_ips = cidrs(s, sink, "deny_ips")
        .map(|c| c.value)
        .unwrap_or_default();
    let rate_limit = rate_limit(s, sink, None);
    let rate_limit_status = rate_limit_status(s, sink);
    let body_limit = s.has("max_body_size").then(|| body_size(s, sink));
    (
        allow_ips,
        deny_ips,
        rate_limit,
        rate_limit_status,
        body_limit,
    )
}

/// `strict_path_rules`, the global one when the rule leaves it out (default `false`).
fn read_strict(s: &mut Section<'_>, sink: &mut Sink<'_>, strict_default: Option<bool>) -> bool {
    s.bool(sink, "strict_path_rules")
        .map_or(strict_default.unwrap_or(false), |b| b.value)
}

/// When the rule at `path` is never used (`unused`), that it is unused is the one thing worth
/// saying about it: its errors still count; its warnings would only lead the reader astray.
fn mute_if_unused(sink: &mut Sink<'_>, path: &str, first_diag: usize, unused: bool) {
    if !unused {
        return;
    }
    sink.mute(path);
    let own = sink.diags.split_off(first_diag);
    sink.diags.extend(own.into_iter().filter(|d| {
        d.severity == Severity::Error || d.message.contains("this rule is never used")
    }));
}

/// At most this many statuses in `max_age_by_status` (a stored response's status is looked up
/// among them; NGINX sites list a handful).
const BY_STATUS_MAX: usize = 16;

/// `max_age_by_status` (rule or path rule): an inline table of status → seconds (`any` for
/// every other status, kept as status 0). `None` when absent; bad entries are reported and
/// skipped.
pub(super) fn max_age_by_status(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
) -> Option<std::sync::Arc<[(u16, u64)]>> {
    const EXAMPLE: &str = "max_age_by_status = { 200 = 600, 404 = 60 }";
    if !s.has("max_age_by_status") {
        return None;
    }
    let mut t = s.table(sink, "max_age_by_status")?;
    let mut out: Vec<(u16, u64)> = Vec::new();
    for (key, entry) in t.entries() {
        let status = if key.eq_ignore_ascii_case("any") {
            Some(0)
        } else {
            key.parse::<u16>().ok().filter(|c| (100..=599).contains(c))
        };
        let Some(status) = status else {
            error(
                sink,
                &entry,
                format!("{key:?} is not a status code"),
                format!("use statuses from 200 to 599 (or `any`), e.g. `{EXAMPLE}`"),
            );
            continue;
        };
        if status != 0 && (status < 200 || matches!(status, 206 | 304 | 412)) {
            error(
                sink,
                &entry,
                format!("status {status} is never stored"),
                format!(
                    "remove `{status}` (1xx are not final, 206 is answered from a full response, \
                     304 refreshes a stored one, 412 answers one request's preconditions)"
                ),
            );
            continue;
        }
        let secs = match entry.value.as_integer() {
            Some(v) if (0..=I64).contains(&v) => v as u64,
            _ => {
                error(
                    sink,
                    &entry,
                    format!("the lifetime of {key} must be a whole number of seconds"),
                    format!("write it as `{key} = 600` (0: never stored)"),
                );
                continue;
            }
        };
        out.push((status, secs));
    }
    let listed = out.iter().filter(|(s, _)| *s != 0).count();
    if listed > BY_STATUS_MAX {
        sink.push(
            Severity::Error,
            &s.key_path("max_age_by_status"),
            t.span(),
            format!("{listed} statuses listed; at most {BY_STATUS_MAX}"),
            "list the statuses that need their own lifetime, and use `any` for the rest",
        );
    }
    t.finish(sink);
    Some(out.into())
}

/// `max_age_seconds` (ARC2 requires it; 0, nothing cached, when it is missing).
fn read_max_age(s: &mut Section<'_>, sink: &mut Sink<'_>) -> u64 {
    match s.int(sink, "max_age_seconds", 0, I64) {
        Some(v) => v.value as u64,
        None => {
            if !s.has("max_age_seconds") {
                // Not only a note: without it nothing is cached unless the origin says how long.
                s.missing(
                    sink,
                    "max_age_seconds",
                    Severity::Warning,
                    "missing (ARC2 requires it); using 0: nothing is cached for this rule",
                    "add `max_age_seconds = 3600` (the lifetime of responses whose origin gives none)",
                );
            }
            0
        }
    }
}

/// `rule_type` (ARC2 requires it; `Whitelist` when it is missing). `ok` turns false on a
/// value that is not one.
fn read_rule_type(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    ok: &mut bool,
    blacklist_note: bool,
) -> RuleType {
    match s.string(sink, "rule_type") {
        Some(v) => match parse_rule_type(sink, &v) {
            Some(t) => {
                if blacklist_note && t == RuleType::Blacklist {
                    blacklist_bypasses(sink, &v);
                }
                t
            }
            None => {
                *ok = false;
                RuleType::Whitelist
            }
        },
        None => {
            if !s.has("rule_type") {
                lenient(s, sink, "rule_type", "\"Whitelist\"");
            }
            RuleType::Whitelist
        }
    }
}

/// A rule's own caching keys, each defaulting to the global one.
struct CacheKeys {
    max_age_overrides_origin: bool,
    heuristic: CacheHeuristic,
    store_set_cookie: bool,
    by_scheme: bool,
    disk: bool,
    statuses: CacheStatuses,
    stale_while_revalidate: Option<u64>,
    stale_if_error: Option<u64>,
}

impl CacheKeys {
    fn read(s: &mut Section<'_>, sink: &mut Sink<'_>, cache: &CacheConfig) -> CacheKeys {
        CacheKeys {
            max_age_overrides_origin: s
                .bool(sink, "max_age_overrides_origin")
                .is_some_and(|b| b.value),
            heuristic: cache_heuristic(s, sink).unwrap_or(cache.heuristic),
            store_set_cookie: s
                .bool(sink, "store_set_cookie")
                .map_or(cache.store_set_cookie, |b| b.value),
            by_scheme: s
                .bool(sink, "cache_by_scheme")
                .map_or(cache.by_scheme, |b| b.value),
            disk: read_disk_switch(s, sink, cache),
            statuses: cache_statuses(s, sink).unwrap_or(cache.statuses),
            stale_while_revalidate: s
                .int(sink, "stale_while_revalidate_seconds", 0, 365 * 86400)
                .map(|v| v.value as u64)
                .or(cache.stale_while_revalidate),
            stale_if_error: s
                .int(sink, "stale_if_error_seconds", 0, 365 * 86400)
                .map(|v| v.value as u64)
                .or(cache.stale_if_error),
        }
    }
}

/// A rule's `cache_disk`: only a switch (the directory is global); on unless turned off.
fn read_disk_switch(s: &mut Section<'_>, sink: &mut Sink<'_>, cache: &CacheConfig) -> bool {
    let Some(v) = s.string_or_bool(sink, "cache_disk", "false") else {
        return true;
    };
    match v.value {
        Err(on) => {
            if on && cache.disk.is_none() {
                crate::validate::warn(
                    sink,
                    &v,
                    "`cache_disk = true` has no effect: there is no global `cache_disk` directory",
                    "set `cache_disk = \"/var/cache/rampart\"` above the first [[proxy_rules]]",
                );
            }
            on
        }
        Ok(_) => {
            crate::validate::error(
                sink,
                &v,
                "a rule cannot have a disk directory of its own",
                "set the directory once, as the global `cache_disk`; a rule only turns it off with `cache_disk = false`",
            );
            true
        }
    }
}

/// `[[...disallowed_user_agents]]`; `None` when an entry is invalid (every one is reported).
fn user_agents(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Option<Vec<(MatchType, String)>> {
    let mut ok = true;
    let mut disallowed_user_agents = Vec::new();
    if let Some(uas) = s.tables(sink, "disallowed_user_agents") {
        for mut ua in uas {
            let agent = ua.string(sink, "user_agent");
            if agent.is_none() && !ua.has("user_agent") {
                ua.missing(
                    sink,
                    "user_agent",
                    Severity::Error,
                    "missing `user_agent`",
                    "add `user_agent = \"BadBot\"`",
                );
                ok = false;
            }
            let mut mt = None;
            match ua.string(sink, "match_type") {
                Some(m) => {
                    mt = match_type(sink, &m);
                    ok &= mt.is_some();
                }
                None if !ua.has("match_type") => {
                    ua.missing(
                        sink,
                        "match_type",
                        Severity::Error,
                        "missing `match_type`",
                        "add `match_type = \"Contains\"`",
                    );
                    ok = false;
                }
                None => ok = false,
            }
            if let (Some(a), Some(mt)) = (agent, mt) {
                disallowed_user_agents.push((mt, a.value));
            }
            ua.finish(sink);
        }
    }
    ok.then_some(disallowed_user_agents)
}

/// `Blacklist` is read as "deny", but in ARC2 (and rampart's default) it means "proxied, not
/// cached": said once per `Blacklist`, until the file says which it wants.
pub(super) fn blacklist_bypasses(sink: &mut Sink<'_>, at: &At<String>) {
    warn(
        sink,
        at,
        "`Blacklist` does not refuse requests: matching paths are proxied without caching (ARC2's meaning)",
        "to refuse them with 403, add `strict_path_rules = true` to this rule (or above the first [[proxy_rules]] for every rule); `strict_path_rules = false` keeps this meaning and silences this warning",
    );
}

pub(super) fn parse_rule_type(sink: &mut Sink<'_>, v: &At<String>) -> Option<RuleType> {
    match v.value.as_str() {
        "Whitelist" => Some(RuleType::Whitelist),
        "Blacklist" => Some(RuleType::Blacklist),
        _ => {
            error(
                sink,
                v,
                format!("unknown rule_type {:?}", v.value),
                "use \"Whitelist\" or \"Blacklist\" (case-sensitive)",
            );
            None
        }
    }
}

pub(super) fn match_type(sink: &mut Sink<'_>, v: &At<String>) -> Option<MatchType> {
    Some(match v.value.as_str() {
        "Equals" => MatchType::Equals,
        "StartsWith" => MatchType::StartsWith,
        "EndsWith" => MatchType::EndsWith,
        "Contains" => MatchType::Contains,
        "DoesNotEqual" => MatchType::DoesNotEqual,
        "DoesNotContain" => MatchType::DoesNotContain,
        _ => {
            error(
                sink,
                v,
                format!("unknown match_type {:?}", v.value),
                "use one of Equals, StartsWith, EndsWith, Contains, DoesNotEqual, DoesNotContain (case-sensitive; in a path rule also Regex)",
            );
            return None;
        }
    })
}
