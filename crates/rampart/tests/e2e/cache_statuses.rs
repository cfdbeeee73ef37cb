//! `cache_statuses`: ARC2's list (200, 201, 204) by default; with `"rfc9111"`, every final status
//! RFC 9111 lets a shared cache store, when it has a lifetime: explicit for any of them,
//! heuristic (the rule's `max_age_seconds`) for the heuristically cacheable ones. What applies to
//! a stored 200 applies to them: hits, revalidation, purges.
#![allow(clippy::unwrap_used)]

use crate::support;

use http::Request;
use support::*;

/// One path per case: `/s/STATUS` answers STATUS with `Cache-Control: CC` from `?cc=` (none
/// when absent), and an ETag.
async fn origin() -> OriginHandle {
    Origin::new()
        .route_fn("*", |s| {
            let path = s.uri.path().to_owned();
            let status: u16 = path
                .rsplit('/')
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or(200);
            let cc = s
                .uri
                .query()
                .and_then(|q| q.strip_prefix("cc="))
                .map(|v| v.replace("%20", " "));
            if s.headers
                .get("if-none-match")
                .is_some_and(|v| v == "\"e1\"")
            {
                return Reply::text("")
                    .status(304)
                    .header("etag", "\"e1\"")
                    .header("cache-control", "max-age=60")
                    .header("x-refreshed", "yes");
            }
            let mut r = Reply::text(&format!("{status} body"))
                .status(status)
                .header("etag", "\"e1\"");
            if status / 100 == 3 {
                r = r.header("location", "/elsewhere");
            }
            if let Some(cc) = cc {
                r = r.header("cache-control", &cc);
            }
            r
        })
        .start()
        .await
}

/// Asks twice; whether the second answer came from the cache.
async fn stored_twice(proxy: &Proxy, host: &str, target: &str) -> bool {
    let first = get(proxy, host, target).await;
    let second = get(proxy, host, target).await;
    assert_eq!(first.status, second.status, "{target}");
    assert_eq!(first.text(), second.text(), "{target}");
    second.header("x-arc2-cache") == Some("Hit")
}

#[tokio::test]
async fn arc2_statuses_by_default_and_every_rfc9111_status_on_request() {
    let origin = origin().await;
    let arc2 = Proxy::start(&config_for("a.test", &origin, "", ""));
    // ARC2's list: a 301 or a 404 is never stored, even with explicit freshness.
    assert!(stored_twice(&arc2, "a.test", "/s/200").await);
    assert!(!stored_twice(&arc2, "a.test", "/s/301?cc=max-age=3600").await);
    assert!(!stored_twice(&arc2, "a.test", "/s/404?cc=s-maxage=60").await);

    let rfc = Proxy::start(&config_for(
        "r.test",
        &origin,
        "cache_statuses = \"rfc9111\"",
        "",
    ));
    for (target, stored) in [
        // Explicit freshness: any final status.
        ("/s/301?cc=max-age=3600", true),
        ("/s/308?cc=max-age=3600", true),
        ("/s/404?cc=s-maxage=60", true),
        ("/s/410?cc=max-age=60", true),
        ("/s/302?cc=max-age=60", true),
        ("/s/500?cc=max-age=60", true),
        // No lifetime of its own: the heuristically cacheable ones get the rule's
        // max_age_seconds (cache_heuristic = "max_age"), the others are not stored.
        ("/s/404", true),
        ("/s/301", true),
        ("/s/410", true),
        ("/s/302", false),
        ("/s/503", false),
        ("/s/500", false),
        // The origin's no-store still wins.
        ("/s/404?cc=no-store", false),
    ] {
        assert_eq!(
            stored_twice(&rfc, "r.test", target).await,
            stored,
            "{target}"
        );
    }
    // A stored 301 keeps its Location.
    let moved = get(&rfc, "r.test", "/s/301?cc=max-age=3600").await;
    assert_eq!(moved.header("location"), Some("/elsewhere"));
    // Preconditions do not apply to a stored 404 (RFC 9110 §13.2.1): its ETag matching gets
    // the 404, not a 304.
    let conditional = fetch(
        Request::get(rfc.url("/s/404?cc=s-maxage=60"))
            .header("host", "r.test")
            .header("if-none-match", "\"e1\""),
    )
    .await;
    assert_eq!(
        (conditional.status.as_u16(), conditional.text()),
        (404, "404 body".to_owned())
    );
    // A purge removes a stored 404 as it does a 200.
    let purge = Proxy::start(&config_for(
        "p.test",
        &origin,
        "cache_statuses = \"rfc9111\"\npurge_allow = [\"127.0.0.0/8\"]",
        "",
    ));
    assert!(stored_twice(&purge, "p.test", "/s/404?cc=max-age=600").await);
    let purged = fetch(
        Request::builder()
            .method("PURGE")
            .uri(purge.url("/s/404?cc=max-age=600"))
            .header("host", "p.test"),
    )
    .await;
    assert_eq!(purged.text(), "{\"purged\":1,\"soft\":false}\n");
    assert_eq!(
        get(&purge, "p.test", "/s/404?cc=max-age=600")
            .await
            .header("x-arc2-cache"),
        Some("Miss")
    );
}

