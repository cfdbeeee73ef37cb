//! `validate()`: the raw TOML document → typed [`Config`], with every problem collected.
//!
//! Compatibility target: `docs/arc2.md`. Every ARC2 key is read here. Keys whose feature is not
//! implemented yet are accepted and reported as [`Severity::Inactive`] when their value asks for
//! the feature. Per-rule keys that ARC2 requires but a file leaves out get the lenient default of
//! docs/arc2.md, "Keys a file leaves out", with a note.
//!
//! One module per part of the file: [`listeners`], [`process`], [`cache`], [`screening`],
//! [`sockets`] (client and origin connections), [`tls`] (the HTTPS listener and
//! certificates) and [`rule`] (`[[proxy_rules]]`: its paths, origins and certificate). Each
//! reads its keys from a [`Section`] and reports into the [`Sink`]; this module puts the parts
//! together and holds the value readers they share.

mod cache;
mod fleet;
mod listeners;
mod pages;
mod process;
mod punycode;
mod redis;
mod rule;
mod screening;
mod sockets;
mod syntax;
mod tls;
mod tracing;
mod transform;

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use crate::diag::{Diagnostic, Severity};
use crate::model::*;
pub(crate) use crate::reader::toml_string;
use crate::reader::{At, Kind, Section, Sink};

pub use screening::DEFAULT_BODY_LIMIT;
#[cfg(test)]
pub use tls::LETS_ENCRYPT_PRODUCTION;

/// Result of validating a file: the typed config when there were no errors, and every diagnostic.
#[derive(Debug)]
pub struct Validated {
    pub config: Option<Config>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Validated {
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.is_error())
    }

    /// `rampart check --strict`: every warning and "accepted, not yet active" notice becomes
    /// an error, so a file passes only when each of its lines does what it says (NGINX's `-t`
    /// fails on an unknown directive the same way).
    pub fn strict(mut self) -> Validated {
        for d in &mut self.diagnostics {
            if d.severity != Severity::Note {
                d.severity = Severity::Error;
            }
        }
        if self.diagnostics.iter().any(Diagnostic::is_error) {
            self.config = None;
        }
        self
    }
}

/// Validates configuration text that came from no file (`rampart demo`, tests). `cpus` is the
/// default for `workers`. Error pages are read from the working directory unless
/// `error_pages_dir` says otherwise.
pub fn validate(src: &str, cpus: usize) -> Validated {
    validate_at(src, cpus, None)
}

/// Validates the text `src` of the configuration file at `path`: `error_pages_dir` is relative
/// to the file's directory, and by default that directory.
pub fn validate_file(src: &str, cpus: usize, path: &std::path::Path) -> Validated {
    validate_at(src, cpus, Some(path))
}

fn validate_at(src: &str, cpus: usize, file: Option<&std::path::Path>) -> Validated {
    let (doc, recovered) = match toml_edit::Document::parse(src.to_owned()) {
        Ok(doc) => (Some(doc), None),
        Err(e) => {
            let r = syntax::recover(src, e);
            let doc = r
                .complete
                .then(|| toml_edit::Document::parse(r.text.clone()).ok())
                .flatten();
            (doc, Some(r))
        }
    };
    let text = recovered
        .as_ref()
        .map_or(src, |r| r.text.as_str())
        .to_owned();
    let mut sink = Sink::new(&text);
    let config = doc.and_then(|doc| {
        let root = Section::new(doc.as_table(), String::new(), None);
        let config = read_config(root, &mut sink, cpus, file);
        sink.resolve_unknown(catalog());
        let screening = config.as_ref().is_some_and(|c| c.screen.sql_injection);
        sink.lenient_notes(screening);
        config
    });
    if let Some(r) = recovered {
        r.report(&mut sink);
    }
    let has_errors = sink.diags.iter().any(Diagnostic::is_error);
    sink.diags.sort_by_key(|d| (d.line == 0, d.line, d.column));
    Validated {
        config: if has_errors { None } else { config },
        diagnostics: sink.diags,
    }
}

/// Every kind of section with the keys it reads, whether or not a file has one: read from a
/// skeleton with one section of each kind.
pub(crate) fn catalog() -> &'static HashMap<String, Kind> {
    static CATALOG: OnceLock<HashMap<String, Kind>> = OnceLock::new();
    CATALOG.get_or_init(|| {
        const SKELETON: &str = "[[proxy_rules]]\n[[proxy_rules.path_rules]]\n\
            [proxy_rules.path_rules.request_headers]\n[proxy_rules.path_rules.response_headers]\n\
            [[proxy_rules.disallowed_user_agents]]\n[proxy_rules.routing_rules]\n\
            [[proxy_rules.routing_rules.routing_locations]]\n\
            [proxy_rules.request_headers]\n[proxy_rules.response_headers]\n\
            [[proxy_rules.redirects]]\n[[proxy_rules.rewrites]]\n[proxy_rules.error_pages]\n";
        let doc = toml_edit::Document::parse(SKELETON).expect("the skeleton is valid TOML");
        let mut sink = Sink::new(SKELETON);
        read_config(
            Section::new(doc.as_table(), String::new(), None),
            &mut sink,
            1,
            None,
        );
        sink.kinds
    })
}

