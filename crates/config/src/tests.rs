use super::*;

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

#[test]
fn arc2_benchmark_config_is_accepted() {
    let v = validate(ARC2_BENCH, 4);
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    let c = v.config.expect("config");
    assert_eq!(c.listen_http, vec!["0.0.0.0:80".parse().expect("addr")]);
    assert_eq!(c.workers, 4);
    assert!(!c.add_logging);
    assert_eq!(c.rules.len(), 1);
    let r = &c.rules[0];
    assert_eq!(r.domain, DomainPattern::Exact("localhost".into()));
    assert_eq!(r.upstreams[0].authority.as_str(), "127.0.0.1:81");
    assert_eq!(r.max_age_seconds, 3600);
    // Features of later versions are reported, not silently ignored.
    let inactive: Vec<_> = v
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Inactive)
        .map(|d| d.key.as_str())
        .collect();
    assert!(
        !inactive.contains(&"add_caching"),
        "caching is active: {inactive:?}"
    );
    // HTTPS is implemented, but this file gives no rule a certificate: the listener is off and
    // the file says so.
    assert!(c.tls.listen_https.is_empty());
    assert!(v.diagnostics.iter().any(|d| d.key == "listening_port_https"
        && d.severity == Severity::Warning
        && d.message.contains("HTTPS listener is off")));
    // The missing compression/minification/webp booleans are tolerated, said in one note.
    let notes: Vec<_> = v
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Note)
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].key, "proxy_rules[0]");
    assert!(
        notes[0].message.contains("enable_compression = false, enable_minification = false, enable_webp_transformation = false"),
        "{notes:?}"
    );
    // They do not fail --strict: nothing is wrong with leaving them to their defaults. (The
    // HTTPS port without a certificate is this file's one warning.)
    let strict = validate(ARC2_BENCH, 4).strict();
    assert_eq!(errors(&strict).len(), 1, "{:?}", errors(&strict));
    assert!(errors(&strict)[0].contains("listening_port_https"));
}

#[test]
fn every_error_is_listed_with_position() {
    let src = r#"listening_address = "localhost"
logging_level = "loud"
proxy_timeout = 70000
proxy_min_tls_version = "TLS_1_4"
nodelay = "yes"
[[proxy_rules]]
domain = "a.example"
max_age_seconds = -1
forward_ipv4 = "300.1.1.1"
forward_port_http = 8080
rule_type = "Greylist"
"#;
    let v = validate(src, 1);
    assert!(v.config.is_none());
    let errs: Vec<_> = v.errors().collect();
    let keyed: Vec<(&str, usize, usize)> = errs
        .iter()
        .map(|d| (d.key.as_str(), d.line, d.column))
        .collect();
    assert_eq!(
        keyed,
        vec![
            ("listening_address", 1, 21),
            ("logging_level", 2, 17),
            ("proxy_timeout", 3, 17),
            ("proxy_min_tls_version", 4, 25),
            ("nodelay", 5, 11),
            ("proxy_rules[0].max_age_seconds", 8, 19),
            ("proxy_rules[0].forward_ipv4", 9, 16),
            ("proxy_rules[0].rule_type", 11, 13),
        ],
        "{errs:#?}"
    );
    assert!(errs[0].message.contains("cannot be parsed"));
    assert!(errs[1]
        .hint
        .contains("off, trace, debug, info, warn, error"));
}

#[test]
fn syntax_errors_are_all_listed_with_positions() {
    let v = validate("a = \n[[proxy_rules]\n", 1);
    let e: Vec<_> = v
        .errors()
        .filter(|d| d.message.contains("not valid TOML"))
        .collect();
    assert_eq!(e.len(), 2, "{e:?}");
    assert_eq!((e[0].line, e[1].line), (1, 2), "{e:?}");
    assert_eq!(e[1].hint, "write the header as `[[proxy_rules]]`");
    // The rest of the file is still checked: the repaired header starts a rule without a
    // domain.
    assert!(
        v.errors().any(|d| d.key == "proxy_rules[0].domain"),
        "{:?}",
        v.diagnostics
    );
    // Three independent mistakes, three errors; the bare word gets "quote it".
    let v = validate(
        "a = = 1\nlogging_level = info\n[[proxy_rules]]\ndomain = \"x\"\nc = [\n",
        1,
    );
    let e: Vec<_> = v
        .errors()
        .filter(|d| d.message.contains("not valid TOML"))
        .collect();
    assert_eq!(
        e.iter().map(|d| d.line).collect::<Vec<_>>(),
        [1, 2, 5],
        "{e:?}"
    );
    assert!(e[1].message.contains("needs quotes"), "{e:?}");
    assert_eq!(e[1].hint, "write it as `logging_level = \"info\"`");
}

#[test]
fn type_errors_suggest_the_value_they_meant() {
    let v = validate("listening_port_http = \"80\"\nadd_caching = \"false\"\n", 1);
    let hints: Vec<_> = v.errors().map(|d| d.hint.clone()).collect();
    assert_eq!(
        hints,
        [
            "write it as `listening_port_http = 80`",
            "write it as `add_caching = false`"
        ]
    );
    let v = validate("proxy_rules = \"x\"\n", 1);
    let e: Vec<_> = v.errors().collect();
    assert!(e[0].hint.contains("`[[proxy_rules]]` section"), "{e:?}");
    assert!(!e[0].hint.contains("= [["), "{e:?}");
}

#[test]
fn misspelt_keys_get_a_suggestion() {
    let v = validate(
        "workrs = 2\n[[proxy_rules]]\ndomain = \"x\"\nfoward_ipv4 = \"127.0.0.1\"\nforward_ipv4 = \"127.0.0.1\"\n",
        1,
    );
    let unknown: Vec<_> = v
        .diagnostics
        .iter()
        .filter(|d| d.message.contains("unknown key"))
        .map(|d| (d.key.as_str(), d.hint.as_str()))
        .collect();
    assert_eq!(
        unknown,
        [
            ("workrs", "rename it to `workers`"),
            ("proxy_rules[0].foward_ipv4", "did you mean `forward_ipv4`?")
        ]
    );
}

#[test]
fn unicode_domains_are_refused_with_their_idna_form() {
    let v = validate(
        "[[proxy_rules]]\ndomain = \"Bücher.example\"\nforward_ipv4 = \"127.0.0.1\"\n\
         [[proxy_rules]]\ndomain = \"*.münchen.de\"\nforward_ipv4 = \"127.0.0.1\"\n",
        1,
    );
    let hints: Vec<_> = v.errors().map(|d| d.hint.clone()).collect();
    assert_eq!(
        hints,
        [
            "write it as `domain = \"xn--bcher-kva.example\"`",
            "write it as `domain = \"*.xn--mnchen-3ya.de\"`"
        ]
    );
}

#[test]
fn unknown_keys_warn_with_line() {
    let src = "max_backlg = 8080\n[[proxy_rules]]\ndomain = \"x\"\nforward_ipv4 = \"127.0.0.1\"\nmax_age = 3\n";
    let v = validate(src, 1);
    assert!(v.config.is_some());
    let unknown: Vec<_> = v
        .diagnostics
        .iter()
        .filter(|d| d.message.contains("unknown key"))
        .map(|d| (d.key.as_str(), d.line))
        .collect();
    assert_eq!(
        unknown,
        vec![("max_backlg", 1), ("proxy_rules[0].max_age", 5)]
    );
}

#[test]
fn logging_level_is_a_prefix_test() {
    let v = validate("logging_level = \"info,hyper=warn\"\n", 1);
    assert_eq!(v.config.expect("config").logging_level, "info,hyper=warn");
}

#[test]
fn domains_wildcards_and_case() {
    let src = r#"
[[proxy_rules]]
domain = "*.Example.COM"
forward_ipv4 = "127.0.0.1"
[[proxy_rules]]
domain = "Exact.Example.com."
forward_addr = "origin.internal"
forward_port_http = 9000
[[proxy_rules]]
domain = "*"
forward_ipv6 = "::1"
forward_port_http = 81
[[proxy_rules]]
domain = "a*b.example"
forward_ipv4 = "127.0.0.1"
"#;
    let v = validate(src, 1);
    assert_eq!(errors(&v).len(), 1, "{:?}", v.diagnostics);
    assert!(errors(&v)[0].contains("proxy_rules[3].domain"));
    let v = validate(
        &src[..src.find("[[proxy_rules]]\ndomain = \"a*b").expect("cut")],
        1,
    );
    let c = v.config.expect("config");
    assert_eq!(
        c.rules[0].domain,
        DomainPattern::Wildcard(".example.com".into())
    );
    assert_eq!(c.rules[0].upstreams[0].authority.as_str(), "127.0.0.1:80");
    assert_eq!(
        c.rules[1].domain,
        DomainPattern::Exact("exact.example.com".into())
    );
    assert_eq!(
        c.rules[1].upstreams[0].authority.as_str(),
        "origin.internal:9000"
    );
    assert_eq!(c.rules[2].domain, DomainPattern::Any);
    assert_eq!(c.rules[2].upstreams[0].authority.as_str(), "[::1]:81");
}

#[test]
fn routing_locations_rank_primary_then_priority() {
    let src = r#"
[[proxy_rules]]
domain = "lb.example"
[proxy_rules.routing_rules]
routing_method = "Priority"
https_only = false
enable_health_checks = false
health_check_interval = 30
[[proxy_rules.routing_rules.routing_locations]]
priority = 2
forward_ipv4 = "10.0.0.2"
forward_port_http = 8080
[[proxy_rules.routing_rules.routing_locations]]
priority = 1
forward_ipv4 = "10.0.0.1"
forward_port_http = 8080
[[proxy_rules.routing_rules.routing_locations]]
primary = true
priority = 9
forward_ipv4 = "10.0.0.9"
forward_port_http = 8080
"#;
    let v = validate(src, 1);
    let c = v.config.expect("config");
    let order: Vec<_> = c.rules[0]
        .upstreams
        .iter()
        .map(|u| u.authority.as_str().to_owned())
        .collect();
    assert_eq!(order, ["10.0.0.9:8080", "10.0.0.1:8080", "10.0.0.2:8080"]);
}

#[test]
fn rule_without_origin_is_an_error() {
    let v = validate("[[proxy_rules]]\ndomain = \"x\"\n", 1);
    let e = errors(&v);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("no origin"));
}

#[test]
fn path_rules_and_match_types() {
    let src = r#"
[[proxy_rules]]
domain = "x"
forward_ipv4 = "127.0.0.1"
[[proxy_rules.path_rules]]
path = "/static"
match_type = "StartsWith"
rule_type = "Whitelist"
max_age_seconds = 86400
[[proxy_rules.path_rules]]
path = "/x"
match_type = "Fuzzy"
rule_type = "Blacklist"
max_age_seconds = 0
"#;
    let v = validate(src, 1);
    let e = errors(&v);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("path_rules[1].match_type") && e[0].contains("12:14"),
        "{e:?}"
    );
}

#[test]
fn wrong_types_never_panic() {
    let src = r#"
workers = 0
listen = "127.0.0.1:80"
proxy_rules = 5
"#;
    let v = validate(src, 1);
    assert_eq!(errors(&v).len(), 3, "{:?}", v.diagnostics);
}

#[test]
fn listen_overrides_address() {
    let v = validate("listen = [\"127.0.0.1:0\", \"[::1]:8081\"]\n", 2);
    let c = v.config.expect("config");
    assert_eq!(c.listen_http.len(), 2);
    assert_eq!(c.listen_http[1].port(), 8081);
}

#[test]
fn match_type_semantics() {
    use MatchType::*;
    assert!(Equals.matches("/a", "/a") && !Equals.matches("/a", "/ab"));
    assert!(StartsWith.matches("/a", "/ab"));
    assert!(EndsWith.matches(".jpg", "/x.jpg"));
    assert!(Contains.matches("adm", "/x/admin"));
    assert!(DoesNotEqual.matches("/a", "/b"));
    assert!(DoesNotContain.matches("adm", "/x") && !DoesNotContain.matches("adm", "/admin"));
}

