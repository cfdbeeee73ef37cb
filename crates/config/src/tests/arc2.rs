//! ARC2 Proxy files: the benchmark configuration loads unchanged.

use super::*;

#[test]
fn arc2_benchmark_config_is_accepted() {
    let v = validate(ARC2_BENCH, 4);
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    let c = v.config.expect("config");
    assert_eq!(c.listen_http, vec!["0.0.0.0:80".parse().expect("addr")]);
    assert_eq!(c.workers, 4);
    assert!(!c.add_logging);
    assert_eq!(c.rules.len(), 1);
    let r = &c.rules[0];
    assert_eq!(r.domain, DomainPattern::Exact("localhost".into()));
    assert_eq!(r.upstreams[0].authority.as_str(), "127.0.0.1:81");
    assert_eq!(r.max_age_seconds, 3600);
    // Features of later versions are reported, not silently ignored.
    let inactive: Vec<_> = v
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Inactive)
        .map(|d| d.key.as_str())
        .collect();
    assert!(
        !inactive.contains(&"add_caching"),
        "caching is active: {inactive:?}"
    );
    // HTTPS is implemented, but this file gives no rule a certificate: the listener is off and
    // the file says so.
    assert!(c.tls.listen_https.is_empty());
    assert!(v.diagnostics.iter().any(|d| d.key == "listening_port_https"
        && d.severity == Severity::Warning
        && d.message.contains("HTTPS listener is off")));
    // The missing compression/minification/webp booleans are tolerated, said in one note.
    let notes: Vec<_> = v
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Note)
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].key, "proxy_rules[0]");
    assert!(
        notes[0].message.contains("enable_compression = false, enable_minification = false, enable_webp_transformation = false"),
        "{notes:?}"
    );
    // They do not fail --strict: nothing is wrong with leaving them to their defaults. (The
    // HTTPS port without a certificate is this file's one warning.)
    let strict = validate(ARC2_BENCH, 4).strict();
    assert_eq!(errors(&strict).len(), 1, "{:?}", errors(&strict));
    assert!(errors(&strict)[0].contains("listening_port_https"));
}