const U16: i64 = u16::MAX as i64;
const U32: i64 = u32::MAX as i64;
const I64: i64 = i64::MAX;

fn inactive(sink: &mut Sink<'_>, at: &At<impl Sized>, what: &str) {
    sink.push(
        Severity::Inactive,
        &at.key,
        at.span.clone(),
        format!("{what} is not implemented in this version of rampart yet; the key is accepted and has no effect"),
        "",
    );
}

fn warn(
    sink: &mut Sink<'_>,
    at: &At<impl Sized>,
    message: impl Into<String>,
    hint: impl Into<String>,
) {
    sink.push(Severity::Warning, &at.key, at.span.clone(), message, hint);
}

fn error(
    sink: &mut Sink<'_>,
    at: &At<impl Sized>,
    message: impl Into<String>,
    hint: impl Into<String>,
) {
    sink.push(Severity::Error, &at.key, at.span.clone(), message, hint);
}

/// Shortest shared secret accepted (`redis_encryption_key`, `cache_peer_key`).
const MIN_SECRET_LEN: usize = 16;

/// A shared secret: `key` (a passphrase of at least [`MIN_SECRET_LEN`] characters) or `file` (a
/// file holding one); `too_short` says what a shorter one would fail to do.
fn secret(
    sink: &mut Sink<'_>,
    key: Option<At<String>>,
    file: Option<At<String>>,
    too_short: &str,
) -> Option<crate::model::Secret> {
    let (text, at) = match (key, file) {
        (Some(k), Some(f)) => {
            error(
                sink,
                &f,
                format!("both `{}` and `{}` are set", k.key, f.key),
                "keep one of them",
            );
            (k.value.clone(), k)
        }
        (Some(k), None) => (k.value.clone(), k),
        (None, Some(f)) => match std::fs::read_to_string(f.value.trim()) {
            Ok(t) => (t.trim().to_owned(), f),
            Err(e) => {
                error(
                    sink,
                    &f,
                    format!("cannot read {:?}: {e}", f.value),
                    "name a readable file holding the key (e.g. made with `openssl rand -hex 32 > key`)",
                );
                return None;
            }
        },
        (None, None) => return None,
    };
    if text.chars().count() < MIN_SECRET_LEN {
        error(
            sink,
            &at,
            too_short,
            "use at least 32 random characters, e.g. from `openssl rand -hex 32`",
        );
        return None;
    }
    Some(crate::model::Secret(text.into_bytes()))
}

/// A byte size: an integer, or a string such as "512MiB", "64M", "1GB" (K/M/G are binary
/// multiples, KB/MB/GB decimal ones, KiB/MiB/GiB binary).
fn size(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    key: &'static str,
    default: u64,
    min: u64,
) -> u64 {
    let at = s.string_or_int(sink, key);
    let value = match at {
        Some(a) => match parse_size(&a.value) {
            Some(v) => Some((v, a)),
            None => {
                error(
                    sink,
                    &a,
                    format!("{:?} is not a size", a.value),
                    "write a number of bytes or e.g. \"512MiB\", \"64MB\", \"2GiB\"",
                );
                return default;
            }
        },
        None => None,
    };
    match value {
        Some((v, a)) if v < min => {
            error(
                sink,
                &a,
                format!("{v} bytes is too small"),
                format!("use at least {min} bytes"),
            );
            default
        }
        Some((v, _)) => v,
        None => default,
    }
}

pub(crate) fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" | "B" | "b" => 1,
        "K" | "k" | "KiB" | "kiB" => 1 << 10,
        "M" | "m" | "MiB" => 1 << 20,
        "G" | "g" | "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// 0 = unset (OS default); above `max` → `max` with a warning (ARC2 accepts the wider range).
fn clamp(sink: &mut Sink<'_>, v: At<i64>, max: i64, what: &str) -> Option<i64> {
    if v.value == 0 {
        return None;
    }
    if v.value > max {
        warn(
            sink,
            &v,
            format!("{} is above {what}; {max} is used", v.value),
            format!("use at most {max}"),
        );
        return Some(max);
    }
    Some(v.value)
}