#[test]
fn review_findings_port_zero_duplicates_ttl_and_routing_precedence() {
    let src = r#"ip_ttl = 1000
[[proxy_rules]]
domain = "bad"
forward_ipv4 = "127.0.0.1"
forward_port_http = 0
[[proxy_rules]]
domain = "dup"
forward_ipv4 = "127.0.0.1"
[[proxy_rules]]
domain = "DUP"
forward_ipv4 = "127.0.0.2"
"#;
    let v = validate(src, 1);
    let e = errors(&v);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("port 0"), "{e:?}");
    let dup = v
        .diagnostics
        .iter()
        .find(|d| d.message.contains("earlier rule"))
        .expect("duplicate warning");
    assert_eq!((dup.key.as_str(), dup.line), ("proxy_rules[2].domain", 10));
    let ttl = v
        .diagnostics
        .iter()
        .find(|d| d.key == "ip_ttl")
        .expect("ttl warning");
    assert_eq!(ttl.severity, Severity::Warning);

    // `upstreams` follow the routing locations; rule-level forward_* next to routing_rules warns.
    let src = r#"
[[proxy_rules]]
domain = "x"
forward_ipv4 = "127.0.0.9"
upstreams = ["127.0.0.1:3"]
[proxy_rules.routing_rules]
routing_method = "Priority"
[[proxy_rules.routing_rules.routing_locations]]
forward_ipv4 = "127.0.0.1"
forward_port_http = 1
"#;
    let v = validate(src, 1);
    assert!(v
        .diagnostics
        .iter()
        .any(|d| d.message.contains("forward_* keys are ignored")));
    let c = v.config.expect("config");
    let order: Vec<_> = c.rules[0]
        .upstreams
        .iter()
        .map(|u| u.authority.to_string())
        .collect();
    assert_eq!(order, ["127.0.0.1:1", "127.0.0.1:3"]);
}

#[test]
fn cache_sizes() {
    let v = validate("cache_memory = \"64MiB\"\ncache_max_object = 1000\n", 1);
    let c = v.config.expect("config");
    assert_eq!(c.cache.memory, 64 << 20);
    assert_eq!(c.cache.max_object, 1000);
    assert!(c.cache.enabled);
    let v = validate("cache_memory = \"lots\"\ncache_max_object = -1\n", 1);
    assert_eq!(errors(&v).len(), 2, "{:?}", v.diagnostics);
    assert_eq!(validate::parse_size("2GiB"), Some(2 << 30));
    assert_eq!(validate::parse_size("5MB"), Some(5_000_000));
    assert_eq!(validate::parse_size("12 K"), Some(12 << 10));
    assert_eq!(validate::parse_size("99999999999999G"), None);
}

