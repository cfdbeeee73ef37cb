//! End-to-end tests of the core proxy: real origin, real `rampart` process, real clients.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use http::Request;
use support::*;

const SIGTERM: i32 = 15;
const SIGINT: i32 = 2;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_stream_both_ways_with_bounded_memory() {
    const GIB: u64 = 1 << 30;
    let origin = Origin::new()
        .route("/download", Reply::streamed(GIB))
        .route_fn("/upload", |s| Reply::text(&s.body_len.to_string()))
        .start()
        .await;
    // A 1 GiB upload: far over the default 2 MiB body limit, so the limit is lifted.
    let proxy = Proxy::start(&config_for(
        "big",
        &origin,
        "workers = 1\ndisable_default_body_limit = true",
        "",
    ));
    // Upload 1 GiB.
    let req = Request::post(proxy.url("/upload"))
        .header("host", "big")
        .header("content-length", GIB.to_string())
        .body(repeat_body(GIB))
        .unwrap();
    let got = send(&client(), req).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.text(),
        GIB.to_string(),
        "origin received the whole upload"
    );
    let after_upload = proxy.peak_rss_kib() / 1024;
    // Download 1 GiB, counting bytes without keeping them.
    let res = client()
        .request(
            Request::get(proxy.url("/download"))
                .header("host", "big")
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    let mut n = 0u64;
    use http_body_util::BodyExt;
    while let Some(f) = body.frame().await {
        if let Some(d) = f.unwrap().data_ref() {
            n += d.len() as u64;
        }
    }
    assert_eq!(n, GIB);
    let peak_mib = proxy.peak_rss_kib() / 1024;
    assert!(peak_mib < 64, "proxy peak RSS {peak_mib} MiB (after upload: {after_upload} MiB) after moving 2 GiB: bodies are being buffered");
}

#[tokio::test]
async fn expect_100_continue_is_answered() {
    let origin = Origin::new()
        .route_fn("/up", |s| Reply::text(&format!("got {}", s.body_len)))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("exp", &origin, "", ""));
    let addr = proxy.addr;
    let out = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(
            b"POST /up HTTP/1.1\r\nHost: exp\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
        )
        .unwrap();
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).unwrap();
        let interim = String::from_utf8_lossy(&buf[..n]).into_owned();
        s.write_all(b"hello").unwrap();
        let mut rest = Vec::new();
        let mut b = [0u8; 1024];
        while let Ok(n) = s.read(&mut b) {
            if n == 0 {
                break;
            }
            rest.extend_from_slice(&b[..n]);
            if String::from_utf8_lossy(&rest).contains("got 5") {
                break;
            }
        }
        (interim, String::from_utf8_lossy(&rest).into_owned())
    })
    .await
    .unwrap();
    assert!(out.0.starts_with("HTTP/1.1 100 Continue"), "{out:?}");
    assert!(
        out.1.starts_with("HTTP/1.1 200") && out.1.contains("got 5"),
        "{out:?}"
    );
    assert!(origin.last().headers.get("expect").is_none());
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let origin = Origin::new()
        .route("/a", Reply::text("first").delay(Duration::from_millis(200)))
        .route("/b", Reply::text("second"))
        .route("/c", Reply::text("third"))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("pipe", &origin, "", ""));
    let addr = proxy.addr;
    let out = tokio::task::spawn_blocking(move || {
        raw(
            addr,
            b"GET /a HTTP/1.1\r\nHost: pipe\r\n\r\nGET /b HTTP/1.1\r\nHost: pipe\r\n\r\nGET /c HTTP/1.1\r\nHost: pipe\r\nConnection: close\r\n\r\n",
            Duration::from_secs(5),
        )
    })
    .await
    .unwrap();
    let (a, b, c) = (out.find("first"), out.find("second"), out.find("third"));
    assert!(a.is_some() && b.is_some() && c.is_some(), "{out}");
    assert!(a < b && b < c, "responses out of order: {out}");
    assert_eq!(out.matches("HTTP/1.1 200").count(), 3);
}

