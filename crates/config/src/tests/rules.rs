//! `[[proxy_rules]]`: domains, paths, path rules and their match types, routing.

use super::*;

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