#[test]
fn the_disk_tier_keys() {
    let dir = std::env::temp_dir().join(format!("rampart-cfg-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Off by default; a missing directory is fine (created at start), and `check` creates
    // nothing.
    let v = validate("", 1);
    assert_eq!(v.config.expect("config").cache.disk, None);
    let src = format!(
        "cache_disk = {:?}\ncache_disk_size = \"64MiB\"\ncache_disk_min_uses = 3\n",
        dir.join("sub").display().to_string()
    );
    std::fs::create_dir_all(&dir).expect("dir");
    let v = validate(&src, 1);
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    let d = v.config.expect("config").cache.disk.expect("disk");
    assert_eq!((d.size, d.min_uses), (64 << 20, 3));
    assert_eq!(d.path, dir.join("sub"));
    assert!(!dir.join("sub").exists(), "check must not create it");
    let names: Vec<_> = std::fs::read_dir(&dir).expect("dir").collect();
    assert!(names.is_empty(), "the probe file is removed: {names:?}");
    // Defaults: 1 GiB, written at the second use.
    let v = validate(
        &format!("cache_disk = {:?}\n", dir.display().to_string()),
        1,
    );
    let d = v.config.expect("config").cache.disk.expect("disk");
    assert_eq!((d.size, d.min_uses), (1 << 30, 2));

    // Bad values: each reported at its line and column.
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").expect("file");
    let v = validate(
        &format!(
            "cache_disk = {:?}\ncache_disk_size = \"1MiB\"\ncache_disk_min_uses = 0\n",
            file.display().to_string()
        ),
        1,
    );
    let e = errors(&v);
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(
        e[0].starts_with("error at 1:14 `cache_disk`") && e[0].contains("not a directory"),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| e.starts_with("error at 2:19 `cache_disk_size`")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| e.starts_with("error at 3:23 `cache_disk_min_uses`")),
        "{e:?}"
    );
    let v = validate(
        &format!(
            "cache_disk = {:?}\n",
            file.join("below").display().to_string()
        ),
        1,
    );
    assert!(
        errors(&v)[0].contains("a part of its path is a file"),
        "{:?}",
        v.diagnostics
    );
    for bad in ["cache_disk = true", "cache_disk = \"\"", "cache_disk = 5"] {
        assert_eq!(errors(&validate(bad, 1)).len(), 1, "{bad}");
    }
    let bad_size = format!(
        "cache_disk_size = \"big\"\ncache_disk = {:?}",
        dir.display().to_string()
    );
    assert_eq!(errors(&validate(&bad_size, 1)).len(), 1, "{bad_size}");
    // `/tmp` itself: anyone may write there.
    let e = errors(&validate("cache_disk = \"/tmp\"", 1));
    assert!(
        e.len() == 1 && e[0].contains("can be written by other users"),
        "{e:?}"
    );
    // A directory rampart cannot write (not when the tests run as root, who can).
    let ro = dir.join("ro");
    std::fs::create_dir_all(&ro).expect("dir");
    let mut perms = std::fs::metadata(&ro).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o555);
    std::fs::set_permissions(&ro, perms).expect("chmod");
    if std::fs::File::create(ro.join("x")).is_err() {
        let v = validate(&format!("cache_disk = {:?}\n", ro.display().to_string()), 1);
        let e = errors(&v);
        assert!(e.len() == 1 && e[0].contains("cannot write in it"), "{e:?}");
        let v = validate(
            &format!("cache_disk = {:?}\n", ro.join("new").display().to_string()),
            1,
        );
        assert!(
            errors(&v)[0].contains("cannot create it"),
            "{:?}",
            v.diagnostics
        );
    }
    // Sizes without a directory do nothing: said so.
    let v = validate("cache_disk_size = \"2GiB\"\ncache_disk = false\n", 1);
    assert!(errors(&v).is_empty());
    assert!(
        warnings(&v)
            .iter()
            .any(|w| w.contains("no effect without `cache_disk`")),
        "{:?}",
        v.diagnostics
    );

    // Per rule: a switch only.
    let global = format!("cache_disk = {:?}", dir.display().to_string());
    let v = with(&global, "cache_disk = false");
    let c = v.config.expect("config");
    assert!(c.cache.disk.is_some());
    assert!(!c.rules.last().expect("rule").cache_disk);
    let on = with(&global, "").config.expect("config");
    assert!(on.rules.last().expect("rule").cache_disk);
    let v = with(&global, "cache_disk = \"/elsewhere\"");
    assert!(
        errors(&v)[0].contains("cannot have a disk directory of its own"),
        "{:?}",
        v.diagnostics
    );
    let v = with("", "cache_disk = true");
    assert!(
        warnings(&v)
            .iter()
            .any(|w| w.contains("no global `cache_disk`")),
        "{:?}",
        v.diagnostics
    );

    let mut perms = std::fs::metadata(&ro).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    let _ = std::fs::set_permissions(&ro, perms);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cache_heuristic_and_store_set_cookie() {
    let rule = "forward_ipv4 = \"127.0.0.1\"\nmax_age_seconds = 60\n";
    // Defaults: ARC2's behaviour.
    let v = validate(&format!("[[proxy_rules]]\ndomain = \"a\"\n{rule}"), 1);
    let c = v.config.expect("config");
    assert_eq!(c.cache.heuristic, CacheHeuristic::MaxAge);
    assert!(!c.cache.store_set_cookie);
    assert_eq!(c.rules[0].cache_heuristic, CacheHeuristic::MaxAge);
    assert!(!c.rules[0].store_set_cookie);
    // Global values are the rules' defaults; a rule may set its own.
    let v = validate(
        &format!(
            "cache_heuristic = \"last_modified\"\nstore_set_cookie = true\n\
             [[proxy_rules]]\ndomain = \"a\"\n{rule}\
             [[proxy_rules]]\ndomain = \"b\"\n{rule}cache_heuristic = \"none\"\nstore_set_cookie = false\n"
        ),
        1,
    );
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    let c = v.config.expect("config");
    assert_eq!(c.cache.heuristic, CacheHeuristic::LastModified);
    assert_eq!(
        (c.rules[0].cache_heuristic, c.rules[0].store_set_cookie),
        (CacheHeuristic::LastModified, true)
    );
    assert_eq!(
        (c.rules[1].cache_heuristic, c.rules[1].store_set_cookie),
        (CacheHeuristic::None, false)
    );
    // Bad values are listed with their positions.
    let v = validate(
        &format!(
            "cache_heuristic = \"heuristic\"\n[[proxy_rules]]\ndomain = \"a\"\n{rule}\
             cache_heuristic = 3\nstore_set_cookie = \"yes\"\n"
        ),
        1,
    );
    assert!(v.config.is_none());
    let errs = errors(&v);
    for needle in [
        "error at 1:19 `cache_heuristic`",
        "error at 6:19 `proxy_rules[0].cache_heuristic`",
        "error at 7:20 `proxy_rules[0].store_set_cookie`",
    ] {
        assert!(
            errs.iter().any(|e| e.contains(needle)),
            "missing {needle:?} in {errs:#?}"
        );
    }
    assert!(
        errs.iter().any(|e| e.contains("\"last_modified\"")),
        "{errs:#?}"
    );
}

#[test]
fn screening_defaults_follow_arc2() {
    let v = validate(
        "[[proxy_rules]]\ndomain = \"a\"\nforward_ipv4 = \"127.0.0.1\"\nenable_sql_injection_protection = true\n",
        2,
    );
    let c = v.config.expect("config");
    // add_rate_limiting defaults to on (docs/arc2.md, "Defaults"), 100/s burst 200, loopback
    // exempt.
    assert_eq!(
        c.screen.rate_limit,
        Some(RateLimit {
            per_second: 100,
            burst: 200
        })
    );
    assert!(c
        .screen
        .rate_limit_exempt
        .iter()
        .any(|n| n.contains("127.0.0.1".parse().expect("ip"))));
    assert_eq!(c.screen.body_limit, Some(2 << 20));
    // SQL injection needs the global switch too.
    assert!(!c.screen.sql_injection);
    assert!(!c.rules[0].sql_injection);
    assert_eq!(c.downstream.max_connections_per_ip, None);
}

#[test]
fn screening_keys() {
    let v = validate(
        r#"add_sql_injection_protection = true
add_rate_limiting = true
rate_limit_per_second = 50
rate_limit_exempt = []
trusted_proxies = ["10.0.0.0/8", "fd00::/8"]
disable_default_body_limit = true
max_connections_per_ip = 20
client_keepalive_timeout_seconds = 5
[[proxy_rules]]
domain = "a"
forward_ipv4 = "127.0.0.1"
enable_sql_injection_protection = true
allow_ips = ["192.0.2.0/24"]
deny_ips = ["192.0.2.7"]
rate_limit_per_second = 5
max_body_size = "10MiB"
[[proxy_rules.disallowed_user_agents]]
user_agent = "BadBot"
match_type = "Contains"
"#,
        2,
    );
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    let c = v.config.expect("config");
    assert_eq!(
        c.screen.rate_limit,
        Some(RateLimit {
            per_second: 50,
            burst: 100
        })
    );
    assert!(c.screen.rate_limit_exempt.is_empty());
    assert_eq!(c.screen.trusted_proxies.len(), 2);
    assert_eq!(c.screen.body_limit, None);
    assert_eq!(c.downstream.max_connections_per_ip, Some(20));
    assert_eq!(
        c.downstream.keepalive_timeout,
        std::time::Duration::from_secs(5)
    );
    let r = &c.rules[0];
    assert!(r.sql_injection);
    assert_eq!(r.allow_ips.len(), 1);
    assert_eq!(r.deny_ips.len(), 1);
    assert_eq!(
        r.rate_limit,
        Some(RateLimit {
            per_second: 5,
            burst: 10
        })
    );
    assert_eq!(r.body_limit, Some(Some(10 << 20)));
    assert_eq!(
        r.disallowed_user_agents,
        vec![(MatchType::Contains, "BadBot".to_owned())]
    );
}

#[test]
fn bad_screening_values_are_listed_with_positions() {
    let v = validate(
        "trusted_proxies = [\"10.0.0.0/33\", \"proxy.local\"]\nmax_body_size = \"lots\"\n[[proxy_rules]]\ndomain = \"a\"\nforward_ipv4 = \"127.0.0.1\"\ndeny_ips = [\"1.2.3\"]\nrate_limit_per_second = 0\n",
        2,
    );
    let errs = errors(&v);
    assert!(v.config.is_none());
    for needle in [
        "error at 1:20 `trusted_proxies[0]`",
        "error at 1:35 `trusted_proxies[1]`",
        "error at 2:17 `max_body_size`",
        "error at 6:13 `proxy_rules[0].deny_ips[0]`",
        "error at 7:25 `proxy_rules[0].rate_limit_per_second`",
    ] {
        assert!(
            errs.iter().any(|e| e.contains(needle)),
            "missing {needle:?} in {errs:#?}"
        );
    }
}

const RULE: &str = "max_age_seconds = 0\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 8080\n";

#[test]
fn lets_encrypt_email_turns_on_acme_for_every_named_domain() {
    let src = format!(
        "lets_encrypt_contact_email = \"ops@example.com\"\nproxy_min_tls_version = \"TLS_1_1\"\n\
         [[proxy_rules]]\ndomain = \"example.com\"\n{RULE}\
         [[proxy_rules]]\ndomain = \"*.example.net\"\n{RULE}\
         [[proxy_rules]]\ndomain = \"plain.example\"\ntls = \"off\"\nredirect_to_https = true\n{RULE}"
    );
    let v = validate(&src, 1);
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    let c = v.config.expect("config");
    assert_eq!(
        c.tls.listen_https,
        vec!["0.0.0.0:443".parse().expect("addr")]
    );
    assert_eq!(c.tls.acme.contact.as_deref(), Some("ops@example.com"));
    assert_eq!(
        c.tls.acme.directory_url,
        crate::validate::LETS_ENCRYPT_PRODUCTION
    );
    assert_eq!(
        c.tls.acme.challenges,
        vec![AcmeChallenge::Http01, AcmeChallenge::TlsAlpn01]
    );
    assert_eq!(c.rules[0].cert, Some(CertSource::Acme));
    // ACME cannot prove a wildcard with http-01/tls-alpn-01: no certificate, and a warning.
    assert_eq!(c.rules[1].cert, None);
    assert!(v
        .diagnostics
        .iter()
        .any(|d| d.key.starts_with("proxy_rules[1]") && d.message.contains("wildcard")));
    assert_eq!(c.rules[2].cert, None);
    // No certificate, so nowhere to redirect to: off, with a warning.
    assert!(!c.rules[2].redirect_to_https);
    assert!(v
        .diagnostics
        .iter()
        .any(|d| d.key == "proxy_rules[2].redirect_to_https" && d.severity == Severity::Warning));
    // TLS 1.0/1.1 for origins are accepted and reported as raised to 1.2.
    assert_eq!(c.upstream.tls_min_version, TlsVersion::Tls12);
    assert!(v
        .diagnostics
        .iter()
        .any(|d| d.key == "proxy_min_tls_version"
            && d.severity == Severity::Warning
            && d.message.contains("raised to TLS_1_2")));
    // The ARC2 default for origins is TLS 1.3; clients get 1.2+.
    let c = validate(ARC2_BENCH, 1).config.expect("config");
    assert_eq!(c.upstream.tls_min_version, TlsVersion::Tls13);
    assert_eq!(c.tls.min_version, TlsVersion::Tls12);
}

#[test]
fn tls_keys() {
    let dir = std::env::temp_dir().join(format!("rampart-config-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (cert, key) = (dir.join("c.pem"), dir.join("k.pem"));
    std::fs::write(&cert, "x").expect("write");
    std::fs::write(&key, "x").expect("write");
    let src = format!(
        "listen_https = [\"127.0.0.1:8443\"]\ntls = \"internal\"\nstate_dir = \"/var/lib/rampart-test\"\n\
         tls_default_domain = \"Files.Example\"\ntls_min_version = \"TLS_1_3\"\n\
         acme_challenges = [\"tls-alpn-01\"]\n\
         [[proxy_rules]]\ndomain = \"files.example\"\ntls_cert_file = {cert:?}\ntls_key_file = {key:?}\n\
         redirect_to_https = true\nhsts_max_age_seconds = 63072000\nhsts_include_subdomains = true\nhsts_preload = true\n\
         forward_addr = \"origin.internal\"\nforward_port_http = 80\nforward_port_https = 8443\nmax_age_seconds = 0\n\
         [[proxy_rules]]\ndomain = \"internal.example\"\nmax_age_seconds = 0\n\
         upstreams = [\"https://10.0.0.5:443\", \"10.0.0.6:80\"]\n\
         [[proxy_rules]]\ndomain = \"named.example\"\nmax_age_seconds = 0\nforward_ipv4 = \"10.0.0.7\"\n\
         forward_port_https = 443\nforward_tls_name = \"backend.example\"\n",
        cert = cert.display().to_string(),
        key = key.display().to_string(),
    );
    let v = validate(&src, 1);
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    let c = v.config.expect("config");
    assert_eq!(
        c.tls.listen_https,
        vec!["127.0.0.1:8443".parse().expect("addr")]
    );
    assert_eq!(c.tls.min_version, TlsVersion::Tls13);
    assert_eq!(c.tls.default_domain.as_deref(), Some("files.example"));
    assert_eq!(
        c.tls.state_dir,
        std::path::PathBuf::from("/var/lib/rampart-test")
    );
    assert_eq!(c.tls.acme.challenges, vec![AcmeChallenge::TlsAlpn01]);
    let files = &c.rules[0];
    assert_eq!(files.cert, Some(CertSource::Files { cert, key }));
    assert!(files.redirect_to_https);
    assert_eq!(
        files.hsts.as_deref(),
        Some("max-age=63072000; includeSubDomains; preload")
    );
    let t = &files.upstreams[0];
    assert_eq!(t.authority.as_str(), "origin.internal:80");
    assert_eq!(
        t.tls.as_ref().map(|a| a.as_str()),
        Some("origin.internal:8443")
    );
    assert!(!t.https_only);
    assert_eq!(t.tls_name, "origin.internal");
    // The global `tls = "internal"` applies to rules without their own source.
    let internal = &c.rules[1];
    assert_eq!(internal.cert, Some(CertSource::Internal));
    // An https:// upstream is TLS only; an IP origin is verified as the rule's domain.
    let (a, b) = (&internal.upstreams[0], &internal.upstreams[1]);
    assert!(a.https_only);
    assert_eq!(a.tls_name, "internal.example");
    assert!(!b.https_only && b.tls.is_none());
    assert_eq!(c.rules[2].upstreams[0].tls_name, "backend.example");
}

#[test]
fn bad_tls_values_are_listed_with_positions() {
    let v = validate(
        "tls = \"yes\"\nproxy_min_tls_version = \"TLS_1_4\"\ntls_default_domain = \"nowhere.example\"\n\
         acme_challenges = [\"dns-01\"]\nproxy_ca_file = \"/nonexistent/ca.pem\"\n\
         [[proxy_rules]]\ndomain = \"a.example\"\nforward_ipv4 = \"127.0.0.1\"\n\
         tls_cert_file = \"/nonexistent/cert.pem\"\nforward_port_https = 0\n\
         forward_tls_name = \"origin/x y\"\n",
        1,
    );
    assert!(v.config.is_none());
    let errs = errors(&v);
    for needle in [
        "error at 1:7 `tls`",
        "error at 2:25 `proxy_min_tls_version`",
        "error at 4:20 `acme_challenges[0]`",
        "error at 5:17 `proxy_ca_file`",
        "error at 9:17 `proxy_rules[0].tls_cert_file`",
        "`proxy_rules[0].tls_key_file`",
        "error at 10:22 `proxy_rules[0].forward_port_https`",
        "error at 11:20 `proxy_rules[0].forward_tls_name`",
        "`tls_default_domain`",
    ] {
        assert!(
            errs.iter().any(|e| e.contains(needle)),
            "missing {needle:?} in {errs:#?}"
        );
    }
}

#[test]
fn tls_default_domain_must_be_covered_by_a_certificate() {
    let src = |name: &str| {
        format!(
            "tls = \"internal\"\ntls_default_domain = \"{name}\"\n\
             [[proxy_rules]]\ndomain = \"*.wild.example\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 80\n"
        )
    };
    // A wildcard certificate covers one label only.
    let v = validate(&src("a.wild.example"), 1);
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    let v = validate(&src("a.b.wild.example"), 1);
    assert!(
        errors(&v)
            .iter()
            .any(|e| e.contains("`tls_default_domain`")),
        "{:?}",
        v.diagnostics
    );
}

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

#[test]
fn compression_needs_both_switches_and_reads_its_flags_leniently() {
    let v = with("enable_compression = true", "enable_compression = true");
    let c = v.config.expect("config");
    assert_eq!(
        c.rules[0].compression,
        Some(Compression {
            br: Some(5),
            zstd: Some(3),
            gzip: Some(6),
            min_length: 256,
            types: None
        })
    );
    // The rule alone: off, with a warning that says why.
    let v = with("", "enable_compression = true");
    assert_eq!(
        v.config.as_ref().expect("config").rules[0].compression,
        None
    );
    assert!(
        warnings(&v).iter().any(|w| w.contains("off globally")),
        "{:?}",
        warnings(&v)
    );
    // Flags: named codings only, levels, a threshold; nonsense ignored with a warning. The
    // rule's flags replace the global ones.
    let v = with(
        "enable_compression = true\ncompression_flags = \"gzip\"",
        "enable_compression = true\ncompression_flags = \"BR=7; gzip , min_length=1024 turbo zstd=99\"",
    );
    let ws = warnings(&v);
    assert!(
        ws.iter().any(|w| w.contains("ignored turbo, zstd=99")),
        "{ws:?}"
    );
    assert_eq!(
        v.config.expect("config").rules[0].compression,
        Some(Compression {
            br: Some(7),
            zstd: None,
            gzip: Some(6),
            min_length: 1024,
            types: None
        })
    );
    let v = with(
        "enable_compression = true\ncompression_flags = \"gzip=1\"",
        "enable_compression = true",
    );
    let gz = v.config.expect("config").rules[0]
        .compression
        .clone()
        .expect("on");
    assert_eq!((gz.br, gz.gzip), (None, Some(1)), "the global flags apply");
}

#[test]
fn minification_and_webp_settings() {
    let v = with(
        "",
        "enable_minification = true\nenable_webp_transformation = true",
    );
    let r = &v.config.expect("config").rules[0];
    assert_eq!(
        r.minify,
        Some(Minify {
            html: true,
            css: true,
            js: true,
            html_comments: false
        })
    );
    assert_eq!(r.webp.map(|w| w.min_age.as_secs()), Some(21_600));
    let v = with(
        "",
        "enable_minification = true\nminification_flags = \"css,JS,php,comments\"\nenable_webp_transformation = true\nwebp_transformation_min_age = 60",
    );
    assert!(
        warnings(&v).iter().any(|w| w.contains("ignored php")),
        "{:?}",
        warnings(&v)
    );
    let r = &v.config.expect("config").rules[0];
    assert_eq!(
        r.minify,
        Some(Minify {
            html: false,
            css: true,
            js: true,
            html_comments: true
        })
    );
    assert_eq!(r.webp.map(|w| w.min_age.as_secs()), Some(60));
    let v = with(
        "",
        "enable_minification = true\nminification_flags = \"php\"",
    );
    assert_eq!(v.config.expect("config").rules[0].minify, None);
    // No routing or transform key is reported as inactive.
    let v = with(
        "enable_compression = true\ncompression_flags = \"br\"",
        "enable_compression = true\nenable_minification = true\nminification_flags = \"html\"\n\
         enable_webp_transformation = true\nwebp_transformation_min_age = 1",
    );
    assert!(
        !v.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Inactive),
        "{:?}",
        v.diagnostics
    );
}

#[test]
fn health_checks_and_performance_routing_are_read() {
    let src = r#"
[[proxy_rules]]
domain = "x"
[proxy_rules.routing_rules]
routing_method = "Performance"
https_only = false
enable_health_checks = true
health_check_interval = 0
health_check_path = "health"
[[proxy_rules.routing_rules.routing_locations]]
forward_ipv4 = "127.0.0.1"
forward_port_http = 1
"#;
    let v = validate(src, 1);
    let ws = warnings(&v);
    assert!(ws.iter().any(|w| w.contains("using 1")), "{ws:?}");
    assert!(ws.iter().any(|w| w.contains("probing /health")), "{ws:?}");
    assert!(
        !v.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Inactive),
        "{:?}",
        v.diagnostics
    );
    let r = &v.config.expect("config").rules[0];
    assert_eq!(r.routing_method, RoutingMethod::Performance);
    assert_eq!(
        r.health_check,
        Some(HealthCheck {
            interval: std::time::Duration::from_secs(1),
            path: "/health".into()
        })
    );
}

#[test]
fn proxy_protocol_listeners_and_trusted_peers() {
    let v = validate(
        "proxy_protocol = true\nproxy_protocol_from = [\"10.0.0.0/8\", \"fd00::/8\"]\n\
         listen = [\"127.0.0.1:8080\", { address = \"127.0.0.1:8081\", proxy_protocol = false }]\n\
         [[proxy_rules]]\ndomain = \"a.example\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 81\n\
         tls = \"internal\"\nsend_proxy_protocol = \"v2\"\n",
        1,
    );
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    let c = v.config.expect("config");
    let a = |s: &str| s.parse::<std::net::SocketAddr>().expect("addr");
    // The global switch is every listener's default, HTTPS included; an entry can say no.
    assert!(c.proxy_protocol.expects(a("127.0.0.1:8080"), false));
    assert!(!c.proxy_protocol.expects(a("127.0.0.1:8081"), false));
    assert!(c.proxy_protocol.expects(a("0.0.0.0:443"), true));
    assert!(c.proxy_protocol.trusts("10.1.2.3".parse().expect("ip")));
    assert!(c
        .proxy_protocol
        .trusts("::ffff:10.1.2.3".parse().expect("ip")));
    assert!(!c.proxy_protocol.trusts("127.0.0.1".parse().expect("ip")));
    assert_eq!(
        c.rules[0].send_proxy_protocol,
        Some(ProxyProtocolVersion::V2)
    );

    // Off by default; loopback alone is trusted when it is on.
    let c = validate(ARC2_BENCH, 1).config.expect("config");
    assert!(c.proxy_protocol.listeners.is_empty());
    assert!(c.rules[0].send_proxy_protocol.is_none());
    let c = with("proxy_protocol = true", "").config.expect("config");
    assert!(c.proxy_protocol.trusts("127.0.0.9".parse().expect("ip")));
    assert!(c.proxy_protocol.trusts("::1".parse().expect("ip")));
    assert!(!c.proxy_protocol.trusts("192.168.1.1".parse().expect("ip")));
    // A trusted list without a listener that reads headers is pointless: said so.
    let v = with("proxy_protocol_from = [\"10.0.0.0/8\"]", "");
    assert!(
        warnings(&v)
            .iter()
            .any(|w| w.contains("1:") && w.contains("no listener has `proxy_protocol = true`")),
        "{:?}",
        v.diagnostics
    );
}

#[test]
fn bad_protocol_keys_are_listed_with_positions() {
    let v = validate(
        "proxy_protocol = \"yes\"\nproxy_protocol_from = [\"10.0.0.0/33\"]\n\
         listen = [{ address = \"127.0.0.1\", proxy_protocol = true }, { proxy_protocol = true }, 8080, { address = \"127.0.0.1:1\", pp = 1 }]\n\
         websocket_idle_timeout_seconds = 0\n\
         [[proxy_rules]]\ndomain = \"a.example\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 81\n\
         send_proxy_protocol = \"v3\"\norigin_protocol = \"h3\"\nallow_upgrades = \"no\"\n\
         [[proxy_rules]]\ndomain = \"b.example\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 81\n\
         origin_protocol = \"h2\"\n\
         [[proxy_rules]]\ndomain = \"c.example\"\nupstreams = [\"https://127.0.0.1:8443\"]\norigin_protocol = \"h2c\"\n",
        1,
    );
    assert!(v.config.is_none());
    let errs = errors(&v);
    for needle in [
        "error at 1:18 `proxy_protocol`",
        "error at 2:24 `proxy_protocol_from[0]`",
        "error at 3:23 `listen[0].address`",
        "error at 3:61 `listen[1]`",
        "error at 3:88 `listen[2]`",
        "error at 4:34 `websocket_idle_timeout_seconds`",
        "error at 9:23 `proxy_rules[0].send_proxy_protocol`",
        "error at 10:19 `proxy_rules[0].origin_protocol`",
        "error at 11:18 `proxy_rules[0].allow_upgrades`",
        "error at 16:19 `proxy_rules[1].origin_protocol`",
        "error at 20:19 `proxy_rules[2].origin_protocol`",
    ] {
        assert!(
            errs.iter().any(|e| e.contains(needle)),
            "missing {needle:?} in {errs:#?}"
        );
    }
    // The unknown key inside a listen entry is named.
    assert!(
        v.diagnostics.iter().any(|d| d.key == "listen[3].pp"),
        "{:?}",
        v.diagnostics
    );
}

#[test]
fn origin_protocols_by_rule_and_location() {
    let v = validate(
        "[[proxy_rules]]\ndomain = \"a.example\"\norigin_protocol = \"h2c\"\n\
         upstreams = [\"127.0.0.1:50051\"]\n\
         [[proxy_rules]]\ndomain = \"b.example\"\norigin_protocol = \"h2\"\n\
         [proxy_rules.routing_rules]\nrouting_method = \"Priority\"\nhttps_only = true\n\
         [[proxy_rules.routing_rules.routing_locations]]\nforward_ipv4 = \"127.0.0.1\"\nforward_port_https = 8443\n\
         [[proxy_rules.routing_rules.routing_locations]]\nforward_ipv4 = \"127.0.0.2\"\nforward_port_https = 8443\norigin_protocol = \"http1\"\n",
        1,
    );
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    // Active: not reported as "accepted, not yet active".
    assert!(
        !v.diagnostics
            .iter()
            .any(|d| d.key.contains("origin_protocol")),
        "{:?}",
        v.diagnostics
    );
    let c = v.config.expect("config");
    assert_eq!(c.rules[0].upstreams[0].protocol, OriginProtocol::H2c);
    let b: Vec<_> = c.rules[1].upstreams.iter().map(|u| u.protocol).collect();
    assert_eq!(b, [OriginProtocol::H2, OriginProtocol::Http1]);
    assert!(c.rules[1].allow_upgrades);
    assert_eq!(c.rules[1].upgrade_idle_timeout, None);
    assert_eq!(c.downstream.upgrade_idle_timeout.as_secs(), 300);
}

#[test]
fn idle_connections_park_after_five_seconds_unless_told() {
    use std::time::Duration;
    let park = |global: &str| {
        let v = with(global, "");
        assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
        v.config.expect("config").downstream.park_after
    };
    assert_eq!(park(""), Some(Duration::from_secs(5)));
    assert_eq!(
        park("client_idle_park_seconds = 1"),
        Some(Duration::from_secs(1))
    );
    assert_eq!(park("client_idle_park_seconds = 0"), None);
    let v = with("client_idle_park_seconds = -1", "");
    let e = errors(&v);
    assert!(
        e.iter()
            .any(|m| m.contains("client_idle_park_seconds") && m.contains("1:")),
        "{e:?}"
    );
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

#[test]
fn a_bare_word_for_a_boolean_is_fixed_with_true_or_false() {
    // The fix is `true` or `false`, never a quoted word (`add_caching = "yes"` is itself a type
    // error).
    let v = validate(
        "add_caching = yes\nwatch_config = off\nlogging_level = warn\n",
        1,
    );
    let e: Vec<_> = v.errors().collect();
    assert_eq!(e.len(), 3, "{e:?}");
    assert_eq!(e[0].line, 1);
    assert!(
        e[0].message.contains("`add_caching` takes a boolean"),
        "{e:?}"
    );
    assert_eq!(e[0].hint, "write it as `add_caching = true`");
    assert_eq!(e[1].hint, "write it as `watch_config = false`");
    // A string key keeps "quote it".
    assert_eq!(e[2].hint, "write it as `logging_level = \"warn\"`");
}

#[test]
fn a_domain_written_as_a_url_names_what_is_extra() {
    // A scheme and a path are named as such, not as "it contains a port".
    for (written, what, fixed) in [
        (
            "https://www.shop.test/",
            "a scheme (`https://`) and a path (`/`)",
            "www.shop.test",
        ),
        ("www.shop.test:8080", "a port (`:8080`)", "www.shop.test"),
        (
            "http://*.shop.test:81/x",
            "a scheme (`http://`), a path (`/x`) and a port (`:81`)",
            "*.shop.test",
        ),
        ("shop.test/blog", "a path (`/blog`)", "shop.test"),
    ] {
        let v = validate(
            &format!("[[proxy_rules]]\ndomain = {written:?}\n{RULE_KEYS}"),
            1,
        );
        let e: Vec<_> = v.errors().collect();
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].message.contains(&format!("it contains {what}")),
            "{written}: {e:?}"
        );
        assert_eq!(
            e[0].hint,
            format!("write it as `domain = \"{fixed}\"`"),
            "{written}"
        );
    }
}

