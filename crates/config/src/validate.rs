//! `validate()`: the raw TOML document → typed [`Config`], with every problem collected.
//!
//! Compatibility target: `shared/ARC2-COMPAT.md`. Every ARC2 key is read here. Keys whose feature
//! is not implemented yet are accepted and reported as [`Severity::Inactive`] when their value
//! asks for the feature. Per-rule keys that ARC2 requires but older ARC2 files omit get the lenient
//! default from ARC2-COMPAT §3 with a warning.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use http::uri::Authority;

use crate::diag::{Diagnostic, Severity};
use crate::model::*;
use crate::reader::{At, Section, Sink};

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
}

/// Validates configuration text. `cpus` is the default for `workers`.
pub fn validate(src: &str, cpus: usize) -> Validated {
    let mut sink = Sink::new(src);
    let doc = match toml_edit::Document::parse(src) {
        Ok(doc) => doc,
        Err(e) => {
            sink.push(
                Severity::Error,
                "",
                e.span(),
                format!("not valid TOML: {}", e.message().trim()),
                "fix the syntax at this position",
            );
            return Validated {
                config: None,
                diagnostics: sink.diags,
            };
        }
    };
    let root = Section::new(doc.as_table(), String::new(), None);
    let config = read_config(root, &mut sink, cpus);
    let has_errors = sink.diags.iter().any(Diagnostic::is_error);
    sink.diags.sort_by_key(|d| (d.line == 0, d.line, d.column));
    Validated {
        config: if has_errors { None } else { config },
        diagnostics: sink.diags,
    }
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

fn read_config(mut s: Section<'_>, sink: &mut Sink<'_>, cpus: usize) -> Option<Config> {
    // --- listeners ---
    let address = s.string(sink, "listening_address");
    let ip = match &address {
        Some(a) => match IpAddr::from_str(a.value.trim()) {
            Ok(ip) => Some(ip),
            Err(_) => {
                error(
                    sink,
                    a,
                    format!("Provided listening http address cannot be parsed: {:?}", a.value),
                    "use an IPv4 or IPv6 address literal such as \"0.0.0.0\", \"127.0.0.1\" or \"::\" (host names are not accepted)",
                );
                None
            }
        },
        None => Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
    };
    let port_http = s
        .int(sink, "listening_port_http", 0, U16)
        .map_or(80, |p| p.value as u16);
    let port_https_at = s.int(sink, "listening_port_https", 0, U16);
    let port_https = port_https_at.as_ref().map_or(443, |p| p.value as u16);
    let listen_https_list = s.strings(sink, "listen_https");
    let listen = s.strings(sink, "listen");
    let mut listen_http = Vec::new();
    if let Some(list) = &listen {
        if list.value.is_empty() {
            error(
                sink,
                list,
                "`listen` is empty",
                "list at least one address such as \"127.0.0.1:8080\", or remove the key",
            );
        }
        for entry in &list.value {
            match SocketAddr::from_str(entry.value.trim()) {
                Ok(a) => listen_http.push(a),
                Err(_) => error(
                    sink,
                    entry,
                    format!("{:?} is not an address with a port", entry.value),
                    "write \"IP:PORT\", e.g. \"127.0.0.1:8080\" or \"[::1]:8080\"",
                ),
            }
        }
        if address.is_some() || s.has("listening_port_http") {
            warn(
                sink,
                list,
                "`listen` replaces `listening_address`/`listening_port_http`, which are ignored",
                "remove one of them",
            );
        }
    } else if let Some(ip) = ip {
        listen_http.push(SocketAddr::new(ip, port_http));
    }

    // --- process ---
    let workers = s
        .int(sink, "workers", 1, 1024)
        .map_or(cpus.max(1), |w| w.value as usize);
    let runtime = match s.string(sink, "worker_runtime") {
        Some(r) => match r.value.as_str() {
            "per-core" => RuntimeMode::PerCore,
            "shared" => RuntimeMode::Shared,
            _ => {
                error(
                    sink,
                    &r,
                    format!("unknown worker_runtime {:?}", r.value),
                    "use \"per-core\" (default) or \"shared\"",
                );
                RuntimeMode::PerCore
            }
        },
        None => RuntimeMode::PerCore,
    };
    let backtracing = s.bool(sink, "backtracing").is_some_and(|b| b.value);
    let add_logging = s.bool(sink, "add_logging").is_none_or(|b| b.value);
    let logging_level = match s.string(sink, "logging_level") {
        Some(l) => {
            const LEVELS: [&str; 6] = ["off", "trace", "debug", "info", "warn", "error"];
            if LEVELS.iter().any(|p| l.value.starts_with(p)) {
                l.value
            } else {
                error(
                    sink,
                    &l,
                    format!("Provided logging level is incorrect: {:?}", l.value),
                    "select one of those: off, trace, debug, info, warn, error",
                );
                "error".to_owned()
            }
        }
        None => "error".to_owned(),
    };
    let shutdown_timeout = s
        .int(sink, "shutdown_timeout_seconds", 0, 3600)
        .map_or(Duration::from_secs(30), |v| secs(v.value));

    // --- cache ---
    let memory = size(&mut s, sink, "cache_memory", 256 << 20, 4096);
    let explicit_max = s.has("cache_max_object");
    let mut max_object = size(&mut s, sink, "cache_max_object", 8 << 20, 1);
    // The store keeps an object of `cache_max_object` storable only while it fits in a bit
    // under half the budget (shards, per-entry overhead).
    let fits = (memory * 45 / 100).saturating_sub(4608).max(1);
    if max_object > fits {
        if explicit_max {
            sink.push(
                Severity::Warning,
                "cache_max_object",
                None,
                format!(
                    "{max_object} bytes cannot fit in a cache of {memory} bytes; {fits} is used"
                ),
                "raise cache_memory or lower cache_max_object",
            );
        }
        max_object = fits;
    }
    let cache = CacheConfig {
        enabled: s.bool(sink, "add_caching").is_none_or(|b| b.value),
        memory,
        max_object: max_object as usize,
        grace: s
            .int(sink, "cache_grace_seconds", 0, 365 * 86400)
            .map_or(Duration::from_secs(10), |v| secs(v.value)),
        heuristic: cache_heuristic(&mut s, sink).unwrap_or_default(),
        store_set_cookie: s.bool(sink, "store_set_cookie").is_some_and(|b| b.value),
    };

    // --- screening ---
    let screen = read_screen(&mut s, sink);
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
    let purge_allow = cidrs(&mut s, sink, "purge_allow").unwrap_or_default();
    if let Some(k) = s.string(sink, "azure_table_storage_key") {
        inactive(sink, &k, "Azure Table Storage log export");
    }
    let contact = s.string(sink, "lets_encrypt_contact_email").and_then(|e| {
        let v = e.value.trim();
        if v.is_empty() {
            return None;
        }
        if !v.contains('@') || v.contains([' ', ',']) {
            error(
                sink,
                &e,
                format!("{:?} is not an e-mail address", e.value),
                "write one address such as \"ops@example.com\"",
            );
        }
        Some(v.trim_start_matches("mailto:").to_owned())
    });
    let tls_default = match s.string(sink, "tls") {
        Some(t) => tls_mode(sink, &t),
        None => None,
    };
    if let Some(b) = s.bool(sink, "enable_compression") {
        if b.value {
            inactive(sink, &b, "response compression");
        }
    }
    if let Some(f) = s.string(sink, "compression_flags") {
        inactive(sink, &f, "response compression");
    }
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

    // --- sockets ---
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
    let downstream = DownstreamConfig {
        nodelay: s.bool(sink, "nodelay").is_none_or(|b| b.value),
        max_backlog,
        recv_buffer_size: s
            .int(sink, "recv_buffer_size", 0, I64)
            .and_then(|v| {
                clamp(
                    sink,
                    v,
                    i32::MAX as i64,
                    "the kernel's largest socket buffer request",
                )
            })
            .map(|v| v as usize),
        send_buffer_size: s
            .int(sink, "send_buffer_size", 0, I64)
            .and_then(|v| {
                clamp(
                    sink,
                    v,
                    i32::MAX as i64,
                    "the kernel's largest socket buffer request",
                )
            })
            .map(|v| v as usize),
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
        keepalive_timeout: s
            .int(sink, "client_keepalive_timeout_seconds", 1, 86_400)
            .map_or(Duration::from_secs(60), |v| secs(v.value)),
        max_head_bytes: size(&mut s, sink, "max_request_head_size", 64 << 10, 8192).min(16 << 20)
            as usize,
        max_headers: s
            .int(sink, "max_request_headers", 8, 1000)
            .map_or(100, |v| v.value as usize),
        h2_max_concurrent_streams: s
            .int(sink, "h2_max_concurrent_streams", 1, 10_000)
            .map_or(256, |v| v.value as u32),
        h2_max_header_list_bytes: size(&mut s, sink, "h2_max_header_list_size", 64 << 10, 1024)
            .min(16 << 20) as u32,
    };

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
    let upstream = UpstreamConfig {
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
        ca_file: file_key(&mut s, sink, "proxy_ca_file"),
    };

    // --- TLS (HTTPS listener, certificates) ---
    let min_version = match s.string(sink, "tls_min_version") {
        Some(v) => match v.value.as_str() {
            "TLS_1_2" => TlsVersion::Tls12,
            "TLS_1_3" => TlsVersion::Tls13,
            _ => {
                error(
                    sink,
                    &v,
                    format!("Invalid TLS value: {:?}", v.value),
                    "use \"TLS_1_2\" (default) or \"TLS_1_3\"; rustls offers no older versions",
                );
                TlsVersion::Tls12
            }
        },
        None => TlsVersion::Tls12,
    };
    let state_dir = match s.string(sink, "state_dir") {
        Some(d) if !d.value.trim().is_empty() => std::path::PathBuf::from(d.value.trim()),
        Some(d) => {
            error(
                sink,
                &d,
                "`state_dir` is empty",
                "name a directory, e.g. \"/var/lib/rampart\"",
            );
            default_state_dir()
        }
        None => default_state_dir(),
    };
    let default_domain = s
        .string(sink, "tls_default_domain")
        .map(|d| d.value.trim().trim_end_matches('.').to_ascii_lowercase());
    let reload_interval = s
        .int(sink, "tls_reload_interval_seconds", 1, 86_400)
        .map_or(Duration::from_secs(5), |v| secs(v.value));
    let directory_url = match s.string(sink, "acme_directory_url") {
        Some(u) if u.value.starts_with("https://") || u.value.starts_with("http://") => u.value,
        Some(u) => {
            error(
                sink,
                &u,
                format!("{:?} is not an http(s) URL", u.value),
                "write the CA's ACME directory URL, e.g. \"https://acme-staging-v02.api.letsencrypt.org/directory\"",
            );
            String::new()
        }
        None => LETS_ENCRYPT_PRODUCTION.to_owned(),
    };
    let acme_ca_file = file_key(&mut s, sink, "acme_ca_file");
    let challenges = match s.strings(sink, "acme_challenges") {
        Some(list) => {
            let mut out = Vec::new();
            for c in &list.value {
                match c.value.as_str() {
                    "http-01" => out.push(AcmeChallenge::Http01),
                    "tls-alpn-01" => out.push(AcmeChallenge::TlsAlpn01),
                    _ => error(
                        sink,
                        c,
                        format!("unknown ACME challenge {:?}", c.value),
                        "use \"http-01\" and/or \"tls-alpn-01\"",
                    ),
                }
            }
            if out.is_empty() && list.value.is_empty() {
                error(
                    sink,
                    &list,
                    "`acme_challenges` is empty",
                    "list \"http-01\" and/or \"tls-alpn-01\"",
                );
            }
            out
        }
        None => vec![AcmeChallenge::Http01, AcmeChallenge::TlsAlpn01],
    };
    // A rule without its own `tls`/files gets this: the global `tls`, else ACME when a contact
    // e-mail is set.
    let rule_tls_default = match tls_default {
        Some(TlsMode::Off) => None,
        Some(TlsMode::Internal) => Some(CertSource::Internal),
        Some(TlsMode::Acme) => Some(CertSource::Acme),
        None => contact.is_some().then_some(CertSource::Acme),
    };

    let strict_default = s.bool(sink, "strict_path_rules").is_some_and(|b| b.value);

    // --- rules ---
    let mut rules = Vec::new();
    match s.tables(sink, "proxy_rules") {
        Some(sections) => {
            let mut domains = Vec::new();
            for section in sections {
                if let Some(rule) = read_rule(
                    section,
                    sink,
                    strict_default,
                    &cache,
                    rule_tls_default.as_ref(),
                    &mut domains,
                ) {
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
    s.finish(sink);
    for rule in &mut rules {
        rule.sql_injection &= screen.sql_injection;
    }
    let has_certs = rules.iter().any(|r| r.cert.is_some());
    let mut listen_https = Vec::new();
    if let Some(list) = &listen_https_list {
        for entry in &list.value {
            match SocketAddr::from_str(entry.value.trim()) {
                Ok(a) => listen_https.push(a),
                Err(_) => error(
                    sink,
                    entry,
                    format!("{:?} is not an address with a port", entry.value),
                    "write \"IP:PORT\", e.g. \"127.0.0.1:8443\" or \"[::1]:8443\"",
                ),
            }
        }
    } else if let Some(ip) = ip {
        listen_https.push(SocketAddr::new(ip, port_https));
    }
    if !has_certs {
        let asked = port_https_at
            .as_ref()
            .map(|p| (p.key.clone(), p.span.clone()))
            .or_else(|| {
                listen_https_list
                    .as_ref()
                    .map(|l| (l.key.clone(), l.span.clone()))
            });
        if let Some((key, span)) = asked {
            sink.push(
                Severity::Warning,
                &key,
                span,
                "no rule has a certificate, so the HTTPS listener is off",
                "give a rule `tls_cert_file` + `tls_key_file`, `tls = \"internal\"`, or set `lets_encrypt_contact_email`",
            );
        }
        listen_https.clear();
    }
    if let Some(d) = &default_domain {
        let known = rules
            .iter()
            .any(|r| r.cert.is_some() && r.domain.certificate_covers(d));
        if !known {
            sink.push(
                Severity::Error,
                "tls_default_domain",
                None,
                format!("tls_default_domain {d:?} is not the domain of a rule with a certificate"),
                "name the `domain` of a rule that has a certificate source",
            );
        }
    }
    let tls = TlsConfig {
        listen_https,
        min_version,
        state_dir,
        default_domain,
        reload_interval,
        acme: AcmeConfig {
            directory_url,
            contact,
            ca_file: acme_ca_file,
            challenges,
        },
    };

    Some(Config {
        listen_http,
        workers,
        runtime,
        logging_level,
        add_logging,
        backtracing,
        downstream,
        upstream,
        shutdown_timeout,
        rules,
        cache,
        admin: AdminConfig {
            api_key,
            purge_allow,
        },
        screen,
        tls,
    })
}

/// Let's Encrypt's production ACME directory (the default CA).
pub const LETS_ENCRYPT_PRODUCTION: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// `$XDG_DATA_HOME/rampart`, else `$HOME/.local/share/rampart`, else `./rampart-state`.
fn default_state_dir() -> std::path::PathBuf {
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return std::path::PathBuf::from(d).join("rampart");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => std::path::PathBuf::from(h).join(".local/share/rampart"),
        None => std::path::PathBuf::from("rampart-state"),
    }
}

/// The `tls` key's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TlsMode {
    Off,
    Internal,
    Acme,
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

fn tls_mode(sink: &mut Sink<'_>, v: &At<String>) -> Option<TlsMode> {
    match v.value.as_str() {
        "off" => Some(TlsMode::Off),
        "internal" => Some(TlsMode::Internal),
        "acme" => Some(TlsMode::Acme),
        _ => {
            error(
                sink,
                v,
                format!("unknown tls mode {:?}", v.value),
                "use \"internal\" (local CA), \"acme\" (automatic certificates) or \"off\"",
            );
            None
        }
    }
}

/// A path to a file that must exist (checked now, so `rampart check` finds a typo).
fn file_key(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    key: &'static str,
) -> Option<std::path::PathBuf> {
    let v = s.string(sink, key)?;
    let path = std::path::PathBuf::from(v.value.trim());
    if let Err(e) = std::fs::metadata(&path) {
        error(
            sink,
            &v,
            format!("cannot read {:?}: {e}", v.value),
            "give the path of a readable PEM file (relative paths start at rampart's working directory)",
        );
    }
    Some(path)
}

fn parse_domain(sink: &mut Sink<'_>, d: &At<String>) -> Option<DomainPattern> {
    let text = d.value.trim().to_ascii_lowercase();
    let text = text.strip_suffix('.').unwrap_or(&text).to_owned();
    let bad = |sink: &mut Sink<'_>, why: &str| {
        error(
            sink,
            d,
            format!("{:?} is not a valid domain: {why}", d.value),
            "write a host name such as \"example.com\", a wildcard \"*.example.com\", or \"*\" for every host",
        );
        None
    };
    if text == "*" {
        return Some(DomainPattern::Any);
    }
    let (wild, host) = match text.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    if host.is_empty() {
        return bad(sink, "it is empty");
    }
    if host.contains('*') {
        return bad(
            sink,
            "`*` is allowed only as the whole first label (`*.example.com`)",
        );
    }
    if host.contains(':') && host.parse::<Ipv6Addr>().is_err() {
        return bad(
            sink,
            "it contains a port; rules match the host without its port",
        );
    }
    if host.contains(['/', ' ', '?', '#', '@']) {
        return bad(sink, "it contains characters a host name cannot have");
    }
    Some(if wild {
        DomainPattern::Wildcard(format!(".{host}"))
    } else {
        DomainPattern::Exact(host.to_owned())
    })
}

fn parse_rule_type(sink: &mut Sink<'_>, v: &At<String>) -> Option<RuleType> {
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

fn match_type(sink: &mut Sink<'_>, v: &At<String>) -> Option<MatchType> {
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
                "use one of Equals, StartsWith, EndsWith, Contains, DoesNotEqual, DoesNotContain (case-sensitive)",
            );
            return None;
        }
    })
}