fn secs(v: i64) -> Duration {
    Duration::from_secs(v.max(0) as u64)
}

fn read_config(
    mut s: Section<'_>,
    sink: &mut Sink<'_>,
    cpus: usize,
    file: Option<&std::path::Path>,
) -> Option<Config> {
    let listeners = listeners::read(&mut s, sink);
    let process = process::read(&mut s, sink, cpus);
    let cache = cache::read(&mut s, sink);
    let screen = screening::read_screen(&mut s, sink);
    let admin = screening::read_admin(&mut s, sink);
    not_implemented(&mut s, sink);
    let transforms = transform::read_global(&mut s, sink);
    let downstream = sockets::read_downstream(&mut s, sink);
    let upstream = sockets::read_upstream(&mut s, sink);
    let tls = tls::read(&mut s, sink);
    let redis = redis::read(&mut s, sink);
    let tracing = tracing::read(&mut s, sink);
    let fleet = fleet::read(&mut s, sink);
    let strict_default = s.bool(sink, "strict_path_rules").map(|b| b.value);
    let pages = pages::PagesDir::read(&mut s, sink, file);
    let globals = rule::Globals {
        strict_default,
        cache: &cache,
        tls_default: tls.rule_default.as_ref(),
        transforms: &transforms,
        pages: &pages,
    };
    let mut rules = rule::read_rules(&mut s, sink, &globals);
    s.finish(sink);
    for rule in &mut rules {
        rule.sql_injection &= screen.sql_injection;
    }
    let acme_in_use = rules.iter().any(|r| r.cert == Some(CertSource::Acme));
    let redis = redis::finish(sink, redis, acme_in_use);
    let has_certs = rules.iter().any(|r| r.cert.is_some());
    let (listen_https, https_pp) = listeners::https(sink, &listeners, has_certs);
    let proxy_protocol = listeners::proxy_protocol(sink, &listeners, https_pp);
    let tls = tls::finish(sink, tls, listen_https, &rules);
    let fleet = fleet::finish(sink, fleet, &listeners.http, redis.is_some());
    Some(Config {
        listen_http: listeners.http,
        workers: process.workers,
        runtime: process.runtime,
        logging_level: process.logging_level,
        add_logging: process.add_logging,
        backtracing: process.backtracing,
        downstream,
        proxy_protocol,
        upstream,
        shutdown_timeout: process.shutdown_timeout,
        watch_config: process.watch_config,
        access_log: process.access_log,
        rules,
        cache,
        admin,
        screen,
        tls,
        redis,
        tracing,
        fleet,
    })
}

/// Global keys of ARC2 features rampart does not have yet: accepted, reported when asked for.
fn not_implemented(s: &mut Section<'_>, sink: &mut Sink<'_>) {
    if let Some(k) = s.string(sink, "azure_table_storage_key") {
        inactive(sink, &k, "Azure Table Storage log export");
    }
}