#[test]
fn fix_lines_are_valid_toml_headers() {
    // The header a fix names is TOML (`[[proxy_rules[0].path_rules]]` would not be).
    for (section, header) in [
        (
            "[proxy_rules.path_rules]\npath = \"/a\"\n",
            "`[[proxy_rules.path_rules]]`",
        ),
        (
            "[proxy_rules.disallowed_user_agents]\nuser_agent = \"x\"\n",
            "`[[proxy_rules.disallowed_user_agents]]`",
        ),
    ] {
        let v = validate(
            &format!("[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}{section}"),
            1,
        );
        let e: Vec<_> = v.errors().collect();
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].hint.contains(header), "{e:?}");
        assert!(!e[0].hint.contains("[0]"), "{e:?}");
    }
}

#[test]
fn global_keys_after_a_rule_are_errors_that_say_why() {
    // TOML reads them as keys of the last rule; check says so as an error, not as "unknown key".
    let src = format!(
        "[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}add_sql_injection_protection = true\napi_key = \"0123456789abcdef0123\"\n"
    );
    let v = validate(&src, 1);
    assert!(v.config.is_none(), "{}", shown(&v));
    let e: Vec<_> = v.errors().collect();
    assert_eq!(e.len(), 2, "{}", shown(&v));
    assert_eq!(e[0].key, "proxy_rules[0].add_sql_injection_protection");
    assert!(
        e[0].message.contains("`add_sql_injection_protection` is a global key, but it comes after the `[[proxy_rules]]` header at line 1"),
        "{e:?}"
    );
    assert_eq!(e[0].hint, "move it above the first `[[proxy_rules]]`");
    assert!(e[1].message.contains("`api_key` is a global key"), "{e:?}");
    // A rule's key after its `[[proxy_rules.disallowed_user_agents]]` lands in that entry.
    let src = format!(
        "[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}[[proxy_rules.disallowed_user_agents]]\nuser_agent = \"x\"\nmatch_type = \"Contains\"\nallow_ips = [\"10.0.0.0/8\"]\n"
    );
    let v = validate(&src, 1);
    let e: Vec<_> = v.errors().collect();
    assert_eq!(e.len(), 1, "{}", shown(&v));
    assert!(e[0].message.contains("`allow_ips` is a key of `[[proxy_rules]]`, but it comes after the `[[proxy_rules.disallowed_user_agents]]` header at line 14"), "{e:?}");
    // A rule's key at the top level is named too (a warning: it was never in effect anywhere).
    let v = validate(
        &format!("forward_ipv4 = \"10.0.0.1\"\n[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}"),
        1,
    );
    assert!(
        shown(&v).contains("`forward_ipv4` is a key of `[[proxy_rules]]`; here it does nothing"),
        "{}",
        shown(&v)
    );
}

