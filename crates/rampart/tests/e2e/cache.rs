//! End-to-end tests of what the cache stores and under which key: sharing rules, Vary, hosts
//! and query strings, request directives, path policy and size limits. Every test asserts what
//! the client got and how many requests the origin saw.
#![allow(clippy::unwrap_used)]

use crate::support;

use http::Request;
use support::*;

#[tokio::test]
async fn miss_then_hit_with_cache_headers() {
    let origin = Origin::new()
        .route("/", Reply::text("Hello World!"))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("c.example", &origin, "", ""));
    let first = get(&proxy, "c.example", "/").await;
    assert_eq!(first.text(), "Hello World!");
    assert_eq!(first.header("x-arc2-cache"), Some("Miss"));
    assert_eq!(
        first.header("cache-status"),
        Some("rampart; fwd=miss; stored")
    );
    let second = get(&proxy, "c.example", "/").await;
    assert_eq!(second.text(), "Hello World!");
    assert_eq!(second.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(second.header("cache-status"), Some("rampart; hit"));
    assert!(second.header("age").is_some());
    assert!(second.header("x-arc2-cache-age").is_some());
    assert_eq!(second.header("content-type"), Some("text/plain"));
    assert_eq!(origin.requests(), 1, "the hit never reached the origin");
}

#[tokio::test]
async fn origin_directives_that_forbid_sharing_always_win() {
    let origin = Origin::new()
        .route(
            "/no-store",
            Reply::text("a").header("cache-control", "no-store"),
        )
        .route(
            "/private",
            Reply::text("b").header("cache-control", "private, max-age=600"),
        )
        .route("/cookie", Reply::text("c").header("set-cookie", "s=1"))
        .route("/vary-star", Reply::text("d").header("vary", "*"))
        .route("/teapot", Reply::text("e").status(418))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("d.example", &origin, "", ""));
    for path in ["/no-store", "/private", "/cookie", "/vary-star", "/teapot"] {
        let before = origin.requests();
        for _ in 0..2 {
            let got = get(&proxy, "d.example", path).await;
            assert_eq!(got.header("x-arc2-cache"), Some("Dynamic"), "{path}");
        }
        assert_eq!(origin.requests(), before + 2, "{path} must not be stored");
    }
}

#[tokio::test]
async fn authorization_is_shared_only_when_the_origin_allows_it() {
    let origin = Origin::new()
        .route("/plain", Reply::text("secret"))
        .route(
            "/public",
            Reply::text("shared").header("cache-control", "public, max-age=60"),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("auth.example", &origin, "", ""));
    for _ in 0..2 {
        let got =
            fetch(req(&proxy, "auth.example", "/plain").header("authorization", "Bearer x")).await;
        assert_eq!(got.header("x-arc2-cache"), Some("Dynamic"));
    }
    assert_eq!(origin.requests(), 2);
    // An anonymous request for the same URL is not answered with the authorised response.
    let anon = get(&proxy, "auth.example", "/plain").await;
    assert_eq!(anon.header("x-arc2-cache"), Some("Miss"));
    assert_eq!(origin.requests(), 3);
    // `public` allows sharing.
    for _ in 0..2 {
        fetch(req(&proxy, "auth.example", "/public").header("authorization", "Bearer x")).await;
    }
    assert_eq!(origin.requests(), 4);
}

#[tokio::test]
async fn an_authorised_request_never_gets_an_anonymous_stored_response() {
    let origin = Origin::new()
        .route_fn("/acct", |s| {
            let who = if s.headers.contains_key("authorization") {
                "private page"
            } else {
                "public page"
            };
            Reply::text(who)
        })
        .start()
        .await;
    let proxy = Proxy::start(&config_for("au.example", &origin, "", ""));
    assert_eq!(
        get(&proxy, "au.example", "/acct").await.text(),
        "public page"
    );
    assert_eq!(
        get(&proxy, "au.example", "/acct")
            .await
            .header("x-arc2-cache"),
        Some("Hit")
    );
    let authorised =
        fetch(req(&proxy, "au.example", "/acct").header("authorization", "Bearer t")).await;
    assert_eq!(
        authorised.text(),
        "private page",
        "the stored anonymous response was not shared"
    );
    assert_eq!(origin.requests(), 2);
}