/// Writes `parts` one after the other (each once everything before it that `until` names has
/// come back), then reads to the end; returns everything read. Blocking; 5 s per read.
fn conversation(addr: std::net::SocketAddr, parts: &[(&[u8], &str)]) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    for (bytes, until) in parts {
        s.write_all(bytes).unwrap();
        while !String::from_utf8_lossy(&got).contains(until) {
            match s.read(&mut b) {
                Ok(0) | Err(_) => return String::from_utf8_lossy(&got).into_owned(),
                Ok(n) => got.extend_from_slice(&b[..n]),
            }
        }
    }
    while let Ok(n) = s.read(&mut b) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&b[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn an_origin_may_answer_while_the_request_body_still_streams() {
    let origin = Origin::new()
        .answer_before_body("/up")
        .route(
            "/up",
            Reply::text("early").header("cache-control", "no-store"),
        )
        .route("*", Reply::text("fine").header("cache-control", "no-store"))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("d", &origin, "", ""));
    let addr = proxy.addr;
    let out = tokio::task::spawn_blocking(move || {
        conversation(
            addr,
            &[
                // Half the body: the answer must come back before the rest is sent.
                (
                    b"POST /up HTTP/1.1\r\nHost: d\r\nContent-Length: 10\r\n\r\nhello",
                    "early",
                ),
                // The rest, then a second request on the same connection.
                (
                    b"worldGET /next HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n",
                    "fine",
                ),
            ],
        )
    })
    .await
    .unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("early") && out.contains("fine"), "{out}");
    assert_eq!(out.matches("HTTP/1.1 200").count(), 2, "{out}");
    // The origin got the whole body, after it had answered.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while origin.body_bytes() < 10 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(origin.body_bytes(), 10);
    assert_eq!(origin.seen().last().unwrap().uri.path(), "/next");
}

#[tokio::test]
async fn an_error_answered_before_the_body_is_read_closes_the_connection() {
    let origin = Origin::new().route("*", Reply::text("fine")).start().await;
    let proxy = Proxy::start(&config_for("e", &origin, "", "max_body_size = \"1KiB\""));
    let addr = proxy.addr;
    // A declared length over the limit: 413 at once, and the connection cannot go on (the
    // body was never read), so the answer says `Connection: close` and the proxy closes.
    let started = std::time::Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        conversation(
            addr,
            &[(
                b"POST /up HTTP/1.1\r\nHost: e\r\nContent-Length: 5000\r\n\r\nxxxx",
                "\r\n\r\n",
            )],
        )
    })
    .await
    .unwrap();
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    assert!(
        out.to_ascii_lowercase().contains("connection: close"),
        "{out}"
    );
    assert!(started.elapsed() < Duration::from_secs(4), "left open");
    assert_eq!(origin.requests(), 0);
}

#[tokio::test]
async fn a_small_unread_body_is_skipped_and_the_next_request_served() {
    let origin = Origin::new()
        .route(
            "/c",
            Reply::text("cached").header("cache-control", "max-age=60"),
        )
        .route("*", Reply::text("fine").header("cache-control", "no-store"))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("k", &origin, "", ""));
    assert_eq!(get(&proxy, "k", "/c").await.text(), "cached");
    let addr = proxy.addr;
    // A hit never reads the request body: its 5 bytes are skipped and the pipelined request
    // behind them is served on the same connection.
    let out = tokio::task::spawn_blocking(move || {
        conversation(
            addr,
            &[(
                b"GET /c HTTP/1.1\r\nHost: k\r\nContent-Length: 5\r\n\r\nhelloGET /d HTTP/1.1\r\nHost: k\r\nConnection: close\r\n\r\n",
                "fine",
            )],
        )
    })
    .await
    .unwrap();
    assert_eq!(out.matches("HTTP/1.1 200").count(), 2, "{out}");
    let (c, d) = (out.find("cached"), out.find("fine"));
    assert!(c.is_some() && c < d, "{out}");
    let paths: Vec<String> = origin
        .seen()
        .iter()
        .map(|s| s.uri.path().to_owned())
        .collect();
    assert_eq!(paths, ["/c", "/d"], "the body was not taken for a request");
}

