//! End-to-end tests of path rules that cannot be bypassed: other spellings of a denied path are
//! normalised before the rules match (see crates/proxy/src/path.rs).
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use support::*;

/// One raw HTTP/1.1 request (so no client library tidies the target); returns the status. It
/// blocks: the tests run on a multi-threaded runtime so the origin keeps answering.
fn status_of(proxy: &Proxy, target: &str, ua: &str) -> u16 {
    let text = raw(
        proxy.addr,
        format!(
            "GET {target} HTTP/1.1\r\nHost: site\r\nUser-Agent: {ua}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
        Duration::from_secs(5),
    );
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}\n{}", proxy.output()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blacklisted_path_cannot_be_reached_by_another_spelling() {
    let origin = Origin::new().route("*", Reply::text("ok")).start().await;
    let cfg = config_for(
        "site",
        &origin,
        "strict_path_rules = true",
        "[[proxy_rules.path_rules]]\npath = \"/admin\"\nmatch_type = \"StartsWith\"\n\
         rule_type = \"Blacklist\"\nmax_age_seconds = 0\n",
    );
    let proxy = Proxy::start(&cfg);
    assert_eq!(status_of(&proxy, "/public", "curl/8"), 200);
    assert_eq!(status_of(&proxy, "/admin", "curl/8"), 403);
    let before = origin.requests();
    for target in [
        "/%61dmin",
        "/./admin",
        "/x/../admin",
        "//admin",
        "/%2e/admin",
        "/%2E%2E/admin/users",
        "/%2Fadmin",
        "/x%2F..%2Fadmin",
        "///./admin?q=1",
        "/public/..;/admin",
        "/admin;jsessionid=1",
        "/x%5C..%5Cadmin",
    ] {
        // The decision does not depend on the client either.
        for ua in ["curl/8", "Mozilla/5.0 (X11; Linux x86_64)"] {
            assert_eq!(status_of(&proxy, target, ua), 403, "{target} as {ua}");
        }
    }
    assert_eq!(origin.requests(), before, "no bypass reached the origin");
    // A malformed percent-encoding is refused, not forwarded.
    assert_eq!(status_of(&proxy, "/adm%zzin", "curl/8"), 400);
    assert_eq!(origin.requests(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whitelist_matches_the_normal_path_and_the_origin_is_sent_it() {
    let origin = Origin::new().route("*", Reply::text("ok")).start().await;
    let cfg = config_for(
        "site",
        &origin,
        "strict_path_rules = true",
        "paths = [\"/pub\"]\n",
    );
    let proxy = Proxy::start(&cfg);
    assert_eq!(status_of(&proxy, "/pub/../secret", "curl/8"), 403);
    assert_eq!(status_of(&proxy, "/secret/../pub/a", "curl/8"), 200);
    assert_eq!(origin.last().uri.path(), "/pub/a");
    // Unreserved characters are decoded, reserved ones kept (upper-case), the query as sent.
    assert_eq!(status_of(&proxy, "/%70ub//x/./y%2fz?a=%2e", "curl/8"), 200);
    assert_eq!(origin.last().uri.to_string(), "/pub/x/y%2Fz?a=%2e");
    // The cache keys on the normal path: another spelling is a hit.
    let got = get(&proxy, "site", "/pub/x/y%2Fz?a=%2e").await;
    assert_eq!(got.header("x-arc2-cache"), Some("Hit"));
}

/// NGINX's `location ~*` and `location ~`: a case-insensitive prefix and a regular expression,
/// both matched on the normalised path, so `/ADMIN`, `/Admin/../ADMIN/x` and `/%41dmin` are all
/// refused by a rule on `/admin` that ignores case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_insensitive_and_regex_path_rules_hold_for_every_spelling() {
    let origin = Origin::new().route("*", Reply::text("ok")).start().await;
    let cfg = config_for(
        "site",
        &origin,
        "strict_path_rules = true",
        "[[proxy_rules.path_rules]]\npath = \"/admin\"\nmatch_type = \"StartsWith\"\nignore_case = true\n\
         rule_type = \"Blacklist\"\nmax_age_seconds = 0\n\
         [[proxy_rules.path_rules]]\npath = '\\.(php|asp)$'\nmatch_type = \"Regex\"\nignore_case = true\n\
         rule_type = \"Blacklist\"\nmax_age_seconds = 0\n",
    );
    let proxy = Proxy::start(&cfg);
    assert_eq!(status_of(&proxy, "/public", "curl/8"), 200);
    assert_eq!(status_of(&proxy, "/index.html", "curl/8"), 200);
    let before = origin.requests();
    for target in [
        "/admin",
        "/ADMIN",
        "/Admin/users",
        "/%41dmin",
        "/x/../ADMIN",
        "/wp/login.php",
        "/wp/LOGIN.PHP",
        "/default.Asp?x=1",
        "/a%2Ephp",
    ] {
        assert_eq!(status_of(&proxy, target, "curl/8"), 403, "{target}");
    }
    assert_eq!(
        origin.requests(),
        before,
        "nothing refused reached the origin"
    );
}

/// A deny for one path (NGINX's `location /admin { deny all; }`): only `strict_path_rules`
/// refused, and it applied to the whole rule, turning a "never cache" Blacklist into a 403 too.
/// `deny = true` refuses its paths, other spellings included, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_path_rule_refuses_its_paths_and_leaves_a_blacklist_proxied() {
    let origin = Origin::new().route("*", Reply::text("ok")).start().await;
    let cfg = config_for(
        "site",
        &origin,
        "",
        "[[proxy_rules.path_rules]]\npath = \"/admin\"\nmatch_type = \"StartsWith\"\ndeny = true\n\
         [[proxy_rules.path_rules]]\npath = \"/account\"\nmatch_type = \"StartsWith\"\n\
         rule_type = \"Blacklist\"\nmax_age_seconds = 0\n",
    );
    let proxy = Proxy::start(&cfg);
    assert_eq!(status_of(&proxy, "/account/orders", "curl/8"), 200);
    for target in [
        "/admin",
        "/admin/users",
        "//admin/",
        "/x/../admin",
        "/%61dmin",
    ] {
        assert_eq!(status_of(&proxy, target, "curl/8"), 403, "{target}");
    }
    assert_eq!(status_of(&proxy, "/public", "curl/8"), 200);
    assert!(
        origin
            .seen()
            .iter()
            .all(|s| !s.uri.path().contains("admin")),
        "nothing under /admin reached the origin"
    );
}
