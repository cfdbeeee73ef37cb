//! Where rampart listens: `listening_address` + `listening_port_http` (ARC2) or `listen`
//! (rampart), and the HTTPS addresses, which are open only when some rule has a certificate.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;

use super::{cidrs, error, warn, U16};
use crate::model::{Cidr, ProxyProtocolConfig};
use crate::reader::{At, ListenEntry, Section, Sink};
use crate::Severity;

/// The listener keys as read; the HTTPS addresses are settled once the rules are known.
pub(super) struct Listeners {
    /// The plain-HTTP addresses.
    pub http: Vec<SocketAddr>,
    /// Those of `http` that expect a PROXY protocol header.
    http_pp: Vec<SocketAddr>,
    /// `proxy_protocol`: the default of every listener.
    pp_default: bool,
    /// `proxy_protocol_from` as read (`None`: not written).
    pp_from: Option<At<Vec<Cidr>>>,
    /// `listening_address` (`None` when it was invalid).
    ip: Option<IpAddr>,
    /// `listening_port_https` as written, and its value or default.
    port_https_at: Option<At<i64>>,
    port_https: u16,
    /// `listen_https` as written.
    https_list: Option<At<Vec<ListenEntry>>>,
}

pub(super) fn read(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Listeners {
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
    let pp_default = s.bool(sink, "proxy_protocol").is_some_and(|b| b.value);
    let pp_from = cidrs(s, sink, "proxy_protocol_from");
    let https_list = s.listen_entries(sink, "listen_https");
    let listen = s.listen_entries(sink, "listen");
    let mut listen_http = Vec::new();
    let mut http_pp = Vec::new();
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
            if let Some(a) = entry_address(sink, entry, "127.0.0.1:8080", "[::1]:8080") {
                listen_http.push(a);
                if entry
                    .proxy_protocol
                    .as_ref()
                    .map_or(pp_default, |p| p.value)
                {
                    http_pp.push(a);
                }
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
        if pp_default {
            http_pp.push(SocketAddr::new(ip, port_http));
        }
    }
    Listeners {
        http: listen_http,
        http_pp,
        pp_default,
        pp_from,
        ip,
        port_https_at,
        port_https,
        https_list,
    }
}

/// The HTTPS addresses: `listen_https`, else `listening_address` + `listening_port_https`;
/// none (with a warning when HTTPS was asked for) when no rule has a certificate.
/// Also returns those of them that expect a PROXY protocol header.
pub(super) fn https(
    sink: &mut Sink<'_>,
    l: &Listeners,
    has_certs: bool,
) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
    let mut listen_https = Vec::new();
    let mut https_pp = Vec::new();
    if let Some(list) = &l.https_list {
        for entry in &list.value {
            if let Some(a) = entry_address(sink, entry, "127.0.0.1:8443", "[::1]:8443") {
                listen_https.push(a);
                if entry
                    .proxy_protocol
                    .as_ref()
                    .map_or(l.pp_default, |p| p.value)
                {
                    https_pp.push(a);
                }
            }
        }
    } else if let Some(ip) = l.ip {
        listen_https.push(SocketAddr::new(ip, l.port_https));
        if l.pp_default {
            https_pp.push(SocketAddr::new(ip, l.port_https));
        }
    }
    if !has_certs {
        let asked = l
            .port_https_at
            .as_ref()
            .map(|p| (p.key.clone(), p.span.clone()))
            .or_else(|| {
                l.https_list
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
        https_pp.clear();
    }
    (listen_https, https_pp)
}

/// The PROXY protocol settings once both kinds of listener are known.
pub(super) fn proxy_protocol(
    sink: &mut Sink<'_>,
    l: &Listeners,
    https_pp: Vec<SocketAddr>,
) -> ProxyProtocolConfig {
    let listeners: Vec<(SocketAddr, bool)> = l
        .http_pp
        .iter()
        .map(|&a| (a, false))
        .chain(https_pp.into_iter().map(|a| (a, true)))
        .collect();
    if let (true, Some(from)) = (listeners.is_empty(), &l.pp_from) {
        warn(
            sink,
            from,
            "no listener has `proxy_protocol = true`, so `proxy_protocol_from` has no effect",
            "set `proxy_protocol = true` globally or on a `listen` entry",
        );
    }
    ProxyProtocolConfig {
        listeners,
        // Only the machine itself unless told otherwise: a header from anyone else would let
        // them claim any client address.
        from: l
            .pp_from
            .as_ref()
            .map(|f| f.value.clone())
            .unwrap_or_else(|| {
                ["127.0.0.0/8", "::1/128"]
                    .iter()
                    .filter_map(|c| Cidr::parse(c))
                    .collect()
            }),
    }
}

/// A `listen`/`listen_https` entry's address, or `None` (reported) when it is not one.
fn entry_address(
    sink: &mut Sink<'_>,
    entry: &ListenEntry,
    v4: &str,
    v6: &str,
) -> Option<SocketAddr> {
    let a = &entry.address;
    match SocketAddr::from_str(a.value.trim()) {
        Ok(addr) => Some(addr),
        Err(_) => {
            error(
                sink,
                a,
                format!("{:?} is not an address with a port", a.value),
                format!("write \"IP:PORT\", e.g. \"{v4}\" or \"{v6}\""),
            );
            None
        }
    }
}
