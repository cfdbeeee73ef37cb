//! The proxy between clients and origins: ARC2's benchmark file unchanged, routing by host and
//! path, the fields added and removed on the way, origin connections reused, failover, the 502
//! and 504 of an origin that fails, and the stages a debug trace names.
#![allow(clippy::unwrap_used)]

use crate::support;
use http::Request;
use std::time::{Duration, Instant};
use support::*;

#[tokio::test]
async fn arc2_benchmark_config_proxies_unchanged() {
    let origin = Origin::new()
        .route("/", Reply::text("Hello World!"))
        .start()
        .await;
    // ARC2's published benchmark file, byte for byte, with only its ports replaced.
    let cfg = format!(
        r#"listening_address = "127.0.0.1"
listening_port_http = 0
listening_port_https = 0
logging_level = "error"
add_caching = true
add_rate_limiting = false
add_logging = false
disable_default_body_limit = false
add_sql_injection_protection = false
[[proxy_rules]]
domain = "localhost"
max_age_seconds = 3600
paths = ["/"]
forward_ipv4 = "127.0.0.1"
forward_port_http = {}
rule_type = "Whitelist"
ignore_query_string = false
enable_logging = false
enable_sql_injection_protection = false
"#,
        origin.port()
    );
    let proxy = Proxy::start(&cfg);
    let got = get(&proxy, "localhost", "/").await;
    assert_eq!(got.status, 200);
    assert_eq!(got.text(), "Hello World!");
    assert_eq!(got.header("x-arc2-cache"), Some("Miss"));
    let got = get(&proxy, "LOCALHOST:8080", "/").await;
    assert_eq!(got.status, 200, "host matching ignores case and port");
    assert_eq!(
        got.header("x-arc2-cache"),
        Some("Hit"),
        "ARC2 caches for max_age_seconds"
    );
    assert_eq!(origin.requests(), 1);
}

#[tokio::test]
async fn routes_by_host_with_wildcards_and_refuses_unknown_hosts() {
    let a = Origin::new().route("*", Reply::text("a")).start().await;
    let b = Origin::new().route("*", Reply::text("b")).start().await;
    let cfg = config_for("a.example", &a, "", "")
        + &format!("[[proxy_rules]]\ndomain = \"*.b.example\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\n", b.port());
    let proxy = Proxy::start(&cfg);
    assert_eq!(get(&proxy, "a.example", "/x").await.text(), "a");
    assert_eq!(get(&proxy, "www.b.example", "/x").await.text(), "b");
    assert_eq!(get(&proxy, "deep.www.B.EXAMPLE:80", "/x").await.text(), "b");
    let before = (a.requests(), b.requests());
    for host in ["b.example", "unknown.example", "a.example.evil"] {
        let got = get(&proxy, host, "/x").await;
        assert_eq!(got.status, 404, "{host}");
        assert!(got.text().contains("no site"), "{}", got.text());
    }
    assert_eq!(
        (a.requests(), b.requests()),
        before,
        "nothing forwarded for unknown hosts"
    );
}

#[tokio::test]
async fn whitelist_and_blacklist_paths() {
    let origin = Origin::new().route("*", Reply::text("ok")).start().await;
    // Non-strict (default): path rules decide caching, everything is proxied.
    let cfg = config_for("site", &origin, "", "paths = [\"/pub\"]\n")
        + "[[proxy_rules.path_rules]]\npath = \"/pub/secret\"\nmatch_type = \"StartsWith\"\nrule_type = \"Blacklist\"\nmax_age_seconds = 0\n";
    let proxy = Proxy::start(&cfg);
    for path in ["/pub/a", "/other", "/pub/secret/x"] {
        assert_eq!(get(&proxy, "site", path).await.status, 200, "{path}");
    }
    assert_eq!(origin.requests(), 3);

    // Strict: outside the Whitelist or inside the Blacklist → 403, nothing forwarded.
    let strict = Proxy::start(&(config_for("site", &origin, "strict_path_rules = true", "paths = [\"/pub\"]\n")
        + "[[proxy_rules.path_rules]]\npath = \"/pub/secret\"\nmatch_type = \"StartsWith\"\nrule_type = \"Blacklist\"\nmax_age_seconds = 0\n"));
    assert_eq!(get(&strict, "site", "/pub/a").await.status, 200);
    let n = origin.requests();
    for path in ["/other", "/pub/secret/x"] {
        let got = get(&strict, "site", path).await;
        assert_eq!(got.status, 403, "{path}");
    }
    assert_eq!(
        origin.requests(),
        n,
        "blocked requests never reach the origin"
    );
}