#[tokio::test]
async fn max_age_overrides_origin_is_arc2_behaviour() {
    let origin = Origin::new()
        .route("/", Reply::text("x").header("cache-control", "max-age=0"))
        .start()
        .await;
    // Default: the origin's max-age=0 wins, nothing is stored.
    let proxy = Proxy::start(&config_for("o.example", &origin, "", ""));
    get(&proxy, "o.example", "/").await;
    get(&proxy, "o.example", "/").await;
    assert_eq!(origin.requests(), 2);
    // Override: the rule's max_age_seconds is the lifetime.
    let proxy = Proxy::start(&config_for(
        "o.example",
        &origin,
        "",
        "max_age_overrides_origin = true",
    ));
    get(&proxy, "o.example", "/").await;
    assert_eq!(
        get(&proxy, "o.example", "/").await.header("x-arc2-cache"),
        Some("Hit")
    );
    assert_eq!(origin.requests(), 3);
}

#[tokio::test]
async fn vary_stores_variants_and_normalises_accept_encoding() {
    let origin = Origin::new()
        .route_fn("/v", |s| {
            let enc = s
                .headers
                .get("accept-encoding")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none")
                .to_owned();
            Reply::text(&format!("for {enc}")).header("vary", "Accept-Encoding")
        })
        .start()
        .await;
    let proxy = Proxy::start(&config_for("v.example", &origin, "", ""));
    let gz = fetch(req(&proxy, "v.example", "/v").header("accept-encoding", "gzip, br")).await;
    assert_eq!(
        (gz.text(), gz.header("x-arc2-cache")),
        ("for gzip, br".into(), Some("Miss"))
    );
    let id = fetch(req(&proxy, "v.example", "/v")).await;
    assert_eq!(
        (id.text(), id.header("x-arc2-cache")),
        ("for none".into(), Some("Miss"))
    );
    assert_eq!(origin.requests(), 2);
    // Same set of codings in another order and case: the stored gzip/br variant.
    let again = fetch(req(&proxy, "v.example", "/v").header("accept-encoding", "BR,gzip")).await;
    assert_eq!(
        (again.text(), again.header("x-arc2-cache")),
        ("for gzip, br".into(), Some("Hit"))
    );
    let id2 = fetch(req(&proxy, "v.example", "/v")).await;
    assert_eq!(
        (id2.text(), id2.header("x-arc2-cache")),
        ("for none".into(), Some("Hit"))
    );
    assert_eq!(origin.requests(), 2);
}

#[tokio::test]
async fn a_second_host_never_sees_the_first_hosts_entry() {
    let origin = Origin::new()
        .route_fn("/same", |s| {
            Reply::text(&format!("page of {}", s.headers["host"].to_str().unwrap()))
        })
        .start()
        .await;
    let cfg = config_for("one.example", &origin, "", "")
        + &format!("[[proxy_rules]]\ndomain = \"two.example\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\n", origin.port());
    let proxy = Proxy::start(&cfg);
    assert_eq!(
        get(&proxy, "one.example", "/same").await.text(),
        "page of one.example"
    );
    assert_eq!(
        get(&proxy, "one.example", "/same")
            .await
            .header("x-arc2-cache"),
        Some("Hit")
    );
    let two = get(&proxy, "two.example", "/same").await;
    assert_eq!(
        (two.text(), two.header("x-arc2-cache")),
        ("page of two.example".into(), Some("Miss"))
    );
    assert_eq!(origin.requests(), 2);
}

#[tokio::test]
async fn query_strings_are_part_of_the_key_unless_ignored() {
    let origin = Origin::new().route("/q", Reply::text("q")).start().await;
    let proxy = Proxy::start(&config_for("q.example", &origin, "", ""));
    get(&proxy, "q.example", "/q?a=1").await;
    get(&proxy, "q.example", "/q?a=2").await;
    assert_eq!(origin.requests(), 2);
    let ignoring = Proxy::start(
        &config_for("q.example", &origin, "", "")
            .replace("ignore_query_string = false", "ignore_query_string = true"),
    );
    get(&ignoring, "q.example", "/q?a=1").await;
    assert_eq!(
        get(&ignoring, "q.example", "/q?a=2")
            .await
            .header("x-arc2-cache"),
        Some("Hit")
    );
    assert_eq!(origin.requests(), 3);
}

