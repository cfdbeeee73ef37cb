//! End-to-end tests of stored responses over time: expiry, revalidation with the origin (304),
//! conditional and range requests answered from the store, and stale responses served while
//! refreshing or when the origin fails. Origins send `Age` so entries are stale on arrival: no
//! test waits out a lifetime.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use support::*;

#[tokio::test]
async fn origin_max_age_expires_and_refetches() {
    let origin = Origin::new()
        .route(
            "/short",
            Reply::text("x").header("cache-control", "max-age=60"),
        )
        // 59 s old on arrival: fresh for one second more (no test waits out a lifetime).
        .route(
            "/aged",
            Reply::text("x")
                .header("cache-control", "max-age=60")
                .header("age", "61"),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("exp.example", &origin, "", ""));
    assert_eq!(
        get(&proxy, "exp.example", "/short")
            .await
            .header("x-arc2-cache"),
        Some("Miss")
    );
    assert_eq!(
        get(&proxy, "exp.example", "/short")
            .await
            .header("x-arc2-cache"),
        Some("Hit")
    );
    // Older than its max-age when it arrives: stored, and stale for the next request.
    let first = get(&proxy, "exp.example", "/aged").await;
    assert_eq!(first.header("x-arc2-cache"), Some("Miss"));
    let got = get(&proxy, "exp.example", "/aged").await;
    assert_eq!(got.header("x-arc2-cache"), Some("Expired"));
    assert_eq!(
        got.header("cache-status"),
        Some("rampart; fwd=stale; stored")
    );
    assert_eq!(origin.requests(), 3);
}

#[tokio::test]
async fn stale_entries_are_revalidated_and_a_304_updates_stored_headers() {
    let origin = Origin::new()
        .route_fn("/doc", |s| {
            if s.headers
                .get("if-none-match")
                .is_some_and(|v| v == "\"v1\"")
            {
                Reply::text("")
                    .status(304)
                    .header("cache-control", "max-age=60")
                    .header("x-version", "2")
                    .header("etag", "\"v1\"")
            } else {
                // Stale on arrival (61 s old, fresh for 60).
                Reply::text("document body")
                    .header("cache-control", "max-age=60")
                    .header("age", "61")
                    .header("etag", "\"v1\"")
                    .header("x-version", "1")
            }
        })
        .start()
        .await;
    let proxy = Proxy::start(&config_for("val.example", &origin, "", ""));
    assert_eq!(
        get(&proxy, "val.example", "/doc").await.header("x-version"),
        Some("1")
    );
    let got = get(&proxy, "val.example", "/doc").await;
    assert_eq!(
        origin
            .last()
            .headers
            .get("if-none-match")
            .map(|v| v.to_str().unwrap()),
        Some("\"v1\""),
        "conditional request"
    );
    assert_eq!(got.status, 200);
    assert_eq!(
        got.text(),
        "document body",
        "the stored body, confirmed by the 304"
    );
    assert_eq!(got.header("x-arc2-cache"), Some("Expired"));
    assert_eq!(
        got.header("x-version"),
        Some("2"),
        "headers updated from the 304"
    );
    let again = get(&proxy, "val.example", "/doc").await;
    assert_eq!(
        (again.header("x-arc2-cache"), again.header("x-version")),
        (Some("Hit"), Some("2"))
    );
    assert_eq!(again.header("cache-control"), Some("max-age=60"));
    assert_eq!(origin.requests(), 2);
}