#[test]
fn a_key_set_twice_in_a_rule_names_the_first_and_why() {
    // Not just "duplicate key / fix the syntax at this position".
    let src =
        format!("[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}enable_compression = true\n");
    let v = validate(&src, 1);
    let e: Vec<_> = v.errors().collect();
    assert_eq!(e.len(), 1, "{}", shown(&v));
    assert_eq!(e[0].line, 14);
    assert!(
        e[0].message.contains("`enable_compression` is set twice in one section (first at line 11): every key after the `[[proxy_rules]]` header at line 1 belongs to that section"),
        "{e:?}"
    );
    assert!(
        e[0].hint
            .contains("move it above the first `[[proxy_rules]]` (line 1)"),
        "{e:?}"
    );
    // The rest was checked: a warning from after the duplicate still shows.
    let v = validate(&format!("{src}bogus_key = 1\n"), 1);
    assert!(
        shown(&v).contains("proxy_rules[0].bogus_key"),
        "{}",
        shown(&v)
    );
}

#[test]
fn a_nested_section_before_its_rule_is_explained() {
    // Not just "duplicate key" at a later line with no explanation.
    let src = format!("[[proxy_rules.disallowed_user_agents]]\nuser_agent = \"x\"\nmatch_type = \"Contains\"\n[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}");
    let v = validate(&src, 1);
    let e: Vec<_> = v.errors().collect();
    assert_eq!(e[0].line, 4, "{}", shown(&v));
    assert!(
        e[0].message.contains(
            "`[[proxy_rules.disallowed_user_agents]]` at line 1 comes before any `[[proxy_rules]]`"
        ),
        "{e:?}"
    );
    assert!(
        e[0].hint
            .contains("move the section at line 1 (its header and its keys) below the last key of the `[[proxy_rules]]` it belongs to, after that rule's own keys"),
        "{e:?}"
    );
    // Nothing after it could be read: said plainly.
    assert!(
        e.iter()
            .any(|d| d.message.contains("the rest of the file was not checked")),
        "{e:?}"
    );
}

#[test]
fn a_misspelt_protection_is_an_error_linked_with_what_is_missing() {
    // A misspelt user-agent block list is an error, not a warning with exit status 0.
    let src = format!("[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}[[proxy_rules.disalowed_user_agents]]\nuser_agent = \"x\"\nmatch_type = \"Contains\"\n");
    let v = validate(&src, 1);
    let e: Vec<_> = v.errors().collect();
    assert_eq!(e.len(), 1, "{}", shown(&v));
    assert!(
        e[0].message
            .contains("did you mean `disallowed_user_agents`"),
        "{e:?}"
    );
    // `enable_minificaton`: one message, not "unknown key" plus "enable_minification missing".
    let rule = RULE_KEYS.replace("enable_minification", "enable_minificaton");
    let v = validate(&format!("[[proxy_rules]]\ndomain = \"a.test\"\n{rule}"), 1);
    let about: Vec<_> = v
        .diagnostics
        .iter()
        .filter(|d| d.key.contains("enable_minific"))
        .collect();
    assert_eq!(about.len(), 1, "{}", shown(&v));
    assert_eq!(about[0].key, "proxy_rules[0].enable_minificaton");
    assert!(about[0].message.contains("did you mean `enable_minification`? `enable_minification` is not set, so rampart uses `enable_minification = false`"), "{about:?}");
    assert_eq!(about[0].severity, Severity::Warning);
}

#[test]
fn a_misspelt_key_that_decides_where_traffic_goes_is_an_error() {
    // `foward_port_http = 18081` was a warning: "configuration OK", and the rule forwarded
    // to port 80.
    let rule = RULE_KEYS.replace("forward_port_http = 8080", "foward_port_http = 18081");
    let v = validate(&format!("[[proxy_rules]]\ndomain = \"a.test\"\n{rule}"), 1);
    let e: Vec<_> = v.errors().collect();
    assert_eq!(e.len(), 1, "{}", shown(&v));
    assert_eq!(e[0].key, "proxy_rules[0].foward_port_http");
    assert_eq!(e[0].hint, "rename it to `forward_port_http`");
    assert!(v.config.is_none());
    for (written, line) in [
        (
            "[[proxy_rules]]\ndomian = \"a.test\"\n",
            "proxy_rules[0].domian",
        ),
        (
            "listning_address = \"0.0.0.0\"\n[[proxy_rules]]\ndomain = \"a.test\"\n",
            "listning_address",
        ),
        (
            "lisen = [\"127.0.0.1:80\"]\n[[proxy_rules]]\ndomain = \"a.test\"\n",
            "lisen",
        ),
        (
            "[[proxy_rules]]\ndomain = \"a.test\"\nupstream = [\"127.0.0.1:9\"]\n",
            "proxy_rules[0].upstream",
        ),
    ] {
        let v = validate(&format!("{written}{RULE_KEYS}"), 1);
        assert!(
            v.errors()
                .any(|d| d.key == line && d.message.starts_with("unknown key; did you mean")),
            "{written}: {}",
            shown(&v)
        );
    }
    // An unknown key that is near no such key stays a warning.
    let v = validate(
        &format!("[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}colour = 1\n"),
        1,
    );
    assert!(v.errors().next().is_none(), "{}", shown(&v));
    assert!(v
        .diagnostics
        .iter()
        .any(|d| d.key == "proxy_rules[0].colour" && d.severity == Severity::Warning));
}

#[test]
fn a_bare_address_is_one_error_at_its_value() {
    // `forward_ipv4 = 127.0.0.1` was a TOML error ("invalid float") after a misleading error
    // at the rule's header ("`forward_port_http` is set but no origin address").
    let rule = RULE_KEYS.replace("forward_ipv4 = \"127.0.0.1\"", "forward_ipv4 = 127.0.0.1");
    let v = validate(&format!("[[proxy_rules]]\ndomain = \"a.test\"\n{rule}"), 1);
    let e: Vec<_> = v.errors().collect();
    assert_eq!(e.len(), 1, "{}", shown(&v));
    assert_eq!((e[0].line, e[0].column), (6, 16), "{}", shown(&v));
    assert_eq!(e[0].hint, "write it as `forward_ipv4 = \"127.0.0.1\"`");
}

#[test]
fn an_unused_rule_is_said_once_and_first() {
    // Only "never used", not seven "missing" warnings before it.
    let src = format!("[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}[[proxy_rules]]\ndomain = \"a.test\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 9\nmisspeled = 1\n");
    let v = validate(&src, 1);
    let w: Vec<_> = v.diagnostics.iter().collect();
    assert_eq!(w.len(), 1, "{}", shown(&v)); // no warning, and no note either
    assert!(w[0].message.contains("this rule is never used"), "{w:?}");
}

#[test]
fn syntax_errors_do_not_hide_the_rest() {
    // Every problem at once, not two syntax errors first and the rest after fixing them.
    let src = "listening_port_http = \"80\"\nadd_caching = yes\nworkers = 0\n[[proxy_rules]\ndomain = \"a.test\"\nmax_age_seconds = -5\nforward_ipv4 = \"1.2.3\"\n";
    let v = validate(src, 1);
    let lines: Vec<_> = v.errors().map(|d| d.line).collect();
    assert_eq!(lines, [1, 2, 3, 4, 6, 7], "{}", shown(&v));
}

#[test]
fn strict_makes_every_warning_an_error() {
    let src = format!("[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}bogus = 1\n");
    let v = validate(&src, 1);
    assert!(v.config.is_some());
    assert_eq!(warnings(&v).len(), 1);
    let v = v.strict();
    assert!(v.config.is_none());
    assert_eq!(errors(&v).len(), 1);
    // A clean file stays accepted.
    let v = validate(
        &format!("[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}"),
        1,
    )
    .strict();
    assert!(v.config.is_some(), "{}", shown(&v));
}

#[test]
fn blacklist_says_it_does_not_refuse() {
    let rule = RULE_KEYS.replace("Whitelist", "Blacklist");
    let path_rule = "[[proxy_rules.path_rules]]\npath = \"/admin\"\nmatch_type = \"StartsWith\"\nrule_type = \"Blacklist\"\nmax_age_seconds = 0\n";
    let v = validate(
        &format!("[[proxy_rules]]\ndomain = \"a.test\"\n{rule}{path_rule}"),
        1,
    );
    let w = warnings(&v);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w.iter()
            .all(|w| w.contains("`Blacklist` does not refuse requests")),
        "{w:?}"
    );
    // Saying which meaning is wanted, in the rule or globally, silences it.
    for (global, extra) in [
        ("", "strict_path_rules = false\n"),
        ("strict_path_rules = true\n", ""),
    ] {
        let v = validate(
            &format!("{global}[[proxy_rules]]\ndomain = \"a.test\"\n{rule}{extra}{path_rule}"),
            1,
        );
        assert!(warnings(&v).is_empty(), "{:?}", warnings(&v));
    }
}

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

#[test]
fn every_key_the_reader_knows_has_its_default_listed() {
    let catalog = crate::validate::catalog();
    for (kind, k) in catalog {
        for key in &k.keys {
            assert!(
                crate::effective::KEYS
                    .iter()
                    .any(|(kd, n, ..)| kd == kind && n == key),
                "{kind}.{key} is read but not in effective::KEYS (its owner and default)"
            );
        }
    }
    for (kind, key, ..) in crate::effective::KEYS {
        assert!(
            catalog.get(*kind).is_some_and(|k| k.keys.contains(key)),
            "effective::KEYS lists {kind}.{key}, which the reader does not read"
        );
    }
}

#[test]
fn every_listed_default_is_the_one_in_effect() {
    use crate::effective::Fallback;
    // The second file leaves out what the first sets (ARC2's required keys among them).
    const BARE: &str = "[[proxy_rules]]\ndomain = \"a.test\"\nforward_ipv4 = \"127.0.0.1\"\n\
        [[proxy_rules.path_rules]]\npath = \"/s\"\nmatch_type = \"StartsWith\"\n";
    let mut wrong = Vec::new();
    for file in [EVERY_SECTION, BARE] {
        let base = validate(file, 3);
        let base_config = base
            .config
            .clone()
            .unwrap_or_else(|| panic!("{}", shown(&base)));
        for (kind, key, _, default) in crate::effective::KEYS {
            let Fallback::Value(v) = default else {
                continue;
            };
            if !kind.is_empty() && !file.contains(&format!("{kind}]")) {
                continue;
            }
            let src = add_to(file, kind, &format!("{key} = {v}"));
            if toml_edit::Document::parse(src.as_str()).is_err() {
                continue; // the file sets it already
            }
            let with_key = validate(&src, 3);
            if with_key.config.as_ref() != Some(&base_config) {
                wrong.push(format!("`{key} = {v}` in [{kind}] {}", shown(&with_key)));
            }
        }
    }
    assert!(wrong.is_empty(), "not the defaults: {wrong:#?}");
}

#[test]
fn the_effective_configuration_reads_back_as_the_same_configuration() {
    let src = add_to(
        &add_to(
            EVERY_SECTION,
            "",
            "cache_memory = \"64MiB\"  # a comment\nbogus_key = 1",
        ),
        "proxy_rules",
        "cache_heuristic = \"none\"",
    );
    let v = validate(&src, 3);
    let printed = crate::effective(&src, 3);
    let again = validate(&printed, 3);
    assert_eq!(again.config, v.config, "{printed}");
    // Written lines are active and marked with their owner; defaults are comments.
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("cache_memory = \"64MiB\" ") && l.ends_with("# rampart")),
        "{printed}"
    );
    assert!(printed.contains("listening_port_http = 8080"), "{printed}");
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("# listening_address = \"0.0.0.0\"")
                && l.ends_with("# ARC2, default")),
        "{printed}"
    );
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("# workers = 3") && l.contains("the number of CPUs")),
        "{printed}"
    );
    assert!(
        printed.contains("# bogus_key: not a key of this section, ignored"),
        "{printed}"
    );
    // A rule's inherited key shows the global value it gets.
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("# store_set_cookie = false")
                && l.contains("default: the global one")),
        "{printed}"
    );
    // A path rule's max_age_seconds comes from its rule.
    let sections: Vec<_> = printed.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(
        sections,
        [
            "[[proxy_rules]]",
            "[[proxy_rules.path_rules]]",
            "[[proxy_rules.disallowed_user_agents]]",
            "[[proxy_rules]]",
            "[proxy_rules.routing_rules]",
            "[[proxy_rules.routing_rules.routing_locations]]"
        ]
    );
}

