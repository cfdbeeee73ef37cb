//! End-to-end tests of recv's screening stage: SQL injection, user agents, client address
//! allow/deny lists, rate limits and body limits. Each test asserts what the client got and
//! what the origin saw (blocked requests never reach it).

#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use http::Request;
use support::*;

async fn any_origin() -> OriginHandle {
    // Every path, never cacheable: each request the proxy lets through reaches the origin.
    Origin::new()
        .route(
            "*",
            Reply::text("origin says hi").header("cache-control", "no-store"),
        )
        .start()
        .await
}

fn post(proxy: &Proxy, host: &str, path: &str, ct: &str, body: &str) -> Request<BoxBody> {
    Request::post(proxy.url(path))
        .header("host", host)
        .header("content-type", ct)
        .body(full(body.to_owned()))
        .unwrap()
}

/// A GET to `path` on `host` through `proxy` with extra header lines.
fn get_with(proxy: &Proxy, host: &str, path: &str, headers: &[(&str, &str)]) -> Request<BoxBody> {
    let mut b = Request::get(proxy.url(path)).header("host", host);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(empty()).unwrap()
}

fn assert_blocked(got: &Got, status: u16) {
    assert_eq!(got.status.as_u16(), status, "{}", got.text());
    assert_eq!(got.header("x-arc2-cache"), Some("Block"));
}

#[tokio::test]
async fn sql_injection_is_blocked_wherever_it_hides() {
    let origin = any_origin().await;
    let cfg = config_for(
        "shop",
        &origin,
        "add_sql_injection_protection = true\nlogging_level = \"info\"",
        "",
    )
    .replace(
        "enable_sql_injection_protection = false",
        "enable_sql_injection_protection = true",
    );
    let proxy = Proxy::start(&cfg);
    let c = client();

    // Query value, path segment, double-encoded value.
    for path in [
        "/search?q=shoes&id=1%27%20OR%20%271%27%3D%271",
        "/search?q=1+union+select+username,password+from+users--",
        "/item/1%27%20OR%20%271%27=%271",
        "/search?id=1%2527%20OR%20%25271%2527%3D%25271",
    ] {
        assert_blocked(&get(&proxy, "shop", path).await, 403);
    }
    // Cookie.
    let got = send(
        &c,
        get_with(
            &proxy,
            "shop",
            "/account",
            &[("cookie", "session=abc123; pref=1' OR '1'='1")],
        ),
    )
    .await;
    assert_blocked(&got, 403);
    // Form and JSON bodies.
    let form = "user=admin%27--&pass=x";
    assert_blocked(
        &send(
            &c,
            post(
                &proxy,
                "shop",
                "/login",
                "application/x-www-form-urlencoded",
                form,
            ),
        )
        .await,
        403,
    );
    let json = r#"{"filters":{"name":"x' OR 1=1 --"}}"#;
    assert_blocked(
        &send(&c, post(&proxy, "shop", "/api", "application/json", json)).await,
        403,
    );
    // A compressed JSON body cannot be screened, so it is refused.
    let mut gz = post(
        &proxy,
        "shop",
        "/api",
        "application/json",
        "\u{1f}\u{8b}not really gzip",
    );
    gz.headers_mut()
        .insert("content-encoding", http::HeaderValue::from_static("gzip"));
    assert_blocked(&send(&c, gz).await, 403);
    assert_eq!(origin.requests(), 0, "a blocked request reached the origin");

    // Ordinary traffic passes, bodies intact.
    for path in [
        "/search?q=running+shoes&page=2&sort=price",
        "/search?q=O%27Reilly+books",
        "/search?q=select+the+best+option+from+the+list",
    ] {
        let got = get(&proxy, "shop", path).await;
        assert_eq!(got.status, 200, "{path}: {}", got.text());
    }
    let benign = r#"{"query":"it's the dog's toy","page":2,"tags":["a","b"]}"#;
    let got = send(&c, post(&proxy, "shop", "/api", "application/json", benign)).await;
    assert_eq!(got.status, 200);
    let got = send(
        &c,
        post(
            &proxy,
            "shop",
            "/login",
            "application/x-www-form-urlencoded",
            "user=o%27neil&pass=hunter2",
        ),
    )
    .await;
    assert_eq!(got.status, 200);
    assert_eq!(origin.requests(), 5);
    let seen = origin.seen();
    assert_eq!(seen[3].body_len, benign.len() as u64);

    // The log names where the payload was.
    assert!(
        proxy.wait_for_output(
            "location=\"query parameter\" parameter=\"id\"",
            Duration::from_secs(5)
        ),
        "{}",
        proxy.output()
    );
    assert!(
        proxy.output().contains("SQL injection"),
        "{}",
        proxy.output()
    );
}

