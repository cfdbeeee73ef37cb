//! Origin keys: health checks, balancing, upstream protocols, idle connections.

use super::*;

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