/// `cache_heuristic` (global or per rule); `None` when absent or invalid (reported).
fn cache_heuristic(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Option<CacheHeuristic> {
    let v = s.string(sink, "cache_heuristic")?;
    match v.value.as_str() {
        "max_age" => Some(CacheHeuristic::MaxAge),
        "last_modified" => Some(CacheHeuristic::LastModified),
        "none" => Some(CacheHeuristic::None),
        other => {
            error(
                sink,
                &v,
                format!("unknown cache_heuristic {other:?}"),
                "use \"max_age\" (default, ARC2), \"last_modified\" (RFC 9111 §4.2.2) or \"none\"",
            );
            None
        }
    }
}

/// `cache_statuses` (global or per rule); `None` when absent or invalid (reported).
fn cache_statuses(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Option<CacheStatuses> {
    let v = s.string(sink, "cache_statuses")?;
    match v.value.as_str() {
        "arc2" => Some(CacheStatuses::Arc2),
        "rfc9111" => Some(CacheStatuses::Rfc9111),
        other => {
            error(
                sink,
                &v,
                format!("unknown cache_statuses {other:?}"),
                "use \"arc2\" (default: 200, 201 and 204) or \"rfc9111\" (every status RFC 9111 lets a cache store, when it has a lifetime)",
            );
            None
        }
    }
}

/// A path to a file that must exist (checked now, so `rampart check` finds a typo) and be a
/// regular file: a device would be read without end and a FIFO waited on when the
/// configuration is put in service (a rule from the management API may name these keys).
fn file_key(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    key: &'static str,
) -> Option<std::path::PathBuf> {
    let v = s.string(sink, key)?;
    let path = std::path::PathBuf::from(v.value.trim());
    let why = match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => None,
        Ok(m) if m.is_dir() => Some("it is a directory".to_owned()),
        Ok(_) => Some("it is not a regular file (a device, a FIFO or a socket)".to_owned()),
        Err(e) => Some(e.to_string()),
    };
    if let Some(why) = why {
        error(
            sink,
            &v,
            format!("cannot read {:?}: {why}", v.value),
            "give the path of a readable PEM file (relative paths start at rampart's working directory)",
        );
    }
    Some(path)
}

/// A list of IP networks; every bad entry is reported.
fn cidrs(s: &mut Section<'_>, sink: &mut Sink<'_>, key: &'static str) -> Option<At<Vec<Cidr>>> {
    let list = s.strings(sink, key)?;
    let mut out = Vec::with_capacity(list.value.len());
    for entry in &list.value {
        match Cidr::parse(&entry.value) {
            Some(c) => out.push(c),
            None => error(
                sink,
                entry,
                format!("{:?} is not an IP address or network", entry.value),
                "write e.g. \"127.0.0.1\", \"10.0.0.0/8\" or \"2001:db8::/32\"",
            ),
        }
    }
    Some(At {
        value: out,
        key: list.key,
        span: list.span,
    })
}

/// `rate_limit_per_second` + `rate_limit_burst` in a section. With a `default`, the keys
/// adjust it; without, the rate is only on when `rate_limit_per_second` is given.
fn rate_limit(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    default: Option<RateLimit>,
) -> Option<RateLimit> {
    let rate = s.int(sink, "rate_limit_per_second", 1, 10_000_000);
    let burst = s.int(sink, "rate_limit_burst", 1, 10_000_000);
    let per_second = match (&rate, default) {
        (Some(r), _) => r.value as u32,
        (None, Some(d)) => d.per_second,
        (None, None) => {
            if let Some(b) = &burst {
                warn(
                    sink,
                    b,
                    "`rate_limit_burst` without `rate_limit_per_second` has no effect",
                    "add `rate_limit_per_second = 100`",
                );
            }
            return None;
        }
    };
    let burst = match (burst, default) {
        (Some(b), _) => b.value as u32,
        // Twice the rate when unset, as for the global default (100/s, burst 200).
        (None, Some(d)) if rate.is_none() => d.burst,
        (None, _) => per_second.saturating_mul(2),
    };
    Some(RateLimit { per_second, burst })
}

/// The default of `rate_limit_status`.
pub const DEFAULT_RATE_LIMIT_STATUS: u16 = 429;

/// `rate_limit_status` in a section: 429 (the default), 503 (NGINX's default) or another
/// 4xx/5xx status whose meaning does not require fields a refusal cannot give.
fn rate_limit_status(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Option<u16> {
    let at = s.int(sink, "rate_limit_status", 400, 599)?;
    // 401/407 need a challenge, 405 an `Allow`, 416 a `Content-Range`, 426 an `Upgrade`;
    // 408 makes clients retry at once on a new connection.
    const REFUSED: [i64; 6] = [401, 405, 407, 408, 416, 426];
    if REFUSED.contains(&at.value) {
        error(
            sink,
            &at,
            format!(
                "{} cannot be a rate limit's refusal (clients read it as something else)",
                at.value
            ),
            "use `rate_limit_status = 429` (the default) or `rate_limit_status = 503` (NGINX's)",
        );
        return None;
    }
    Some(at.value as u16)
}

/// `max_body_size`: a size, or 0 / "unlimited" for no limit.
fn body_size(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Option<u64> {
    if let Some(a) = s.string_or_int(sink, "max_body_size") {
        if a.value.trim().eq_ignore_ascii_case("unlimited") || a.value.trim() == "0" {
            return None;
        }
        match parse_size(&a.value) {
            Some(v) => return Some(v),
            None => error(
                sink,
                &a,
                format!("{:?} is not a size", a.value),
                "write a number of bytes, e.g. \"10MiB\", or \"unlimited\"",
            ),
        }
    }
    Some(DEFAULT_BODY_LIMIT)
}

/// A per-rule boolean ARC2 requires; missing → `false` with a note (docs/arc2.md, "Keys a file
/// leaves out").
fn flag(s: &mut Section<'_>, sink: &mut Sink<'_>, key: &'static str, required: bool) -> bool {
    match s.bool(sink, key) {
        Some(b) => b.value,
        None => {
            if required && !s.has(key) {
                lenient(s, sink, key, "false");
            }
            false
        }
    }
}

/// A key ARC2 requires that the section leaves out: rampart uses `default` (said in one note per
/// section, see [`Sink::lenient_notes`]).
fn lenient(s: &Section<'_>, sink: &mut Sink<'_>, key: &str, default: &str) {
    sink.lenient(s.path(), s.span(), key, default);
}
