//! A rule's certificate (its files, `tls`, or the global default) and what it asks of HTTPS:
//! `redirect_to_https` and HSTS.

use crate::model::{CertSource, DomainPattern};
use crate::reader::{Section, Sink};
use crate::validate::tls::{tls_mode, TlsMode};
use crate::validate::{error, file_key, warn, I64, U16};
use crate::Severity;

/// A rule's certificate source: its own files or `tls`, else the global default. Returns
/// whether the keys were valid.
pub(super) fn read_rule_tls(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    domain: Option<&DomainPattern>,
    tls_default: Option<&CertSource>,
) -> (Option<CertSource>, bool) {
    let mode_at = s.string(sink, "tls");
    let mut ok = true;
    let mode = match &mode_at {
        Some(m) => {
            let mode = tls_mode(sink, m);
            ok &= mode.is_some();
            mode
        }
        None => None,
    };
    let cert = file_key(s, sink, "tls_cert_file");
    let key = file_key(s, sink, "tls_key_file");
    let source = match (cert, key) {
        (Some(cert), Some(key)) => {
            if let Some(m) = mode_at.as_ref().filter(|_| mode != Some(TlsMode::Off)) {
                warn(
                    sink,
                    m,
                    "this rule has certificate files, so `tls` is ignored",
                    "remove `tls` or the files",
                );
            }
            Some(CertSource::Files { cert, key })
        }
        (Some(_), None) | (None, Some(_)) => {
            let (have, lack) = if s.has("tls_cert_file") {
                ("tls_cert_file", "tls_key_file")
            } else {
                ("tls_key_file", "tls_cert_file")
            };
            s.missing(
                sink,
                lack,
                Severity::Error,
                &format!("`{have}` needs `{lack}` beside it"),
                &format!("add `{lack} = \"...\"` (PEM)"),
            );
            return (None, false);
        }
        (None, None) => match mode {
            Some(TlsMode::Off) => None,
            Some(TlsMode::Internal) => Some(CertSource::Internal),
            Some(TlsMode::Acme) => Some(CertSource::Acme),
            None => tls_default.cloned(),
        },
    };
    // Automatic certificates need a name to put in them.
    let automatic = matches!(source, Some(CertSource::Internal | CertSource::Acme));
    let source = match domain {
        Some(DomainPattern::Any) if automatic => {
            if let Some(m) = &mode_at {
                warn(
                    sink,
                    m,
                    "a catch-all rule (`domain = \"*\"`) cannot get an automatic certificate",
                    "give it `tls_cert_file` + `tls_key_file`",
                );
            }
            None
        }
        Some(DomainPattern::Wildcard(_)) if source == Some(CertSource::Acme) => {
            s.missing(
                sink,
                "tls",
                Severity::Warning,
                "ACME cannot validate a wildcard name with http-01 or tls-alpn-01; this rule gets no certificate",
                "give it `tls_cert_file` + `tls_key_file`, or `tls = \"internal\"`",
            );
            None
        }
        _ => source,
    };
    (source, ok)
}

/// `redirect_to_https` and the HSTS header value (`hsts_max_age_seconds`,
/// `hsts_include_subdomains`, `hsts_preload`); neither has an effect without a certificate.
pub(super) fn read_https(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    has_cert: bool,
) -> (bool, u16, Option<String>) {
    let redirect_to_https = s.bool(sink, "redirect_to_https").is_some_and(|b| b.value);
    let status = redirect_status(s, sink);
    let age = s.int(sink, "hsts_max_age_seconds", 0, I64);
    let subdomains = s.bool(sink, "hsts_include_subdomains");
    let preload = s.bool(sink, "hsts_preload");
    if let (None, Some(flag)) = (&age, subdomains.as_ref().or(preload.as_ref())) {
        warn(
            sink,
            flag,
            "this has no effect without `hsts_max_age_seconds`",
            "add `hsts_max_age_seconds = 31536000` to send Strict-Transport-Security",
        );
    }
    let hsts = age.map(|age| {
        let mut v = format!("max-age={}", age.value);
        if subdomains.is_some_and(|b| b.value) {
            v.push_str("; includeSubDomains");
        }
        if preload.is_some_and(|b| b.value) {
            v.push_str("; preload");
        }
        v
    });
    if (redirect_to_https || hsts.is_some()) && !has_cert {
        let key = if redirect_to_https {
            "redirect_to_https"
        } else {
            "hsts_max_age_seconds"
        };
        s.missing(
            sink,
            key,
            Severity::Warning,
            &format!("`{key}` is set but this rule has no certificate, so HTTPS cannot serve it"),
            "give the rule `tls_cert_file` + `tls_key_file` or `tls = \"internal\"`, or set `lets_encrypt_contact_email`",
        );
    }
    // Without a certificate there is no HTTPS to send clients to: no redirect (warned above).
    let redirect_to_https = redirect_to_https && has_cert;
    (redirect_to_https, status, hsts)
}

/// `redirect_to_https_status`: 301, 302, 307 or 308 (the default).
fn redirect_status(s: &mut Section<'_>, sink: &mut Sink<'_>) -> u16 {
    let Some(at) = s.int(sink, "redirect_to_https_status", 0, U16) else {
        return 308;
    };
    match at.value {
        301 | 302 | 307 | 308 => at.value as u16,
        v => {
            error(
                sink,
                &at,
                format!("{v} is not a redirect status rampart sends"),
                "use `redirect_to_https_status = 301` (or 302, 307, 308)",
            );
            308
        }
    }
}