#[test]
fn a_rule_left_out_of_screening_is_a_warning_when_screening_is_on() {
    let rule = RULE_KEYS.replace("enable_sql_injection_protection = true\n", "");
    let v = validate(&format!("[[proxy_rules]]\ndomain = \"a.test\"\n{rule}"), 1);
    assert!(warnings(&v).is_empty(), "{}", shown(&v));
    let v = validate(
        &format!(
            "add_sql_injection_protection = true\n[[proxy_rules]]\ndomain = \"a.test\"\n{rule}"
        ),
        1,
    );
    let w = warnings(&v);
    assert_eq!(w.len(), 1, "{}", shown(&v));
    assert!(w[0].contains("not screened for SQL injection"), "{w:?}");
}

#[test]
fn cache_statuses_global_and_per_rule() {
    let v = with("", "");
    let c = v.config.expect("config");
    assert_eq!(c.cache.statuses, CacheStatuses::Arc2);
    assert_eq!(c.rules[0].cache_statuses, CacheStatuses::Arc2);
    let c = with("cache_statuses = \"rfc9111\"", "")
        .config
        .expect("config");
    assert_eq!(c.rules[0].cache_statuses, CacheStatuses::Rfc9111);
    let c = with("cache_statuses = \"rfc9111\"", "cache_statuses = \"arc2\"")
        .config
        .expect("config");
    assert_eq!(c.rules[0].cache_statuses, CacheStatuses::Arc2);
    let v = with("", "cache_statuses = \"all\"");
    let e = errors(&v);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("unknown cache_statuses \"all\""), "{e:?}");
}

#[test]
fn regex_and_case_insensitive_path_rules() {
    let src = r#"
[[proxy_rules]]
domain = "x"
max_age_seconds = 60
forward_ipv4 = "127.0.0.1"
[[proxy_rules.path_rules]]
path = "^/api/v[0-9]+/"
match_type = "Regex"
rule_type = "Whitelist"
max_age_seconds = 5
[[proxy_rules.path_rules]]
path = "\\.(JPG|PNG)$"
match_type = "Regex"
ignore_case = true
rule_type = "Whitelist"
max_age_seconds = 600
[[proxy_rules.path_rules]]
path = "/Admin"
match_type = "StartsWith"
ignore_case = true
rule_type = "Blacklist"
max_age_seconds = 0
"#;
    let v = validate(src, 1);
    let c = v.config.unwrap_or_else(|| panic!("{:?}", v.diagnostics));
    let pr = &c.rules[0].path_rules;
    assert!(pr[0].matches("/api/v2/users"));
    assert!(!pr[0].matches("/api/vx/users"));
    assert!(!pr[0].matches("/x/api/v2/"), "anchored by its ^");
    assert!(pr[1].matches("/img/a.jpg") && pr[1].matches("/img/A.PNG"));
    assert!(!pr[1].matches("/img/a.gif"));
    assert!(pr[2].matches("/admin/x") && pr[2].matches("/ADMIN") && !pr[2].matches("/adm"));
    // A pattern that backtracking engines take exponential time on is linear here.
    let evil = Pattern::new("^(a+)+$", false).expect("valid");
    let subject = format!("{}!", "a".repeat(100_000));
    assert!(!evil.regex.is_match(&subject));
    // A bad pattern is reported at its line and column, with what is wrong.
    let bad = src.replace("^/api/v[0-9]+/", "^/api/(v[0-9]+/");
    let v = validate(&bad, 1);
    let e = errors(&v);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("at 7:8") && e[0].contains("is not a valid regular expression"),
        "{e:?}"
    );
    assert!(e[0].contains("unclosed group"), "{e:?}");
    // Look-around is not supported (it is what makes matching non-linear): said so.
    let v = validate(&src.replace("^/api/v[0-9]+/", "^/api(?=/v)"), 1);
    assert!(errors(&v)[0].contains("look-around"), "{:?}", errors(&v));
}

#[test]
fn header_rules_redirects_rewrites_and_error_pages() {
    let page = std::env::temp_dir().join(format!("rampart-page-{}.html", std::process::id()));
    std::fs::write(&page, "<h1>down</h1>").expect("write");
    let src = format!(
        r#"error_pages_dir = {:?}
[[proxy_rules]]
domain = "x"
max_age_seconds = 60
forward_ipv4 = "127.0.0.1"
[proxy_rules.request_headers]
set = {{ "X-Real-IP" = "{{client_ip}}", "X-Url" = "{{scheme}}://{{host}}{{path}}" }}
add = {{ "X-Via" = "rampart" }}
remove = ["X-Debug"]
[proxy_rules.response_headers]
set = {{ "X-Frame-Options" = "DENY" }}
remove = ["Server"]
[[proxy_rules.redirects]]
from = "^/old/(.*)$"
to = "https://new.example/$1"
status = 308
[[proxy_rules.rewrites]]
from = "^/api/v1/(?P<rest>.*)$"
to = "/v1/${{rest}}"
[proxy_rules.error_pages]
503 = {:?}
404 = {{ body = "<p>not here</p>" }}
origin_errors = true
[[proxy_rules.path_rules]]
path = "/static"
match_type = "StartsWith"
rule_type = "Whitelist"
max_age_seconds = 600
[proxy_rules.path_rules.response_headers]
set = {{ "Cache-Control" = "public, max-age=600" }}
"#,
        std::env::temp_dir().display().to_string(),
        page.display().to_string()
    );
    let v = validate(&src, 1);
    let c = v.config.unwrap_or_else(|| panic!("{:?}", v.diagnostics));
    let r = &c.rules[0];
    assert_eq!(r.request_headers.set.len(), 2);
    assert_eq!(r.request_headers.set[0].0, "x-real-ip");
    assert_eq!(
        r.request_headers.set[0].1.parts,
        [TemplatePart::Var(Variable::ClientIp)]
    );
    assert_eq!(r.request_headers.remove[0], "x-debug");
    assert!(r.request_headers.uses(Variable::Host));
    assert_eq!(r.response_headers.set[0].0, "x-frame-options");
    assert_eq!(r.redirects[0].status, 308);
    assert!(r.redirects[0].keep_query);
    assert_eq!(r.rewrites[0].to, "/v1/${rest}");
    assert_eq!(r.error_pages.get(503).expect("503").body, b"<h1>down</h1>");
    assert_eq!(
        r.error_pages.get(503).expect("503").content_type,
        "text/html; charset=utf-8"
    );
    assert_eq!(
        r.error_pages.get(404).expect("404").content_type,
        "text/html; charset=utf-8"
    );
    assert!(r.error_pages.origin_errors);
    assert_eq!(r.path_rules[0].response_headers.set.len(), 1);
    // The printed file reads back the same.
    let printed = crate::effective(&src, 1);
    assert_eq!(validate(&printed, 1).config, Some(c), "{printed}");

    // Every mistake, at its line.
    for (bad, want) in [
        ("{client_ip}", "{nope}"),
        ("\"X-Real-IP\"", "\"Content-Length\""),
        ("\"X-Real-IP\"", "\"Bad Name\""),
        ("status = 308", "status = 200"),
        ("to = \"https://new.example/$1\"", "to = \"new.example/$1\""),
        (
            "to = \"https://new.example/$1\"",
            "to = \"https://x/{client_ip}\"",
        ),
        ("to = \"/v1/${rest}\"", "to = \"v1?x=1\""),
        ("from = \"^/old/(.*)$\"", "from = \"^/old/(.*$\""),
        ("404 = {", "200 = {"),
        ("origin_errors = true", "origin_errors = \"yes\""),
    ] {
        let text = src.replace(bad, want);
        assert_ne!(text, src, "{bad}");
        let v = validate(&text, 1);
        let e = errors(&v);
        assert_eq!(e.len(), 1, "{want}: {e:?}");
        assert!(e[0].starts_with("error at "), "{e:?}");
    }
    let missing = src.replace(
        &format!("{:?}", page.display().to_string()),
        &format!(
            "{:?}",
            std::env::temp_dir()
                .join("nonexistent-503.html")
                .display()
                .to_string()
        ),
    );
    assert!(errors(&validate(&missing, 1))[0].contains("cannot read the error page"));
    let _ = std::fs::remove_file(&page);
}

#[test]
fn cache_tag_headers() {
    let c = with("", "").config.expect("config");
    let names: Vec<_> = c
        .cache
        .tag_headers
        .iter()
        .map(|h| h.as_str().to_owned())
        .collect();
    assert_eq!(names, ["surrogate-key", "cache-tag", "xkey"]);
    let c = with("cache_tag_headers = []", "").config.expect("config");
    assert!(c.cache.tag_headers.is_empty());
    let v = with("cache_tag_headers = [\"X-Tags\", \"bad name\"]", "");
    let e = errors(&v);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("\"bad name\" is not a valid header field name"),
        "{e:?}"
    );
}

#[test]
fn a_field_name_with_a_dot_is_read_whole() {
    let v = with(
        "",
        "[proxy_rules.response_headers]\nset = { \"X.Trace\" = \"on\" }\n",
    );
    let c = v.config.unwrap_or_else(|| panic!("{:?}", v.diagnostics));
    assert_eq!(c.rules[0].response_headers.set[0].0, "x.trace");
}

/// `check` called a directory anyone could write (mode 1777) fine,
/// and the disk tier then followed links planted in it. Refused at its line and column, with
/// a fix that works when pasted.
#[test]
fn a_disk_cache_directory_others_can_write_is_an_error() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("rampart-cfg-open-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let src = format!(
        "cache_disk = {:?}\ncache_disk_size = \"64MiB\"\n",
        dir.display().to_string()
    );
    let v = validate(&src, 1);
    let e = errors(&v);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("error at 1:14 `cache_disk`")
            && e[0].contains("can be written by other users (mode 1777)")
            && e[0].contains(&format!("chmod 700 {}", dir.display())),
        "{e:?}"
    );
    // The fix, pasted, makes it pass.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod 700");
    assert!(errors(&validate(&src, 1)).is_empty());
    // A link planted under the probe's name is not written through.
    let victim = dir.join("victim");
    std::fs::write(&victim, b"keep").expect("victim");
    let probe = dir.join(format!(".rampart-probe-{}", std::process::id()));
    std::os::unix::fs::symlink(&victim, &probe).expect("link");
    let _ = validate(&src, 1);
    assert_eq!(std::fs::read(&victim).expect("victim"), b"keep");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `KEY = "…"` a hint gives as the fix, as written in the hint.
fn pasted_fix(hint: &str, key: &str) -> String {
    let start = hint
        .find(&format!("`{key} = "))
        .unwrap_or_else(|| panic!("no `{key} = …` in the hint {hint:?}"));
    let rest = &hint[start + 1..];
    rest[..rest.find('`').expect("closing backtick")].to_owned()
}

