//! End-to-end tests of invalidation: unsafe methods (RFC 9111 §4.4), `PURGE` and the management
//! API's purge scopes, and what the admin paths are without an API key.
#![allow(clippy::unwrap_used)]

use crate::support;

use http::Request;
use support::*;

#[tokio::test]
async fn successful_unsafe_requests_invalidate_the_target_and_location() {
    let origin = Origin::new()
        .route(
            "/item",
            Reply::text("item").header("vary", "Accept-Encoding"),
        )
        .route("/list", Reply::text("list"))
        .route_fn("/edit", |s| {
            if s.method == http::Method::POST {
                Reply::text("saved").status(201).header("location", "/list")
            } else {
                Reply::text("form")
            }
        })
        .route("/fail", Reply::text("no").status(500))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("inv.example", &origin, "", ""));
    for path in ["/item", "/list"] {
        get(&proxy, "inv.example", path).await;
        assert_eq!(
            get(&proxy, "inv.example", path)
                .await
                .header("x-arc2-cache"),
            Some("Hit")
        );
    }
    assert_eq!(origin.requests(), 2);
    // A failed unsafe request invalidates nothing.
    let failed = send(
        &client(),
        Request::post(proxy.url("/fail"))
            .header("host", "inv.example")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(failed.status, 500);
    assert_eq!(
        get(&proxy, "inv.example", "/list")
            .await
            .header("x-arc2-cache"),
        Some("Hit")
    );
    assert_eq!(
        get(&proxy, "inv.example", "/item")
            .await
            .header("x-arc2-cache"),
        Some("Hit")
    );
    // A successful POST invalidates its Location on the same host.
    let saved = send(
        &client(),
        Request::post(proxy.url("/edit"))
            .header("host", "inv.example")
            .body(full("x"))
            .unwrap(),
    )
    .await;
    assert_eq!(saved.status, 201);
    assert_eq!(
        get(&proxy, "inv.example", "/list")
            .await
            .header("x-arc2-cache"),
        Some("Miss"),
        "Location invalidated"
    );
    // A successful DELETE invalidates its target, every variant of it.
    let del = send(
        &client(),
        Request::delete(proxy.url("/item"))
            .header("host", "inv.example")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(del.status, 200);
    assert_eq!(
        get(&proxy, "inv.example", "/item")
            .await
            .header("x-arc2-cache"),
        Some("Miss"),
        "target invalidated"
    );
    assert_eq!(origin.requests(), 7);
}

async fn warm(proxy: &Proxy, host: &str, paths: &[&str]) {
    for p in paths {
        get(proxy, host, p).await;
        assert_eq!(
            get(proxy, host, p).await.header("x-arc2-cache"),
            Some("Hit"),
            "{p}"
        );
    }
}

fn purge(proxy: &Proxy, host: &str, path: &str) -> http::request::Builder {
    Request::builder()
        .method("PURGE")
        .uri(proxy.url(path))
        .header("host", host)
}

#[tokio::test]
async fn purge_method_needs_an_allowed_address_or_the_key() {
    let origin = Origin::new().route("*", Reply::text("p")).start().await;
    let open = Proxy::start(&config_for(
        "pg.example",
        &origin,
        "purge_allow = [\"127.0.0.0/8\"]",
        "",
    ));
    warm(&open, "pg.example", &["/a"]).await;
    let res = fetch(purge(&open, "pg.example", "/a")).await;
    assert_eq!(res.status, 200);
    assert_eq!(res.text(), "{\"purged\":1,\"soft\":false}\n");
    assert_eq!(
        get(&open, "pg.example", "/a").await.header("x-arc2-cache"),
        Some("Miss")
    );

    let closed = Proxy::start(&config_for(
        "pg.example",
        &origin,
        &format!("api_key = \"{API_KEY}\""),
        "",
    ));
    warm(&closed, "pg.example", &["/b"]).await;
    let refused = fetch(purge(&closed, "pg.example", "/b")).await;
    assert_eq!(refused.status, 403);
    assert!(
        refused
            .text()
            .contains("send the api_key, or add the address to purge_allow"),
        "{}",
        refused.text()
    );
    // A wrong key is said to be wrong, not "not allowed from this address".
    let wrong = fetch(
        purge(&closed, "pg.example", "/b").header("authorization", "Bearer not-the-key-at-all"),
    )
    .await;
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.text(), "{\"error\":\"wrong API key\"}\n");
    assert_eq!(wrong.header("www-authenticate"), Some("Bearer"));
    assert_eq!(
        get(&closed, "pg.example", "/b")
            .await
            .header("x-arc2-cache"),
        Some("Hit")
    );
    let keyed = fetch(
        purge(&closed, "pg.example", "/b").header("authorization", format!("Bearer {API_KEY}")),
    )
    .await;
    assert_eq!(keyed.status, 200);
    assert_eq!(
        get(&closed, "pg.example", "/b")
            .await
            .header("x-arc2-cache"),
        Some("Miss")
    );
    // PURGE never reaches the origin.
    assert!(origin.seen().iter().all(|s| s.method != "PURGE"));
}