#[tokio::test]
async fn hop_by_hop_headers_are_removed_and_forwarding_headers_added() {
    let origin = Origin::new()
        .route(
            "/",
            Reply::text("ok")
                .header("connection", "x-origin-private")
                .header("x-origin-private", "secret")
                .header("keep-alive", "timeout=5")
                .header("x-end-to-end", "kept"),
        )
        .route("/named", Reply::text("ok"))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("fwd.example", &origin, "", ""));
    let req = Request::get(proxy.url("/"))
        .header("host", "fwd.example")
        .header("connection", "keep-alive, x-client-private")
        .header("x-client-private", "1")
        .header("proxy-connection", "keep-alive")
        .header("te", "trailers")
        .header("x-forwarded-for", "203.0.113.9")
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-host", "spoofed.example")
        .header("x-client-visible", "yes")
        .body(empty())
        .unwrap();
    let got = send(&client(), req).await;
    assert_eq!(got.status, 200);
    let seen = origin.last();
    let h = &seen.headers;
    assert!(
        h.get("x-client-private").is_none(),
        "Connection-named header forwarded: {h:?}"
    );
    assert!(h.get("proxy-connection").is_none() && h.get("te").is_none());
    assert_eq!(h["x-client-visible"], "yes");
    assert_eq!(h["host"], "fwd.example");
    assert_eq!(h["x-forwarded-for"], "203.0.113.9, 127.0.0.1");
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-forwarded-host"], "fwd.example");
    assert_eq!(h["via"], "1.1 rampart");
    assert_eq!(seen.version, http::Version::HTTP_11);
    // Response side.
    assert!(
        got.header("x-origin-private").is_none(),
        "{:?}",
        got.headers
    );
    assert!(got.header("keep-alive").is_none());
    assert_eq!(got.header("x-end-to-end"), Some("kept"));
    assert_eq!(got.header("via"), Some("1.1 rampart"));

    // A request id and a forwarding list the client's `Connection` names are hop-by-hop: the
    // origin gets rampart's own id and the client's address alone, never the client's values.
    let req = Request::get(proxy.url("/named"))
        .header("host", "fwd.example")
        .header("connection", "x-request-id, X-Forwarded-For")
        .header("x-request-id", "client-chosen-id")
        .header("x-forwarded-for", "198.51.100.7")
        .body(empty())
        .unwrap();
    assert_eq!(send(&client(), req).await.status, 200);
    let seen = origin.last();
    assert_eq!(seen.uri.path(), "/named");
    let h = seen.headers;
    let ids: Vec<_> = h.get_all("x-request-id").iter().collect();
    assert_eq!(ids.len(), 1, "{h:?}");
    assert_ne!(ids[0], "client-chosen-id");
    assert_eq!(ids[0].len(), 32, "rampart's own id: {h:?}");
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
}

#[tokio::test]
async fn upstream_connections_are_reused() {
    let origin = Origin::new().route("*", Reply::text("ok")).start().await;
    let proxy = Proxy::start(&config_for("pool", &origin, "add_caching = false", ""));
    for _ in 0..5 {
        // A fresh client each round: new downstream connections, same upstream pool.
        let c = client();
        for i in 0..40 {
            let got = send(
                &c,
                Request::get(proxy.url(&format!("/{i}")))
                    .header("host", "pool")
                    .body(empty())
                    .unwrap(),
            )
            .await;
            assert_eq!(got.status, 200);
        }
    }
    assert_eq!(origin.requests(), 200);
    // Two workers, each with its own pool; sequential requests need one connection each.
    assert!(
        origin.connections() <= 4,
        "origin saw {} connections for 200 requests",
        origin.connections()
    );
}

#[tokio::test]
async fn unreachable_origin_is_502_and_slow_origin_is_504() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let slow = Origin::new()
        .route("/slow", Reply::text("late").delay(Duration::from_secs(4)))
        .start()
        .await;
    let cfg = config_for("slow", &slow, "proxy_timeout = 1", "")
        + &format!("[[proxy_rules]]\ndomain = \"down\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {closed_port}\n");
    let proxy = Proxy::start(&cfg);
    let got = get(&proxy, "down", "/").await;
    assert_eq!(got.status, 502);
    assert!(got.text().contains("could not be reached"));
    let started = Instant::now();
    let got = get(&proxy, "slow", "/slow").await;
    assert_eq!(got.status, 504);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "timed out by proxy_timeout, not by the origin"
    );
    assert!(
        proxy.wait_for_output("upstream request failed", Duration::from_secs(5)),
        "{}",
        proxy.output()
    );
}

#[tokio::test]
async fn fails_over_to_the_next_upstream() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let live = Origin::new().route("*", Reply::text("live")).start().await;
    let cfg = format!(
        "listen = [\"127.0.0.1:0\"]\nworkers = 1\n[[proxy_rules]]\ndomain = \"lb\"\n\
         upstreams = [\"127.0.0.1:{closed_port}\", \"127.0.0.1:{}\"]\n",
        live.port()
    );
    let proxy = Proxy::start(&cfg);
    for _ in 0..3 {
        let got = get(&proxy, "lb", "/").await;
        assert_eq!((got.status.as_u16(), got.text()), (200, "live".to_owned()));
    }
    assert_eq!(live.requests(), 3);
}

