//! HTTP/3 end to end: a real QUIC + HTTP/3 client (quinn and h3) against the real binary's UDP
//! socket beside its HTTPS listener. The same pipeline as HTTP/1.1 and HTTP/2 (cache,
//! screening, logging, bodies both ways), Alt-Svc on HTTPS responses, the certificates and
//! their reloads, turning HTTP/3 on and off by reload, and the limits (streams, connections,
//! idle connections, malformed requests).
#![allow(clippy::unwrap_used)]

use crate::support;
use crate::support::h3 as h3c;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use support::tls::{self, eventually, files, TestCa};
use support::*;

const SIGHUP: i32 = 1;

/// A rule for `domain` to the origin on `port`, with extra rule lines.
pub(crate) fn rule(domain: &str, port: u16, extra: &str) -> String {
    format!(
        "\n[[proxy_rules]]\ndomain = \"{domain}\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\n\
         forward_port_http = {port}\nrule_type = \"Whitelist\"\nenable_logging = true\nignore_query_string = false\n\
         enable_sql_injection_protection = true\nenable_compression = false\nenable_minification = false\n\
         enable_webp_transformation = false\n{extra}\n"
    )
}

pub(crate) const GLOBAL: &str = "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nlistening_port_https = 0\n\
                      workers = 2\nlogging_level = \"info\"\nadd_logging = true\nadd_sql_injection_protection = true\n";