/// each of these reached the origin with 200. Screening reads what the origin's
/// common parsers read, and refuses (400) what they could read two ways.
#[tokio::test]
async fn sql_injection_past_parser_differences_is_refused() {
    let origin = any_origin().await;
    let cfg = config_for("shop", &origin, "add_sql_injection_protection = true", "").replace(
        "enable_sql_injection_protection = false",
        "enable_sql_injection_protection = true",
    );
    let proxy = Proxy::start(&cfg);
    let c = client();
    let payload = "admin' OR '1'='1' --";
    let part = |disposition: &str, boundary: &str| {
        format!("--{boundary}\r\n{disposition}\r\n\r\n{payload}\r\n--{boundary}--\r\n")
    };
    let multipart = "multipart/form-data; boundary=B";
    // Ambiguous heads: 400.
    for (ct, body) in [
        // The boundary given twice: rampart took the first, the origin may take the other.
        (
            "multipart/form-data; boundary=Z; boundary=B",
            part("Content-Disposition: form-data; name=\"id\"", "B"),
        ),
        (
            "multipart/form-data; boundary=\"B\"; BOUNDARY=Z",
            part("Content-Disposition: form-data; name=\"id\"", "B"),
        ),
    ] {
        let got = send(&c, post(&proxy, "shop", "/login", ct, &body)).await;
        assert_blocked(&got, 400);
    }
    // Two Content-Type lines: text/plain (not screened), then JSON for the origin.
    let two = Request::post(proxy.url("/api"))
        .header("host", "shop")
        .header("content-type", "text/plain")
        .header("content-type", "application/json")
        .body(full(format!("{{\"user\":\"{payload}\"}}")))
        .unwrap();
    assert_blocked(&send(&c, two).await, 400);
    // Fields that common parsers read as fields, whatever a file-looking parameter says.
    for disposition in [
        // Only `filename*`: PHP, Django and Rails read this part as a field.
        "Content-Disposition: form-data; name=\"id\"; filename*=UTF-8''a.txt",
        // `filename=` inside the quoted name is part of the name.
        "Content-Disposition: form-data; name=\"id; filename=a.txt\"",
        // Two Content-Disposition lines: a parser that reads the first sees a field.
        "Content-Disposition: form-data; name=\"id\"\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.txt\"",
    ] {
        let got = send(&c, post(&proxy, "shop", "/login", multipart, &part(disposition, "B"))).await;
        assert_blocked(&got, 403);
    }
    for target in [
        // A path parameter (`;`), which Java and Rails servers read.
        "/x;id=1%20UNION%20SELECT%20password%20FROM%20users",
        "/a/b;jsessionid=1;id=1%27%20OR%20%271%27%3D%271/c",
        // `;` as a query separator, which some frameworks accept.
        "/search?a=1;id=1%20UNION%20SELECT%20password%20FROM%20users",
        // Encoded three times (an origin that decodes until nothing changes).
        "/search?id=1%252527%252520OR%252520%2525271%252527%25253D%2525271",
        "/item/1%252527%252520OR%252520%2525271%252527%25253D%2525271",
    ] {
        assert_blocked(&get(&proxy, "shop", target).await, 403);
    }
    assert_eq!(origin.requests(), 0, "{:?}", origin.seen());

    // Ordinary requests of the same shapes pass.
    for target in [
        "/x;jsessionid=abc123",
        "/search?a=1;b=2&q=running+shoes",
        "/search?q=100%25+cotton",
    ] {
        let got = get(&proxy, "shop", target).await;
        assert_eq!(got.status, 200, "{target}: {}", got.text());
    }
    let upload = part(
        "Content-Disposition: form-data; name=\"f\"; filename=\"a.txt\"; filename*=UTF-8''a.txt",
        "B",
    );
    let got = send(&c, post(&proxy, "shop", "/upload", multipart, &upload)).await;
    assert_eq!(
        got.status, 200,
        "an uploaded file's content is not a parameter"
    );
    assert_eq!(origin.requests(), 4);
}

