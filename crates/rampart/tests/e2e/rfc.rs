//! End-to-end tests of the rest of RFC 9111 and RFC 9213: heuristic freshness
//! (`cache_heuristic`), `CDN-Cache-Control`, `store_set_cookie` and qualified `private` /
//! `no-cache`, `private` with lifetimes, `immutable`, ranges that fill the cache, `If-Match` /
//! `If-Unmodified-Since` on hits and on misses that fill the cache, and interim (1xx)
//! responses. Every test asserts what the client received and what the origin saw.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{Request, StatusCode};
use support::*;

async fn fetch(proxy: &Proxy, host: &str, path: &str, headers: &[(&str, &str)]) -> Got {
    let mut b = Request::get(proxy.url(path)).header("host", host);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    send(&client(), b.body(empty()).unwrap()).await
}

/// Fetches until the answer comes from the store. While the whole object is still arriving, a
/// request joins that fetch (a collapsed miss) and must never reach the origin itself.
async fn fetch_until_stored(
    proxy: &Proxy,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Got {
    for _ in 0..250 {
        let got = fetch(proxy, host, path, headers).await;
        if got.header("x-arc2-cache") == Some("Hit") {
            return got;
        }
        assert_eq!(
            got.header("cache-status"),
            Some("rampart; fwd=miss; collapsed"),
            "while the fill runs, requests join it"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{path} was never stored");
}

fn http_date(t: SystemTime) -> String {
    httpdate::fmt_http_date(t)
}

fn ago(secs: u64) -> String {
    http_date(SystemTime::now() - Duration::from_secs(secs))
}

/// The cache label and the origin's request count after two GETs of `path`.
async fn twice(proxy: &Proxy, origin: &OriginHandle, host: &str, path: &str) -> (Got, Got, usize) {
    let before = origin.requests();
    let a = fetch(proxy, host, path, &[]).await;
    let b = fetch(proxy, host, path, &[]).await;
    (a, b, origin.requests() - before)
}

// --- cache_heuristic ---------------------------------------------------------------------------

fn heuristic_origin() -> Origin {
    Origin::new()
        .route_fn("/lm-old", |_| {
            Reply::text("old").header("last-modified", &ago(10 * 3600))
        })
        .route_fn("/lm-aged", |_| {
            Reply::text("old")
                .header("last-modified", &ago(10 * 3600))
                .header("age", "90")
        })
        .route_fn("/lm-new", |_| {
            Reply::text("new").header("last-modified", &ago(5))
        })
        .route("/plain", Reply::text("plain"))
        .route(
            "/explicit",
            Reply::text("explicit").header("cache-control", "max-age=60"),
        )
}

#[tokio::test]
async fn heuristic_max_age_is_the_arc2_default() {
    let origin = heuristic_origin().start().await;
    let proxy = Proxy::start(&config_for("h.example", &origin, "", ""));
    for path in ["/plain", "/lm-old", "/lm-new", "/explicit"] {
        let (a, b, n) = twice(&proxy, &origin, "h.example", path).await;
        assert_eq!(a.header("x-arc2-cache"), Some("Miss"), "{path}");
        assert_eq!(b.header("x-arc2-cache"), Some("Hit"), "{path}");
        assert_eq!(n, 1, "{path}: stored for max_age_seconds");
    }
}

#[tokio::test]
async fn heuristic_last_modified_needs_a_validator() {
    let origin = heuristic_origin().start().await;
    let proxy = Proxy::start(&config_for(
        "h.example",
        &origin,
        "cache_heuristic = \"last_modified\"",
        "",
    ));
    // 10% of 10 h = 1 h, capped at max_age_seconds (60 s): stored.
    let (_, b, n) = twice(&proxy, &origin, "h.example", "/lm-old").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Hit"), 1));
    assert_eq!(b.text(), "old");
    // Explicit freshness is not a heuristic.
    let (_, b, n) = twice(&proxy, &origin, "h.example", "/explicit").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Hit"), 1));
    // No Last-Modified: nothing to go by, never reused.
    let (a, b, n) = twice(&proxy, &origin, "h.example", "/plain").await;
    assert_eq!(a.header("x-arc2-cache"), Some("Dynamic"));
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Dynamic"), 2));
    assert_eq!(b.text(), "plain");
    // Modified 5 s ago: 10% is 0 s, not stored.
    let (_, b, n) = twice(&proxy, &origin, "h.example", "/lm-new").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Dynamic"), 2));
}

#[tokio::test]
async fn heuristic_lifetime_is_capped_at_max_age_seconds() {
    let origin = heuristic_origin().start().await;
    let config = config_for(
        "h.example",
        &origin,
        "",
        "cache_heuristic = \"last_modified\"",
    );
    // `/lm-aged` is 90 s old on arrival: 1 h by the heuristic, but 60 s by the rule, so stale at
    // once and revalidated with its validator (no test waits out a lifetime).
    let proxy = Proxy::start(&config);
    let (_, b, n) = twice(&proxy, &origin, "h.example", "/lm-aged").await;
    assert_eq!(b.text(), "old");
    assert_eq!(n, 2);
    assert!(origin.last().headers.contains_key("if-modified-since"));
    // Under a cap above its age the same response is fresh: the cap, not the age, made it stale.
    let proxy = Proxy::start(&config.replace("max_age_seconds = 60", "max_age_seconds = 3600"));
    let (_, b, n) = twice(&proxy, &origin, "h.example", "/lm-aged").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Hit"), 1));
}

#[tokio::test]
async fn heuristic_none_per_rule_overrides_the_global_setting() {
    let origin = heuristic_origin().start().await;
    let proxy = Proxy::start(&config_for(
        "h.example",
        &origin,
        "cache_heuristic = \"last_modified\"",
        "cache_heuristic = \"none\"",
    ));
    let (_, b, n) = twice(&proxy, &origin, "h.example", "/lm-old").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Dynamic"), 2));
    let (_, b, n) = twice(&proxy, &origin, "h.example", "/explicit").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Hit"), 1));
}

#[test]
fn heuristic_with_an_unknown_value_is_a_config_error() {
    let origin_port = 9; // never contacted: the config is refused
    let toml = format!(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\ncache_heuristic = \"lastmod\"\n\
         [[proxy_rules]]\ndomain = \"h.example\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\n\
         forward_port_http = {origin_port}\n"
    );
    let out = Proxy::try_start(&toml);
    assert!(out.contains("cache_heuristic"), "{out}");
    assert!(
        out.contains("last_modified"),
        "the hint names the valid values: {out}"
    );
}

// --- CDN-Cache-Control (RFC 9213) --------------------------------------------------------------

#[tokio::test]
async fn cdn_cache_control_takes_precedence_and_stops_here() {
    let origin = Origin::new()
        .route(
            "/cdn-only",
            Reply::text("a")
                .header("cache-control", "no-store")
                .header("cdn-cache-control", "max-age=60"),
        )
        .route(
            "/cdn-no-store",
            Reply::text("b")
                .header("cache-control", "max-age=60")
                .header("cdn-cache-control", "no-store"),
        )
        .route(
            "/cdn-invalid",
            Reply::text("c")
                .header("cache-control", "no-store")
                .header("cdn-cache-control", "Max-Age=60"),
        )
        .route(
            "/surrogate",
            Reply::text("d")
                .header("cache-control", "max-age=60")
                .header("surrogate-control", "no-store"),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("cdn.example", &origin, "", ""));

    let (a, b, n) = twice(&proxy, &origin, "cdn.example", "/cdn-only").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Hit"), 1));
    for got in [&a, &b] {
        assert_eq!(got.header("cdn-cache-control"), None, "not forwarded");
        assert_eq!(
            got.header("cache-control"),
            Some("no-store"),
            "for the others"
        );
    }

    let (a, b, n) = twice(&proxy, &origin, "cdn.example", "/cdn-no-store").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Dynamic"), 2));
    assert_eq!(a.header("cdn-cache-control"), None);
    assert_eq!(a.header("cache-control"), Some("max-age=60"));

    // An invalid targeted field is ignored: Cache-Control's no-store applies.
    let (_, b, n) = twice(&proxy, &origin, "cdn.example", "/cdn-invalid").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Dynamic"), 2));

    // Surrogate-Control is not honoured, and passes through untouched.
    let (a, b, n) = twice(&proxy, &origin, "cdn.example", "/surrogate").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Hit"), 1));
    assert_eq!(a.header("surrogate-control"), Some("no-store"));
    assert_eq!(b.header("surrogate-control"), Some("no-store"));
}

#[tokio::test]
async fn cdn_cache_control_replaces_expires_too() {
    let expires = http_date(SystemTime::now() + Duration::from_secs(3600));
    let origin = Origin::new()
        .route("/expires", Reply::text("a").header("expires", &expires))
        .route(
            "/targeted",
            Reply::text("b")
                .header("expires", &expires)
                .header("cdn-cache-control", "none"),
        )
        .start()
        .await;
    // Only explicit freshness: Expires alone stores; beside CDN-Cache-Control it is ignored.
    let proxy = Proxy::start(&config_for(
        "cdn.example",
        &origin,
        "",
        "cache_heuristic = \"none\"",
    ));
    let (_, b, n) = twice(&proxy, &origin, "cdn.example", "/expires").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Hit"), 1));
    let (_, b, n) = twice(&proxy, &origin, "cdn.example", "/targeted").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Dynamic"), 2));
    assert_eq!(b.header("expires"), Some(expires.as_str()));
}

// --- Set-Cookie, private -----------------------------------------------------------------------

fn cookie_origin() -> Origin {
    Origin::new()
        .route(
            "/explicit",
            Reply::text("a")
                .header("cache-control", "public, max-age=60")
                .header("set-cookie", "s=1"),
        )
        .route("/implicit", Reply::text("b").header("set-cookie", "s=2"))
        .route(
            "/private",
            Reply::text("c")
                .header("cache-control", "private, max-age=60")
                .header("set-cookie", "s=3"),
        )
        .route(
            "/qualified",
            Reply::text("d")
                .header("cache-control", "max-age=60, private=\"Set-Cookie\"")
                .header("set-cookie", "s=4"),
        )
        .route(
            "/no-cache-field",
            Reply::text("e")
                .header("cache-control", "max-age=60, no-cache=\"x-user\"")
                .header("x-user", "alice"),
        )
}

#[tokio::test]
async fn set_cookie_is_not_stored_by_default() {
    let origin = cookie_origin().start().await;
    let proxy = Proxy::start(&config_for("k.example", &origin, "", ""));
    for path in ["/explicit", "/implicit", "/private"] {
        let (a, b, n) = twice(&proxy, &origin, "k.example", path).await;
        assert_eq!(
            (b.header("x-arc2-cache"), n),
            (Some("Dynamic"), 2),
            "{path}"
        );
        assert!(a.header("set-cookie").is_some() && b.header("set-cookie").is_some());
    }
}

#[tokio::test]
async fn store_set_cookie_stores_explicitly_shared_responses_with_their_cookie() {
    let origin = cookie_origin().start().await;
    let proxy = Proxy::start(&config_for(
        "k.example",
        &origin,
        "store_set_cookie = true",
        "",
    ));
    let (a, b, n) = twice(&proxy, &origin, "k.example", "/explicit").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Hit"), 1));
    assert_eq!(a.header("set-cookie"), Some("s=1"));
    assert_eq!(
        b.header("set-cookie"),
        Some("s=1"),
        "reused with its Set-Cookie"
    );
    // Not explicitly cacheable, or private: still never stored.
    for path in ["/implicit", "/private"] {
        let (_, b, n) = twice(&proxy, &origin, "k.example", path).await;
        assert_eq!(
            (b.header("x-arc2-cache"), n),
            (Some("Dynamic"), 2),
            "{path}"
        );
    }

    // A rule can turn it off again.
    let proxy = Proxy::start(&config_for(
        "k.example",
        &origin,
        "store_set_cookie = true",
        "store_set_cookie = false",
    ));
    let (_, b, n) = twice(&proxy, &origin, "k.example", "/explicit").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Dynamic"), 2));
}

#[tokio::test]
async fn qualified_private_and_no_cache_store_the_rest_of_the_response() {
    let origin = cookie_origin().start().await;
    let proxy = Proxy::start(&config_for("k.example", &origin, "", ""));
    let (a, b, n) = twice(&proxy, &origin, "k.example", "/qualified").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Hit"), 1));
    assert_eq!(
        a.header("set-cookie"),
        Some("s=4"),
        "the origin's answer keeps it"
    );
    assert_eq!(b.header("set-cookie"), None, "the shared copy does not");
    assert_eq!(b.text(), "d");

    let (a, b, n) = twice(&proxy, &origin, "k.example", "/no-cache-field").await;
    assert_eq!((b.header("x-arc2-cache"), n), (Some("Hit"), 1));
    assert_eq!(a.header("x-user"), Some("alice"));
    assert_eq!(b.header("x-user"), None);
}

#[tokio::test]
async fn private_wins_over_lifetimes_on_any_line() {
    let origin = Origin::new()
        .route(
            "/one-line",
            Reply::text("a").header("cache-control", "private, s-maxage=60"),
        )
        .route(
            "/two-lines",
            Reply::text("b")
                .header("cache-control", "s-maxage=60")
                .header("cache-control", "private"),
        )
        .route(
            "/max-age",
            Reply::text("c")
                .header("cache-control", "max-age=60, public")
                .header("cache-control", "PRIVATE"),
        )
        .route(
            "/shared",
            Reply::text("d").header("cache-control", "s-maxage=60"),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("p.example", &origin, "", ""));
    for path in ["/one-line", "/two-lines", "/max-age"] {
        let (a, b, n) = twice(&proxy, &origin, "p.example", path).await;
        assert_eq!(
            (b.header("x-arc2-cache"), n),
            (Some("Dynamic"), 2),
            "{path}"
        );
        assert_eq!(a.text(), b.text());
    }
    // With Authorization too: s-maxage would allow sharing it, private does not.
    let before = origin.requests();
    for _ in 0..2 {
        let got = fetch(
            &proxy,
            "p.example",
            "/two-lines",
            &[("authorization", "Basic eDp5")],
        )
        .await;
        assert_eq!(got.header("x-arc2-cache"), Some("Dynamic"));
    }
    assert_eq!(origin.requests(), before + 2);
    // s-maxage alone is shared, even with Authorization.
    let a = fetch(
        &proxy,
        "p.example",
        "/shared",
        &[("authorization", "Basic eDp5")],
    )
    .await;
    let b = fetch(
        &proxy,
        "p.example",
        "/shared",
        &[("authorization", "Basic eDp5")],
    )
    .await;
    assert_eq!(a.header("x-arc2-cache"), Some("Miss"));
    assert_eq!(b.header("x-arc2-cache"), Some("Hit"));
}

// --- immutable ---------------------------------------------------------------------------------

#[tokio::test]
async fn immutable_is_not_revalidated_on_reload_while_fresh_only() {
    let origin = Origin::new()
        .route(
            "/immutable",
            Reply::text("i")
                .header("cache-control", "max-age=60, immutable")
                .header("etag", "\"i1\""),
        )
        .route(
            "/mutable",
            Reply::text("m")
                .header("cache-control", "max-age=60")
                .header("etag", "\"m1\""),
        )
        .route(
            "/short",
            // Stale on arrival: 61 s old, fresh for 60.
            Reply::text("s")
                .header("cache-control", "max-age=60, immutable")
                .header("age", "61")
                .header("etag", "\"s1\""),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("i.example", &origin, "", ""));
    let reload = [("cache-control", "max-age=0")];

    fetch(&proxy, "i.example", "/immutable", &[]).await;
    let got = fetch(&proxy, "i.example", "/immutable", &reload).await;
    assert_eq!(
        got.header("x-arc2-cache"),
        Some("Hit"),
        "a reload does not revalidate it"
    );
    assert_eq!(origin.requests(), 1);
    // no-cache still asks for validation.
    let got = fetch(
        &proxy,
        "i.example",
        "/immutable",
        &[("cache-control", "no-cache")],
    )
    .await;
    assert_eq!(got.text(), "i");
    assert_eq!(origin.requests(), 2);

    // Without immutable a reload goes to the origin.
    fetch(&proxy, "i.example", "/mutable", &[]).await;
    let before = origin.requests();
    let got = fetch(&proxy, "i.example", "/mutable", &reload).await;
    assert_eq!(got.text(), "m");
    assert_eq!(origin.requests(), before + 1);

    // Stale, immutable changes nothing: a reload that would accept a stale copy (max-stale)
    // but asks for a young one (max-age=0) is revalidated with its validator like any other.
    fetch(&proxy, "i.example", "/short", &[]).await;
    let before = origin.requests();
    let got = fetch(
        &proxy,
        "i.example",
        "/short",
        &[("cache-control", "max-age=0, max-stale=100")],
    )
    .await;
    assert_eq!(got.text(), "s");
    assert_eq!(origin.requests(), before + 1);
    assert_eq!(
        origin
            .last()
            .headers
            .get("if-none-match")
            .and_then(|v| v.to_str().ok()),
        Some("\"s1\"")
    );
}

// --- ranges ------------------------------------------------------------------------------------

/// 200,000 bytes whose content tells where each byte is.
fn pattern() -> String {
    (0..200_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect()
}

#[tokio::test]
async fn a_range_miss_fetches_and_stores_the_whole_object() {
    let body = pattern();
    let origin = Origin::new()
        .route(
            "/video",
            Reply::text(&body)
                .header("cache-control", "max-age=60")
                .header("etag", "\"v1\""),
        )
        .route("/tail", Reply::text(&body).header("etag", "\"t1\""))
        .route("/tail2", Reply::text(&body).header("etag", "\"t1\""))
        .route("/far", Reply::text(&body))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("r.example", &origin, "", ""));

    let got = fetch(
        &proxy,
        "r.example",
        "/video",
        &[("range", "bytes=1000-1999")],
    )
    .await;
    assert_eq!(got.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(got.header("content-range"), Some("bytes 1000-1999/200000"));
    assert_eq!(got.text(), &body[1000..2000]);
    assert_eq!(origin.requests(), 1);
    let seen = origin.last();
    assert!(
        !seen.headers.contains_key("range"),
        "the origin was asked for everything"
    );

    // The rest is served from the store (or from the fill while it still runs).
    let got =
        fetch_until_stored(&proxy, "r.example", "/video", &[("range", "bytes=150000-")]).await;
    assert_eq!(got.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(got.text(), &body[150_000..]);
    let got = fetch(&proxy, "r.example", "/video", &[]).await;
    assert_eq!((got.status, got.body.len()), (StatusCode::OK, 200_000));
    assert_eq!(got.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(origin.requests(), 1);

    // A suffix range on a miss, with a matching If-Range.
    let got = fetch(
        &proxy,
        "r.example",
        "/tail",
        &[("range", "bytes=-100"), ("if-range", "\"t1\"")],
    )
    .await;
    assert_eq!(got.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(got.text(), &body[199_900..]);
    // An If-Range that does not match gets the whole representation (on a miss too).
    let got = fetch(
        &proxy,
        "r.example",
        "/tail2",
        &[("range", "bytes=0-9"), ("if-range", "\"old\"")],
    )
    .await;
    assert_eq!((got.status, got.body.len()), (StatusCode::OK, 200_000));
    assert_eq!(got.header("x-arc2-cache"), Some("Miss"));

    // Past the end on a miss: 416, and the object is stored all the same.
    let got = fetch(&proxy, "r.example", "/far", &[("range", "bytes=500000-")]).await;
    assert_eq!(got.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(got.header("content-range"), Some("bytes */200000"));
    let before = origin.requests();
    let got = fetch_until_stored(&proxy, "r.example", "/far", &[]).await;
    assert_eq!(got.body.len(), 200_000);
    assert_eq!(origin.requests(), before);
}

/// An origin that answers ranges itself (206), as real ones do.
fn ranged_origin(body: String, cache_control: &'static str) -> Origin {
    let body = Arc::new(body);
    Origin::new().route_fn("*", move |seen| {
        let range = seen
            .headers
            .get("range")
            .and_then(|v| v.to_str().ok())
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.split_once('-'))
            .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)));
        match range {
            Some((a, b)) => Reply::text(&body[a..=b])
                .status(206)
                .header("content-range", &format!("bytes {a}-{b}/{}", body.len()))
                .header("cache-control", cache_control),
            None => Reply::text(&body).header("cache-control", cache_control),
        }
    })
}

#[tokio::test]
async fn a_range_of_an_unstorable_object_is_asked_of_the_origin_again() {
    let body = pattern();
    let origin = ranged_origin(body.clone(), "no-store").start().await;
    let proxy = Proxy::start(&config_for("r.example", &origin, "", ""));
    let got = fetch(&proxy, "r.example", "/live", &[("range", "bytes=10-19")]).await;
    assert_eq!(got.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(got.text(), &body[10..20]);
    let seen = origin.seen();
    assert_eq!(seen.len(), 2, "a whole-object try, then the range");
    assert!(!seen[0].headers.contains_key("range"));
    assert_eq!(seen[1].headers.get("range").unwrap(), "bytes=10-19");
    // For a while, further ranges of that URL go straight to the origin with their range.
    let got = fetch(&proxy, "r.example", "/live", &[("range", "bytes=20-29")]).await;
    assert_eq!(got.text(), &body[20..30]);
    let seen = origin.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[2].headers.get("range").unwrap(), "bytes=20-29");
}

#[tokio::test]
async fn a_range_of_an_object_over_cache_max_object_is_asked_of_the_origin_again() {
    let body = pattern();
    let origin = ranged_origin(body.clone(), "max-age=60").start().await;
    let proxy = Proxy::start(&config_for(
        "r.example",
        &origin,
        "cache_max_object = \"64KiB\"",
        "",
    ));
    for _ in 0..2 {
        let got = fetch(&proxy, "r.example", "/big", &[("range", "bytes=100-199")]).await;
        assert_eq!(got.status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(got.text(), &body[100..200]);
    }
    assert_eq!(
        origin.requests(),
        3,
        "a whole-object try and the range, then the range alone"
    );
}

#[tokio::test]
async fn a_range_of_an_object_of_unknown_length_is_asked_of_the_origin_again() {
    let body = pattern();
    let whole = body.clone();
    let origin = Origin::new()
        .route_fn("/chunked", move |seen| match seen.headers.get("range") {
            Some(_) => Reply::text(&whole[0..10])
                .status(206)
                .header("content-range", "bytes 0-9/200000"),
            None => Reply::chunked(&whole).header("cache-control", "max-age=60"),
        })
        .start()
        .await;
    let proxy = Proxy::start(&config_for("r.example", &origin, "", ""));
    let got = fetch(&proxy, "r.example", "/chunked", &[("range", "bytes=0-9")]).await;
    assert_eq!(got.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(got.text(), &body[0..10]);
    assert_eq!(origin.requests(), 2);
    // The whole response, asked for without a range, is stored as usual.
    let got = fetch(&proxy, "r.example", "/chunked", &[]).await;
    assert_eq!(got.body.len(), 200_000);
    let got = fetch(&proxy, "r.example", "/chunked", &[("range", "bytes=0-9")]).await;
    assert_eq!(got.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(got.text(), &body[0..10]);
    assert_eq!(origin.requests(), 3);
}

#[tokio::test]
async fn concurrent_ranges_of_one_object_share_one_fetch() {
    let body = pattern();
    let origin = Origin::new()
        .route(
            "/shared",
            Reply::text(&body)
                .header("cache-control", "max-age=60")
                .delay(Duration::from_millis(300)),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("r.example", &origin, "", ""));
    let ranges = ["bytes=0-99", "bytes=100000-100099", "bytes=-5", "bytes=0-"];
    let asks = ranges.map(|r| {
        let url = proxy.url("/shared");
        tokio::spawn(async move {
            let req = Request::get(url)
                .header("host", "r.example")
                .header("range", r)
                .body(empty())
                .unwrap();
            send(&client(), req).await
        })
    });
    let mut answers = Vec::new();
    for a in asks {
        answers.push(a.await.unwrap());
    }
    assert_eq!(
        origin.requests(),
        1,
        "one whole-object fetch for every range"
    );
    assert_eq!(answers[0].text(), &body[..100]);
    assert_eq!(answers[1].text(), &body[100_000..100_100]);
    assert_eq!(answers[2].text(), &body[199_995..]);
    assert_eq!(answers[3].text(), body);
    let content_ranges: Vec<_> = answers.iter().map(|a| a.header("content-range")).collect();
    assert_eq!(
        content_ranges,
        [
            Some("bytes 0-99/200000"),
            Some("bytes 100000-100099/200000"),
            Some("bytes 199995-199999/200000"),
            Some("bytes 0-199999/200000"),
        ]
    );
    for a in &answers {
        assert_eq!(a.status, StatusCode::PARTIAL_CONTENT);
    }
    let collapsed = answers
        .iter()
        .filter(|a| a.header("cache-status") == Some("rampart; fwd=miss; collapsed"))
        .count();
    assert!(collapsed >= 1, "the others read the first one's fetch");
}

#[tokio::test]
async fn coalesced_clients_never_get_withheld_fields() {
    let origin = Origin::new()
        .route(
            "/qualified",
            Reply::text("d")
                .header("cache-control", "max-age=60, private=\"Set-Cookie\"")
                .header("set-cookie", "session=leader")
                .delay(Duration::from_millis(300)),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("k.example", &origin, "", ""));
    let asks: Vec<_> = (0..4)
        .map(|_| {
            let url = proxy.url("/qualified");
            tokio::spawn(async move {
                let req = Request::get(url)
                    .header("host", "k.example")
                    .body(empty())
                    .unwrap();
                send(&client(), req).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for a in asks {
        answers.push(a.await.unwrap());
    }
    assert_eq!(origin.requests(), 1);
    let with_cookie = answers
        .iter()
        .filter(|a| a.header("set-cookie").is_some())
        .count();
    assert_eq!(with_cookie, 1, "only the client whose request fetched it");
    let collapsed = answers
        .iter()
        .filter(|a| a.header("cache-status") == Some("rampart; fwd=miss; collapsed"))
        .count();
    assert!(collapsed >= 1, "{collapsed}");
    assert!(answers.iter().all(|a| a.text() == "d"));
}

#[tokio::test]
async fn revalidation_keeps_withholding_fields_named_in_cdn_cache_control() {
    let origin = Origin::new()
        .route_fn("/account", |seen| {
            // The 304 repeats the private field but not CDN-Cache-Control: the stored copy's
            // directives still say what to withhold.
            let reply = if seen.headers.contains_key("if-none-match") {
                Reply::text("").status(304)
            } else {
                // Stale on arrival: 61 s old, fresh for 60.
                Reply::text("page")
                    .header("cdn-cache-control", "max-age=60, private=\"x-user\"")
                    .header("age", "61")
            };
            reply.header("etag", "\"p1\"").header("x-user", "alice")
        })
        .start()
        .await;
    let proxy = Proxy::start(&config_for("k.example", &origin, "", ""));
    let first = fetch(&proxy, "k.example", "/account", &[]).await;
    assert_eq!(first.header("x-user"), Some("alice"));
    // Stale: revalidated (a 304 that carries the field again), then answered from the store.
    let second = fetch(&proxy, "k.example", "/account", &[]).await;
    assert_eq!(origin.requests(), 2);
    assert!(origin.last().headers.contains_key("if-none-match"));
    assert_eq!(second.text(), "page");
    assert_eq!(second.header("x-user"), None);
    let third = fetch(&proxy, "k.example", "/account", &[]).await;
    assert_eq!(third.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(third.header("x-user"), None);
    assert_eq!(origin.requests(), 2);
}

// --- If-Match / If-Unmodified-Since on hits ----------------------------------------------------

#[tokio::test]
async fn if_match_and_if_unmodified_since_are_evaluated_on_hits() {
    let modified = ago(3600);
    let origin = Origin::new()
        .route(
            "/doc",
            Reply::text("doc")
                .header("cache-control", "max-age=60")
                .header("etag", "\"d1\"")
                .header("last-modified", &modified),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("m.example", &origin, "", ""));
    fetch(&proxy, "m.example", "/doc", &[]).await;
    let cases: [(&[(&str, &str)], StatusCode); 7] = [
        (&[("if-match", "\"d1\"")], StatusCode::OK),
        (&[("if-match", "\"x\", \"d1\"")], StatusCode::OK),
        (&[("if-match", "*")], StatusCode::OK),
        (&[("if-match", "\"d2\"")], StatusCode::PRECONDITION_FAILED),
        (&[("if-match", "W/\"d1\"")], StatusCode::PRECONDITION_FAILED),
        (
            &[("if-unmodified-since", &ago(7200))],
            StatusCode::PRECONDITION_FAILED,
        ),
        (&[("if-unmodified-since", &ago(10))], StatusCode::OK),
    ];
    for (headers, want) in cases {
        let got = fetch(&proxy, "m.example", "/doc", headers).await;
        assert_eq!(got.status, want, "{headers:?}");
        assert_eq!(got.header("x-arc2-cache"), Some("Hit"), "{headers:?}");
        if want == StatusCode::OK {
            assert_eq!(got.text(), "doc");
        } else {
            assert!(got.body.is_empty());
        }
    }
    // A failed precondition comes before a range.
    let got = fetch(
        &proxy,
        "m.example",
        "/doc",
        &[("if-match", "\"nope\""), ("range", "bytes=0-0")],
    )
    .await;
    assert_eq!(got.status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(origin.requests(), 1, "all answered from the store");
}

/// a miss carrying `If-Match: "nope"` made the origin answer 412 with a lifetime
/// (`cache_statuses = "rfc9111"`), which was stored: the next plain GET was a 412 hit. A
/// cache-filling request now goes without the client's `If-Match` / `If-Unmodified-Since`
/// (as it goes without `Range`), they are evaluated against the response, and a 412 is never
/// stored (for the requests that still carry them to the origin: a forced refresh).
#[tokio::test]
async fn a_412_to_one_clients_precondition_is_not_stored_for_everyone() {
    let modified = ago(3600);
    let origin = Origin::new()
        .route_fn("*", move |seen| {
            let h = &seen.headers;
            let failed = h.get("if-match").is_some_and(|v| v != "\"v1\"")
                || h.contains_key("if-unmodified-since");
            if failed {
                return Reply::text("")
                    .status(412)
                    .header("cache-control", "max-age=600");
            }
            Reply::text("the page")
                .header("cache-control", "max-age=600")
                .header("etag", "\"v1\"")
                .header("last-modified", &modified)
        })
        .start()
        .await;
    let proxy = Proxy::start(&config_for(
        "p.example",
        &origin,
        "cache_statuses = \"rfc9111\"",
        "",
    ));
    let old = ago(7200);
    for (path, pre) in [
        ("/a", ("if-match", "\"nope\"")),
        ("/b", ("if-unmodified-since", old.as_str())),
    ] {
        let first = fetch(&proxy, "p.example", path, &[pre]).await;
        assert_eq!(first.status, StatusCode::PRECONDITION_FAILED, "{path}");
        assert!(first.body.is_empty());
        let plain = fetch(&proxy, "p.example", path, &[]).await;
        assert_eq!(plain.status, StatusCode::OK, "{path}: {}", plain.text());
        assert_eq!(plain.text(), "the page");
    }
    // The fills went without the preconditions, and answered the plain requests (from the
    // store, or streaming still: the 412 did not wait for the body): one request per path.
    let seen = origin.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for s in &seen {
        assert!(
            !s.headers.contains_key("if-match") && !s.headers.contains_key("if-unmodified-since"),
            "{s:?}"
        );
    }
    // A matching If-Match on a miss gets the page, and fills the store too.
    let got = fetch(&proxy, "p.example", "/c", &[("if-match", "\"v1\"")]).await;
    assert_eq!(
        (got.status, got.text().as_str()),
        (StatusCode::OK, "the page")
    );
    fetch(&proxy, "p.example", "/c", &[]).await;
    assert_eq!(origin.requests(), 3);
    // A client's forced refresh sends its precondition on; the 412 that comes back is its
    // own, never stored.
    let forced = fetch(
        &proxy,
        "p.example",
        "/d",
        &[("if-match", "\"nope\""), ("cache-control", "no-cache")],
    )
    .await;
    assert_eq!(forced.status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(origin.last().headers["if-match"], "\"nope\"");
    let plain = fetch(&proxy, "p.example", "/d", &[]).await;
    assert_eq!(plain.status, StatusCode::OK, "{}", plain.text());
}

// --- interim responses -------------------------------------------------------------------------

/// An HTTP/1.1 origin written by hand: every request is answered with `interim` (raw 1xx
/// responses) followed by a cacheable 200.
async fn interim_origin(interim: &'static str) -> (u16, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        seen.fetch_add(1, Ordering::SeqCst);
                        let answer = format!(
                            "{interim}HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\
                             cache-control: max-age=60\r\n\r\nhello"
                        );
                        if s.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    (port, count)
}

#[tokio::test]
async fn interim_responses_are_passed_on_and_never_cached() {
    for interim in [
        "HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n",
        "HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a.js>\r\n\r\n",
    ] {
        let (port, requests) = interim_origin(interim).await;
        let toml = format!(
            "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nworkers = 1\nadd_logging = false\n\
             [[proxy_rules]]\ndomain = \"e.example\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\n\
             forward_port_http = {port}\n"
        );
        let proxy = Proxy::start(&toml);
        let addr = proxy.addr;
        // The origin runs on this test's runtime: the blocking client gets a thread of its own.
        let ask = || {
            tokio::task::spawn_blocking(move || {
                let req = b"GET /page HTTP/1.1\r\nhost: e.example\r\nconnection: close\r\n\r\n";
                raw(addr, req, Duration::from_secs(5))
            })
        };
        // RFC 9110 §15.2: a proxy forwards the 1xx answers it did not ask for, ahead of the
        // final one, and the final answer does not take their fields.
        let first = ask().await.unwrap();
        let final_at = first.find("HTTP/1.1 200 OK\r\n").expect(&first);
        let (interims, fin) = first.split_at(final_at);
        assert!(interims.starts_with("HTTP/1.1 10"), "{first}");
        assert!(interims.contains("HTTP/1.1 103 Early Hints\r\n"), "{first}");
        assert_eq!(
            interims.contains(" 102 "),
            interim.contains(" 102 "),
            "{first}"
        );
        assert!(interims.to_ascii_lowercase().contains("link:"), "{first}");
        assert!(!fin.to_ascii_lowercase().contains("link:"), "{first}");
        assert!(first.ends_with("hello"), "{first}");
        let second = ask().await.unwrap();
        assert!(second.starts_with("HTTP/1.1 200 OK\r\n"), "{second}");
        assert!(
            second.to_ascii_lowercase().contains("x-arc2-cache: hit"),
            "{second}"
        );
        assert!(!second.to_ascii_lowercase().contains("link:"), "{second}");
        assert_eq!(requests.load(Ordering::SeqCst), 1);
    }
}
