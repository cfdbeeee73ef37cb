//! A rule's origins: `forward_addr`/`forward_ipv4`/`forward_ipv6` with their ports (ARC2),
//! `[...routing_rules]` with its `[[...routing_locations]]` (ARC2), and `upstreams` (rampart),
//! and the name each is verified by over TLS.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use http::uri::Authority;

use super::protocols::{check_protocol, origin_protocol};
use crate::model::{DomainPattern, HealthCheck, OriginProtocol, RoutingMethod, UpstreamTarget};
use crate::reader::{At, Section, Sink};
use crate::validate::{error, warn, U16, U32};
use crate::Severity;

/// The name an origin is reached by over TLS (SNI, and the name its certificate must have).
pub(super) struct TlsNames {
    /// `forward_tls_name`.
    given: Option<String>,
    /// The rule's domain when it is one host.
    rule_host: Option<String>,
}

impl TlsNames {
    /// Reads `forward_tls_name`; the `bool` is false when it is invalid (reported).
    pub(super) fn read(
        s: &mut Section<'_>,
        sink: &mut Sink<'_>,
        domain: Option<&DomainPattern>,
    ) -> (TlsNames, bool) {
        let mut ok = true;
        let given = match s.string(sink, "forward_tls_name") {
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
        let rule_host = match domain {
            Some(DomainPattern::Exact(d)) => Some(d.clone()),
            _ => None,
        };
        (TlsNames { given, rule_host }, ok)
    }

    /// The name for an origin at `origin_host`: `forward_tls_name`, else the origin's host
    /// name, else (an IP address) the rule's domain when it is one host.
    fn name(&self, origin_host: &str) -> String {
        if let Some(n) = &self.given {
            return n.clone();
        }
        let bare = origin_host.trim_start_matches('[').trim_end_matches(']');
        let bare = match bare.parse::<IpAddr>() {
            Ok(_) => bare,
            // A forward_addr may carry a port.
            Err(_) => bare.rsplit_once(':').map_or(bare, |(h, _)| h),
        };
        if bare.parse::<IpAddr>().is_ok() {
            self.rule_host.clone().unwrap_or_else(|| bare.to_owned())
        } else {
            bare.to_owned()
        }
    }
}

/// A rule's origins, in order, and how a request picks one; `None` when they are invalid
/// (reported). `valid_so_far`: the rest of the rule is valid (a rule with errors is not also
/// told it has no origin).
pub(super) fn read(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    names: &TlsNames,
    valid_so_far: bool,
) -> Option<(Vec<UpstreamTarget>, RoutingMethod, Option<HealthCheck>)> {
    let mut ok = valid_so_far;
    // The rule's `origin_protocol`: the default of each of its origins.
    let (protocol, protocol_ok) = origin_protocol(s, sink);
    ok &= protocol_ok;
    let Forward {
        host,
        port,
        port_tls,
        had_error: fwd_error,
    } = read_forward(s, sink);
    ok &= !fwd_error;
    let mut upstreams = Vec::new();
    let mut routing_method = RoutingMethod::Priority;
    let mut health_check = None;
    let rule_span_at = At {
        value: (),
        key: s.path().to_owned(),
        span: s.span(),
    };
    let (listed, listed_ok) = listed(s, sink, names, protocol.as_ref());
    ok &= listed_ok;
    if let Some(rr) = s.table(sink, "routing_rules") {
        match routing_rules(
            rr,
            sink,
            host.is_some(),
            &rule_span_at,
            names,
            protocol.as_ref(),
        ) {
            Some((ranked, method, health)) => {
                upstreams = ranked;
                routing_method = method;
                health_check = health;
            }
            None => ok = false,
        }
    } else if let Some(h) = &host {
        let p = port.as_ref().map_or(80, |p| p.value as u16);
        let tls = Tls {
            port: port_tls,
            only: false,
            name: names.name(h),
            protocol: protocol.as_ref(),
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
    ok.then_some((upstreams, routing_method, health_check))
}

/// `upstreams` (rampart's key): `HOST:PORT` or `https://HOST:PORT` entries. The valid ones,
/// and whether all were.
fn listed(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    names: &TlsNames,
    protocol: Option<&At<OriginProtocol>>,
) -> (Vec<UpstreamTarget>, bool) {
    let mut ok = true;
    let mut listed = Vec::new();
    if let Some(list) = s.strings(sink, "upstreams") {
        for u in &list.value {
            let text = u.value.trim();
            let (tls, text) = match text.strip_prefix("https://") {
                Some(rest) => (true, rest),
                None => (false, text.strip_prefix("http://").unwrap_or(text)),
            };
            match Authority::from_str(text) {
                Ok(authority) if authority.port_u16().is_some_and(|p| p > 0) => {
                    let target = UpstreamTarget {
                        tls: tls.then(|| authority.clone()),
                        https_only: tls,
                        tls_name: names.name(authority.host()),
                        authority,
                        weight: 1,
                        protocol: protocol.map_or(OriginProtocol::Http1, |p| p.value),
                    };
                    match protocol.map(|p| check_protocol(sink, p, &target)) {
                        Some(false) => ok = false,
                        _ => listed.push(target),
                    }
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
    (listed, ok)
}

/// `[...routing_rules]` (ARC2): its locations in the order they are tried (primary first, then
/// by priority number, then file order) and the routing method.
fn routing_rules(
    mut rr: Section<'_>,
    sink: &mut Sink<'_>,
    forward_given: bool,
    rule_span_at: &At<()>,
    names: &TlsNames,
    protocol: Option<&At<OriginProtocol>>,
) -> Option<(Vec<UpstreamTarget>, RoutingMethod, Option<HealthCheck>)> {
    let mut ok = true;
    if forward_given {
        warn(
            sink,
            rule_span_at,
            "`routing_rules` is present, so this rule's own forward_* keys are ignored",
            "move the origin into a [[...routing_locations]] entry, or remove routing_rules",
        );
    }
    let routing_method = match rr.string(sink, "routing_method") {
        Some(m) => match m.value.as_str() {
            "Priority" => RoutingMethod::Priority,
            "Weighted" => RoutingMethod::Weighted,
            "Performance" => RoutingMethod::Performance,
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
    let health_check = health_check(&mut rr, sink);
    let mut ranked = Vec::new();
    match rr.tables(sink, "routing_locations") {
        Some(locs) => {
            for (i, loc) in locs.into_iter().enumerate() {
                match routing_location(loc, sink, https_only, names, protocol) {
                    Some((primary, priority, t)) => {
                        ranked.push((!primary, priority.unwrap_or(u32::MAX), i, t))
                    }
                    None => ok = false,
                }
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
    let upstreams = ranked.into_iter().map(|(_, _, _, t)| t).collect();
    ok.then_some((upstreams, routing_method, health_check))
}

/// `enable_health_checks`, `health_check_interval` (seconds; 0 is read as 1, with a warning)
/// and `health_check_path` (default `/`; a path without a leading `/` gets one, with a
/// warning). `None` when checks are off.
fn health_check(rr: &mut Section<'_>, sink: &mut Sink<'_>) -> Option<HealthCheck> {
    let enabled = rr
        .bool(sink, "enable_health_checks")
        .is_some_and(|b| b.value);
    let interval = rr.int(sink, "health_check_interval", 0, U32);
    let path = rr.string(sink, "health_check_path");
    if !enabled {
        return None;
    }
    let seconds = match interval {
        Some(i) if i.value == 0 => {
            warn(
                sink,
                &i,
                "a health check interval of 0 seconds would probe without pause; using 1",
                "set health_check_interval to the seconds between probes, e.g. 5",
            );
            1
        }
        Some(i) => i.value as u64,
        None => DEFAULT_HEALTH_CHECK_INTERVAL,
    };
    let Some(p) = path else {
        return Some(HealthCheck {
            interval: std::time::Duration::from_secs(seconds),
            path: "/".to_owned(),
        });
    };
    let path = if p.value.starts_with('/') {
        p.value.clone()
    } else {
        warn(
            sink,
            &p,
            format!(
                "health_check_path {:?} does not start with `/`; probing /{}",
                p.value, p.value
            ),
            "write the path as the origin serves it, e.g. \"/health\"",
        );
        format!("/{}", p.value)
    };
    if http::uri::PathAndQuery::try_from(path.as_str()).is_err() {
        error(
            sink,
            &p,
            format!(
                "health_check_path {:?} is not a valid request path",
                p.value
            ),
            "write a path such as \"/health\" (percent-encode spaces and other special characters)",
        );
        return None;
    }
    Some(HealthCheck {
        interval: std::time::Duration::from_secs(seconds),
        path,
    })
}

/// `health_check_interval` when a file turns checks on without one (ARC2 requires the key).
const DEFAULT_HEALTH_CHECK_INTERVAL: u64 = 10;

/// One `[[...routing_locations]]`: whether it is the primary, its priority and its target;
/// `None` when it is invalid (reported).
fn routing_location(
    mut loc: Section<'_>,
    sink: &mut Sink<'_>,
    https_only: bool,
    names: &TlsNames,
    rule_protocol: Option<&At<OriginProtocol>>,
) -> Option<(bool, Option<u32>, UpstreamTarget)> {
    let primary = loc.bool(sink, "primary").is_some_and(|b| b.value);
    let (own, protocol_ok) = origin_protocol(&mut loc, sink);
    if !protocol_ok {
        return None;
    }
    let priority = loc.int(sink, "priority", 0, U16).map(|p| p.value as u32);
    let Forward {
        host,
        port,
        port_tls,
        had_error,
    } = read_forward(&mut loc, sink);
    let at = At {
        value: (),
        key: loc.path().to_owned(),
        span: loc.span(),
    };
    let target = match host {
        Some(h) => {
            let port = port.map_or(80, |p| p.value as u16);
            let weight = priority.unwrap_or(1).max(1);
            let tls = Tls {
                port: port_tls,
                only: https_only,
                name: names.name(&h),
                protocol: own.as_ref().or(rule_protocol),
            };
            make_target(sink, &at, &h, port, tls, weight)
        }
        None if !had_error => {
            loc.missing(
                sink,
                "forward_ipv4",
                Severity::Error,
                "this routing location has no address",
                "add `forward_ipv4 = \"127.0.0.1\"` (or forward_addr / forward_ipv6)",
            );
            None
        }
        None => None,
    };
    loc.finish(sink);
    target
        .filter(|_| !had_error)
        .map(|t| (primary, priority, t))
}

/// `forward_addr` / `forward_ipv4` / `forward_ipv6` and the ports, as a rule or a routing
/// location has them.
struct Forward {
    /// The origin's host (precedence: addr > ipv4 > ipv6).
    host: Option<String>,
    /// `forward_port_http`.
    port: Option<At<i64>>,
    /// `forward_port_https`.
    port_tls: Option<u16>,
    /// One of the keys was invalid (reported).
    had_error: bool,
}

/// Reads `forward_addr` / `forward_ipv4` / `forward_ipv6` + ports from a rule or a routing
/// location.
fn read_forward(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Forward {
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
    Forward {
        host,
        port,
        port_tls,
        had_error,
    }
}

/// How a target is reached over TLS, and in which HTTP version.
struct Tls<'a> {
    /// `forward_port_https`.
    port: Option<u16>,
    /// `https_only`.
    only: bool,
    /// SNI / verified name.
    name: String,
    /// `origin_protocol` (the location's, else the rule's).
    protocol: Option<&'a At<OriginProtocol>>,
}

fn make_target(
    sink: &mut Sink<'_>,
    at: &At<impl Sized>,
    host: &str,
    port: u16,
    tls: Tls<'_>,
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
    let target = UpstreamTarget {
        authority,
        tls: tls_authority,
        https_only: tls.only,
        tls_name: tls.name,
        weight,
        protocol: tls.protocol.map_or(OriginProtocol::Http1, |p| p.value),
    };
    match tls.protocol {
        Some(p) if !check_protocol(sink, p, &target) => None,
        _ => Some(target),
    }
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
