//! TLS keys: certificates, ACME, the default domain, redirects to HTTPS.

use super::*;

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
