//! Screening keys: allow/deny, user agents, SQL injection, rate limits.

use super::*;

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
