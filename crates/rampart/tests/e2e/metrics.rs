//! `/_rampart/metrics` and the dashboard's event stream, end to end: real requests of every
//! kind through the real binary, then the figures they must have moved.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use http::Request;
use http_body_util::BodyExt as _;
use support::*;

const SIGTERM: i32 = 15;

/// The value of one series (`name{labels}` exactly as written), `None` when absent.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

fn must(text: &str, series: &str) -> f64 {
    value(text, series).unwrap_or_else(|| panic!("{series} not in\n{text}"))
}

async fn scrape(proxy: &Proxy) -> String {
    let got = fetch(
        req(proxy, "anything", "/_rampart/metrics")
            .header("authorization", format!("Bearer {API_KEY}")),
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(
        got.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    got.text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_outcomes_origins_and_refusals_are_counted() {
    let origin = Origin::new()
        .route(
            "/cached",
            Reply::text("stored").header("cache-control", "max-age=60"),
        )
        .route("*", Reply::text("page"))
        .start()
        .await;
    // A port nothing listens on: the second rule's origin refuses connections.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let rules = format!(
        "[[proxy_rules.disallowed_user_agents]]\nuser_agent = \"BadBot\"\nmatch_type = \"Contains\"\n\
         [[proxy_rules]]\ndomain = \"down.test\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {closed}\n\
         [[proxy_rules]]\ndomain = \"127.0.0.1\"\nmax_age_seconds = 60\nrule_type = \"Whitelist\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\n",
        origin.port()
    );
    let cfg = config_for(
        "a.test",
        &origin,
        &format!("api_key = \"{API_KEY}\""),
        &rules,
    );
    let proxy = Proxy::start(&cfg);

    // Without the key (and no metrics_allow): refused.
    let refused = get(&proxy, "a.test", "/_rampart/metrics").await;
    assert_eq!(refused.status, 401);

    let c = client();
    for _ in 0..3 {
        send(&c, req(&proxy, "a.test", "/cached").body(empty()).unwrap()).await;
    }
    // HTTP/2 routes by :authority, here the listener's address (the third rule).
    let h2 = h2_client();
    for cache in ["Miss", "Hit"] {
        let got = send(
            &h2,
            Request::get(proxy.url("/cached")).body(empty()).unwrap(),
        )
        .await;
        assert_eq!(got.header("x-arc2-cache"), Some(cache));
    }
    let bot = send(
        &c,
        req(&proxy, "a.test", "/x")
            .header("user-agent", "BadBot/1")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(bot.status, 403);
    assert_eq!(get(&proxy, "nobody.test", "/").await.status, 404);
    assert_eq!(get(&proxy, "down.test", "/").await.status, 502);

    let text = scrape(&proxy).await;
    let rq = |rule: &str, code: &str, cache: &str, proto: &str| {
        value(
            &text,
            &format!("rampart_requests_total{{rule=\"{rule}\",code=\"{code}\",cache=\"{cache}\",protocol=\"{proto}\"}}"),
        )
        .unwrap_or(0.0)
    };
    assert_eq!(rq("a.test", "2xx", "miss", "http1"), 1.0, "{text}");
    assert_eq!(rq("a.test", "2xx", "hit", "http1"), 2.0, "{text}");
    assert_eq!(rq("127.0.0.1", "2xx", "miss", "http2"), 1.0, "{text}");
    assert_eq!(rq("127.0.0.1", "2xx", "hit", "http2"), 1.0, "{text}");
    assert_eq!(rq("a.test", "4xx", "blocked", "http1"), 1.0, "{text}");
    // No rule: the unknown host's 404 and the keyless scrape's 401.
    assert_eq!(rq("-", "4xx", "none", "http1"), 2.0, "{text}");
    assert_eq!(rq("down.test", "5xx", "error", "http1"), 1.0, "{text}");
    assert_eq!(
        must(
            &text,
            "rampart_request_duration_seconds_count{rule=\"a.test\"}"
        ),
        4.0
    );
    assert_eq!(
        must(
            &text,
            "rampart_request_duration_seconds_bucket{rule=\"a.test\",le=\"+Inf\"}"
        ),
        4.0
    );
    assert_eq!(
        must(
            &text,
            "rampart_blocked_requests_total{reason=\"user_agent\"}"
        ),
        1.0
    );
    assert_eq!(
        must(&text, "rampart_blocked_requests_total{reason=\"no_route\"}"),
        1.0
    );
    // 3 of 5 lookups were answered from the cache.
    assert_eq!(must(&text, "rampart_cache_hit_ratio"), 0.6);
    assert_eq!(must(&text, "rampart_cache_entries"), 2.0);
    assert!(must(&text, "rampart_cache_size_bytes") > 0.0);

    let up = format!("127.0.0.1:{}", origin.port());
    let down = format!("127.0.0.1:{closed}");
    assert_eq!(
        must(
            &text,
            &format!("rampart_origin_requests_total{{origin=\"{up}\"}}")
        ),
        2.0,
        "only the misses went to the origin"
    );
    assert_eq!(
        must(
            &text,
            &format!("rampart_origin_up{{rule=\"a.test\",origin=\"{up}\"}}")
        ),
        1.0
    );
    assert_eq!(
        must(
            &text,
            &format!("rampart_origin_up{{rule=\"down.test\",origin=\"{down}\"}}")
        ),
        0.0,
        "a refused connection takes the origin out of rotation"
    );
    assert_eq!(
        must(
            &text,
            &format!("rampart_origin_errors_total{{origin=\"{down}\",kind=\"connect\"}}")
        ),
        1.0
    );
    assert_eq!(
        must(
            &text,
            &format!("rampart_origin_response_duration_seconds_count{{origin=\"{up}\"}}")
        ),
        2.0
    );
    assert!(
        must(
            &text,
            &format!("rampart_origin_received_bytes_total{{origin=\"{up}\"}}")
        ) > 0.0
    );
    assert!(must(&text, "rampart_client_sent_bytes_total") > 0.0);
    assert!(must(&text, "rampart_client_received_bytes_total") > 0.0);
    assert!(must(&text, "rampart_connections_accepted_total{scheme=\"http\"}") >= 3.0);
    assert!(must(&text, "rampart_connections_open{scheme=\"http\"}") >= 1.0);
    assert_eq!(
        must(&text, "rampart_config_reloads_total{result=\"ok\"}"),
        0.0
    );
    assert!(text.contains("rampart_build_info{version=\""), "{text}");
    assert!(must(&text, "process_resident_memory_bytes") > 1e6);

    // OpenMetrics for a scraper that asks for it.
    let om = fetch(
        req(&proxy, "anything", "/_rampart/metrics")
            .header("authorization", format!("Bearer {API_KEY}"))
            .header(
                "accept",
                "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
            ),
    )
    .await;
    assert!(om
        .header("content-type")
        .unwrap()
        .starts_with("application/openmetrics-text"));
    assert!(om.text().ends_with("# EOF\n"), "{}", om.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_allow_opens_the_metrics_to_listed_addresses_only() {
    let origin = Origin::new()
        .route("*", Reply::text("origin"))
        .start()
        .await;
    let open = Proxy::start(&config_for(
        "a.test",
        &origin,
        "metrics_allow = [\"127.0.0.0/8\"]",
        "",
    ));
    let got = get(&open, "a.test", "/_rampart/metrics").await;
    assert_eq!(got.status, 200);
    assert!(
        got.text().contains("rampart_connections_accepted_total"),
        "{}",
        got.text()
    );
    // Without an api_key, the rest of /_rampart/ is the site's: the origin answers it.
    assert_eq!(
        get(&open, "a.test", "/_rampart/status").await.text(),
        "origin"
    );

    let elsewhere = Proxy::start(&config_for(
        "a.test",
        &origin,
        "metrics_allow = [\"10.0.0.0/8\"]",
        "",
    ));
    assert_eq!(
        get(&elsewhere, "a.test", "/_rampart/metrics").await.status,
        401
    );
    // The TCP peer counts, never X-Forwarded-For.
    let spoofed =
        fetch(req(&elsewhere, "a.test", "/_rampart/metrics").header("x-forwarded-for", "10.1.2.3"))
            .await;
    assert_eq!(spoofed.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_handshakes_and_certificate_expiry_are_reported() {
    use support::tls::{self, TestCa};
    let origin = Origin::new().route("*", Reply::text("hi")).start().await;
    let ca = TestCa::new("metrics CA");
    let leaf = ca.leaf(&["secure.test"]);
    let (cert, key) = leaf.write("metrics-tls");
    let cfg = format!(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nlistening_port_https = 0\n\
         workers = 1\nlogging_level = \"warn\"\napi_key = \"{API_KEY}\"\n\
         [[proxy_rules]]\ndomain = \"secure.test\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\n\
         tls_cert_file = {:?}\ntls_key_file = {:?}\n",
        origin.port(),
        cert.display().to_string(),
        key.display().to_string()
    );
    let proxy = Proxy::start(&cfg);
    let https = proxy.https.unwrap();
    let good = tls::browser(ca.roots());
    tls::connect(https, "secure.test", &good).await.unwrap();
    // A client that does not trust the certificate fails its handshake.
    let stranger = tls::browser(TestCa::new("another CA").roots());
    assert!(tls::connect(https, "secure.test", &stranger).await.is_err());
    // The server sees the failure when the client's alert arrives: wait for it to be counted.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = scrape(&proxy).await;
        if value(&text, "rampart_tls_handshakes_total{result=\"failed\"}") == Some(1.0)
            || tokio::time::Instant::now() > deadline
        {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        must(&text, "rampart_tls_handshakes_total{result=\"ok\"}"),
        1.0
    );
    assert_eq!(
        must(&text, "rampart_tls_handshakes_total{result=\"failed\"}"),
        1.0
    );
    let expiry = must(
        &text,
        "rampart_tls_certificate_expiry_timestamp_seconds{name=\"secure.test\"}",
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(expiry > now, "expires {expiry}, now {now}");
    assert!(
        must(
            &text,
            "rampart_connections_accepted_total{scheme=\"https\"}"
        ) >= 2.0
    );
}

/// Reads server-sent events from `body` until `want` accepts one (at most `within`).
pub(crate) async fn event_until(
    body: &mut hyper::body::Incoming,
    buffered: &mut String,
    within: Duration,
    want: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        while let Some(end) = buffered.find("\n\n") {
            let event: String = buffered.drain(..end + 2).collect();
            let data = event.trim().strip_prefix("data: ").unwrap();
            let v: serde_json::Value = serde_json::from_str(data).unwrap();
            if want(&v) {
                return v;
            }
        }
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .expect("the awaited event within the time")
            .expect("the stream goes on")
            .unwrap();
        if let Some(d) = frame.data_ref() {
            buffered.push_str(std::str::from_utf8(d).unwrap());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_streams_live_figures_and_ends_with_the_server() {
    let origin = Origin::new()
        .route(
            "*",
            Reply::text("page").header("cache-control", "max-age=60"),
        )
        .start()
        .await;
    let rules = "strict_path_rules = true\n[[proxy_rules.path_rules]]\npath = \"/admin\"\n\
                 match_type = \"StartsWith\"\nrule_type = \"Blacklist\"\n";
    let proxy = Proxy::start(&config_for(
        "a.test",
        &origin,
        &format!("api_key = \"{API_KEY}\""),
        rules,
    ));
    // The page and its files: served with a strict policy and no figures in them.
    let page = get(&proxy, "a.test", "/_rampart/dashboard").await;
    assert_eq!(page.status, 200);
    assert!(page.text().contains("/_rampart/dashboard.js"));
    let csp = page.header("content-security-policy").unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
    for asset in ["/_rampart/dashboard.js", "/_rampart/dashboard.css"] {
        assert_eq!(get(&proxy, "a.test", asset).await.status, 200, "{asset}");
    }
    // The stream needs the key.
    assert_eq!(
        get(&proxy, "a.test", "/_rampart/dashboard/events")
            .await
            .status,
        401
    );

    let c = client();
    let res = c
        .request(
            Request::get(proxy.url("/_rampart/dashboard/events"))
                .header("host", "a.test")
                .header("authorization", format!("Bearer {API_KEY}"))
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut body = res.into_body();
    let mut buf = String::new();
    let first = event_until(&mut body, &mut buf, Duration::from_secs(5), |_| true).await;
    assert_eq!(first["requests_per_second"], 0.0);
    assert_eq!(first["upstreams"][0]["up"], true);
    assert!(first["traces"].is_null(), "no traces panel without tracing");

    // Traffic while the dashboard watches: 20 requests to one path, one refused.
    for _ in 0..20 {
        send(&c, req(&proxy, "a.test", "/popular").body(empty()).unwrap()).await;
    }
    assert_eq!(get(&proxy, "a.test", "/admin/panel").await.status, 403);
    let busy = event_until(&mut body, &mut buf, Duration::from_secs(5), |v| {
        v["requests_per_second"].as_f64().unwrap() > 0.0
    })
    .await;
    // Later events cover the rest of the burst when it straddled a tick.
    let seen = event_until(&mut body, &mut buf, Duration::from_secs(5), |v| {
        v["totals"]["requests"].as_u64().unwrap() >= 21
    })
    .await;
    assert!(busy["latency_ms"]["p50"].as_f64().unwrap() > 0.0, "{busy}");
    assert_eq!(seen["top_paths"][0][0], "a.test/popular", "{seen}");
    assert_eq!(seen["top_paths"][0][1], 20, "{seen}");
    assert_eq!(seen["top_hosts"][0][0], "a.test");
    let blocked = &seen["recent_blocked"][0];
    assert_eq!(blocked["path"], "/admin/panel", "{seen}");
    assert_eq!(blocked["reason"], "path_rule");
    assert_eq!(seen["hit_ratio_since_start"], 19.0 / 20.0, "{seen}");
    assert_eq!(seen["cache"]["entries"], 1);

    // A stopping server ends the stream instead of waiting out its drain time on it.
    proxy.signal(SIGTERM);
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(f) = body.frame().await {
            if f.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the event stream outlived the shutdown");
}