/// Reads `forward_addr` / `forward_ipv4` / `forward_ipv6` + ports from a rule or a routing
/// location. Returns the origin host (precedence addr > ipv4 > ipv6) and the plain-HTTP port.
fn read_forward(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
) -> (Option<String>, Option<At<i64>>, Option<u16>, bool) {
    let mut host = None;
    let mut had_error = false;
    if let Some(a) = s.string(sink, "forward_addr") {
        let v = a.value.trim();
        if v.is_empty() || v.contains(['/', ' ', '?', '#', '@']) {
            error(
                sink,
                &a,
                format!("{:?} is not a host name or address", a.value),
                "write a host name such as \"origin.internal\" or an IP address",
            );
            had_error = true;
        } else {
            host = Some(v.to_owned());
        }
    }
    if let Some(a) = s.string(sink, "forward_ipv4") {
        match Ipv4Addr::from_str(a.value.trim()) {
            Ok(ip) => {
                host.get_or_insert(ip.to_string());
            }
            Err(_) => {
                error(
                    sink,
                    &a,
                    format!("{:?} is not an IPv4 address", a.value),
                    "write four numbers such as \"127.0.0.1\"",
                );
                had_error = true;
            }
        }
    }
    if let Some(a) = s.string(sink, "forward_ipv6") {
        match Ipv6Addr::from_str(a.value.trim().trim_start_matches('[').trim_end_matches(']')) {
            Ok(ip) => {
                host.get_or_insert(format!("[{ip}]"));
            }
            Err(_) => {
                error(
                    sink,
                    &a,
                    format!("{:?} is not an IPv6 address", a.value),
                    "write an address such as \"::1\" (without brackets or port)",
                );
                had_error = true;
            }
        }
    }
    let port = s.int(sink, "forward_port_http", 0, U16);
    if let Some(p) = port.as_ref().filter(|p| p.value == 0) {
        error(
            sink,
            p,
            "an origin cannot be on port 0",
            "use the port the origin listens on, e.g. 8080",
        );
        had_error = true;
    }
    let port_tls = match s.int(sink, "forward_port_https", 0, U16) {
        Some(p) if p.value == 0 => {
            error(
                sink,
                &p,
                "an origin cannot be on port 0",
                "use the port the origin serves HTTPS on, e.g. 443",
            );
            had_error = true;
            None
        }
        p => p.map(|p| p.value as u16),
    };
    (host, port, port_tls, had_error)
}