#[tokio::test]
async fn head_is_answered_from_a_stored_get() {
    let origin = Origin::new()
        .route("/h", Reply::text("twelve bytes"))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("h.example", &origin, "", ""));
    get(&proxy, "h.example", "/h").await;
    let head = send(
        &client(),
        Request::head(proxy.url("/h"))
            .header("host", "h.example")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(head.header("content-length"), Some("12"));
    assert!(head.body.is_empty());
    assert_eq!(origin.requests(), 1);
}

#[tokio::test]
async fn request_directives_no_cache_max_age_only_if_cached() {
    let origin = Origin::new()
        .route("/r", Reply::text("r").header("age", "5"))
        .route("/absent", Reply::text("a"))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("r.example", &origin, "", ""));
    get(&proxy, "r.example", "/r").await;
    // no-cache (and Pragma: no-cache) go to the origin.
    let forced = fetch(req(&proxy, "r.example", "/r").header("cache-control", "no-cache")).await;
    assert_eq!(forced.header("x-arc2-cache"), Some("Bypass"));
    let pragma = fetch(req(&proxy, "r.example", "/r").header("pragma", "no-cache")).await;
    assert_eq!(pragma.header("x-arc2-cache"), Some("Bypass"));
    assert_eq!(origin.requests(), 3);
    // max-age=0 from the client: the stored copy is too old.
    // The stored copy is 5 s old (the origin's `Age`).
    fetch(req(&proxy, "r.example", "/r").header("cache-control", "max-age=0")).await;
    assert_eq!(origin.requests(), 4);
    // only-if-cached: served from the cache, or 504 without contacting the origin.
    let cached =
        fetch(req(&proxy, "r.example", "/r").header("cache-control", "only-if-cached")).await;
    assert_eq!(cached.status, 200);
    let absent =
        fetch(req(&proxy, "r.example", "/absent").header("cache-control", "only-if-cached")).await;
    assert_eq!(absent.status, 504);
    assert_eq!(origin.requests(), 4);
}

#[tokio::test]
async fn path_policy_labels_and_non_get_methods() {
    let origin = Origin::new().route("*", Reply::text("p")).start().await;
    let cfg = config_for("p.example", &origin, "", "paths = [\"/pub\"]\n")
        + "[[proxy_rules.path_rules]]\npath = \"/pub/no\"\nmatch_type = \"StartsWith\"\nrule_type = \"Blacklist\"\nmax_age_seconds = 0\n";
    let proxy = Proxy::start(&cfg);
    for (path, label) in [("/elsewhere", "Dynamic"), ("/pub/no/x", "Bypass")] {
        for _ in 0..2 {
            assert_eq!(
                get(&proxy, "p.example", path).await.header("x-arc2-cache"),
                Some(label),
                "{path}"
            );
        }
    }
    assert_eq!(origin.requests(), 4);
    let post = send(
        &client(),
        Request::post(proxy.url("/pub/a"))
            .header("host", "p.example")
            .body(full("x"))
            .unwrap(),
    )
    .await;
    assert_eq!(post.header("x-arc2-cache"), Some("Dynamic"));
}

#[tokio::test]
async fn objects_over_the_size_limit_stream_through_uncached() {
    let origin = Origin::new()
        .route("/big", Reply::streamed(300_000))
        .route("/small", Reply::streamed(1000))
        .start()
        .await;
    let proxy = Proxy::start(&config_for(
        "big.example",
        &origin,
        "cache_max_object = \"256KiB\"",
        "",
    ));
    for _ in 0..2 {
        let got = get(&proxy, "big.example", "/big").await;
        assert_eq!(got.body.len(), 300_000);
        assert_eq!(got.header("x-arc2-cache"), Some("Dynamic"));
    }
    assert_eq!(origin.requests(), 2);
    get(&proxy, "big.example", "/small").await;
    let hit = get(&proxy, "big.example", "/small").await;
    assert_eq!(
        (hit.body.len(), hit.header("x-arc2-cache")),
        (1000, Some("Hit"))
    );
}

#[tokio::test]
async fn caching_off_globally() {
    let origin = Origin::new().route("/", Reply::text("x")).start().await;
    let proxy = Proxy::start(&config_for(
        "off.example",
        &origin,
        "add_caching = false",
        "",
    ));
    for _ in 0..2 {
        assert_eq!(
            get(&proxy, "off.example", "/").await.header("x-arc2-cache"),
            Some("Dynamic")
        );
    }
    assert_eq!(origin.requests(), 2);
}
