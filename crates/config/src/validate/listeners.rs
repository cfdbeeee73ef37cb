//! Where rampart listens: `listening_address` + `listening_port_http` (ARC2) or `listen`
//! (rampart), and the HTTPS addresses, which are open only when some rule has a certificate.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;

use super::{error, warn, U16};
use crate::reader::{At, Section, Sink};
use crate::Severity;

/// The listener keys as read; the HTTPS addresses are settled once the rules are known.
pub(super) struct Listeners {
    /// The plain-HTTP addresses.
    pub http: Vec<SocketAddr>,
    /// `listening_address` (`None` when it was invalid).
    ip: Option<IpAddr>,
    /// `listening_port_https` as written, and its value or default.
    port_https_at: Option<At<i64>>,
    port_https: u16,
    /// `listen_https` as written.
    https_list: Option<At<Vec<At<String>>>>,
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
    let https_list = s.strings(sink, "listen_https");
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
    Listeners {
        http: listen_http,
        ip,
        port_https_at,
        port_https,
        https_list,
    }
}

/// The HTTPS addresses: `listen_https`, else `listening_address` + `listening_port_https`;
/// none (with a warning when HTTPS was asked for) when no rule has a certificate.
pub(super) fn https(sink: &mut Sink<'_>, l: &Listeners, has_certs: bool) -> Vec<SocketAddr> {
    let mut listen_https = Vec::new();
    if let Some(list) = &l.https_list {
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
    } else if let Some(ip) = l.ip {
        listen_https.push(SocketAddr::new(ip, l.port_https));
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
    }
    listen_https
}