#[test]
fn a_redirect_target_with_a_line_break_or_a_control_character_is_an_error_at_its_line() {
    // It passed, and at run time the answer had no `Location` (a field value cannot hold
    // them). Non-ASCII text has the same fate.
    for (written, fixed) in [
        (
            r#"to = "/new\r\nSet-Cookie: a=b""#,
            r#"to = "/new%0D%0ASet-Cookie: a=b""#,
        ),
        (r#"to = "/a\tb/$1""#, r#"to = "/a%09b/$1""#),
        (r#"to = "/x\u0000\"\\""#, r#"to = "/x%00\"\\""#),
        (
            r#"to = "https://{host}/\u007f""#,
            r#"to = "https://{host}/%7F""#,
        ),
        (r#"to = "/café""#, r#"to = "/caf%C3%A9""#),
    ] {
        let src =
            format!("{ARC2_BENCH}[[proxy_rules.redirects]]\nfrom = \"^/old/(.*)$\"\n{written}\n");
        let line = src.lines().count();
        let v = validate(&src, 1);
        let e: Vec<&Diagnostic> = v.errors().collect();
        assert_eq!(e.len(), 1, "{written}: {e:?}");
        assert_eq!((e[0].line, e[0].column), (line, 6), "{written}: {e:?}");
        assert_eq!(e[0].key, "proxy_rules[0].redirects[0].to");
        assert!(e[0].message.contains("cannot be in a `Location`"), "{e:?}");
        // The fix, pasted in place of the line, passes.
        let fix = pasted_fix(&e[0].hint, "to");
        assert_eq!(fix, fixed);
        let v = validate(&src.replace(written, &fix), 1);
        assert!(v.config.is_some(), "{fix}: {:?}", v.diagnostics);
    }
}

#[test]
fn a_domain_with_a_control_character_is_an_error() {
    for (written, fixed) in [
        (r#"domain = "\u0000""#, None),
        (
            r#"domain = "exa\u0000mple.com""#,
            Some(r#"domain = "example.com""#),
        ),
        (
            r#"domain = "a.example\r\nb""#,
            Some(r#"domain = "a.exampleb""#),
        ),
        (
            r#"domain = "x\u007f.example""#,
            Some(r#"domain = "x.example""#),
        ),
        (
            r#"domain = "*.x\tz.example""#,
            Some(r#"domain = "*.xz.example""#),
        ),
    ] {
        let src = ARC2_BENCH.replace(r#"domain = "localhost""#, written);
        let v = validate(&src, 1);
        let e: Vec<&Diagnostic> = v.errors().collect();
        assert_eq!(e.len(), 1, "{written}: {e:?}");
        let line = 1 + src
            .lines()
            .position(|l| l.starts_with("domain"))
            .expect("domain");
        assert_eq!((e[0].line, e[0].column), (line, 10), "{written}: {e:?}");
        assert!(e[0].message.contains("control character"), "{e:?}");
        match fixed {
            Some(fixed) => {
                let fix = pasted_fix(&e[0].hint, "domain");
                assert_eq!(fix, fixed);
                let v = validate(&src.replace(written, &fix), 1);
                assert!(v.config.is_some(), "{fix}: {:?}", v.diagnostics);
            }
            None => assert!(e[0].hint.contains("example.com"), "{e:?}"),
        }
    }
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

#[test]
fn error_pages_are_read_only_from_error_pages_dir() {
    // An API-key holder could publish any file the process can read (`/etc/shadow`), read
    // /dev/urandom without a limit, or block `check` on a FIFO.
    let root = scratch_dir("pages");
    let conf_dir = root.join("etc");
    std::fs::create_dir_all(conf_dir.join("errors")).expect("mkdir");
    let config = conf_dir.join("rampart.toml");
    std::fs::write(conf_dir.join("502.html"), "<h1>Away</h1>").expect("write");
    std::fs::write(conf_dir.join("errors/503.html"), "<h1>Busy</h1>").expect("write");
    std::fs::write(root.join("secret.txt"), "the secret").expect("write");
    std::os::unix::fs::symlink(root.join("secret.txt"), conf_dir.join("link.html")).expect("ln");
    std::fs::write(conf_dir.join("big.html"), vec![b'x'; (1 << 20) + 1]).expect("write");
    std::fs::write(
        conf_dir.join("key.txt"),
        "-----BEGIN PRIVATE KEY-----\nMIIE\n",
    )
    .expect("write");
    let fifo = std::process::Command::new("mkfifo")
        .arg(conf_dir.join("pipe.html"))
        .status()
        .expect("mkfifo");
    assert!(fifo.success());
    let file_of = |page: &str| {
        format!("{ARC2_BENCH}[proxy_rules.error_pages]\n502 = {page}\n503 = \"errors/503.html\"\n")
    };
    let page_line = |src: &str| {
        1 + src
            .lines()
            .position(|l| l.starts_with("502 ="))
            .expect("502")
    };

    // Inside: relative (from the configuration file's directory) or absolute.
    for page in [
        "\"502.html\"".to_owned(),
        format!("{:?}", conf_dir.join("502.html").display().to_string()),
    ] {
        let v = validate_file(&file_of(&page), 1, &config);
        let c = v
            .config
            .unwrap_or_else(|| panic!("{page}: {:?}", v.diagnostics));
        assert_eq!(
            c.rules[0].error_pages.get(502).expect("502").body,
            b"<h1>Away</h1>"
        );
        assert_eq!(
            c.rules[0].error_pages.get(503).expect("503").body,
            b"<h1>Busy</h1>"
        );
    }

    let secret = root.join("secret.txt").display().to_string();
    for (page, says, fix) in [
        (
            format!("{secret:?}"),
            "is outside `error_pages_dir`",
            Some("copy"),
        ),
        (
            "\"/etc/passwd\"".to_owned(),
            "is outside `error_pages_dir`",
            Some("copy"),
        ),
        (
            "\"../secret.txt\"".to_owned(),
            "has `..` in it",
            Some("copy"),
        ),
        (
            "\"errors/../502.html\"".to_owned(),
            "has `..` in it",
            Some("paste"),
        ),
        (
            "{ file = \"./errors/../errors/503.html\" }".to_owned(),
            "has `..` in it",
            Some("paste"),
        ),
        (
            "\"link.html\"".to_owned(),
            "is a symbolic link to",
            Some("copy"),
        ),
        ("\"pipe.html\"".to_owned(), "not a regular file", None),
        ("\"big.html\"".to_owned(), "larger than 1048576 bytes", None),
        (
            "{ file = \"key.txt\", content_type = \"text/plain\" }".to_owned(),
            "holds a private key",
            None,
        ),
        (
            "{ file = \"rampart.toml\", content_type = \"text/plain\" }".to_owned(),
            "the configuration file itself",
            None,
        ),
        (
            "\"missing.html\"".to_owned(),
            "cannot read the error page",
            None,
        ),
    ] {
        let src = file_of(&page);
        std::fs::write(&config, &src).expect("write");
        let v = validate_file_in_time(&src, &config);
        let e: Vec<&Diagnostic> = v.errors().collect();
        assert_eq!(e.len(), 1, "{page}: {e:?}");
        assert_eq!(e[0].key, "proxy_rules[0].error_pages.502", "{page}");
        assert_eq!((e[0].line, e[0].column), (page_line(&src), 1), "{page}");
        assert!(e[0].message.contains(says), "{page}: {e:?}");
        assert!(
            e[0].message.contains("error_pages_dir") || e[0].hint.contains("error_pages_dir"),
            "{page}: {e:?}"
        );
        // The fix works when pasted (after copying the file, when it says to).
        let key = if page.starts_with('{') { "file" } else { "502" };
        match fix {
            Some("paste") => {
                let line = pasted_fix(&e[0].hint, key);
                let fixed = if key == "file" {
                    src.replace(&page, &format!("{{ {line} }}"))
                } else {
                    src.replace(&format!("502 = {page}"), &line)
                };
                let v = validate_file(&fixed, 1, &config);
                assert!(v.config.is_some(), "{line}: {:?}", v.diagnostics);
            }
            Some(_) => {
                assert!(e[0].hint.starts_with("copy the file into"), "{e:?}");
                let line = pasted_fix(&e[0].hint, key);
                let name = line.rsplit('"').nth(1).expect("a name");
                let from = if page.contains("passwd") {
                    std::path::PathBuf::from("/etc/passwd")
                } else {
                    root.join("secret.txt")
                };
                std::fs::copy(from, conf_dir.join(name)).expect("copy");
                let fixed = src.replace(&format!("502 = {page}"), &line);
                // (`passwd` has no extension to tell its content type by: given here.)
                let v = validate_file(
                    &fixed
                        .replace("502 = ", "502 = { content_type = \"text/plain\", file = ")
                        .replace(&format!("{name}\"\n"), &format!("{name}\" }}\n")),
                    1,
                    &config,
                );
                assert!(v.config.is_some(), "{line}: {:?}", v.diagnostics);
                std::fs::remove_file(conf_dir.join(name)).expect("rm");
            }
            None => {}
        }
    }

    // Device files are refused whatever the directory: /dev/urandom is never read.
    let src = format!(
        "error_pages_dir = \"/dev\"\n{ARC2_BENCH}[proxy_rules.error_pages]\n502 = {{ file = \"urandom\", content_type = \"text/plain\" }}\n"
    );
    let e = errors(&validate_file_in_time(&src, &config));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("not a regular file"), "{e:?}");

    // `error_pages_dir`: relative to the configuration file's directory; one that does not
    // exist is an error at its line.
    let src = format!(
        "error_pages_dir = \"errors\"\n{ARC2_BENCH}[proxy_rules.error_pages]\n503 = \"503.html\"\n"
    );
    let v = validate_file(&src, 1, &config);
    assert!(v.config.is_some(), "{:?}", v.diagnostics);
    let v = validate_file(&src.replace("\"errors\"", "\"nowhere\""), 1, &config);
    let e: Vec<&Diagnostic> = v.errors().collect();
    assert_eq!(e[0].key, "error_pages_dir", "{e:?}");
    assert_eq!((e[0].line, e[0].column), (1, 19), "{e:?}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_certificate_file_that_is_a_device_or_a_directory_is_an_error() {
    // The rule API can name these: /dev/zero was read without end when the rule was put in
    // service, and a FIFO waited for a writer.
    for (path, says) in [
        ("/dev/zero", "not a regular file"),
        ("/dev/null", "not a regular file"),
        ("/tmp", "a directory"),
    ] {
        let v = validate(
            &format!(
                "[[proxy_rules]]\ndomain = \"a.example\"\nforward_ipv4 = \"127.0.0.1\"\n\
                 tls_cert_file = {path:?}\ntls_key_file = {path:?}\n"
            ),
            1,
        );
        let e = errors(&v);
        assert_eq!(e.len(), 2, "{path}: {e:?}");
        assert!(
            e[0].contains("error at 4:17 `proxy_rules[0].tls_cert_file`"),
            "{e:?}"
        );
        assert!(e[0].contains(says) && e[1].contains(says), "{e:?}");
    }
}

#[test]
fn expires_takes_seconds_durations_and_off() {
    let path = "[[proxy_rules.path_rules]]\npath = \"/live\"\nmatch_type = \"StartsWith\"\nrule_type = \"Whitelist\"\nmax_age_seconds = 1\nexpires = \"off\"\n\
                [[proxy_rules.path_rules]]\npath = \"/static\"\nmatch_type = \"StartsWith\"\nrule_type = \"Whitelist\"\nmax_age_seconds = 1\nexpires = \"1h30m\"\n";
    let v = with("", &format!("expires = \"7d\"\n{path}"));
    let c = v.config.unwrap_or_else(|| panic!("{:?}", v.diagnostics));
    let r = &c.rules[0];
    assert_eq!(r.expires, Some(604_800));
    assert_eq!(r.path_rules[0].expires, Some(None));
    assert_eq!(r.path_rules[1].expires, Some(Some(5_400)));
    assert_eq!(
        with("", "expires = 0\n").config.expect("valid").rules[0].expires,
        Some(0)
    );
    assert_eq!(with("", "").config.expect("valid").rules[0].expires, None);
    for bad in ["\"7 days\"", "\"20y\"", "-1", "true", "\"3651d\""] {
        let v = with("", &format!("expires = {bad}\n"));
        let e: Vec<_> = v.errors().collect();
        assert_eq!(e.len(), 1, "{bad}: {e:?}");
        assert_eq!(e[0].line, 21, "{bad}: {e:?}");
        assert!(e[0].message.contains("lifetime"), "{bad}: {e:?}");
        assert!(e[0].hint.contains("expires = \"7d\""), "{bad}: {e:?}");
    }
}

#[test]
fn max_age_by_status_per_rule_and_path_rule() {
    let v = with(
        "",
        "max_age_by_status = { 200 = 600, 404 = 60, any = 5 }\n\
         [[proxy_rules.path_rules]]\npath = \"/api/\"\nmatch_type = \"StartsWith\"\n\
         rule_type = \"Whitelist\"\nmax_age_seconds = 60\nmax_age_by_status = { 404 = 0 }\n\
         [[proxy_rules.path_rules]]\npath = \"/static/\"\nmatch_type = \"StartsWith\"\n\
         rule_type = \"Whitelist\"\nmax_age_seconds = 60\n",
    );
    let c = v
        .config
        .clone()
        .unwrap_or_else(|| panic!("{:?}", errors(&v)));
    let r = &c.rules[0];
    assert_eq!(*r.max_age_by_status, [(200, 600), (404, 60), (0, 5)]);
    assert_eq!(
        r.path_rules[0].max_age_by_status.as_deref(),
        Some(&[(404, 0)][..])
    );
    assert_eq!(r.path_rules[1].max_age_by_status, None);
    assert!(with("", "").config.expect("config").rules[0]
        .max_age_by_status
        .is_empty());
    // The printed file reads back the same.
    let src = format!("{ARC2_BENCH}max_age_by_status = {{ 200 = 600, 404 = 60 }}\n");
    let c = validate(&src, 1).config.expect("config");
    let printed = crate::effective(&src, 1);
    assert_eq!(validate(&printed, 1).config, Some(c), "{printed}");
}

#[test]
fn max_age_by_status_reports_bad_entries_where_they_are() {
    let v = with(
        "",
        "max_age_by_status = { 200 = 600, 99 = 1, 304 = 60, 404 = \"1m\", ok = 3 }",
    );
    let e = errors(&v);
    assert_eq!(e.len(), 4, "{e:?}");
    let line = ARC2_BENCH.lines().count() + 2;
    assert!(e.iter().all(|m| m.contains(&format!("{line}:"))), "{e:?}");
    assert!(e[0].contains("\"99\" is not a status code"), "{e:?}");
    assert!(e[1].contains("status 304 is never stored"), "{e:?}");
    assert!(
        e[2].contains("the lifetime of 404 must be a whole number of seconds"),
        "{e:?}"
    );
    assert!(e[3].contains("\"ok\" is not a status code"), "{e:?}");
    let v = with("", "max_age_by_status = 600");
    let e = errors(&v);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("expected a table"), "{e:?}");
}

#[test]
fn stale_windows_global_and_per_rule() {
    let c = with("", "").config.expect("config");
    assert_eq!(c.cache.stale_while_revalidate, None);
    assert_eq!(c.rules[0].stale_if_error, None);
    let c = with(
        "stale_while_revalidate_seconds = 30\nstale_if_error_seconds = 86400",
        "stale_if_error_seconds = 60",
    )
    .config
    .expect("config");
    assert_eq!(c.rules[0].stale_while_revalidate, Some(30));
    assert_eq!(c.rules[0].stale_if_error, Some(60));
    let v = with("", "stale_while_revalidate_seconds = -1");
    let e = errors(&v);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("stale_while_revalidate_seconds"), "{e:?}");
}

#[test]
fn compression_types_and_min_length_are_read_and_a_rule_replaces_the_global_ones() {
    let v = with(
        "enable_compression = true\ncompression_types = [\"text/*\", \"application/json\"]\ncompression_min_length = \"1KiB\"",
        "enable_compression = true",
    );
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    let c = v.config.expect("config").rules[0]
        .compression
        .clone()
        .expect("on");
    assert_eq!(
        c.types,
        Some(vec![
            MediaRange::Type("text".into()),
            MediaRange::Exact("application/json".into())
        ])
    );
    assert_eq!(c.min_length, 1024);
    // The rule's own keys replace the global ones; `*` and `*/*` are every type.
    let v = with(
        "enable_compression = true\ncompression_types = [\"text/*\"]\ncompression_min_length = 1024",
        "enable_compression = true\ncompression_types = [\"*\", \"Image/SVG+XML\"]\ncompression_min_length = 10",
    );
    let c = v.config.expect("config").rules[0]
        .compression
        .clone()
        .expect("on");
    assert_eq!(
        c.types,
        Some(vec![
            MediaRange::Any,
            MediaRange::Exact("image/svg+xml".into())
        ])
    );
    assert_eq!(c.min_length, 10);
}

#[test]
fn the_nearest_compression_threshold_wins() {
    // The global key over the global flag; a rule's flag over the global key; within one
    // section the key over the flag, with a warning.
    let cases = [
        (
            "compression_flags = \"min_length=100\"\ncompression_min_length = 200",
            "",
            200,
            true,
        ),
        (
            "compression_min_length = 200",
            "compression_flags = \"gzip min_length=300\"",
            300,
            false,
        ),
        (
            "compression_flags = \"min_length=100\"",
            "compression_flags = \"gzip\"",
            100,
            false,
        ),
        (
            "",
            "compression_flags = \"min_length=5\"\ncompression_min_length = 7",
            7,
            true,
        ),
        ("", "", 256, false),
    ];
    for (global, rule, want, warned) in cases {
        let v = with(
            &format!("enable_compression = true\n{global}"),
            &format!("enable_compression = true\n{rule}"),
        );
        let ws = warnings(&v);
        assert_eq!(
            ws.iter()
                .any(|w| w.contains("`compression_min_length` is used")),
            warned,
            "{global} / {rule}: {ws:?}"
        );
        let c = v.config.expect("config").rules[0].compression.clone();
        assert_eq!(c.expect("on").min_length, want, "{global} / {rule}");
    }
}

#[test]
fn a_compression_type_without_a_slash_is_an_error_at_its_line_and_the_fix_pastes() {
    let written =
        "compression_types = [\"html\", \"text/css; charset=utf-8\", \"application/json\", \"??\"]";
    let src = format!("enable_compression = true\n{written}\n{ARC2_BENCH}");
    let v = validate(&src, 1);
    let e: Vec<&Diagnostic> = v.errors().collect();
    assert_eq!(e.len(), 3, "{e:?}");
    assert_eq!((e[0].line, e[0].column), (2, 22), "{e:?}");
    assert_eq!(e[0].key, "compression_types[0]");
    assert_eq!((e[1].line, e[1].column), (2, 30), "{e:?}");
    assert!(e[2].message.contains("\"??\" is not a media type"), "{e:?}");
    let fix = pasted_fix(&e[0].hint, "compression_types");
    assert_eq!(
        fix,
        "compression_types = [\"text/html\", \"text/css\", \"application/json\"]"
    );
    let v = validate(&src.replace(written, &fix), 1);
    assert!(errors(&v).is_empty(), "{fix}: {:?}", v.diagnostics);
    // A size that is not one.
    let v = validate(
        &format!("enable_compression = true\ncompression_min_length = \"big\"\n{ARC2_BENCH}"),
        1,
    );
    let e: Vec<&Diagnostic> = v.errors().collect();
    assert_eq!(
        (e[0].key.as_str(), e[0].line),
        ("compression_min_length", 2),
        "{e:?}"
    );
    let fix = pasted_fix(&e[0].hint, "compression_min_length");
    let v = validate(
        &format!("enable_compression = true\n{fix}\n{ARC2_BENCH}"),
        1,
    );
    assert!(errors(&v).is_empty(), "{fix}: {:?}", v.diagnostics);
}

#[test]
fn rate_limit_status_is_global_and_per_rule_and_refuses_statuses_that_mean_something_else() {
    let v = with("", "");
    let c = v.config.expect("config");
    assert_eq!(c.screen.rate_limit_status, 429);
    assert_eq!(c.rules[0].rate_limit_status, None);
    let v = with("rate_limit_status = 503", "rate_limit_status = 420");
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    let c = v.config.expect("config");
    assert_eq!(c.screen.rate_limit_status, 503);
    assert_eq!(c.rules[0].rate_limit_status, Some(420));
    for (bad, why) in [
        ("401", "cannot be"),
        ("200", "out of range"),
        ("600", "out of range"),
    ] {
        let src = format!("rate_limit_status = {bad}\n{ARC2_BENCH}");
        let v = validate(&src, 1);
        let e: Vec<&Diagnostic> = v.errors().collect();
        assert_eq!(e.len(), 1, "{bad}: {e:?}");
        assert_eq!(
            (e[0].key.as_str(), e[0].line, e[0].column),
            ("rate_limit_status", 1, 21)
        );
        assert!(e[0].to_string().contains(why), "{bad}: {e:?}");
    }
    let e = validate(&format!("rate_limit_status = 401\n{ARC2_BENCH}"), 1);
    let hint = &e.errors().next().expect("error").hint;
    let fix = pasted_fix(hint, "rate_limit_status");
    assert!(errors(&validate(&format!("{fix}\n{ARC2_BENCH}"), 1)).is_empty());
}

#[test]
fn redirect_to_https_status_values() {
    let base =
        "[[proxy_rules]]\ndomain = \"a.example\"\ntls = \"internal\"\nredirect_to_https = true\n";
    let tail = "forward_addr = \"127.0.0.1\"\nmax_age_seconds = 0\n";
    let v = validate(&format!("{base}{tail}"), 1);
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    assert_eq!(
        v.config.expect("config").rules[0].redirect_to_https_status,
        308
    );
    for ok in [301, 302, 307, 308] {
        let v = validate(&format!("{base}redirect_to_https_status = {ok}\n{tail}"), 1);
        assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
        assert_eq!(
            v.config.expect("config").rules[0].redirect_to_https_status,
            ok
        );
    }
    let v = validate(&format!("{base}redirect_to_https_status = 303\n{tail}"), 1);
    assert!(
        v.errors()
            .any(|d| d.key == "proxy_rules[0].redirect_to_https_status"
                && d.line == 5
                && d.hint.contains("redirect_to_https_status = 301")),
        "{:?}",
        v.diagnostics
    );
}

#[test]
fn a_deny_path_rule_needs_no_caching_keys_and_shadowed_path_rules_are_warned() {
    let v = with(
        "",
        "[[proxy_rules.path_rules]]\npath = \"/admin\"\nmatch_type = \"StartsWith\"\ndeny = true\n",
    );
    let c = v.config.as_ref().expect("valid");
    assert!(c.rules[0].path_rules[0].deny);
    assert!(
        !v.diagnostics
            .iter()
            .any(|d| d.key.contains("path_rules") || d.message.contains("path_rules")),
        "{:?}",
        v.diagnostics
    );
    // Headers at lines 21, 26, 30, 35 and 40: the first that matches decides, so /static/img and
    // /ADMIN/x never
    // apply; /api ignoring case is not covered by anything case-sensitive.
    let v = with(
        "",
        "[[proxy_rules.path_rules]]\npath = \"/static\"\nmatch_type = \"StartsWith\"\nrule_type = \"Whitelist\"\nmax_age_seconds = 60\n\
         [[proxy_rules.path_rules]]\npath = \"/static/img\"\nmatch_type = \"StartsWith\"\ndeny = true\n\
         [[proxy_rules.path_rules]]\npath = \"/admin\"\nmatch_type = \"StartsWith\"\nignore_case = true\ndeny = true\n\
         [[proxy_rules.path_rules]]\npath = \"/ADMIN/x\"\nmatch_type = \"Equals\"\nrule_type = \"Whitelist\"\nmax_age_seconds = 60\n\
         [[proxy_rules.path_rules]]\npath = \"/api\"\nmatch_type = \"StartsWith\"\nignore_case = true\nrule_type = \"Whitelist\"\nmax_age_seconds = 60\n",
    );
    assert!(v.config.is_some(), "{:?}", v.diagnostics);
    let w: Vec<_> = v
        .diagnostics
        .iter()
        .filter(|d| d.message.contains("never applies"))
        .collect();
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!(w[0].line, 26, "{w:?}");
    assert!(w[0].message.contains("line 21 (`/static`)"), "{w:?}");
    assert!(w[0].message.contains("it caches; this one denies"), "{w:?}");
    assert_eq!(
        w[0].hint,
        "move this path rule above the one at line 21, or remove it"
    );
    assert_eq!(w[1].line, 35, "{w:?}");
    assert!(w[1].message.contains("line 30 (`/admin`)"), "{w:?}");
}