#[tokio::test]
async fn sql_injection_screening_needs_both_switches() {
    let origin = any_origin().await;
    // Global on, rule off (config_for writes enable_sql_injection_protection = false).
    let proxy = Proxy::start(&config_for(
        "shop",
        &origin,
        "add_sql_injection_protection = true",
        "",
    ));
    let got = get(&proxy, "shop", "/search?id=1%27%20OR%20%271%27%3D%271").await;
    assert_eq!(got.status, 200);
    // Rule on, global off (the default).
    let cfg = config_for("shop", &origin, "", "").replace(
        "enable_sql_injection_protection = false",
        "enable_sql_injection_protection = true",
    );
    let proxy2 = Proxy::start(&cfg);
    let got = get(&proxy2, "shop", "/search?id=1%27%20OR%20%271%27%3D%271").await;
    assert_eq!(got.status, 200);
    assert_eq!(origin.requests(), 2);
}

#[tokio::test]
async fn disallowed_user_agents_are_blocked() {
    let origin = any_origin().await;
    let rule = "[[proxy_rules.disallowed_user_agents]]\nuser_agent = \"BadBot\"\nmatch_type = \"Contains\"\n\
                [[proxy_rules.disallowed_user_agents]]\nuser_agent = \"\"\nmatch_type = \"Equals\"\n";
    let proxy = Proxy::start(&config_for("ua", &origin, "", rule));
    let c = client();
    let with_ua = |ua: Option<&str>| {
        let headers: Vec<_> = ua.map(|ua| ("user-agent", ua)).into_iter().collect();
        get_with(&proxy, "ua", "/", &headers)
    };
    assert_blocked(
        &send(&c, with_ua(Some("Mozilla/5.0 BadBot/2.1"))).await,
        403,
    );
    // A missing User-Agent compares as the empty string.
    assert_blocked(&send(&c, with_ua(None)).await, 403);
    assert_eq!(origin.requests(), 0);
    // Case-sensitive: "badbot" is not "BadBot".
    assert_eq!(send(&c, with_ua(Some("badbot"))).await.status, 200);
    assert_eq!(send(&c, with_ua(Some("Mozilla/5.0"))).await.status, 200);
    assert_eq!(origin.requests(), 2);
}

#[tokio::test]
async fn negated_user_agent_rule_blocks_everything_else() {
    let origin = any_origin().await;
    let rule = "[[proxy_rules.disallowed_user_agents]]\nuser_agent = \"Mozilla\"\nmatch_type = \"DoesNotContain\"\n";
    let proxy = Proxy::start(&config_for("ua", &origin, "", rule));
    let c = client();
    let req = |ua: &str| get_with(&proxy, "ua", "/", &[("user-agent", ua)]);
    assert_blocked(&send(&c, req("curl/8.0")).await, 403);
    assert_eq!(send(&c, req("Mozilla/5.0 (X11)")).await.status, 200);
    assert_eq!(origin.requests(), 1);
}

#[tokio::test]
async fn client_address_allow_and_deny_lists() {
    let origin = any_origin().await;
    let cfg = format!(
        "{}{}",
        config_for("allow", &origin, "", "allow_ips = [\"10.0.0.0/8\"]"),
        config_for("deny", &origin, "", "deny_ips = [\"127.0.0.0/8\", \"::1\"]")
            .split("[[proxy_rules]]")
            .nth(1)
            .map(|r| format!("[[proxy_rules]]{r}"))
            .unwrap()
    );
    let proxy = Proxy::start(&cfg);
    assert_blocked(&get(&proxy, "allow", "/").await, 403);
    assert_blocked(&get(&proxy, "deny", "/").await, 403);
    assert_eq!(origin.requests(), 0);
}

