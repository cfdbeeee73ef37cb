//! The configuration's tests, one module per part of the file; the files and helpers they
//! share are here.

use super::*;

mod arc2;
mod cache;
mod defaults;
mod diagnostics;
mod http;
mod listeners;
mod origins;
mod rules;
mod screening;
mod tls;
mod tracing;
mod transform;

const ARC2_BENCH: &str = r#"listening_address = "0.0.0.0"
listening_port_http = 80
listening_port_https = 443
logging_level = "error"
add_caching = true
add_rate_limiting = false
add_logging = false
disable_default_body_limit = false
add_sql_injection_protection = false
[[proxy_rules]]
domain = "localhost"
max_age_seconds = 3600
paths = ["/"]
forward_ipv4 = "127.0.0.1"
forward_port_http = 81
rule_type = "Whitelist"
ignore_query_string = false
enable_logging = false
enable_sql_injection_protection = false
"#;

fn errors(v: &Validated) -> Vec<String> {
    v.errors().map(|d| d.to_string()).collect()
}

const RULE: &str = "max_age_seconds = 0\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 8080\n";

/// The rule of `ARC2_BENCH` with `rule` lines added, under `global` lines.
fn with(global: &str, rule: &str) -> Validated {
    validate(&format!("{global}\n{ARC2_BENCH}{rule}\n"), 1)
}

fn warnings(v: &Validated) -> Vec<String> {
    v.diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .map(|d| d.to_string())
        .collect()
}

/// Every diagnostic as `line: severity message / fix`, for tests that read the whole output.
fn shown(v: &Validated) -> String {
    v.diagnostics.iter().map(|d| format!("{}\n", d)).collect()
}

const RULE_KEYS: &str = r#"max_age_seconds = 60
paths = ["/"]
rule_type = "Whitelist"
forward_ipv4 = "127.0.0.1"
forward_port_http = 8080
enable_logging = true
ignore_query_string = false
enable_sql_injection_protection = true
enable_compression = false
enable_minification = false
enable_webp_transformation = false
"#;

/// A file with one section of every kind, for tests that add a key to each.
const EVERY_SECTION: &str = r#"listening_port_http = 8080
[[proxy_rules]]
domain = "a.test"
max_age_seconds = 60
forward_ipv4 = "127.0.0.1"
forward_port_http = 9000
enable_logging = true
ignore_query_string = false
enable_sql_injection_protection = false
enable_compression = false
enable_minification = false
enable_webp_transformation = false
rule_type = "Whitelist"
paths = ["/"]
[[proxy_rules.path_rules]]
path = "/static"
match_type = "StartsWith"
rule_type = "Whitelist"
max_age_seconds = 600
[[proxy_rules.disallowed_user_agents]]
user_agent = "BadBot"
match_type = "Contains"
[[proxy_rules]]
domain = "b.test"
max_age_seconds = 60
enable_logging = true
ignore_query_string = false
enable_sql_injection_protection = false
enable_compression = false
enable_minification = false
enable_webp_transformation = false
rule_type = "Whitelist"
paths = ["/"]
[proxy_rules.routing_rules]
routing_method = "Weighted"
[[proxy_rules.routing_rules.routing_locations]]
forward_ipv4 = "127.0.0.1"
forward_port_http = 9001
"#;

/// `src` with `line` written as the first line of the first section of `kind`.
fn add_to(src: &str, kind: &str, line: &str) -> String {
    if kind.is_empty() {
        return format!("{line}\n{src}");
    }
    let header = match kind {
        "proxy_rules.routing_rules" => "[proxy_rules.routing_rules]".to_owned(),
        k => format!("[[{k}]]"),
    };
    let at = src
        .find(&format!("{header}\n"))
        .expect("the section is in the file")
        + header.len()
        + 1;
    format!("{}{line}\n{}", &src[..at], &src[at..])
}

/// The `KEY = "…"` a hint gives as the fix, as written in the hint.
fn pasted_fix(hint: &str, key: &str) -> String {
    let start = hint
        .find(&format!("`{key} = "))
        .unwrap_or_else(|| panic!("no `{key} = …` in the hint {hint:?}"));
    let rest = &hint[start + 1..];
    rest[..rest.find('`').expect("closing backtick")].to_owned()
}

/// A fresh directory for files a test reads.
fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rampart-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// `validate_file` on another thread: a file that blocks its reader fails the test instead of
/// hanging it.
fn validate_file_in_time(src: &str, path: &std::path::Path) -> Validated {
    let (tx, rx) = std::sync::mpsc::channel();
    let (src, path) = (src.to_owned(), path.to_owned());
    std::thread::spawn(move || {
        let _ = tx.send(validate_file(&src, 1, &path));
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("validation finished (a page file blocked it)")
}
