//! A client connection as rampart serves it: bodies streamed both ways with bounded memory,
//! `100 Continue`, pipelining, early answers, unread bodies, header timeouts, HTTP/2 over
//! cleartext, and the connection limit.
#![allow(clippy::unwrap_used)]

use crate::support;
use http::Request;
use std::time::{Duration, Instant};
use support::*;

use crate::process::exits_cleanly;
const SIGTERM: i32 = 15;

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

/// The streams of one HTTP/2 connection run in its task (`http2/server/conn.rs`): twenty
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