#[tokio::test]
async fn trusted_proxies_name_the_real_client() {
    let origin = any_origin().await;
    let proxy = Proxy::start(&config_for(
        "xff",
        &origin,
        "trusted_proxies = [\"127.0.0.1\"]",
        "deny_ips = [\"203.0.113.0/24\"]",
    ));
    let c = client();
    let req = |xff: &str| get_with(&proxy, "xff", "/", &[("x-forwarded-for", xff)]);
    // The right-most untrusted hop is the client.
    assert_blocked(&send(&c, req("198.51.100.1, 203.0.113.9")).await, 403);
    assert_eq!(send(&c, req("203.0.113.9, 198.51.100.1")).await.status, 200);
    // The trusted hop itself is skipped; hops may carry a port.
    assert_blocked(&send(&c, req("203.0.113.9, 127.0.0.1")).await, 403);
    assert_blocked(&send(&c, req("203.0.113.9:4711")).await, 403);
    assert_eq!(origin.requests(), 1);

    // Without trust, X-Forwarded-For is ignored for screening.
    let origin2 = any_origin().await;
    let proxy2 = Proxy::start(&config_for(
        "xff",
        &origin2,
        "",
        "deny_ips = [\"203.0.113.0/24\"]",
    ));
    let got = send(
        &c,
        get_with(&proxy2, "xff", "/", &[("x-forwarded-for", "203.0.113.9")]),
    )
    .await;
    assert_eq!(got.status, 200);
}

#[tokio::test]
async fn rate_limits_answer_429_with_retry_after() {
    let origin = any_origin().await;
    let proxy = Proxy::start(&config_for(
        "rl",
        &origin,
        "rate_limit_per_second = 2\nrate_limit_burst = 5\nrate_limit_exempt = []\ntrusted_proxies = [\"127.0.0.1\"]",
        "",
    ));
    let c = client();
    let req = |who: &str| get_with(&proxy, "rl", "/", &[("x-forwarded-for", who)]);
    for _ in 0..5 {
        assert_eq!(send(&c, req("198.51.100.1")).await.status, 200);
    }
    let got = send(&c, req("198.51.100.1")).await;
    assert_blocked(&got, 429);
    let retry: u64 = got.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    assert_eq!(got.header("ratelimit-limit"), Some("5"));
    assert_eq!(got.header("ratelimit-remaining"), Some("0"));
    assert!(got.header("ratelimit-reset").is_some());
    // Another client has its own budget.
    assert_eq!(send(&c, req("198.51.100.2")).await.status, 200);
    assert_eq!(origin.requests(), 6);
    // The budget refills at the configured rate.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(send(&c, req("198.51.100.1")).await.status, 200);
}

#[tokio::test]
async fn rate_limiting_off_and_loopback_exempt_by_default() {
    let origin = any_origin().await;
    // add_rate_limiting defaults to on (ARC2), but loopback clients are exempt by default.
    let proxy = Proxy::start(&config_for(
        "rl",
        &origin,
        "rate_limit_per_second = 1\nrate_limit_burst = 1",
        "",
    ));
    for _ in 0..5 {
        assert_eq!(get(&proxy, "rl", "/").await.status, 200);
    }
    // add_rate_limiting = false turns it off for everyone.
    let proxy2 = Proxy::start(&config_for(
        "rl",
        &origin,
        "add_rate_limiting = false\nrate_limit_per_second = 1\nrate_limit_burst = 1\nrate_limit_exempt = []",
        "",
    ));
    for _ in 0..5 {
        assert_eq!(get(&proxy2, "rl", "/").await.status, 200);
    }
}

#[tokio::test]
async fn per_rule_rate_limit() {
    let origin = any_origin().await;
    let proxy = Proxy::start(&config_for(
        "rl",
        &origin,
        "add_rate_limiting = false\nrate_limit_exempt = []",
        "rate_limit_per_second = 1\nrate_limit_burst = 2",
    ));
    assert_eq!(get(&proxy, "rl", "/").await.status, 200);
    assert_eq!(get(&proxy, "rl", "/").await.status, 200);
    assert_blocked(&get(&proxy, "rl", "/").await, 429);
    assert_eq!(origin.requests(), 2);
}

#[tokio::test]
async fn rate_limit_status_is_the_refusals_status_globally_and_per_rule() {
    let origin = any_origin().await;
    // Global: NGINX's 503, with the same Retry-After and RateLimit fields as a 429.
    let proxy = Proxy::start(&config_for(
        "rl",
        &origin,
        "rate_limit_per_second = 1\nrate_limit_burst = 1\nrate_limit_exempt = []\nrate_limit_status = 503",
        "",
    ));
    assert_eq!(get(&proxy, "rl", "/").await.status, 200);
    let got = get(&proxy, "rl", "/").await;
    assert_blocked(&got, 503);
    assert!(got.header("retry-after").is_some());
    assert_eq!(got.header("ratelimit-limit"), Some("1"));
    // A rule's limiter: its own status when set, else the global one.
    let proxy = Proxy::start(&config_for(
        "rl",
        &origin,
        "add_rate_limiting = false\nrate_limit_exempt = []\nrate_limit_status = 503",
        "rate_limit_per_second = 1\nrate_limit_burst = 1\nrate_limit_status = 420",
    ));
    assert_eq!(get(&proxy, "rl", "/").await.status, 200);
    assert_blocked(&get(&proxy, "rl", "/").await, 420);
    let proxy = Proxy::start(&config_for(
        "rl",
        &origin,
        "add_rate_limiting = false\nrate_limit_exempt = []\nrate_limit_status = 503",
        "rate_limit_per_second = 1\nrate_limit_burst = 1",
    ));
    assert_eq!(get(&proxy, "rl", "/").await.status, 200);
    assert_blocked(&get(&proxy, "rl", "/").await, 503);
    assert_eq!(origin.requests(), 3);
}