/// How a target is reached over TLS.
struct Tls {
    /// `forward_port_https`.
    port: Option<u16>,
    /// `https_only`.
    only: bool,
    /// SNI / verified name.
    name: String,
}

fn make_target(
    sink: &mut Sink<'_>,
    at: &At<impl Sized>,
    host: &str,
    port: u16,
    tls: Tls,
    weight: u32,
) -> Option<UpstreamTarget> {
    // A forward_addr may already carry a port ("origin:8080"); keep it then (plain HTTP only).
    let bare = host.starts_with('[') || !host.contains(':');
    let text = if bare {
        format!("{host}:{port}")
    } else {
        host.to_owned()
    };
    let authority = match Authority::from_str(&text) {
        Ok(a) if a.port_u16().is_some() => a,
        _ => {
            error(
                sink,
                at,
                format!("{text:?} is not a valid origin address"),
                "use a host name or IP address and a port",
            );
            return None;
        }
    };
    // Under `https_only` without `forward_port_https`, TLS goes to 443.
    let tls_port = tls.port.or(tls.only.then_some(443));
    let tls_authority = tls_port.and_then(|p| {
        let h = authority.host();
        let h = if h.contains(':') && !h.starts_with('[') {
            format!("[{h}]")
        } else {
            h.to_owned()
        };
        Authority::from_str(&format!("{h}:{p}")).ok()
    });
    Some(UpstreamTarget {
        authority,
        tls: tls_authority,
        https_only: tls.only,
        tls_name: tls.name,
        weight,
    })
}

