//! TLS: the HTTPS listener's settings, where certificates live, ACME, and the certificate
//! source of a rule that names none (`tls`, `lets_encrypt_contact_email`).

use std::net::SocketAddr;
use std::time::Duration;

use super::{error, file_key, secs, warn, U32};
use crate::model::*;
use crate::reader::{At, Section, Sink};
use crate::Severity;

/// Let's Encrypt's production ACME directory (the default CA).
pub const LETS_ENCRYPT_PRODUCTION: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// `http3_max_concurrent_streams` when unset (as NGINX's `http3_max_concurrent_streams`).
const DEFAULT_H3_STREAMS: u32 = 128;

/// `http3_alt_svc_max_age_seconds` when unset: a day, as Caddy announces.
const DEFAULT_ALT_SVC_MAX_AGE: Duration = Duration::from_secs(86_400);

/// `$STATE_DIRECTORY` (systemd's `StateDirectory=`), else `/var/lib/rampart` when running as
/// root, else `$XDG_DATA_HOME/rampart`, else `$HOME/.local/share/rampart`, else
/// `./rampart-state`.
fn default_state_dir() -> std::path::PathBuf {
    // systemd may list several directories, separated by colons; the first is ours.
    if let Some(d) = std::env::var_os("STATE_DIRECTORY").filter(|d| !d.is_empty()) {
        let first = d
            .to_string_lossy()
            .split(':')
            .next()
            .unwrap_or_default()
            .to_owned();
        if !first.is_empty() {
            return std::path::PathBuf::from(first);
        }
    }
    if running_as_root() {
        return std::path::PathBuf::from("/var/lib/rampart");
    }
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return std::path::PathBuf::from(d).join("rampart");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => std::path::PathBuf::from(h).join(".local/share/rampart"),
        None => std::path::PathBuf::from("rampart-state"),
    }
}

/// Whether the process runs as root (`/proc/self` belongs to the effective user).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The `tls` key's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TlsMode {
    Off,
    Internal,
    Acme,
}

pub(super) fn tls_mode(sink: &mut Sink<'_>, v: &At<String>) -> Option<TlsMode> {
    match v.value.as_str() {
        "off" => Some(TlsMode::Off),
        "internal" => Some(TlsMode::Internal),
        "acme" => Some(TlsMode::Acme),
        _ => {
            error(
                sink,
                v,
                format!("unknown tls mode {:?}", v.value),
                "use \"internal\" (local CA), \"acme\" (automatic certificates) or \"off\"",
            );
            None
        }
    }
}

/// The global TLS keys; the HTTPS addresses and the `tls_default_domain` check wait for the
/// rules.
pub(super) struct Settings {
    min_version: TlsVersion,
    state_dir: std::path::PathBuf,
    default_domain: Option<String>,
    reload_interval: Duration,
    acme: AcmeConfig,
    http3: Option<At<bool>>,
    http3_config: Http3Config,
    /// What a rule without its own `tls`/files gets: the global `tls`, else ACME when a
    /// contact e-mail is set.
    pub rule_default: Option<CertSource>,
}