#[tokio::test]
async fn body_limits() {
    let origin = any_origin().await;
    let proxy = Proxy::start(&config_for("b", &origin, "", "max_body_size = \"1KiB\""));
    let c = client();
    // Declared too large: refused before the body is read.
    let got = send(
        &c,
        post(&proxy, "b", "/up", "text/plain", &"x".repeat(2048)),
    )
    .await;
    assert_blocked(&got, 413);
    // Chunked (no length): refused when the limit is crossed.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let body = http_body_util::BodyExt::boxed(ChannelBody(rx));
    let req = Request::post(proxy.url("/up"))
        .header("host", "b")
        .body(body)
        .unwrap();
    tx.send(Ok(hyper::body::Frame::data(bytes::Bytes::from(vec![
        b'y';
        4096
    ]))))
    .await
    .unwrap();
    drop(tx);
    let got = send(&c, req).await;
    assert_blocked(&got, 413);
    // Crossing the limit after the request went to the origin: still 413 (the origin's
    // request is abandoned, it never gets a complete body).
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let req = Request::post(proxy.url("/up"))
        .header("host", "b")
        .body(http_body_util::BodyExt::boxed(ChannelBody(rx)))
        .unwrap();
    for len in [512, 1024] {
        tx.send(Ok(hyper::body::Frame::data(bytes::Bytes::from(vec![
            b'z';
            len
        ]))))
        .await
        .unwrap();
    }
    drop(tx);
    let got = send(&c, req).await;
    assert_blocked(&got, 413);
    assert!(origin.seen().iter().all(|s| s.body_len < 1536));
    // At the limit: fine.
    let got = send(
        &c,
        post(&proxy, "b", "/up", "text/plain", &"x".repeat(1024)),
    )
    .await;
    assert_eq!(got.status, 200);
    assert!(origin.seen().iter().any(|s| s.body_len == 1024));
}

#[tokio::test]
async fn default_body_limit_is_2_mib_and_can_be_disabled() {
    let origin = any_origin().await;
    let three_mib = "z".repeat(3 << 20);
    let proxy = Proxy::start(&config_for("b", &origin, "", ""));
    let c = client();
    assert_blocked(
        &send(&c, post(&proxy, "b", "/", "text/plain", &three_mib)).await,
        413,
    );
    assert_eq!(
        send(
            &c,
            post(&proxy, "b", "/", "text/plain", &"z".repeat(2 << 20))
        )
        .await
        .status,
        200
    );
    let proxy2 = Proxy::start(&config_for(
        "b",
        &origin,
        "disable_default_body_limit = true",
        "",
    ));
    assert_eq!(
        send(&c, post(&proxy2, "b", "/", "text/plain", &three_mib))
            .await
            .status,
        200
    );
    assert_eq!(origin.last().body_len, 3 << 20);
}

#[tokio::test]
async fn stalled_request_body_gets_408() {
    let origin = any_origin().await;
    let proxy = Proxy::start(&config_for(
        "slow",
        &origin,
        "client_body_timeout_seconds = 1",
        "",
    ));
    let addr = proxy.addr;
    let start = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        raw(
            addr,
            b"POST / HTTP/1.1\r\nHost: slow\r\nContent-Length: 10\r\n\r\nhello",
            Duration::from_secs(5),
        )
    })
    .await
    .unwrap();
    assert!(out.starts_with("HTTP/1.1 408"), "{out}");
    assert!(start.elapsed() < Duration::from_secs(4));
    assert!(
        origin.seen().iter().all(|s| s.body_len < 10),
        "a stalled body must never reach the origin complete"
    );
}