#[tokio::test]
async fn h2c_prior_knowledge() {
    let origin = Origin::new()
        .route("/", Reply::text("over h2"))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("h2.example", &origin, "", ""));
    // Connect to the proxy and send :authority h2.example (an h2c prior-knowledge connection).
    let mut req = Request::get("/").body(empty()).unwrap();
    *req.uri_mut() = format!("http://h2.example:{}/", proxy.addr.port())
        .parse()
        .unwrap();
    let stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let res = sender.send_request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    use http_body_util::BodyExt;
    assert_eq!(
        res.into_body().collect().await.unwrap().to_bytes(),
        "over h2"
    );
    // The origin gets the name the cache key uses; the port goes apart.
    let seen = origin.last();
    assert_eq!(seen.headers["host"], "h2.example");
    assert_eq!(
        seen.headers["x-forwarded-port"],
        proxy.addr.port().to_string().as_str()
    );
    assert_eq!(seen.headers["via"], "2 rampart");
    assert_eq!(seen.version, http::Version::HTTP_11);
}

/// The streams of one HTTP/2 connection run in its task (`transport/h2_streams.rs`): twenty
/// slow requests on one connection are all at the origin at once and all answered, and a
/// graceful stop still finishes the ones in flight before the process exits.
#[tokio::test]
async fn h2_streams_of_one_connection_run_side_by_side_and_a_stop_finishes_them() {
    let origin = Origin::new()
        .route("*", Reply::text("slow").delay(Duration::from_millis(800)))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("streams", &origin, "workers = 1", ""));
    let stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let port = proxy.addr.port();
    let ask = |path: String| {
        let mut sender = sender.clone();
        tokio::spawn(async move {
            let req = Request::get(format!("http://streams:{port}{path}"))
                .body(empty())
                .unwrap();
            let res = sender.send_request(req).await.map_err(|e| e.to_string())?;
            let status = res.status().as_u16();
            use http_body_util::BodyExt;
            let body = res.into_body().collect().await.map_err(|e| e.to_string())?;
            Ok::<_, String>((status, body.to_bytes()))
        })
    };
    let asked: Vec<_> = (0..20).map(|i| ask(format!("/side/{i}"))).collect();
    // All twenty reach the origin while the first is still being answered (each takes 0.8 s
    // there): the streams do not wait for one another.
    let deadline = Instant::now() + Duration::from_secs(10);
    while origin.requests() < 20 {
        assert!(
            Instant::now() < deadline,
            "{} of 20 at the origin",
            origin.requests()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for a in asked {
        assert_eq!(a.await.unwrap().unwrap(), (200, bytes::Bytes::from("slow")));
    }
    // A stop while five streams are at the origin: they are answered, then the process ends.
    let before = origin.requests();
    let last: Vec<_> = (0..5).map(|i| ask(format!("/last/{i}"))).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while origin.requests() < before + 5 {
        assert!(
            Instant::now() < deadline,
            "the last five never reached the origin"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.signal(SIGTERM);
    for a in last {
        assert_eq!(a.await.unwrap().unwrap(), (200, bytes::Bytes::from("slow")));
    }
    exits_cleanly(proxy).await;
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_requests() {
    let origin = Origin::new()
        .route(
            "/slow",
            Reply::text("finished").delay(Duration::from_millis(1500)),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("drain", &origin, "", ""));
    let url = proxy.url("/slow");
    let in_flight = tokio::spawn(async move {
        send(
            &client(),
            Request::get(url)
                .header("host", "drain")
                .body(empty())
                .unwrap(),
        )
        .await
    });
    // Wait until the origin has the request, then ask rampart to stop.
    let deadline = Instant::now() + Duration::from_secs(10);
    while origin.requests() == 0 {
        assert!(
            Instant::now() < deadline,
            "request never reached the origin"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.signal(SIGTERM);
    let got = in_flight.await.unwrap();
    assert_eq!(
        (got.status.as_u16(), got.text()),
        (200, "finished".to_owned())
    );
    let proxy = exits_cleanly(proxy).await;
    assert!(
        std::net::TcpStream::connect(proxy.addr).is_err(),
        "still accepting after shutdown"
    );
}

#[tokio::test]
async fn connection_limit_is_logged_and_enforced() {
    let origin = Origin::new().route("*", Reply::text("ok")).start().await;
    let proxy = Proxy::start(&config_for(
        "lim",
        &origin,
        "max_connections = 2\nworkers = 1",
        "",
    ));
    let addr = proxy.addr;
    // Two idle keep-alive connections hold both slots.
    let holders: Vec<_> = tokio::task::spawn_blocking(move || {
        (0..2)
            .map(|_| {
                use std::io::{Read, Write};
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                s.write_all(b"GET / HTTP/1.1\r\nHost: lim\r\n\r\n").unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut b = [0u8; 512];
                let n = s.read(&mut b).unwrap();
                assert!(String::from_utf8_lossy(&b[..n]).starts_with("HTTP/1.1 200"));
                s
            })
            .collect()
    })
    .await
    .unwrap();
    // A third connection is accepted by the kernel but not served while the limit holds.
    let third = tokio::task::spawn_blocking(move || {
        raw(
            addr,
            b"GET / HTTP/1.1\r\nHost: lim\r\nConnection: close\r\n\r\n",
            Duration::from_millis(700),
        )
    });
    let out = third.await.unwrap();
    assert!(out.is_empty(), "served beyond the limit: {out}");
    assert!(
        proxy.wait_for_output("connection limit reached", Duration::from_secs(5)),
        "{}",
        proxy.output()
    );
    drop(holders);
    let out = tokio::task::spawn_blocking(move || {
        raw(
            addr,
            b"GET / HTTP/1.1\r\nHost: lim\r\nConnection: close\r\n\r\n",
            Duration::from_secs(5),
        )
    })
    .await
    .unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
}

#[test]
fn check_lists_every_error_with_line_and_column() {
    let path = scratch("bad.toml");
    std::fs::write(
        &path,
        "listening_address = \"localhost\"\nlogging_level = \"chatty\"\nproxy_timeout = 99999\nsurprise = 1\n\
         [[proxy_rules]]\ndomain = \"x\"\nforward_ipv4 = \"1.2.3\"\nrule_type = \"Greylist\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(rampart_bin())
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let p = path.display().to_string();
    for expected in [
        format!("{p}:1:21: error: `listening_address`"),
        format!("{p}:2:17: error: `logging_level`"),
        format!("{p}:3:17: error: `proxy_timeout`"),
        format!("{p}:4:1: warning: `surprise` unknown key"),
        format!("{p}:7:16: error: `proxy_rules[0].forward_ipv4`"),
        format!("{p}:8:13: error: `proxy_rules[0].rule_type`"),
    ] {
        assert!(err.contains(&expected), "missing {expected:?} in:\n{err}");
    }
    assert!(err.contains("fix:"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("5 error(s)"));

    // A good file passes and reports inactive keys.
    std::fs::write(
        &path,
        "azure_table_storage_key = \"k\"\n[[proxy_rules]]\ndomain = \"x\"\nforward_ipv4 = \"127.0.0.1\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(rampart_bin())
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("accepted, not yet active"));
}

#[test]
fn check_strict_fails_on_warnings_and_print_shows_the_effective_file() {
    let path = scratch("strict.toml");
    let check = |args: &[&str]| {
        let mut cmd = std::process::Command::new(rampart_bin());
        cmd.args(["check", "--config", path.to_str().unwrap()])
            .args(args);
        cmd.output().unwrap()
    };
    // One misplaced global key (an error in every mode) ...
    std::fs::write(
        &path,
        "[[proxy_rules]]\ndomain = \"x\"\nforward_ipv4 = \"127.0.0.1\"\napi_key = \"0123456789abcdef0123\"\n",
    )
    .unwrap();
    let out = check(&[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(":4:1: error: `proxy_rules[0].api_key` `api_key` is a global key, but it comes after the `[[proxy_rules]]` header at line 1"),
        "{err}"
    );
    // ... moved above the rule: the warnings (ARC2's required rule keys) pass without
    // --strict and fail with it.
    std::fs::write(
        &path,
        "api_key = \"0123456789abcdef0123\"\n[[proxy_rules]]\ndomain = \"x\"\nforward_ipv4 = \"127.0.0.1\"\n",
    )
    .unwrap();
    assert_eq!(check(&[]).status.code(), Some(0));
    let out = check(&["--strict"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("--strict: every warning counts as an error")
    );
    // --print: stdout is the file as rampart reads it, and itself a valid file.
    let out = check(&["--print"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("api_key = ") && l.ends_with("# ARC2")),
        "{printed}"
    );
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("# cache_memory = \"256MiB\"")
                && l.ends_with("# rampart, default")),
        "{printed}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("configuration OK"));
    std::fs::write(&path, &printed).unwrap();
    assert_eq!(check(&[]).status.code(), Some(0));
}

#[tokio::test]
async fn run_names_inactive_keys_once_and_keeps_stdout_for_the_access_log() {
    let origin = Origin::new().route("*", Reply::text("ok")).start().await;
    let proxy = Proxy::start(&config_for(
        "x",
        &origin,
        "azure_table_storage_key = \"k\"\nadd_logging = true",
        "",
    ));
    assert_eq!(get(&proxy, "x", "/").await.status, 200);
    assert!(proxy.wait_for_output("path=/", Duration::from_secs(5)));
    let (out, err) = (
        proxy.stdout.lock().unwrap().clone(),
        proxy.stderr.lock().unwrap().clone(),
    );
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("accepted but not active"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains("azure_table_storage_key"),
        "{err}"
    );
    assert!(err.contains("listening on http://"), "{err}");
    assert!(
        !out.contains("listening on"),
        "startup lines on stdout: {out}"
    );
    assert!(
        out.lines().all(|l| l.contains("path=")),
        "stdout is the access log only: {out}"
    );
}

#[tokio::test]
async fn a_second_instance_on_the_same_port_refuses_to_start() {
    let origin = Origin::new().route("*", Reply::text("first")).start().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = config_for("x", &origin, "", "").replace(
        "listening_port_http = 0",
        &format!("listening_port_http = {port}"),
    );
    let first = Proxy::start(&cfg);
    assert_eq!(first.addr.port(), port);
    // SO_REUSEPORT would let it join silently and split the traffic between two caches.
    let out = Proxy::try_start(&cfg);
    assert!(
        out.contains(&format!("cannot listen on 127.0.0.1:{port}"))
            && out.contains("another process is already listening there"),
        "{out}"
    );
    assert_eq!(get(&first, "x", "/").await.text(), "first");
}

#[test]
fn run_without_config_says_how_to_start() {
    let dir = scratch("empty-dir");
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::process::Command::new(rampart_bin())
        .arg("run")
        .current_dir(&dir)
        .output()
        .unwrap();
    if std::path::Path::new("/etc/rampart/rampart.toml").exists() {
        return; // a machine-wide config would be picked up; nothing to assert here.
    }
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rampart demo") && err.contains("--config"),
        "{err}"
    );
}

#[tokio::test]
async fn demo_serves_its_pages_and_stops_on_ctrl_c() {
    let mut demo = Proxy::spawn(&["demo", "--listen", "127.0.0.1:0"]);
    assert!(
        demo.wait_for_output("Press Ctrl-C", Duration::from_secs(5)),
        "{}",
        demo.output()
    );
    let out = demo.stdout.lock().unwrap().clone();
    assert!(out.contains("curl -i http://"), "{out}");
    let c = client();
    let get = |p: &str| Request::get(demo.url(p)).body(empty()).unwrap();
    let hello = send(&c, get("/")).await;
    assert_eq!(hello.text(), "Hello World!");
    assert_eq!(hello.header("x-arc2-cache"), Some("Miss"));
    let again = send(&c, get("/")).await;
    assert_eq!(
        again.header("x-arc2-cache"),
        Some("Hit"),
        "the demo shows a miss, then a hit"
    );
    let img = send(&c, get("/image.jpg")).await;
    assert_eq!(img.header("content-type"), Some("image/jpeg"));
    assert!(
        img.body.len() > 70_000 && img.body.starts_with(&[0xFF, 0xD8]),
        "a real JPEG of ~73 KB"
    );
    let cookie = send(&c, get("/cookie")).await;
    assert!(cookie.header("set-cookie").is_some());
    let slow = send(&c, get("/slow")).await;
    assert_eq!(slow.header("cache-control"), Some("no-store"));
    // The demo screens for SQL injection, as its printed try-line says.
    assert!(out.contains("SQL injection: 403"), "{out}");
    let sqli = send(&c, get("/search?q=1%27%20OR%20%271%27%3D%271")).await;
    assert_eq!(sqli.status, 403);
    assert_eq!(sqli.header("x-arc2-cache"), Some("Block"));
    demo.signal(SIGINT);
    let code = tokio::task::spawn_blocking(move || demo.wait_exit(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(code, Some(0));
}

/// `rampart demo` says where its state (its local CA) is, and as root keeps it in root's home,
/// never in the service's state directory `/var/lib/rampart`.
#[test]
fn demo_says_where_it_keeps_its_state_and_keeps_out_of_the_services() {
    let home = scratch("demo-home");
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt as _;
        m.uid() == 0
    });
    let expected = home.join(if root {
        ".local/share/rampart-demo"
    } else {
        ".local/share/rampart"
    });
    let mut demo = Proxy::spawn_env(
        &["demo", "--listen", "127.0.0.1:0"],
        &[
            ("HOME", home.to_str().unwrap()),
            ("XDG_DATA_HOME", ""),
            ("STATE_DIRECTORY", ""),
        ],
    );
    assert!(
        demo.wait_for_output("Press Ctrl-C", Duration::from_secs(10)),
        "{}",
        demo.output()
    );
    let out = demo.stdout.lock().unwrap().clone();
    assert!(
        out.contains(&format!("state         : {}", expected.display())),
        "the demo names its state directory {}:\n{out}",
        expected.display()
    );
    assert!(
        expected.join("ca/root.pem").is_file(),
        "the local CA is in the directory the demo names"
    );
    assert!(
        out.contains(&format!(
            "--cacert {}",
            expected.join("ca/root.pem").display()
        )),
        "{out}"
    );
    demo.signal(SIGINT);
    assert_eq!(demo.wait_exit(Duration::from_secs(10)), Some(0));
    let _ = std::fs::remove_dir_all(&home);
}

#[tokio::test]
async fn one_line_proxy_command() {
    let origin = Origin::new()
        .route("*", Reply::text("via proxy cmd"))
        .start()
        .await;
    let to = format!("127.0.0.1:{}", origin.port());
    let proxy = Proxy::spawn(&[
        "proxy",
        "--from",
        "127.0.0.1:0",
        "--to",
        &to,
        "--workers",
        "1",
    ]);
    let got = get(&proxy, "any.host", "/z").await;
    assert_eq!(got.text(), "via proxy cmd");
    // Its own configuration draws no warning.
    let err = proxy.stderr.lock().unwrap().clone();
    assert!(!err.contains("warning"), "{err}");
}

#[test]
fn one_line_proxy_with_a_bad_origin_names_the_flag() {
    for to in ["localhost", "localhost:0", "http://", "a b:80"] {
        let out = std::process::Command::new(rampart_bin())
            .args(["proxy", "--from", "127.0.0.1:0", "--to", to])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{to}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("give the origin as HOST:PORT"), "{to}: {err}");
        assert!(
            !err.contains("--to:"),
            "no position in a file the user never wrote: {err}"
        );
    }
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

#[tokio::test]
async fn silent_connections_are_closed_after_the_header_timeout() {
    let origin = Origin::new().route("*", Reply::text("ok")).start().await;
    let proxy = Proxy::start(&config_for(
        "quiet",
        &origin,
        "client_header_timeout_seconds = 1\nworkers = 1",
        "",
    ));
    let addr = proxy.addr;
    let started = Instant::now();
    // Sends nothing; the proxy must close the connection by itself.
    let out = tokio::task::spawn_blocking(move || raw(addr, b"", Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(out.is_empty() || out.starts_with("HTTP/1.1 408"), "{out}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "closed after {waited:?}"
    );
}

/// The harness itself: an assertion inside an origin's handler runs in the origin's task, where
/// a panic would only close a connection. The origin answers 500 and the test fails when its
/// handle is dropped.
#[tokio::test]
#[should_panic(expected = "the test origin panicked: GET /boom: the origin's own assertion")]
async fn a_panic_in_the_test_origin_fails_the_test() {
    let origin = Origin::new()
        .route_fn("/boom", |_| panic!("the origin's own assertion"))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("boom.example", &origin, "", ""));
    let got = get(&proxy, "boom.example", "/boom").await;
    assert_eq!(got.status, 500);
    drop(origin);
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

/// Waits (off the runtime) for a stopping proxy to exit, and checks it exited with 0.
async fn exits_cleanly(mut proxy: Proxy) -> Proxy {
    tokio::task::spawn_blocking(move || {
        let code = proxy.wait_exit(Duration::from_secs(10));
        assert_eq!(code, Some(0), "{}", proxy.output());
        proxy
    })
    .await
    .unwrap()
}

#[test]
fn check_counts_and_lists_the_listeners_run_opens() {
    // `tls = "internal"` opens HTTP and HTTPS (and HTTP/3 with `http3`): `check` said
    // "1 listener(s)", counting the plain-HTTP addresses only.
    let path = scratch("listeners.toml");
    let check = |toml: &str| {
        std::fs::write(&path, toml).unwrap();
        let out = std::process::Command::new(rampart_bin())
            .args(["check", "--config", path.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let rule = "[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n";
    let both = format!("listen = [\"127.0.0.1:18080\"]\nlisten_https = [\"127.0.0.1:18443\"]\ntls = \"internal\"\n{rule}");
    let out = check(&both);
    assert!(
        out.contains("2 listener(s): HTTP 127.0.0.1:18080, HTTPS 127.0.0.1:18443;"),
        "{out}"
    );
    let out = check(&format!("http3 = true\n{both}"));
    assert!(
        out.contains("3 listener(s): HTTP 127.0.0.1:18080, HTTPS 127.0.0.1:18443, HTTP/3 127.0.0.1:18443 (UDP);"),
        "{out}"
    );
    // No rule has a certificate: `run` opens the plain-HTTP listener only.
    let out = check(&format!(
        "listen = [\"127.0.0.1:18080\"]\nlisten_https = [\"127.0.0.1:18443\"]\n{rule}"
    ));
    assert!(
        out.contains("1 listener(s): HTTP 127.0.0.1:18080;"),
        "{out}"
    );
}

#[test]
fn check_quotes_a_bare_address_and_says_nothing_else_about_it() {
    // `forward_ipv4 = 127.0.0.1` gave "invalid float" with "fix the syntax at this position",
    // after a misleading "`forward_port_http` is set but no origin address".
    let path = scratch("bare.toml");
    std::fs::write(
        &path,
        "listen = [\"127.0.0.1:8080\"]\n\n[[proxy_rules]]\ndomain = \"example.com\"\nmax_age_seconds = \"1h\"\npaths = \"/\"\nforward_ipv4 = 127.0.0.1\nforward_port_http = 3000\n",
    )
    .unwrap();
    let out = std::process::Command::new(rampart_bin())
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let p = path.display().to_string();
    let errors: Vec<&str> = err.lines().filter(|l| l.contains(": error: ")).collect();
    assert_eq!(errors.len(), 3, "{err}");
    for expected in [
        format!("{p}:5:19: error: `proxy_rules[0].max_age_seconds` expected an integer, found a string\n    fix: write it as `max_age_seconds = 3600`"),
        format!("{p}:6:9: error: `proxy_rules[0].paths` expected an array of strings, found a string\n    fix: write it as `paths = [\"/\"]`"),
        format!("{p}:7:16: error: not valid TOML: the value \"127.0.0.1\" is a string and needs quotes\n    fix: write it as `forward_ipv4 = \"127.0.0.1\"`"),
    ] {
        assert!(err.contains(&expected), "missing {expected:?} in:\n{err}");
    }
}