pub(super) fn read(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Settings {
    let tls_default = match s.string(sink, "tls") {
        Some(t) => tls_mode(sink, &t),
        None => None,
    };
    let min_version = match s.string(sink, "tls_min_version") {
        Some(v) => match v.value.as_str() {
            "TLS_1_2" => TlsVersion::Tls12,
            "TLS_1_3" => TlsVersion::Tls13,
            _ => {
                error(
                    sink,
                    &v,
                    format!("Invalid TLS value: {:?}", v.value),
                    "use \"TLS_1_2\" (default) or \"TLS_1_3\"; rustls offers no older versions",
                );
                TlsVersion::Tls12
            }
        },
        None => TlsVersion::Tls12,
    };
    let state_dir = match s.string(sink, "state_dir") {
        Some(d) if !d.value.trim().is_empty() => std::path::PathBuf::from(d.value.trim()),
        Some(d) => {
            error(
                sink,
                &d,
                "`state_dir` is empty",
                "name a directory, e.g. \"/var/lib/rampart\"",
            );
            default_state_dir()
        }
        None => default_state_dir(),
    };
    let default_domain = s
        .string(sink, "tls_default_domain")
        .map(|d| d.value.trim().trim_end_matches('.').to_ascii_lowercase());
    let reload_interval = s
        .int(sink, "tls_reload_interval_seconds", 1, 86_400)
        .map_or(Duration::from_secs(5), |v| secs(v.value));
    let acme = read_acme(s, sink);
    let http3 = s.bool(sink, "http3");
    let http3_config = Http3Config {
        max_streams: s
            .int(sink, "http3_max_concurrent_streams", 1, 10_000)
            .map_or(DEFAULT_H3_STREAMS, |v| v.value as u32),
        alt_svc_max_age: match s.int(sink, "http3_alt_svc_max_age_seconds", 0, U32) {
            Some(v) if v.value == 0 => None,
            Some(v) => Some(secs(v.value)),
            None => Some(DEFAULT_ALT_SVC_MAX_AGE),
        },
    };
    // A rule without its own `tls`/files gets this: the global `tls`, else ACME when a contact
    // e-mail is set.
    let rule_tls_default = match tls_default {
        Some(TlsMode::Off) => None,
        Some(TlsMode::Internal) => Some(CertSource::Internal),
        Some(TlsMode::Acme) => Some(CertSource::Acme),
        None => acme.contact.is_some().then_some(CertSource::Acme),
    };
    Settings {
        min_version,
        state_dir,
        default_domain,
        reload_interval,
        acme,
        http3,
        http3_config,
        rule_default: rule_tls_default,
    }
}

/// ACME: the contact e-mail (which turns automatic certificates on), the CA's directory and
/// its root, and the challenge types offered.
fn read_acme(s: &mut Section<'_>, sink: &mut Sink<'_>) -> AcmeConfig {
    let contact = s.string(sink, "lets_encrypt_contact_email").and_then(|e| {
        let v = e.value.trim();
        if v.is_empty() {
            return None;
        }
        if !v.contains('@') || v.contains([' ', ',']) {
            error(
                sink,
                &e,
                format!("{:?} is not an e-mail address", e.value),
                "write one address such as \"ops@example.com\"",
            );
        }
        Some(v.trim_start_matches("mailto:").to_owned())
    });
    let directory_url = match s.string(sink, "acme_directory_url") {
        Some(u) if u.value.starts_with("https://") || u.value.starts_with("http://") => u.value,
        Some(u) => {
            error(
                sink,
                &u,
                format!("{:?} is not an http(s) URL", u.value),
                "write the CA's ACME directory URL, e.g. \"https://acme-staging-v02.api.letsencrypt.org/directory\"",
            );
            String::new()
        }
        None => LETS_ENCRYPT_PRODUCTION.to_owned(),
    };
    let acme_ca_file = file_key(s, sink, "acme_ca_file");
    let challenges = match s.strings(sink, "acme_challenges") {
        Some(list) => {
            let mut out = Vec::new();
            for c in &list.value {
                match c.value.as_str() {
                    "http-01" => out.push(AcmeChallenge::Http01),
                    "tls-alpn-01" => out.push(AcmeChallenge::TlsAlpn01),
                    _ => error(
                        sink,
                        c,
                        format!("unknown ACME challenge {:?}", c.value),
                        "use \"http-01\" and/or \"tls-alpn-01\"",
                    ),
                }
            }
            if out.is_empty() && list.value.is_empty() {
                error(
                    sink,
                    &list,
                    "`acme_challenges` is empty",
                    "list \"http-01\" and/or \"tls-alpn-01\"",
                );
            }
            out
        }
        None => vec![AcmeChallenge::Http01, AcmeChallenge::TlsAlpn01],
    };
    AcmeConfig {
        directory_url,
        contact,
        ca_file: acme_ca_file,
        challenges,
    }
}

/// The TLS configuration, once the rules (and so the HTTPS addresses) are known.
pub(super) fn finish(
    sink: &mut Sink<'_>,
    t: Settings,
    listen_https: Vec<SocketAddr>,
    rules: &[RuleConfig],
) -> TlsConfig {
    if let Some(d) = &t.default_domain {
        let known = rules
            .iter()
            .any(|r| r.cert.is_some() && r.domain.certificate_covers(d));
        if !known {
            sink.push(
                Severity::Error,
                "tls_default_domain",
                None,
                format!("tls_default_domain {d:?} is not the domain of a rule with a certificate"),
                "name the `domain` of a rule that has a certificate source",
            );
        }
    }
    let http3 = match t.http3 {
        Some(on) if on.value && listen_https.is_empty() => {
            warn(
                sink,
                &on,
                "HTTP/3 is served beside the HTTPS listener, which is off (no rule has a certificate)",
                "give a rule a certificate source, or remove `http3`",
            );
            None
        }
        Some(on) if on.value => Some(t.http3_config),
        _ => None,
    };
    TlsConfig {
        http3,
        listen_https,
        min_version: t.min_version,
        state_dir: t.state_dir,
        default_domain: t.default_domain,
        reload_interval: t.reload_interval,
        acme: t.acme,
    }
}
