//! Listeners and sockets: addresses, ports, the PROXY protocol.

use super::*;

#[test]
fn listen_overrides_address() {
    let v = validate("listen = [\"127.0.0.1:0\", \"[::1]:8081\"]\n", 2);
    let c = v.config.expect("config");
    assert_eq!(c.listen_http.len(), 2);
    assert_eq!(c.listen_http[1].port(), 8081);
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