/// An origin killed while it holds a GET must not make that GET a 502 while another origin is
/// up. A safe, body-less request whose connection fails before any of the answer goes to the
/// next origin; a POST does not (it may have been acted on).
#[tokio::test]
async fn a_get_whose_origin_drops_the_connection_goes_to_the_next_origin() {
    use std::io::Read as _;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Reads each request head, then closes the connection without a byte of answer.
    let dropping = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dropping_port = dropping.local_addr().unwrap().port();
    let dropped = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = dropped.clone();
    std::thread::spawn(move || {
        for conn in dropping.incoming() {
            let Ok(mut conn) = conn else { break };
            let mut buf = [0u8; 4096];
            let mut head = Vec::new();
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    let live = Origin::new().route("*", Reply::text("live")).start().await;
    let cfg = format!(
        "listen = [\"127.0.0.1:0\"]\nworkers = 1\n[[proxy_rules]]\ndomain = \"lb\"\nmax_age_seconds = 0\n\
         upstreams = [\"127.0.0.1:{dropping_port}\", \"127.0.0.1:{}\"]\n",
        live.port()
    );
    let proxy = Proxy::start(&cfg);
    for _ in 0..6 {
        let got = get(&proxy, "lb", "/").await;
        assert_eq!((got.status.as_u16(), got.text()), (200, "live".to_owned()));
    }
    assert!(
        dropped.load(Ordering::SeqCst) > 0,
        "the failing origin was never tried"
    );
    // A POST that reached the failing origin is not sent again.
    let before = dropped.load(Ordering::SeqCst);
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let req = Request::post(proxy.url("/"))
            .header("host", "lb")
            .body(full("x"))
            .unwrap();
        statuses.push(send(&client(), req).await.status.as_u16());
    }
    let tried = dropped.load(Ordering::SeqCst) - before;
    assert_eq!(
        statuses.iter().filter(|&&s| s == 502).count(),
        tried,
        "{statuses:?}"
    );
}

#[tokio::test]
async fn origin_connect_timeout_is_504() {
    // A listener that never accepts, with its accept queue full: further SYNs go unanswered,
    // so connecting to it hangs until rampart's connect timeout.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    socket.listen(0).unwrap();
    let port = socket.local_addr().unwrap().as_socket().unwrap().port();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_nonblocking(true).unwrap();
        let _ = s.connect(
            &format!("127.0.0.1:{port}")
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        );
        fillers.push(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let cfg = format!(
        "listen = [\"127.0.0.1:0\"]\nworkers = 1\nproxy_connect_timeout_seconds = 1\n[[proxy_rules]]\ndomain = \"hang\"\nupstreams = [\"127.0.0.1:{port}\"]\n"
    );
    let proxy = Proxy::start(&cfg);
    let started = Instant::now();
    let got = get(&proxy, "hang", "/").await;
    assert_eq!(got.status, 504, "{}", got.text());
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(socket);
}

/// With `logging_level = "debug"`, a request's lines carry its spans and name its stages in
/// order: a miss that is stored, then a hit, then a pass (POST), each from its own `request` span.
#[tokio::test]
async fn a_debug_trace_reads_as_the_stages() {
    let origin = Origin::new()
        .route(
            "/c",
            Reply::text("cached").header("cache-control", "max-age=60"),
        )
        .route(
            "/p",
            Reply::text("pass").header("cache-control", "no-store"),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for(
        "trace.example",
        &origin,
        "logging_level = \"warn,rampart_proxy=debug\"\nworkers = 1",
        "",
    ));
    for path in ["/c", "/c"] {
        assert_eq!(get(&proxy, "trace.example", path).await.status, 200);
    }
    let post = Request::post(proxy.url("/p"))
        .header("host", "trace.example")
        .body(empty())
        .unwrap();
    assert_eq!(send(&client(), post).await.status, 200);
    // The last line expected, not the first: the client can have its answer before deliver's
    // line reaches the log.
    assert!(
        proxy.wait_for_output(
            "uri=/p mode=Client}: rampart_proxy::pipeline::deliver",
            Duration::from_secs(5)
        ),
        "{}",
        proxy.output()
    );
    // The stage named by each line of one request, in order.
    let stages = |uri: &str| -> Vec<Vec<String>> {
        let err = proxy.stderr.lock().unwrap().clone();
        let mut requests: Vec<Vec<String>> = Vec::new();
        for line in err.lines().filter(|l| l.contains(&format!("uri={uri} "))) {
            assert!(line.contains("conn{peer=127.0.0.1:"), "{line}");
            let stage = line.split(": rampart_proxy::").nth(1).unwrap();
            let message = stage.split_once(": ").unwrap().1;
            let word = message.split([' ', ',']).next().unwrap().to_owned();
            // Every request's first line is recv's.
            if word == "routed" {
                requests.push(Vec::new());
            }
            requests
                .last_mut()
                .expect("a request starts in recv")
                .push(word);
        }
        requests
    };
    assert_eq!(
        stages("/c"),
        [
            vec!["routed", "miss", "miss", "fetch", "deliver"],
            vec!["routed", "hit"],
        ],
        "{}",
        proxy.output()
    );
    assert_eq!(
        stages("/p"),
        [vec!["routed", "pass", "fetch", "deliver"]],
        "{}",
        proxy.output()
    );
}