/// The UDP port an `Alt-Svc: h3=":PORT"; ma=N` value names.
fn alt_svc_port(v: &str) -> Option<u16> {
    v.strip_prefix("h3=\":")?.split('"').next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_goes_through_the_same_pipeline() {
    let origin = Origin::new()
        .route(
            "/page",
            Reply::text("hello over h3\n").header("cache-control", "max-age=60"),
        )
        .route("/big", Reply::streamed(4 << 20))
        .route_fn("/upload", |s| {
            Reply::text(&format!("got {} bytes", s.body_len))
        })
        .route("*", Reply::text("other\n"))
        .start()
        .await;
    let ca = TestCa::new("test CA");
    let (c, k) = ca.leaf(&["a.test"]).write("h3");
    let proxy = Proxy::start(&format!(
        "{GLOBAL}http3 = true\n{}",
        rule("a.test", origin.port(), &files(&c, &k))
    ));
    let (https, udp) = (proxy.https.unwrap(), proxy.h3.expect("an HTTP/3 socket"));
    // HTTP/3 takes the HTTPS port's number when the system chose it.
    assert_eq!(udp.port(), https.port(), "{}", proxy.output());

    // HTTPS over TCP announces it, over HTTP/1.1 and HTTP/2 alike.
    for alpn in [&b"http/1.1"[..], b"h2"] {
        let client = tls::client_config(ca.roots(), &[alpn], &[&rustls::version::TLS13]);
        let got = tls::get(https, "a.test", "/other", &client).await;
        assert_eq!(got.status, 200);
        let alt = got.header("alt-svc").expect("Alt-Svc on HTTPS");
        assert_eq!(alt, format!("h3=\":{}\"; ma=86400", udp.port()));
        assert_eq!(alt_svc_port(alt), Some(udp.port()));
    }
    // Plain HTTP does not (Alt-Svc there would send clients to an origin they did not ask for).
    let plain = get(&proxy, "a.test", "/other").await;
    assert_eq!(plain.header("alt-svc"), None);

    let mut h3 = h3c::connect(udp, "a.test", ca.roots()).await.unwrap();
    // Cache: a miss, then a hit on the same connection.
    let first = h3.get("a.test", "/page").await;
    assert_eq!(first.status, 200);
    assert_eq!(first.version, http::Version::HTTP_3);
    assert_eq!(first.text(), "hello over h3\n");
    assert_eq!(first.header("x-arc2-cache"), Some("Miss"));
    assert_eq!(
        first.header("alt-svc"),
        None,
        "no Alt-Svc over HTTP/3 itself"
    );
    let again = h3.get("a.test", "/page").await;
    assert_eq!(again.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(again.text(), "hello over h3\n");
    assert_eq!(
        origin
            .seen()
            .iter()
            .filter(|s| s.uri.path() == "/page")
            .count(),
        1
    );
    // The origin sees an HTTP/1.1 request that says where it came from.
    let seen = origin.last();
    assert_eq!(seen.version, http::Version::HTTP_11);
    assert_eq!(seen.headers["host"], "a.test");
    assert_eq!(seen.headers["x-forwarded-proto"], "https");

    // Bodies both ways: 900 KiB up (in 64 KiB DATA frames), 4 MiB down.
    let up = Bytes::from(vec![b'u'; 900 << 10]);
    let req = Request::post("https://a.test/upload").body(()).unwrap();
    let got = h3.send(req, up).await.unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.text(), format!("got {} bytes", 900 << 10));
    // Over the body limit (2 MiB by default): 413, and the client is told to stop sending.
    // Declared here; cut while it streams in tests/http3_cut.rs.
    let req = Request::post("https://a.test/upload")
        .header("content-length", (3u64 << 20).to_string())
        .body(())
        .unwrap();
    let too_big = h3
        .send(req, Bytes::from(vec![b'u'; 3 << 20]))
        .await
        .unwrap();
    assert_eq!(too_big.status, 413);
    let big = h3.get("a.test", "/big").await;
    assert_eq!(big.status, 200);
    assert_eq!(big.body.len(), 4 << 20);

    // HEAD: the head only.
    let req = Request::head("https://a.test/page").body(()).unwrap();
    let head = h3.send(req, Bytes::new()).await.unwrap();
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());

    // Screening: SQL injection is refused before the origin.
    let before = origin.requests();
    let bad = h3.get("a.test", "/q?id=1%27%20OR%20%271%27=%271").await;
    assert_eq!(bad.status, 403, "{}", bad.text());
    // A connection-specific field makes an HTTP/3 request malformed (RFC 9114 §4.2): 400.
    let req = Request::get("https://a.test/other")
        .header("connection", "close")
        .body(())
        .unwrap();
    let malformed = h3.send(req, Bytes::new()).await.unwrap();
    assert_eq!(malformed.status, 400);
    let req = Request::get("https://a.test/other")
        .header("transfer-encoding", "chunked")
        .body(())
        .unwrap();
    assert_eq!(h3.send(req, Bytes::new()).await.unwrap().status, 400);
    // So do whitespace around a field value and a second host field (RFC 9114
    // §4.2 and §4.3.1, as RFC 9113 §8.2.1 for HTTP/2).
    for fields in [
        &[("x-a", " v")][..],
        &[("x-a", "v\t")],
        &[("host", "a.test"), ("host", "evil.example")],
    ] {
        let mut req = Request::get("https://a.test/other");
        for (n, v) in fields {
            req = req.header(*n, *v);
        }
        let got = h3.send(req.body(()).unwrap(), Bytes::new()).await.unwrap();
        assert_eq!(got.status, 400, "{fields:?}");
    }
    assert_eq!(
        origin.requests(),
        before,
        "refused requests reached the origin"
    );
    // An unknown host: the rule table decides, as over TCP.
    let other = h3.get("b.test", "/page").await;
    assert_eq!(other.status, get(&proxy, "b.test", "/page").await.status);
    assert_eq!(other.status, 404);

    // The access log names the protocol.
    assert!(
        proxy.wait_for_output("HTTP/3", Duration::from_secs(5)),
        "{}",
        proxy.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_limits_streams_connections_and_idle_time() {
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let seen = arrivals.clone();
    let origin = Origin::new()
        .route_fn("/slow", move |_| {
            seen.lock().unwrap().push(Instant::now());
            Reply::text("slow\n").delay(Duration::from_millis(300))
        })
        .route("*", Reply::text("ok\n"))
        .start()
        .await;
    let ca = TestCa::new("test CA");
    let (c, k) = ca.leaf(&["a.test"]).write("h3-limits");
    let proxy = Proxy::start(&format!(
        "{GLOBAL}http3 = true\nhttp3_max_concurrent_streams = 2\nmax_connections = 2\n\
         client_keepalive_timeout_seconds = 2\n{}",
        rule(
            "a.test",
            origin.port(),
            &format!("{}cache_policy = \"no-cache\"\n", files(&c, &k))
        )
    ));
    let udp = proxy.h3.unwrap();

    // Two streams at a time: six slow requests on one connection arrive in three waves.
    let mut h3 = h3c::connect(udp, "a.test", ca.roots()).await.unwrap();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..6 {
        let mut send = h3c::H3Sender::from(&h3);
        tasks.push(tokio::spawn(async move {
            let req = Request::get(format!("https://a.test/slow?{i}"))
                .body(())
                .unwrap();
            send.send(req).await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap(), 200);
    }
    assert!(
        start.elapsed() >= Duration::from_millis(850),
        "{:?}",
        start.elapsed()
    );
    let arrived = arrivals.lock().unwrap().clone();
    assert_eq!(arrived.len(), 6);
    // No more than two were ever at the origin within one reply's time.
    for (i, a) in arrived.iter().enumerate() {
        let within = arrived[i..]
            .iter()
            .filter(|b| b.duration_since(*a) < Duration::from_millis(250))
            .count();
        assert!(
            within <= 2,
            "{within} requests arrived together: {arrived:?}"
        );
    }

    // `max_connections = 2`: a third connection is refused while two are open.
    let second = h3c::connect(udp, "a.test", ca.roots()).await.unwrap();
    let third = h3c::connect(udp, "a.test", ca.roots()).await;
    assert!(third.is_err(), "a third connection was accepted");
    drop(second);

    // An idle connection is closed after the keep-alive timeout (2 s).
    let idle_since = Instant::now();
    let why = tokio::time::timeout(Duration::from_secs(10), h3.closed()).await;
    let why = why.expect("the idle connection was not closed");
    assert!(
        idle_since.elapsed() >= Duration::from_millis(1500),
        "closed after {:?}: {why}",
        idle_since.elapsed()
    );
    drop(h3);
    // Their slots are free again.
    assert!(
        eventually(Duration::from_secs(5), async || {
            h3c::connect(udp, "a.test", ca.roots()).await.is_ok()
        })
        .await,
        "no connection after the others closed; {}",
        proxy.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_follows_certificate_and_configuration_reloads() {
    let origin = Origin::new()
        .route("*", Reply::text("hello\n"))
        .start()
        .await;
    let ca = TestCa::new("test CA");
    let first = ca.leaf(&["a.test"]);
    let (c, k) = first.write("h3-reload");
    let config = |h3: bool| {
        format!(
            "{GLOBAL}tls_reload_interval_seconds = 1\nhttp3 = {h3}\n{}",
            rule("a.test", origin.port(), &files(&c, &k))
        )
    };
    let path = scratch("h3-reload.toml");
    std::fs::write(&path, config(false)).unwrap();
    let proxy = Proxy::spawn(&["run", "--config", path.to_str().unwrap()]);
    let https = proxy.https.unwrap();
    assert_eq!(proxy.h3, None);
    let client = tls::browser(ca.roots());
    let got = tls::get(https, "a.test", "/", &client).await;
    assert_eq!(got.header("alt-svc"), None, "HTTP/3 is off by default");

    // Turned on by a reload: a UDP socket opens, announced on HTTPS responses.
    std::fs::write(&path, config(true)).unwrap();
    proxy.signal(SIGHUP);
    let mut port = None;
    assert!(
        eventually(Duration::from_secs(10), async || {
            let got = tls::get(https, "a.test", "/", &client).await;
            port = got.header("alt-svc").and_then(alt_svc_port);
            port.is_some()
        })
        .await,
        "{}",
        proxy.output()
    );
    let udp = std::net::SocketAddr::new(https.ip(), port.unwrap());
    let mut h3 = h3c::connect(udp, "a.test", ca.roots()).await.unwrap();
    assert_eq!(h3.peer_leaf(), first.der);
    assert_eq!(h3.get("a.test", "/").await.status, 200);

    // Renewed certificate files: new HTTP/3 handshakes present the new certificate.
    let second = ca.leaf(&["a.test"]);
    std::fs::write(&c, &second.chain_pem).unwrap();
    std::fs::write(&k, &second.key_pem).unwrap();
    assert!(
        eventually(Duration::from_secs(10), async || {
            match h3c::connect(udp, "a.test", ca.roots()).await {
                Ok(h) => h.peer_leaf() == second.der,
                Err(_) => false,
            }
        })
        .await,
        "HTTP/3 kept the old certificate; {}",
        proxy.output()
    );

    // Turned off again: the announcement stops, new connections fail, the open one finishes
    // what it was doing.
    std::fs::write(&path, config(false)).unwrap();
    proxy.signal(SIGHUP);
    assert!(
        eventually(Duration::from_secs(10), async || {
            let got = tls::get(https, "a.test", "/", &client).await;
            got.header("alt-svc").is_none()
        })
        .await
    );
    assert!(h3c::connect(udp, "a.test", ca.roots()).await.is_err());
    assert_eq!(h3.get("a.test", "/").await.status, 200);
}

/// `rampart check` on `toml`: its exit code and everything it printed.
fn check(toml: &str) -> (Option<i32>, String) {
    let path = scratch("h3-check.toml");
    std::fs::write(&path, toml).unwrap();
    let out = std::process::Command::new(rampart_bin())
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[test]
fn http3_keys_are_checked() {
    let (code, text) = check(
        "listening_address = \"127.0.0.1\"\nhttp3 = \"yes\"\nhttp3_max_concurrent_streams = 0\n\
         http3_alt_svc_max_age_seconds = -1\n\
         [[proxy_rules]]\ndomain = \"a.test\"\nforward_ipv4 = \"127.0.0.1\"\n",
    );
    assert_eq!(code, Some(1), "{text}");
    for at in [
        "2:9: error: `http3`",
        "3:32: error: `http3_max_concurrent_streams`",
        "4:33: error: `http3_alt_svc_max_age_seconds`",
    ] {
        assert!(text.contains(at), "{at} not reported:\n{text}");
    }
    // `http3` without a certificate anywhere: a warning, not an error.
    let (code, text) = check(
        "listening_address = \"127.0.0.1\"\nhttp3 = true\n\
         [[proxy_rules]]\ndomain = \"a.test\"\nforward_ipv4 = \"127.0.0.1\"\n",
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("HTTP/3 is served beside the HTTPS listener"),
        "{text}"
    );
}