#[tokio::test]
async fn a_stale_stored_404_is_revalidated_like_a_200() {
    let origin = origin().await;
    // Per rule: only this rule stores RFC 9111's statuses.
    let proxy = Proxy::start(&config_for(
        "v.test",
        &origin,
        "",
        "cache_statuses = \"rfc9111\"",
    ));
    // Fresh for 1 s.
    let first = get(&proxy, "v.test", "/s/404?cc=max-age=1").await;
    assert_eq!(first.status, 404);
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let again = get(&proxy, "v.test", "/s/404?cc=max-age=1").await;
    assert_eq!(
        origin
            .last()
            .headers
            .get("if-none-match")
            .map(|v| v.to_str().unwrap().to_owned()),
        Some("\"e1\"".to_owned()),
        "a conditional request for the stale 404"
    );
    assert_eq!(
        (
            again.status.as_u16(),
            again.text(),
            again.header("x-refreshed")
        ),
        (404, "404 body".to_owned(), Some("yes")),
        "the stored 404, refreshed by the 304"
    );
    let hit = get(&proxy, "v.test", "/s/404?cc=max-age=1").await;
    assert_eq!(hit.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(origin.requests(), 2);
}

/// `max_age_by_status` (NGINX's `proxy_cache_valid 404 1m`): a 404 without a lifetime of its
/// own was kept for the rule's whole `max_age_seconds`; now for its own, while a 200 stays.
#[tokio::test]
async fn a_404_expires_after_its_own_lifetime_while_a_200_stays() {
    let origin = origin().await;
    let proxy = Proxy::start(&config_for(
        "l.test",
        &origin,
        "cache_statuses = \"rfc9111\"",
        "max_age_by_status = { 404 = 3 }",
    ));
    assert!(stored_twice(&proxy, "l.test", "/s/200").await);
    assert!(stored_twice(&proxy, "l.test", "/s/404").await);
    let start = std::time::Instant::now();
    loop {
        let got = get(&proxy, "l.test", "/s/404").await;
        if got.header("x-arc2-cache") != Some("Hit") {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(6),
            "the 404 is still fresh after {:?}",
            start.elapsed()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Ages count whole seconds (the origin's `Date` has no fraction): 3 s of lifetime leave at
    // least 1 s.
    assert!(start.elapsed() >= std::time::Duration::from_secs(1));
    // The 200 keeps the rule's 60 seconds.
    let ok = get(&proxy, "l.test", "/s/200").await;
    assert_eq!(ok.header("x-arc2-cache"), Some("Hit"));
}

/// A status `max_age_by_status` lists is stored under ARC2's list too (as NGINX stores what
/// `proxy_cache_valid` names); `0` keeps a status out; a path rule's table replaces the rule's.
#[tokio::test]
async fn a_listed_404_is_stored_under_arc2_and_zero_keeps_a_status_out() {
    let origin = origin().await;
    let proxy = Proxy::start(&config_for(
        "n.test",
        &origin,
        "",
        "max_age_by_status = { 404 = 60, 200 = 0 }\n\
         [[proxy_rules.path_rules]]\npath = \"/p/\"\nmatch_type = \"StartsWith\"\n\
         rule_type = \"Whitelist\"\nmax_age_seconds = 60\nmax_age_by_status = { 410 = 60 }\n",
    ));
    assert!(stored_twice(&proxy, "n.test", "/s/404").await);
    assert!(!stored_twice(&proxy, "n.test", "/s/200").await);
    assert!(!stored_twice(&proxy, "n.test", "/s/500").await);
    // Under /p/ the path rule's table applies: 410 listed, 404 not (ARC2's list), 200 is.
    assert!(stored_twice(&proxy, "n.test", "/p/s/410").await);
    assert!(!stored_twice(&proxy, "n.test", "/p/s/404").await);
    assert!(stored_twice(&proxy, "n.test", "/p/s/200").await);
}