#[tokio::test]
async fn admin_api_purges_by_the_four_scopes_and_soft_purges() {
    let origin = Origin::new()
        .route("*", Reply::text("x").header("cache-control", "max-age=600"))
        .start()
        .await;
    let cfg = config_for("one.example", &origin, &format!("api_key = \"{API_KEY}\""), "")
        + &format!("[[proxy_rules]]\ndomain = \"two.example\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\n", origin.port());
    let proxy = Proxy::start(&cfg);
    let api = |q: &str| {
        Request::post(proxy.url(&format!("/_rampart/purge?{q}")))
            .header("authorization", format!("Bearer {API_KEY}"))
    };
    warm(
        &proxy,
        "one.example",
        &["/blog/1", "/blog/2", "/shop/blog-sale", "/about"],
    )
    .await;
    warm(&proxy, "two.example", &["/blog/1"]).await;

    assert_eq!(
        fetch(api("scope=prefix&host=one.example&path=%2Fblog%2F"))
            .await
            .text(),
        "{\"purged\":2,\"soft\":false}\n"
    );
    assert_eq!(
        get(&proxy, "two.example", "/blog/1")
            .await
            .header("x-arc2-cache"),
        Some("Hit"),
        "other host untouched"
    );
    assert_eq!(
        fetch(api("scope=contains&host=one.example&path=blog"))
            .await
            .text(),
        "{\"purged\":1,\"soft\":false}\n"
    );
    assert_eq!(
        fetch(api("scope=exact&host=one.example&path=/about"))
            .await
            .text(),
        "{\"purged\":1,\"soft\":false}\n"
    );
    assert_eq!(
        fetch(api("scope=domain&host=TWO.example")).await.text(),
        "{\"purged\":1,\"soft\":false}\n"
    );
    for (h, p) in [
        ("one.example", "/blog/1"),
        ("one.example", "/shop/blog-sale"),
        ("one.example", "/about"),
        ("two.example", "/blog/1"),
    ] {
        assert_eq!(
            get(&proxy, h, p).await.header("x-arc2-cache"),
            Some("Miss"),
            "{h}{p}"
        );
    }

    // Soft purge: marked stale (refetched next time), but kept for stale-if-error.
    warm(&proxy, "one.example", &["/soft"]).await;
    assert_eq!(
        fetch(api("scope=exact&host=one.example&path=/soft&soft=true"))
            .await
            .text(),
        "{\"purged\":1,\"soft\":true}\n"
    );
    assert_eq!(
        get(&proxy, "one.example", "/soft")
            .await
            .header("x-arc2-cache"),
        Some("Expired")
    );
    fetch(api("scope=exact&host=one.example&path=/soft&soft=1")).await;
    drop(origin);
    let down = get(&proxy, "one.example", "/soft").await;
    assert_eq!(
        (down.status.as_u16(), down.header("cache-status")),
        (200, Some("rampart; hit; detail=stale-if-error"))
    );

    // Status, and the key is required.
    let status =
        fetch(Request::get(proxy.url("/_rampart/status")).header("x-api-key", API_KEY)).await;
    assert!(
        status.text().starts_with("{\"cache\":{\"entries\":"),
        "{}",
        status.text()
    );
    let anonymous = fetch(Request::get(proxy.url("/_rampart/status"))).await;
    assert_eq!(anonymous.status, 401);
    assert!(
        anonymous.text().contains("missing API key"),
        "{}",
        anonymous.text()
    );
    let wrong =
        fetch(Request::get(proxy.url("/_rampart/status")).header("x-api-key", "nope")).await;
    assert_eq!(
        (wrong.status.as_u16(), wrong.text().as_str()),
        (401, "{\"error\":\"wrong API key\"}\n")
    );
    // A known endpoint with the wrong method: 405 and what it takes.
    for (method, path, allow) in [
        ("GET", "/_rampart/purge", "POST"),
        ("POST", "/_rampart/status", "GET, HEAD"),
        ("GET", "/_rampart/reload", "POST"),
        ("DELETE", "/_rampart/rules", "GET, POST"),
        ("GET", "/_rampart/rules/one.example", "PUT, DELETE"),
    ] {
        let res = fetch(
            Request::builder()
                .method(method)
                .uri(proxy.url(path))
                .header("x-api-key", API_KEY),
        )
        .await;
        assert_eq!(res.status, 405, "{method} {path}: {}", res.text());
        assert_eq!(res.header("allow"), Some(allow), "{method} {path}");
    }
    let unknown =
        fetch(Request::get(proxy.url("/_rampart/nothing")).header("x-api-key", API_KEY)).await;
    assert_eq!(unknown.status, 404);
}

#[tokio::test]
async fn without_an_api_key_admin_paths_are_ordinary_paths() {
    let origin = Origin::new()
        .route("*", Reply::text("origin page"))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("plain.example", &origin, "", ""));
    let got = get(&proxy, "plain.example", "/_rampart/status").await;
    assert_eq!(got.text(), "origin page");
}
