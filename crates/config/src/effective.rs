//! `rampart check --print`: the file as rampart reads it. Every key of every section it has, with
//! the value written or the default in effect, each marked as ARC2's or rampart's (NGINX's
//! `-T`, Caddy's `adapt`).
//!
//! The defaults are listed once, in [`KEYS`]; the tests prove each one is what the reader
//! really uses (a file with `key = default` validates to the same [`Config`] as a file without
//! the key), that every key the reader knows is listed, and that the printed file validates to
//! the same configuration as the original.

use toml_edit::{Item, TableLike};

/// Whose key it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    Arc2,
    Rampart,
}

/// The value a key has when the file does not set it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fallback {
    /// A TOML value.
    Value(&'static str),
    /// The value of the key of the same name one level up (a rule's `cache_heuristic`, a path
    /// rule's `max_age_seconds`).
    Inherited,
    /// Computed when the file is read (said in words).
    Computed(&'static str),
    /// No value: the feature is off, or another key decides (said in words).
    Unset(&'static str),
}

use Fallback::*;
use Owner::*;

/// Every key rampart reads: its section kind (`""` for the top level), name, owner and default.
/// A data table, one line per key, so it is as long as the file format is wide (the file's length
/// is this table; the code is the last 200 lines).
pub(crate) const KEYS: &[(&str, &str, Owner, Fallback)] = &[
    // Listeners
    ("", "listening_address", Arc2, Value("\"0.0.0.0\"")),
    ("", "listening_port_http", Arc2, Value("80")),
    ("", "listening_port_https", Arc2, Value("443")),
    (
        "",
        "listen",
        Rampart,
        Unset("listening_address and listening_port_http apply"),
    ),
    (
        "",
        "listen_https",
        Rampart,
        Unset("listening_address and listening_port_https apply"),
    ),
    ("", "proxy_protocol", Rampart, Value("false")),
    (
        "",
        "proxy_protocol_from",
        Rampart,
        Value("[\"127.0.0.0/8\", \"::1/128\"]"),
    ),
    // HTTPS and certificates
    (
        "",
        "tls",
        Rampart,
        Unset("a rule without certificate files has none"),
    ),
    ("", "tls_min_version", Rampart, Value("\"TLS_1_2\"")),
    (
        "",
        "tls_default_domain",
        Rampart,
        Unset("a handshake without a known name fails"),
    ),
    ("", "tls_reload_interval_seconds", Rampart, Value("5")),
    (
        "",
        "state_dir",
        Rampart,
        Computed(
            "$STATE_DIRECTORY, else /var/lib/rampart as root, else under $XDG_DATA_HOME or $HOME",
        ),
    ),
    ("", "lets_encrypt_contact_email", Arc2, Unset("no ACME")),
    (
        "",
        "acme_directory_url",
        Rampart,
        Value("\"https://acme-v02.api.letsencrypt.org/directory\""),
    ),
    (
        "",
        "acme_ca_file",
        Rampart,
        Unset("the system's trust roots"),
    ),
    (
        "",
        "acme_challenges",
        Rampart,
        Value("[\"http-01\", \"tls-alpn-01\"]"),
    ),
    ("", "http3", Rampart, Value("false")),
    ("", "http3_max_concurrent_streams", Rampart, Value("128")),
    ("", "http3_alt_svc_max_age_seconds", Rampart, Value("86400")),
    // Process and logging
    ("", "workers", Rampart, Computed("the number of CPUs")),
    ("", "worker_runtime", Rampart, Value("\"per-core\"")),
    ("", "shutdown_timeout_seconds", Rampart, Value("30")),
    ("", "watch_config", Rampart, Value("false")),
    ("", "logging_level", Arc2, Value("\"error\"")),
    ("", "add_logging", Arc2, Value("true")),
    ("", "backtracing", Arc2, Value("false")),
    ("", "access_log_path", Rampart, Unset("stdout")),
    ("", "access_log_format", Rampart, Value("\"kv\"")),
    // Client connections
    ("", "max_connections", Rampart, Value("100000")),
    ("", "max_connections_per_ip", Rampart, Value("0")),
    ("", "client_header_timeout_seconds", Rampart, Value("30")),
    ("", "client_body_timeout_seconds", Rampart, Value("60")),
    (
        "",
        "client_body_total_timeout_seconds",
        Rampart,
        Value("300"),
    ),
    ("", "client_send_timeout_seconds", Rampart, Value("60")),
    ("", "client_keepalive_timeout_seconds", Rampart, Value("60")),
    ("", "client_idle_park_seconds", Rampart, Value("5")),
    ("", "websocket_idle_timeout_seconds", Rampart, Value("300")),
    ("", "max_request_head_size", Rampart, Value("\"64KiB\"")),
    ("", "max_request_headers", Rampart, Value("100")),
    ("", "h2_max_concurrent_streams", Rampart, Value("256")),
    ("", "h2_max_header_list_size", Rampart, Value("\"64KiB\"")),
    (
        "",
        "max_backlog",
        Arc2,
        Computed("4096, or the kernel's net.core.somaxconn when lower"),
    ),
    ("", "nodelay", Arc2, Value("true")),
    ("", "recv_buffer_size", Arc2, Value("0")),
    ("", "send_buffer_size", Arc2, Value("0")),
    ("", "ip_ttl", Arc2, Value("0")),
    ("", "tcp_keep_alive_seconds", Arc2, Value("0")),
    ("", "nonblocking", Arc2, Value("true")),
    ("", "enable_streaming", Arc2, Value("true")),
    // Origin connections
    ("", "proxy_timeout", Arc2, Value("45")),
    ("", "proxy_connect_timeout_seconds", Rampart, Value("5")),
    ("", "proxy_keepalive_sec", Arc2, Value("120")),
    ("", "proxy_max_idle_per_origin", Rampart, Value("256")),
    ("", "proxy_nodelay", Arc2, Value("true")),
    ("", "proxy_min_tls_version", Arc2, Value("\"TLS_1_3\"")),
    (
        "",
        "proxy_ca_file",
        Rampart,
        Unset("the system's trust roots"),
    ),
    // Rules, transformations
    ("", "strict_path_rules", Rampart, Value("false")),
    (
        "",
        "error_pages_dir",
        Rampart,
        Computed("the configuration file's directory"),
    ),
    ("", "enable_compression", Arc2, Value("false")),
    (
        "",
        "compression_flags",
        Arc2,
        Unset("br, zstd and gzip at their default levels"),
    ),
    (
        "",
        "compression_types",
        Rampart,
        Unset("the built-in list: text, JSON, XML, JavaScript, SVG, ..."),
    ),
    (
        "",
        "compression_min_length",
        Rampart,
        Computed("min_length in compression_flags, else 256"),
    ),
    // Cache
    ("", "add_caching", Arc2, Value("true")),
    ("", "cache_memory", Rampart, Value("\"256MiB\"")),
    ("", "cache_max_object", Rampart, Value("\"8MiB\"")),
    ("", "cache_disk", Rampart, Value("false")),
    ("", "cache_disk_size", Rampart, Value("\"1GiB\"")),
    ("", "cache_disk_min_uses", Rampart, Value("2")),
    ("", "cache_grace_seconds", Rampart, Value("10")),
    ("", "cache_heuristic", Rampart, Value("\"max_age\"")),
    ("", "store_set_cookie", Rampart, Value("false")),
    ("", "cache_by_scheme", Rampart, Value("true")),
    ("", "cache_statuses", Rampart, Value("\"arc2\"")),
    (
        "",
        "stale_while_revalidate_seconds",
        Rampart,
        Unset("only the origin's stale-while-revalidate"),
    ),
    (
        "",
        "stale_if_error_seconds",
        Rampart,
        Unset("only the origin's stale-if-error"),
    ),
    (
        "",
        "cache_tag_headers",
        Rampart,
        Value("[\"Surrogate-Key\", \"Cache-Tag\", \"xkey\"]"),
    ),
    // Management API
    ("", "api_key", Arc2, Unset("no management API")),
    ("", "purge_allow", Rampart, Value("[]")),
    ("", "metrics_allow", Rampart, Value("[]")),
    // Screening
    ("", "add_rate_limiting", Arc2, Value("true")),
    ("", "rate_limit_per_second", Rampart, Value("100")),
    (
        "",
        "rate_limit_burst",
        Rampart,
        Computed("twice rate_limit_per_second (200)"),
    ),
    (
        "",
        "rate_limit_exempt",
        Rampart,
        Value("[\"127.0.0.0/8\", \"::1\"]"),
    ),
    ("", "rate_limit_status", Rampart, Value("429")),
    ("", "rate_limit_max_clients", Rampart, Value("100000")),
    ("", "trusted_proxies", Rampart, Value("[]")),
    ("", "disable_default_body_limit", Arc2, Value("false")),
    (
        "",
        "max_body_size",
        Rampart,
        Computed("\"2MiB\", or no limit with disable_default_body_limit"),
    ),
    ("", "add_sql_injection_protection", Arc2, Value("false")),
    // Redis
    (
        "",
        "redis_url",
        Rampart,
        Unset("no Redis: every instance keeps its own state"),
    ),
    ("", "redis_cluster", Rampart, Unset("no Redis Cluster")),
    ("", "redis_key_prefix", Rampart, Value("\"rampart:\"")),
    ("", "redis_timeout_ms", Rampart, Value("5")),
    ("", "redis_rate_limits", Rampart, Value("true")),
    ("", "redis_purge", Rampart, Value("true")),
    (
        "",
        "redis_certificates",
        Rampart,
        Computed("true when a rule uses ACME"),
    ),
    ("", "redis_cache", Rampart, Value("false")),
    ("", "redis_cache_max_object", Rampart, Value("\"1MiB\"")),
    ("", "redis_encryption_key", Rampart, Unset("none")),
    ("", "redis_encryption_key_file", Rampart, Unset("none")),
    // OpenTelemetry
    (
        "",
        "tracing_endpoint",
        Rampart,
        Unset("no tracing: traceparent passes through untouched"),
    ),
    ("", "tracing_protocol", Rampart, Value("\"http/protobuf\"")),
    ("", "tracing_headers", Rampart, Value("{}")),
    ("", "tracing_service_name", Rampart, Value("\"rampart\"")),
    ("", "tracing_resource", Rampart, Value("{}")),
    (
        "",
        "tracing_sampler",
        Rampart,
        Value("\"parentbased_always_on\""),
    ),
    ("", "tracing_sample_ratio", Rampart, Value("1.0")),
    ("", "tracing_queue_size", Rampart, Value("2048")),
    ("", "tracing_batch_size", Rampart, Value("512")),
    ("", "tracing_export_interval_ms", Rampart, Value("5000")),
    ("", "tracing_timeout_ms", Rampart, Value("10000")),
    ("", "trust_trace_context", Rampart, Value("true")),
    ("", "trust_trace_context_from", Rampart, Value("[]")),
    // A cache sharded over several instances
    (
        "",
        "cache_peers",
        Rampart,
        Unset("no peers: every instance caches on its own"),
    ),
    (
        "",
        "cache_peer_self",
        Rampart,
        Computed("the entry of cache_peers the HTTP listener is"),
    ),
    ("", "cache_peers_from_redis", Rampart, Value("false")),
    ("", "cache_peer_key", Rampart, Unset("none")),
    ("", "cache_peer_key_file", Rampart, Unset("none")),
    ("", "cache_peer_local_ttl_seconds", Rampart, Value("0")),
    ("", "cache_peer_timeout_ms", Rampart, Value("500")),
    (
        "",
        "azure_table_storage_key",
        Arc2,
        Unset("no log export (not yet active)"),
    ),
    (
        "",
        "proxy_rules",
        Arc2,
        Unset("no rule: every request is answered 404"),
    ),
    // [[proxy_rules]]
    ("proxy_rules", "domain", Arc2, Unset("required")),
    ("proxy_rules", "max_age_seconds", Arc2, Value("0")),
    ("proxy_rules", "paths", Arc2, Value("[\"/\"]")),
    ("proxy_rules", "rule_type", Arc2, Value("\"Whitelist\"")),
    ("proxy_rules", "strict_path_rules", Rampart, Inherited),
    ("proxy_rules", "forward_addr", Arc2, Unset("none")),
    ("proxy_rules", "forward_ipv4", Arc2, Unset("none")),
    ("proxy_rules", "forward_ipv6", Arc2, Unset("none")),
    ("proxy_rules", "forward_port_http", Arc2, Value("80")),
    (
        "proxy_rules",
        "forward_port_https",
        Arc2,
        Unset("requests over HTTPS use forward_port_http"),
    ),
    (
        "proxy_rules",
        "forward_tls_name",
        Rampart,
        Computed("the origin's host name, or the rule's domain for an IP address"),
    ),
    ("proxy_rules", "upstreams", Rampart, Value("[]")),
    (
        "proxy_rules",
        "origin_protocol",
        Rampart,
        Value("\"http1\""),
    ),
    (
        "proxy_rules",
        "send_proxy_protocol",
        Rampart,
        Unset("no PROXY header to origins"),
    ),
    ("proxy_rules", "allow_upgrades", Rampart, Value("true")),
    (
        "proxy_rules",
        "websocket_idle_timeout_seconds",
        Rampart,
        Computed("the global websocket_idle_timeout_seconds"),
    ),
    ("proxy_rules", "enable_logging", Arc2, Value("false")),
    ("proxy_rules", "ignore_query_string", Arc2, Value("false")),
    (
        "proxy_rules",
        "max_age_overrides_origin",
        Rampart,
        Value("false"),
    ),
    ("proxy_rules", "cache_heuristic", Rampart, Inherited),
    ("proxy_rules", "store_set_cookie", Rampart, Inherited),
    ("proxy_rules", "cache_by_scheme", Rampart, Inherited),
    ("proxy_rules", "cache_disk", Rampart, Value("true")),
    ("proxy_rules", "expires", Rampart, Unset("off")),
    ("proxy_rules", "cache_statuses", Rampart, Inherited),
    ("proxy_rules", "max_age_by_status", Rampart, Value("{}")),
    (
        "proxy_rules",
        "stale_while_revalidate_seconds",
        Rampart,
        Inherited,
    ),
    ("proxy_rules", "stale_if_error_seconds", Rampart, Inherited),
    (
        "proxy_rules",
        "enable_sql_injection_protection",
        Arc2,
        Value("false"),
    ),
    ("proxy_rules", "allow_ips", Rampart, Value("[]")),
    ("proxy_rules", "deny_ips", Rampart, Value("[]")),
    (
        "proxy_rules",
        "rate_limit_per_second",
        Rampart,
        Unset("no limiter of its own"),
    ),
    (
        "proxy_rules",
        "rate_limit_burst",
        Rampart,
        Computed("twice rate_limit_per_second"),
    ),
    ("proxy_rules", "rate_limit_status", Rampart, Inherited),
    ("proxy_rules", "max_body_size", Rampart, Inherited),
    ("proxy_rules", "enable_compression", Arc2, Value("false")),
    ("proxy_rules", "compression_flags", Arc2, Inherited),
    ("proxy_rules", "compression_types", Rampart, Inherited),
    ("proxy_rules", "compression_min_length", Rampart, Inherited),
    ("proxy_rules", "enable_minification", Arc2, Value("false")),
    (
        "proxy_rules",
        "minification_flags",
        Arc2,
        Value("\"html,css,js\""),
    ),
    (
        "proxy_rules",
        "enable_webp_transformation",
        Arc2,
        Value("false"),
    ),
    (
        "proxy_rules",
        "webp_transformation_min_age",
        Arc2,
        Value("21600"),
    ),
    ("proxy_rules", "tls", Rampart, Inherited),
    ("proxy_rules", "tls_cert_file", Rampart, Unset("none")),
    ("proxy_rules", "tls_key_file", Rampart, Unset("none")),
    ("proxy_rules", "redirect_to_https", Rampart, Value("false")),
    (
        "proxy_rules",
        "redirect_to_https_status",
        Rampart,
        Value("308"),
    ),
    (
        "proxy_rules",
        "hsts_max_age_seconds",
        Rampart,
        Unset("no Strict-Transport-Security header"),
    ),
    (
        "proxy_rules",
        "hsts_include_subdomains",
        Rampart,
        Value("false"),
    ),
    ("proxy_rules", "hsts_preload", Rampart, Value("false")),
    ("proxy_rules", "path_rules", Arc2, Unset("none")),
    ("proxy_rules", "disallowed_user_agents", Arc2, Unset("none")),
    ("proxy_rules", "routing_rules", Arc2, Unset("none")),
    (
        "proxy_rules",
        "request_headers",
        Rampart,
        Unset("the request's fields go as rampart sets them"),
    ),
    (
        "proxy_rules",
        "response_headers",
        Rampart,
        Unset("the response's fields go as they are"),
    ),
    ("proxy_rules", "redirects", Rampart, Unset("none")),
    ("proxy_rules", "rewrites", Rampart, Unset("none")),
    (
        "proxy_rules",
        "error_pages",
        Rampart,
        Unset("rampart's short plain-text answers"),
    ),
    // [proxy_rules.request_headers], [proxy_rules.response_headers] (and in a path rule)
    (
        "proxy_rules.request_headers",
        "remove",
        Rampart,
        Value("[]"),
    ),
    ("proxy_rules.request_headers", "set", Rampart, Value("{}")),
    ("proxy_rules.request_headers", "add", Rampart, Value("{}")),
    (
        "proxy_rules.response_headers",
        "remove",
        Rampart,
        Value("[]"),
    ),
    ("proxy_rules.response_headers", "set", Rampart, Value("{}")),
    ("proxy_rules.response_headers", "add", Rampart, Value("{}")),
    (
        "proxy_rules.response_headers",
        "always",
        Rampart,
        Value("false"),
    ),
    (
        "proxy_rules.path_rules",
        "max_age_by_status",
        Rampart,
        Unset("the rule's applies"),
    ),
    (
        "proxy_rules.path_rules",
        "request_headers",
        Rampart,
        Unset("the rule's apply"),
    ),
    (
        "proxy_rules.path_rules",
        "response_headers",
        Rampart,
        Unset("the rule's apply"),
    ),
    (
        "proxy_rules.path_rules.request_headers",
        "remove",
        Rampart,
        Value("[]"),
    ),
    (
        "proxy_rules.path_rules.request_headers",
        "set",
        Rampart,
        Value("{}"),
    ),
    (
        "proxy_rules.path_rules.request_headers",
        "add",
        Rampart,
        Value("{}"),
    ),
    (
        "proxy_rules.path_rules.response_headers",
        "remove",
        Rampart,
        Value("[]"),
    ),
    (
        "proxy_rules.path_rules.response_headers",
        "set",
        Rampart,
        Value("{}"),
    ),
    (
        "proxy_rules.path_rules.response_headers",
        "add",
        Rampart,
        Value("{}"),
    ),
    (
        "proxy_rules.path_rules.response_headers",
        "always",
        Rampart,
        Value("false"),
    ),
    // [[proxy_rules.redirects]], [[proxy_rules.rewrites]]
    ("proxy_rules.redirects", "from", Rampart, Unset("required")),
    ("proxy_rules.redirects", "to", Rampart, Unset("required")),
    ("proxy_rules.redirects", "status", Rampart, Value("301")),
    ("proxy_rules.redirects", "scheme", Rampart, Unset("both")),
    (
        "proxy_rules.redirects",
        "keep_query",
        Rampart,
        Value("true"),
    ),
    ("proxy_rules.rewrites", "from", Rampart, Unset("required")),
    ("proxy_rules.rewrites", "to", Rampart, Unset("required")),
    // [[proxy_rules.path_rules]]
    ("proxy_rules.path_rules", "path", Arc2, Unset("required")),
    (
        "proxy_rules.path_rules",
        "match_type",
        Arc2,
        Unset("required"),
    ),
    (
        "proxy_rules.path_rules",
        "rule_type",
        Arc2,
        Value("\"Whitelist\""),
    ),
    ("proxy_rules.path_rules", "max_age_seconds", Arc2, Inherited),
    ("proxy_rules.path_rules", "expires", Rampart, Inherited),
    ("proxy_rules.path_rules", "deny", Rampart, Value("false")),
    (
        "proxy_rules.path_rules",
        "ignore_case",
        Rampart,
        Value("false"),
    ),
    // [[proxy_rules.disallowed_user_agents]]
    (
        "proxy_rules.disallowed_user_agents",
        "user_agent",
        Arc2,
        Unset("required"),
    ),
    (
        "proxy_rules.disallowed_user_agents",
        "match_type",
        Arc2,
        Unset("required"),
    ),
    // [proxy_rules.routing_rules]
    (
        "proxy_rules.routing_rules",
        "routing_method",
        Arc2,
        Value("\"Priority\""),
    ),
    (
        "proxy_rules.routing_rules",
        "https_only",
        Arc2,
        Value("false"),
    ),
    (
        "proxy_rules.routing_rules",
        "enable_health_checks",
        Arc2,
        Value("false"),
    ),
    (
        "proxy_rules.routing_rules",
        "health_check_interval",
        Arc2,
        Value("10"),
    ),
    (
        "proxy_rules.routing_rules",
        "health_check_path",
        Arc2,
        Value("\"/\""),
    ),
    (
        "proxy_rules.routing_rules",
        "routing_locations",
        Arc2,
        Unset("required"),
    ),
    // [[proxy_rules.routing_rules.routing_locations]]
    (
        "proxy_rules.routing_rules.routing_locations",
        "primary",
        Arc2,
        Value("false"),
    ),
    (
        "proxy_rules.routing_rules.routing_locations",
        "priority",
        Arc2,
        Unset("ranks last, weight 1"),
    ),
    (
        "proxy_rules.routing_rules.routing_locations",
        "forward_addr",
        Arc2,
        Unset("none"),
    ),
    (
        "proxy_rules.routing_rules.routing_locations",
        "forward_ipv4",
        Arc2,
        Unset("none"),
    ),
    (
        "proxy_rules.routing_rules.routing_locations",
        "forward_ipv6",
        Arc2,
        Unset("none"),
    ),
    (
        "proxy_rules.routing_rules.routing_locations",
        "forward_port_http",
        Arc2,
        Value("80"),
    ),
    (
        "proxy_rules.routing_rules.routing_locations",
        "forward_port_https",
        Arc2,
        Unset("requests over HTTPS use forward_port_http"),
    ),
    (
        "proxy_rules.routing_rules.routing_locations",
        "origin_protocol",
        Rampart,
        Inherited,
    ),
];

/// The nested sections of each kind, in the order they are printed, and whether each is an
/// array of tables.
const NESTED: &[(&str, &str, bool)] = &[
    ("", "proxy_rules", true),
    ("proxy_rules", "path_rules", true),
    ("proxy_rules.path_rules", "request_headers", false),
    ("proxy_rules.path_rules", "response_headers", false),
    ("proxy_rules", "disallowed_user_agents", true),
    ("proxy_rules", "routing_rules", false),
    ("proxy_rules.routing_rules", "routing_locations", true),
    ("proxy_rules", "request_headers", false),
    ("proxy_rules", "response_headers", false),
    ("proxy_rules", "redirects", true),
    ("proxy_rules", "rewrites", true),
    ("proxy_rules", "error_pages", false),
];

/// Sections whose keys are names the file chooses (statuses): printed as written.
const OPEN: &[&str] = &["proxy_rules.error_pages"];

/// The file `src` as rampart reads it (`src` must be valid TOML; `cpus` as given to
/// [`crate::validate`]).
pub fn effective(src: &str, cpus: usize) -> String {
    let Ok(doc) = toml_edit::Document::parse(src) else {
        return String::new();
    };
    let mut out = String::from(
        "# The effective configuration: every key rampart reads, with the value in effect.\n\
         # ARC2: a key of ARC2 Proxy's format. rampart: rampart's own key. The lines the file\n\
         # sets are active; every other key is a comment with its default.\n",
    );
    section(&mut out, doc.as_table(), "", &[], cpus);
    out
}

/// Prints one section's keys, then its nested sections. `outer` holds the sections around it,
/// innermost last, for inherited defaults.
fn section(out: &mut String, t: &dyn TableLike, kind: &str, outer: &[&dyn TableLike], cpus: usize) {
    if OPEN.contains(&kind) {
        for (k, item) in t.iter() {
            if let Some(v) = value_of(item) {
                out.push_str(&format!("{} = {v}  # rampart\n", toml_edit::Key::new(k)));
            }
        }
        return;
    }
    let lines: Vec<(String, String)> = KEYS
        .iter()
        .filter(|(k, name, ..)| {
            *k == kind && !NESTED.iter().any(|(p, n, _)| p == &kind && n == name)
        })
        .map(|&(_, name, owner, default)| line(t, kind, name, owner, default, outer, cpus))
        .collect();
    let width = lines
        .iter()
        .map(|(l, _)| l.len())
        .max()
        .unwrap_or(0)
        .min(60);
    for (l, c) in lines {
        out.push_str(&format!("{l:width$}  # {c}\n"));
    }
    // What the file has that rampart does not read.
    for (k, _) in t.iter() {
        let known = KEYS.iter().any(|(kd, n, ..)| *kd == kind && *n == k);
        if !known {
            out.push_str(&format!(
                "# {k}: not a key of this section, ignored (see `rampart check`)\n"
            ));
        }
    }
    let mut inner = outer.to_vec();
    inner.push(t);
    for &(parent, name, array) in NESTED.iter().filter(|(p, ..)| *p == kind) {
        let sub_kind = if kind.is_empty() {
            name.to_owned()
        } else {
            format!("{kind}.{name}")
        };
        let Some(item) = t.get(name) else { continue };
        let _ = parent;
        let entries: Vec<&dyn TableLike> = match item {
            Item::ArrayOfTables(a) => a.iter().map(|t| t as &dyn TableLike).collect(),
            Item::Value(toml_edit::Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_inline_table().map(|t| t as &dyn TableLike))
                .collect(),
            other => other.as_table_like().into_iter().collect(),
        };
        for e in entries {
            let header = if array {
                format!("[[{sub_kind}]]")
            } else {
                format!("[{sub_kind}]")
            };
            out.push_str(&format!("\n{header}\n"));
            section(out, e, &sub_kind, &inner, cpus);
        }
    }
}

/// One key's line and its comment.
fn line(
    t: &dyn TableLike,
    kind: &str,
    name: &str,
    owner: Owner,
    default: Fallback,
    outer: &[&dyn TableLike],
    cpus: usize,
) -> (String, String) {
    let who = match owner {
        Arc2 => "ARC2",
        Rampart => "rampart",
    };
    if let Some(v) = t.get(name).and_then(value_of) {
        return (format!("{name} = {v}"), who.to_owned());
    }
    match default {
        Value(v) => (format!("# {name} = {v}"), format!("{who}, default")),
        Computed(why) if name == "workers" => (
            format!("# {name} = {cpus}"),
            format!("{who}, default: {why}"),
        ),
        Computed(why) => (format!("# {name}"), format!("{who}, default: {why}")),
        Unset(why) => (format!("# {name}"), format!("{who}, not set: {why}")),
        Inherited => {
            // The same key one level up, written or by default.
            let parent_kind = kind.rfind('.').map_or("", |i| &kind[..i]);
            let parent = KEYS
                .iter()
                .find(|(k, n, ..)| *k == parent_kind && *n == name)
                .copied();
            match (outer.split_last(), parent) {
                (Some((up, rest)), Some((_, _, p_owner, p_default))) => {
                    let (l, c) = line(*up, parent_kind, name, p_owner, p_default, rest, cpus);
                    let l = if l.starts_with('#') {
                        l
                    } else {
                        format!("# {l}")
                    };
                    let from = if parent_kind.is_empty() {
                        "the global one".to_owned()
                    } else {
                        format!("the one of [[{parent_kind}]]")
                    };
                    let c = match c.split_once(", ") {
                        Some((_, rest)) => format!("{who}, default: {from} ({rest})"),
                        None => format!("{who}, default: {from}"),
                    };
                    (l, c)
                }
                _ => (
                    format!("# {name}"),
                    format!("{who}, default: the one of the section above"),
                ),
            }
        }
    }
}

/// A key's value as one line: a value as written, a `[section]` as an inline table.
fn value_of(item: &Item) -> Option<toml_edit::Value> {
    let mut v = match item {
        Item::Value(v) => v.clone(),
        Item::Table(t) => toml_edit::Value::InlineTable(t.clone().into_inline_table()),
        _ => return None,
    };
    v.decor_mut().clear();
    Some(v)
}