#[tokio::test]
async fn client_conditional_requests_are_answered_from_the_cache() {
    let origin = Origin::new()
        .route(
            "/c",
            Reply::text("cond")
                .header("etag", "W/\"abc\"")
                .header("last-modified", "Sat, 01 Jan 2022 00:00:00 GMT"),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("cond.example", &origin, "", ""));
    get(&proxy, "cond.example", "/c").await;
    let nm = fetch(req(&proxy, "cond.example", "/c").header("if-none-match", "\"abc\"")).await;
    assert_eq!(nm.status, 304);
    assert!(nm.body.is_empty());
    assert_eq!(nm.header("etag"), Some("W/\"abc\""));
    assert_eq!(nm.header("x-arc2-cache"), Some("Hit"));
    let other = fetch(req(&proxy, "cond.example", "/c").header("if-none-match", "\"zzz\"")).await;
    assert_eq!(
        (other.status.as_u16(), other.text()),
        (200, "cond".to_owned())
    );
    let ims = fetch(
        req(&proxy, "cond.example", "/c")
            .header("if-modified-since", "Sun, 02 Jan 2022 00:00:00 GMT"),
    )
    .await;
    assert_eq!(ims.status, 304);
    let older = fetch(
        req(&proxy, "cond.example", "/c")
            .header("if-modified-since", "Fri, 31 Dec 2021 00:00:00 GMT"),
    )
    .await;
    assert_eq!(older.status, 200);
    assert_eq!(origin.requests(), 1);
}

#[tokio::test]
async fn ranges_are_served_from_a_stored_full_response() {
    let body: String = (0..1000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let origin = Origin::new()
        .route("/r", Reply::text(&body).header("etag", "\"strong\""))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("range.example", &origin, "", ""));
    get(&proxy, "range.example", "/r").await;
    let part = fetch(req(&proxy, "range.example", "/r").header("range", "bytes=0-9")).await;
    assert_eq!(part.status, 206);
    assert_eq!(part.header("content-range"), Some("bytes 0-9/1000"));
    assert_eq!(part.text(), &body[..10]);
    let tail = fetch(req(&proxy, "range.example", "/r").header("range", "bytes=-10")).await;
    assert_eq!(
        (tail.status.as_u16(), tail.text()),
        (206, body[990..].to_owned())
    );
    let beyond = fetch(req(&proxy, "range.example", "/r").header("range", "bytes=5000-")).await;
    assert_eq!(beyond.status, 416);
    assert_eq!(beyond.header("content-range"), Some("bytes */1000"));
    let if_range_stale = fetch(
        req(&proxy, "range.example", "/r")
            .header("range", "bytes=0-9")
            .header("if-range", "\"old\""),
    )
    .await;
    assert_eq!(
        (if_range_stale.status.as_u16(), if_range_stale.body.len()),
        (200, 1000)
    );
    let if_range_ok = fetch(
        req(&proxy, "range.example", "/r")
            .header("range", "bytes=10-19")
            .header("if-range", "\"strong\""),
    )
    .await;
    assert_eq!(
        (if_range_ok.status.as_u16(), if_range_ok.text()),
        (206, body[10..20].to_owned())
    );
    assert_eq!(
        origin.requests(),
        1,
        "every range came from the stored full response"
    );
}