/// A name rustls can send as SNI and verify: an IP address, or a DNS name of letters, digits,
/// `-` and `_` in dot-separated labels of 1–63 characters (253 at most in all).
fn valid_tls_name(name: &str) -> bool {
    if name.parse::<IpAddr>().is_ok() {
        return true;
    }
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

fn read_rule(
    mut s: Section<'_>,
    sink: &mut Sink<'_>,
    strict_default: bool,
    cache: &CacheConfig,
    tls_default: Option<&CertSource>,
    domains: &mut Vec<DomainPattern>,
) -> Option<RuleConfig> {
    let mut ok = true;
    let domain_at = s.string(sink, "domain");
    let domain = match &domain_at {
        Some(d) => parse_domain(sink, d),
        None => {
            s.missing(
                sink,
                "domain",
                Severity::Error,
                "every [[proxy_rules]] needs a `domain`",
                "add `domain = \"example.com\"`",
            );
            None
        }
    };
    ok &= domain.is_some();
    if let (Some(d), Some(at)) = (&domain, &domain_at) {
        if domains.contains(d) {
            warn(
                sink,
                at,
                format!(
                    "domain {:?} already has an earlier rule; this rule is never used",
                    at.value
                ),
                "merge the two rules or remove one",
            );
        } else {
            domains.push(d.clone());
        }
    }

    let max_age_seconds = match s.int(sink, "max_age_seconds", 0, I64) {
        Some(v) => v.value as u64,
        None => {
            if !s.has("max_age_seconds") {
                lenient(&s, sink, "max_age_seconds", "0 (nothing cached)");
            }
            0
        }
    };
    let paths = match s.strings(sink, "paths") {
        Some(list) => {
            for p in &list.value {
                if !p.value.starts_with('/') {
                    warn(
                        sink,
                        p,
                        format!(
                            "path {:?} does not start with `/` and matches no request",
                            p.value
                        ),
                        "start it with `/`",
                    );
                }
            }
            let v: Vec<String> = list.value.into_iter().map(|p| p.value).collect();
            if v.is_empty() {
                vec!["/".to_owned()]
            } else {
                v
            }
        }
        None => vec!["/".to_owned()],
    };
    let rule_type = match s.string(sink, "rule_type") {
        Some(v) => parse_rule_type(sink, &v).unwrap_or_else(|| {
            ok = false;
            RuleType::Whitelist
        }),
        None => {
            if !s.has("rule_type") {
                lenient(&s, sink, "rule_type", "\"Whitelist\"");
            }
            RuleType::Whitelist
        }
    };
    let enable_logging = flag(&mut s, sink, "enable_logging", true);
    let ignore_query_string = flag(&mut s, sink, "ignore_query_string", true);
    let sql_injection = flag(&mut s, sink, "enable_sql_injection_protection", true);
    for (key, what) in [
        ("enable_compression", "response compression"),
        ("enable_minification", "minification"),
        ("enable_webp_transformation", "WebP transformation"),
    ] {
        if flag(&mut s, sink, key, true) {
            if let Some(b) = s.bool(sink, key) {
                inactive(sink, &b, what);
            }
        }
    }
    for (key, what) in [
        ("compression_flags", "response compression"),
        ("minification_flags", "minification"),
    ] {
        if let Some(f) = s.string(sink, key) {
            inactive(sink, &f, what);
        }
    }
    if let Some(v) = s.int(sink, "webp_transformation_min_age", 0, I64) {
        inactive(sink, &v, "WebP transformation");
    }
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
    let strict_path_rules = s
        .bool(sink, "strict_path_rules")
        .map_or(strict_default, |b| b.value);
    let max_age_overrides_origin = s
        .bool(sink, "max_age_overrides_origin")
        .is_some_and(|b| b.value);
    let cache_heuristic = cache_heuristic(&mut s, sink).unwrap_or(cache.heuristic);
    let store_set_cookie = s
        .bool(sink, "store_set_cookie")
        .map_or(cache.store_set_cookie, |b| b.value);
    let allow_ips = cidrs(&mut s, sink, "allow_ips").unwrap_or_default();
    let deny_ips = cidrs(&mut s, sink, "deny_ips").unwrap_or_default();
    let rate_limit = rate_limit(&mut s, sink, None);
    let body_limit = s.has("max_body_size").then(|| body_size(&mut s, sink));
    let (cert, tls_ok) = read_rule_tls(&mut s, sink, domain.as_ref(), tls_default);
    ok &= tls_ok;
    let redirect_to_https = s.bool(sink, "redirect_to_https").is_some_and(|b| b.value);
    let hsts = s.int(sink, "hsts_max_age_seconds", 0, I64).map(|age| {
        let mut v = format!("max-age={}", age.value);
        if s.bool(sink, "hsts_include_subdomains")
            .is_some_and(|b| b.value)
        {
            v.push_str("; includeSubDomains");
        }
        if s.bool(sink, "hsts_preload").is_some_and(|b| b.value) {
            v.push_str("; preload");
        }
        v
    });
    if (redirect_to_https || hsts.is_some()) && cert.is_none() {
        let key = if redirect_to_https {
            "redirect_to_https"
        } else {
            "hsts_max_age_seconds"
        };
        s.missing(
            sink,
            key,
            Severity::Warning,
            &format!("`{key}` is set but this rule has no certificate, so HTTPS cannot serve it"),
            "give the rule `tls_cert_file` + `tls_key_file` or `tls = \"internal\"`, or set `lets_encrypt_contact_email`",
        );
    }
    // Without a certificate there is no HTTPS to send clients to: no redirect (warned above).
    let redirect_to_https = redirect_to_https && cert.is_some();
    let tls_name_override = match s.string(sink, "forward_tls_name") {
        Some(n) if valid_tls_name(n.value.trim()) => Some(n.value.trim().to_owned()),
        Some(n) => {
            error(
                sink,
                &n,
                format!("{:?} is not a host name or IP address", n.value),
                "give the name in the origin's certificate, e.g. \"origin.example.com\"",
            );
            ok = false;
            None
        }
        None => None,
    };
    let rule_host = match &domain {
        Some(DomainPattern::Exact(d)) => Some(d.clone()),
        _ => None,
    };
    let tls_name = |origin_host: &str| -> String {
        if let Some(n) = &tls_name_override {
            return n.clone();
        }
        let bare = origin_host.trim_start_matches('[').trim_end_matches(']');
        let bare = match bare.parse::<IpAddr>() {
            Ok(_) => bare,
            // A forward_addr may carry a port.
            Err(_) => bare.rsplit_once(':').map_or(bare, |(h, _)| h),
        };
        if bare.parse::<IpAddr>().is_ok() {
            rule_host.clone().unwrap_or_else(|| bare.to_owned())
        } else {
            bare.to_owned()
        }
    };

    // path rules
    let mut path_rules = Vec::new();
    if let Some(sections) = s.tables(sink, "path_rules") {
        for mut pr in sections {
            let path = pr.string(sink, "path");
            if path.is_none() && !pr.has("path") {
                pr.missing(
                    sink,
                    "path",
                    Severity::Error,
                    "missing `path`",
                    "add `path = \"/static\"`",
                );
            }
            let mt = match pr.string(sink, "match_type") {
                Some(m) => match_type(sink, &m),
                None => {
                    if !pr.has("match_type") {
                        pr.missing(
                            sink,
                            "match_type",
                            Severity::Error,
                            "missing `match_type`",
                            "add `match_type = \"StartsWith\"`",
                        );
                    }
                    None
                }
            };
            let rt = match pr.string(sink, "rule_type") {
                Some(v) => parse_rule_type(sink, &v),
                None => {
                    if !pr.has("rule_type") {
                        lenient(&pr, sink, "rule_type", "\"Whitelist\"");
                        Some(RuleType::Whitelist)
                    } else {
                        None
                    }
                }
            };
            let age = match pr.int(sink, "max_age_seconds", 0, I64) {
                Some(v) => Some(v.value as u64),
                None if !pr.has("max_age_seconds") => {
                    lenient(&pr, sink, "max_age_seconds", "the rule's max_age_seconds");
                    Some(max_age_seconds)
                }
                None => None,
            };
            pr.finish(sink);
            match (path, mt, rt, age) {
                (Some(path), Some(match_type), Some(rule_type), Some(max_age_seconds)) => {
                    path_rules.push(PathRuleConfig {
                        path: path.value,
                        match_type,
                        rule_type,
                        max_age_seconds,
                    })
                }
                _ => ok = false,
            }
        }
    }

    // origins
    let (host, port, port_tls, fwd_error) = read_forward(&mut s, sink);
    ok &= !fwd_error;
    let mut upstreams = Vec::new();
    let mut listed = Vec::new();
    let mut routing_method = RoutingMethod::Priority;
    let rule_span_at = At {
        value: (),
        key: s.path().to_owned(),
        span: s.span(),
    };
    if let Some(list) = s.strings(sink, "upstreams") {
        for u in &list.value {
            let text = u.value.trim();
            let (tls, text) = match text.strip_prefix("https://") {
                Some(rest) => (true, rest),
                None => (false, text.strip_prefix("http://").unwrap_or(text)),
            };
            match Authority::from_str(text) {
                Ok(authority) if authority.port_u16().is_some_and(|p| p > 0) => {
                    listed.push(UpstreamTarget {
                        tls: tls.then(|| authority.clone()),
                        https_only: tls,
                        tls_name: tls_name(authority.host()),
                        authority,
                        weight: 1,
                    })
                }
                _ => {
                    error(
                        sink,
                        u,
                        format!("{:?} is not HOST:PORT", u.value),
                        "write e.g. \"127.0.0.1:3000\", \"origin.internal:8080\" or \"https://origin.internal:443\"",
                    );
                    ok = false;
                }
            }
        }
    }
    if let Some(mut rr) = s.table(sink, "routing_rules") {
        if host.is_some() {
            warn(
                sink,
                &rule_span_at,
                "`routing_rules` is present, so this rule's own forward_* keys are ignored",
                "move the origin into a [[...routing_locations]] entry, or remove routing_rules",
            );
        }
        routing_method = match rr.string(sink, "routing_method") {
            Some(m) => match m.value.as_str() {
                "Priority" => RoutingMethod::Priority,
                "Weighted" => RoutingMethod::Weighted,
                "Performance" => {
                    warn(
                        sink,
                        &m,
                        "`Performance` routing is served as `Priority` in this version",
                        "",
                    );
                    RoutingMethod::Performance
                }
                _ => {
                    error(
                        sink,
                        &m,
                        format!("unknown routing_method {:?}", m.value),
                        "use \"Priority\", \"Weighted\" or \"Performance\"",
                    );
                    ok = false;
                    RoutingMethod::Priority
                }
            },
            None => RoutingMethod::Priority,
        };
        let https_only = rr.bool(sink, "https_only").is_some_and(|b| b.value);
        if let Some(b) = rr.bool(sink, "enable_health_checks") {
            if b.value {
                inactive(sink, &b, "active health checks");
            }
        }
        rr.int(sink, "health_check_interval", 0, U32);
        rr.string(sink, "health_check_path");
        let mut ranked = Vec::new();
        match rr.tables(sink, "routing_locations") {
            Some(locs) => {
                for (i, mut loc) in locs.into_iter().enumerate() {
                    let primary = loc.bool(sink, "primary").is_some_and(|b| b.value);
                    let priority = loc.int(sink, "priority", 0, U16).map(|p| p.value as u32);
                    let (h, p, pt, e) = read_forward(&mut loc, sink);
                    ok &= !e;
                    let at = At {
                        value: (),
                        key: loc.path().to_owned(),
                        span: loc.span(),
                    };
                    match h {
                        Some(h) => {
                            let port = p.map_or(80, |p| p.value as u16);
                            let weight = priority.unwrap_or(1).max(1);
                            let tls = Tls {
                                port: pt,
                                only: https_only,
                                name: tls_name(&h),
                            };
                            if let Some(t) = make_target(sink, &at, &h, port, tls, weight) {
                                ranked.push((!primary, priority.unwrap_or(u32::MAX), i, t));
                            } else {
                                ok = false;
                            }
                        }
                        None if !e => {
                            loc.missing(
                                sink,
                                "forward_ipv4",
                                Severity::Error,
                                "this routing location has no address",
                                "add `forward_ipv4 = \"...\"` (or forward_addr / forward_ipv6)",
                            );
                            ok = false;
                        }
                        None => {}
                    }
                    loc.finish(sink);
                }
            }
            None => {
                if !rr.has("routing_locations") {
                    rr.missing(
                        sink,
                        "routing_locations",
                        Severity::Error,
                        "routing_rules needs at least one [[...routing_locations]]",
                        "add a routing location with forward_ipv4 and forward_port_http",
                    );
                }
                ok = false;
            }
        }
        rr.finish(sink);
        // primary first, then lower priority number, then file order.
        ranked.sort_by_key(|(not_primary, prio, i, _)| (*not_primary, *prio, *i));
        upstreams.extend(ranked.into_iter().map(|(_, _, _, t)| t));
    } else if let Some(h) = &host {
        let p = port.as_ref().map_or(80, |p| p.value as u16);
        let tls = Tls {
            port: port_tls,
            only: false,
            name: tls_name(h),
        };
        match make_target(sink, &rule_span_at, h, p, tls, 1) {
            Some(t) => upstreams.push(t),
            None => ok = false,
        }
    } else if port.is_some() && listed.is_empty() && !fwd_error {
        s.missing(
            sink,
            "forward_ipv4",
            Severity::Error,
            "`forward_port_http` is set but no origin address",
            "add `forward_ipv4 = \"127.0.0.1\"` (or forward_addr / forward_ipv6)",
        );
        ok = false;
    }
    // The `upstreams` list (rampart's key) follows the ARC2-configured origins.
    upstreams.extend(listed);
    if upstreams.is_empty() && ok && !fwd_error {
        s.missing(
            sink,
            "forward_ipv4",
            Severity::Error,
            "this rule has no origin to forward to",
            "add `forward_ipv4 = \"127.0.0.1\"` and `forward_port_http = 8080` (or forward_addr, forward_ipv6, routing_rules, upstreams)",
        );
        ok = false;
    }
    s.finish(sink);

    let domain = domain?;
    if !ok {
        return None;
    }
    Some(RuleConfig {
        domain_text: domain_at.map(|d| d.value).unwrap_or_default(),
        domain,
        max_age_seconds,
        paths,
        rule_type,
        path_rules,
        upstreams,
        routing_method,
        enable_logging,
        ignore_query_string,
        strict_path_rules,
        max_age_overrides_origin,
        cache_heuristic,
        store_set_cookie,
        sql_injection,
        disallowed_user_agents,
        allow_ips,
        deny_ips,
        rate_limit,
        body_limit,
        cert,
        redirect_to_https,
        hsts,
    })
}

/// A rule's certificate source: its own files or `tls`, else the global default. Returns
/// whether the keys were valid.
fn read_rule_tls(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    domain: Option<&DomainPattern>,
    tls_default: Option<&CertSource>,
) -> (Option<CertSource>, bool) {
    let mode_at = s.string(sink, "tls");
    let mut ok = true;
    let mode = match &mode_at {
        Some(m) => {
            let mode = tls_mode(sink, m);
            ok &= mode.is_some();
            mode
        }
        None => None,
    };
    let cert = file_key(s, sink, "tls_cert_file");
    let key = file_key(s, sink, "tls_key_file");
    let source = match (cert, key) {
        (Some(cert), Some(key)) => {
            if let Some(m) = mode_at.as_ref().filter(|_| mode != Some(TlsMode::Off)) {
                warn(
                    sink,
                    m,
                    "this rule has certificate files, so `tls` is ignored",
                    "remove `tls` or the files",
                );
            }
            Some(CertSource::Files { cert, key })
        }
        (Some(_), None) | (None, Some(_)) => {
            let (have, lack) = if s.has("tls_cert_file") {
                ("tls_cert_file", "tls_key_file")
            } else {
                ("tls_key_file", "tls_cert_file")
            };
            s.missing(
                sink,
                lack,
                Severity::Error,
                &format!("`{have}` needs `{lack}` beside it"),
                &format!("add `{lack} = \"...\"` (PEM)"),
            );
            return (None, false);
        }
        (None, None) => match mode {
            Some(TlsMode::Off) => None,
            Some(TlsMode::Internal) => Some(CertSource::Internal),
            Some(TlsMode::Acme) => Some(CertSource::Acme),
            None => tls_default.cloned(),
        },
    };
    // Automatic certificates need a name to put in them.
    let automatic = matches!(source, Some(CertSource::Internal | CertSource::Acme));
    let source = match domain {
        Some(DomainPattern::Any) if automatic => {
            if let Some(m) = &mode_at {
                warn(
                    sink,
                    m,
                    "a catch-all rule (`domain = \"*\"`) cannot get an automatic certificate",
                    "give it `tls_cert_file` + `tls_key_file`",
                );
            }
            None
        }
        Some(DomainPattern::Wildcard(_)) if source == Some(CertSource::Acme) => {
            s.missing(
                sink,
                "tls",
                Severity::Warning,
                "ACME cannot validate a wildcard name with http-01 or tls-alpn-01; this rule gets no certificate",
                "give it `tls_cert_file` + `tls_key_file`, or `tls = \"internal\"`",
            );
            None
        }
        _ => source,
    };
    (source, ok)
}

/// A list of IP networks; every bad entry is reported.
fn cidrs(s: &mut Section<'_>, sink: &mut Sink<'_>, key: &'static str) -> Option<Vec<Cidr>> {
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
    Some(out)
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

/// ARC2-COMPAT §9.5: the default request body limit.
pub const DEFAULT_BODY_LIMIT: u64 = 2 << 20;

fn read_screen(s: &mut Section<'_>, sink: &mut Sink<'_>) -> ScreenConfig {
    // ARC2 defaults rate limiting to on when the key is omitted (§2.1, production semantics).
    let on = s.bool(sink, "add_rate_limiting").is_none_or(|b| b.value);
    let default = RateLimit {
        per_second: 100,
        burst: 200,
    };
    let configured = rate_limit(s, sink, Some(default));
    let rate_limit = on.then_some(configured).flatten();
    let rate_limit_exempt = cidrs(s, sink, "rate_limit_exempt").unwrap_or_else(|| {
        ["127.0.0.0/8", "::1"]
            .iter()
            .filter_map(|c| Cidr::parse(c))
            .collect()
    });
    let rate_limit_max_clients = s
        .int(sink, "rate_limit_max_clients", 1024, 100_000_000)
        .map_or(100_000, |v| v.value as usize);
    let trusted_proxies = cidrs(s, sink, "trusted_proxies").unwrap_or_default();
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
        rate_limit_exempt,
        rate_limit_max_clients,
        trusted_proxies,
        body_limit,
    }
}

/// A per-rule boolean ARC2 requires; missing → `false` with a warning (ARC2-COMPAT §3 leniency).
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

fn lenient(s: &Section<'_>, sink: &mut Sink<'_>, key: &str, default: &str) {
    s.missing(
        sink,
        key,
        Severity::Warning,
        &format!("missing (ARC2 requires it); using {default}"),
        &format!("add `{key}` to this section"),
    );
}