#[tokio::test]
async fn max_stale_and_min_fresh_from_the_client() {
    let origin = Origin::new()
        // 20 s of freshness left.
        .route(
            "/m",
            Reply::text("m")
                .header("cache-control", "max-age=60")
                .header("age", "40"),
        )
        // 1 s stale.
        .route(
            "/s",
            Reply::text("s")
                .header("cache-control", "max-age=60")
                .header("age", "61"),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("ms.example", &origin, "", ""));
    get(&proxy, "ms.example", "/m").await;
    // min-fresh larger than what is left: not good enough, go to the origin.
    let fresh_enough =
        fetch(req(&proxy, "ms.example", "/m").header("cache-control", "min-fresh=30")).await;
    assert_eq!(fresh_enough.header("x-arc2-cache"), Some("Expired"));
    assert_eq!(origin.requests(), 2);
    // A stale copy; a client that accepts 60 s of staleness gets it.
    get(&proxy, "ms.example", "/s").await;
    assert_eq!(origin.requests(), 3);
    let stale_ok =
        fetch(req(&proxy, "ms.example", "/s").header("cache-control", "max-stale=60")).await;
    assert_eq!(stale_ok.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(origin.requests(), 3);
    // Without max-stale it is refetched.
    assert_eq!(
        get(&proxy, "ms.example", "/s").await.header("x-arc2-cache"),
        Some("Expired")
    );
    assert_eq!(origin.requests(), 4);
}

#[tokio::test]
async fn stale_if_error_serves_the_stored_copy_when_the_origin_fails() {
    let failing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let f = failing.clone();
    let origin = Origin::new()
        .route_fn("/sie", move |_| {
            if f.load(std::sync::atomic::Ordering::SeqCst) {
                Reply::text("broken").status(503)
            } else {
                Reply::text("good copy")
                    .header("cache-control", "max-age=60, stale-if-error=600")
                    .header("age", "61")
            }
        })
        .route_fn("/strict", |_| {
            Reply::text("strict copy")
                .header("cache-control", "max-age=60, must-revalidate")
                .header("age", "61")
        })
        .start()
        .await;
    let port = origin.port();
    let proxy = Proxy::start(&config_for(
        "sie.example",
        &origin,
        "cache_grace_seconds = 0",
        "",
    ));
    get(&proxy, "sie.example", "/sie").await;
    get(&proxy, "sie.example", "/strict").await;
    // Both arrived stale (Age 61, max-age 60).
    failing.store(true, std::sync::atomic::Ordering::SeqCst);
    let got = get(&proxy, "sie.example", "/sie").await;
    assert_eq!(
        (got.status.as_u16(), got.text()),
        (200, "good copy".to_owned())
    );
    assert_eq!(
        got.header("cache-status"),
        Some("rampart; hit; detail=stale-if-error")
    );
    // The origin goes away entirely: still served.
    drop(origin);
    let down = get(&proxy, "sie.example", "/sie").await;
    assert_eq!(
        (down.status.as_u16(), down.text()),
        (200, "good copy".to_owned())
    );
    // must-revalidate forbids it: the client sees the failure.
    let strict = get(&proxy, "sie.example", "/strict").await;
    assert_eq!(strict.status, 502, "port {port}");
}

#[tokio::test]
async fn grace_period_covers_origins_that_say_nothing() {
    let origin = Origin::new()
        .route(
            "/g",
            Reply::text("graceful")
                .header("cache-control", "max-age=60")
                .header("age", "61"),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for(
        "grace.example",
        &origin,
        "cache_grace_seconds = 30",
        "",
    ));
    // Stale on arrival (Age 61, max-age 60), 1 s into the 30 s grace.
    get(&proxy, "grace.example", "/g").await;
    drop(origin);
    let got = get(&proxy, "grace.example", "/g").await;
    assert_eq!(
        (got.status.as_u16(), got.text()),
        (200, "graceful".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_while_revalidate_serves_stale_and_refreshes_once() {
    let version = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let v = version.clone();
    let origin = Origin::new()
        .route_fn("/swr", move |_| {
            let n = v.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // The first version arrives stale (Age 61, max-age 60); the refresh is fresh.
            Reply::text(&format!("version {n}"))
                .header("cache-control", "max-age=60, stale-while-revalidate=600")
                .header("age", if n == 0 { "61" } else { "0" })
                .delay(Duration::from_millis(if n == 0 { 0 } else { 300 }))
        })
        .start()
        .await;
    let proxy = Proxy::start(&config_for("swr.example", &origin, "", ""));
    assert_eq!(get(&proxy, "swr.example", "/swr").await.text(), "version 0");
    // A burst of requests while stale: all answered at once with the stale copy.
    let started = std::time::Instant::now();
    for _ in 0..10 {
        let got = get(&proxy, "swr.example", "/swr").await;
        assert_eq!(got.text(), "version 0");
        assert_eq!(
            got.header("cache-status"),
            Some("rampart; hit; detail=stale-while-revalidate")
        );
    }
    assert!(
        started.elapsed() < Duration::from_millis(300 * 10),
        "stale answers did not wait for the origin"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let got = get(&proxy, "swr.example", "/swr").await;
        if got.text() == "version 1" {
            assert_eq!(got.header("x-arc2-cache"), Some("Hit"));
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never refreshed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(origin.requests(), 2, "exactly one background refresh");
}

/// `stale_while_revalidate_seconds` (NGINX's `proxy_cache_use_stale updating`): a stale copy
/// answers while it is refreshed though the origin sent no `stale-while-revalidate`; the
/// origin's own directive (here a shorter window, 0) overrides the operator's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_stale_while_revalidate_applies_when_the_origin_gives_none() {
    let version = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let v = version.clone();
    let origin = Origin::new()
        .route_fn("/plain", move |_| {
            let n = v.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // Stale on arrival (Age 61, max-age 60); the refresh is fresh.
            Reply::text(&format!("version {n}"))
                .header("cache-control", "max-age=60")
                .header("age", if n == 0 { "61" } else { "0" })
        })
        .route(
            "/own",
            Reply::text("own")
                .header("cache-control", "max-age=60, stale-while-revalidate=0")
                .header("age", "61"),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for(
        "swrd.example",
        &origin,
        "stale_while_revalidate_seconds = 600",
        "",
    ));
    assert_eq!(
        get(&proxy, "swrd.example", "/plain").await.text(),
        "version 0"
    );
    let got = get(&proxy, "swrd.example", "/plain").await;
    assert_eq!(got.text(), "version 0");
    assert_eq!(
        got.header("cache-status"),
        Some("rampart; hit; detail=stale-while-revalidate")
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let got = get(&proxy, "swrd.example", "/plain").await;
        if got.text() == "version 1" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never refreshed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The origin's stale-while-revalidate=0: not served stale, fetched again.
    get(&proxy, "swrd.example", "/own").await;
    let own = get(&proxy, "swrd.example", "/own").await;
    assert_ne!(
        own.header("cache-status"),
        Some("rampart; hit; detail=stale-while-revalidate")
    );
    assert_eq!(origin.requests(), 4, "{:?}", own.header("cache-status"));
}

/// `stale_if_error_seconds` (NGINX's `proxy_cache_use_stale error timeout http_503`, Varnish
/// grace): a stale copy stands in for a 5xx or an origin that is down though the origin sent no
/// `stale-if-error`, also for a response with `s-maxage` (the operator's key is the permission
/// RFC 9111 §4.2.4 asks for). `must-revalidate` still forbids it; the origin's own
/// `stale-if-error` (here 0) overrides the operator's.
#[tokio::test]
async fn the_operators_stale_if_error_covers_5xx_a_down_origin_and_s_maxage() {
    let failing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let origin = Origin::new();
    let mut origin = origin;
    for (path, cc) in [
        ("/plain", "max-age=60"),
        ("/shared", "s-maxage=60"),
        ("/strict", "s-maxage=60, must-revalidate"),
        ("/own", "max-age=60, stale-if-error=0"),
    ] {
        let f = failing.clone();
        origin = origin.route_fn(path, move |_| {
            if f.load(std::sync::atomic::Ordering::SeqCst) {
                Reply::text("broken").status(503)
            } else {
                Reply::text(&format!("good {path}"))
                    .header("cache-control", cc)
                    .header("age", "61")
            }
        });
    }
    let origin = origin.start().await;
    let proxy = Proxy::start(&config_for(
        "sied.example",
        &origin,
        "cache_grace_seconds = 0",
        "stale_if_error_seconds = 600",
    ));
    let paths = ["/plain", "/shared", "/strict", "/own"];
    for p in paths {
        get(&proxy, "sied.example", p).await;
    }
    failing.store(true, std::sync::atomic::Ordering::SeqCst);
    for p in ["/plain", "/shared"] {
        let got = get(&proxy, "sied.example", p).await;
        assert_eq!(
            (got.status.as_u16(), got.text()),
            (200, format!("good {p}"))
        );
        assert_eq!(
            got.header("cache-status"),
            Some("rampart; hit; detail=stale-if-error"),
            "{p}"
        );
    }
    for p in ["/strict", "/own"] {
        assert_eq!(get(&proxy, "sied.example", p).await.status, 503, "{p}");
    }
    // The origin goes away entirely: still served.
    drop(origin);
    for p in ["/plain", "/shared"] {
        let got = get(&proxy, "sied.example", p).await;
        assert_eq!(
            (got.status.as_u16(), got.text()),
            (200, format!("good {p}"))
        );
    }
    for p in ["/strict", "/own"] {
        assert_eq!(get(&proxy, "sied.example", p).await.status, 502, "{p}");
    }
}
