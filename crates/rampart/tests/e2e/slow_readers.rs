//! Clients that stop reading : their responses' memory stays inside
//! `cache_memory` (a body a slow client holds after the cache let it go is still charged, and a
//! coalesced fetch's buffer is charged while it lives), and `client_send_timeout_seconds` cuts
//! them off. Before: 40 HTTP/1.1 clients that never read distinct 5.4 MB objects took RSS from
//! 78 to 232 MB at 64 MiB, and one HTTP/2 connection with a zero window and 120 streams to
//! 549 MB, open past 75 s.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use http::Request;
use support::*;

const OBJECT: u64 = 5_400_000;

const HUGE: u64 = 40_000_000;

async fn big_origin() -> OriginHandle {
    Origin::new()
        .route("/huge", Reply::streamed(HUGE))
        .route(
            "*",
            Reply::streamed(OBJECT).header("cache-control", "max-age=600"),
        )
        .start()
        .await
}

/// The goal: `cache_memory` × 1.1 + 40 MiB.
fn goal_mib(cache_mib: u64) -> u64 {
    cache_mib * 11 / 10 + 40
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Polls until `done`, at most `within`.
async fn until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

#[tokio::test]
async fn forty_http1_clients_that_never_read_stay_within_the_budget() {
    let origin = big_origin().await;
    let proxy = Proxy::start(&config_for(
        "slow",
        &origin,
        "cache_memory = \"64MiB\"\nworkers = 1\nclient_send_timeout_seconds = 600",
        "",
    ));
    let base = rss_kib(proxy.pid()) >> 10;
    // 40 connections, one after the other, each asking for a distinct object and reading
    // nothing; each fetch ends (the origin's body is all in) before the next starts.
    let mut held = Vec::new();
    for i in 0..40 {
        let mut s = std::net::TcpStream::connect(proxy.addr).unwrap();
        write!(s, "GET /obj/{i} HTTP/1.1\r\nHost: slow\r\n\r\n").unwrap();
        held.push(s);
        assert!(until(Duration::from_secs(30), || origin.requests() == i + 1).await);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let peak = proxy.peak_rss_kib() >> 10;
    eprintln!("40 HTTP/1.1 clients that never read: peak RSS {peak} MiB (from {base} MiB)");
    assert!(
        peak <= goal_mib(64),
        "peak RSS {peak} MiB (from {base} MiB) with 40 clients holding 5.4 MB responses; goal {} MiB",
        goal_mib(64)
    );
    // The clients still get whole, correct responses when they do read.
    let mut s = held.pop().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        let head_end = got.windows(4).position(|w| w == b"\r\n\r\n");
        if head_end.is_some_and(|h| got.len() - (h + 4) >= OBJECT as usize) {
            break;
        }
    }
    let h = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    assert!(got.starts_with(b"HTTP/1.1 200"));
    assert_eq!(got.len() - (h + 4), OBJECT as usize);
    assert!(got[h + 4..].iter().all(|&b| b == b'x'));
}

/// An HTTP/2 connection to `proxy` whose streams' windows are shut: it reads every response
/// head and not a byte of any body.
async fn zero_window_connection(proxy: &Proxy) -> hyper::client::conn::http2::SendRequest<BoxBody> {
    let stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(0)
            .adaptive_window(false)
            .max_concurrent_reset_streams(0)
            .handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender
}

#[tokio::test]
async fn an_http2_connection_with_a_shut_window_stays_within_the_budget_and_is_cut_off() {
    let origin = big_origin().await;
    let proxy = Proxy::start(&config_for(
        "slow",
        &origin,
        "cache_memory = \"64MiB\"\nworkers = 1\nclient_send_timeout_seconds = 30\nmetrics_allow = [\"127.0.0.1\"]",
        "",
    ));
    let mut c = zero_window_connection(&proxy).await;
    let mut pending = Vec::new();
    // One stream after the other, each fetch over (its body all in) before the next.
    for i in 0..120 {
        let req = Request::get(format!("http://slow/h2/{i}"))
            .body(empty())
            .unwrap();
        c.ready().await.unwrap();
        pending.push(tokio::spawn(c.send_request(req)));
        assert!(until(Duration::from_secs(30), || origin.requests() == i + 1).await);
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    // Heads arrive; bodies cannot.
    let mut bodies = Vec::new();
    for p in pending {
        let res = tokio::time::timeout(Duration::from_secs(30), p)
            .await
            .expect("a response head within 30 s")
            .unwrap()
            .unwrap();
        assert_eq!(res.status(), 200);
        bodies.push(res.into_body());
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let peak = proxy.peak_rss_kib() >> 10;
    eprintln!("120 shut HTTP/2 streams: peak RSS {peak} MiB");
    assert!(
        peak <= goal_mib(64),
        "peak RSS {peak} MiB with 120 shut HTTP/2 streams; goal {} MiB",
        goal_mib(64)
    );
    // client_send_timeout_seconds (30 s here: the streams above take ~8 s to open): the
    // connection is closed, and every body ends in an error rather than hanging.
    use http_body_util::BodyExt as _;
    let started = Instant::now();
    let first = bodies.pop().unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(45), first.collect()).await;
    assert!(
        matches!(ended, Ok(Err(_))),
        "the body should fail when the connection is cut: {:?}",
        ended.map(|r| r.map(|b| b.to_bytes().len()))
    );
    assert!(started.elapsed() < Duration::from_secs(40));
    let metrics = fetch(req(&proxy, "slow", "/_rampart/metrics")).await.text();
    assert!(
        metrics.contains("rampart_client_send_timeouts_total 1\n"),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_http1_client_that_stops_reading_is_cut_off_after_the_send_timeout() {
    let origin = big_origin().await;
    let proxy = Proxy::start(&config_for(
        "slow",
        &origin,
        &format!(
            "workers = 1\nclient_send_timeout_seconds = 2\nmetrics_allow = [\"127.0.0.1\"]\napi_key = \"{API_KEY}\""
        ),
        "",
    ));
    let addr = proxy.addr;
    let closed_after = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        // 40 MB: more than the kernel's socket buffers hold, so rampart's writes wait.
        s.write_all(b"GET /huge HTTP/1.1\r\nHost: slow\r\n\r\n")
            .unwrap();
        std::thread::sleep(Duration::from_secs(6));
        // By now rampart gave up: reading drains what was buffered, then the end.
        let start = Instant::now();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut total = 0usize;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
        (total, start.elapsed())
    })
    .await
    .unwrap();
    let (read, took) = closed_after;
    assert!(
        (read as u64) < HUGE,
        "the whole response arrived ({read} bytes): the connection was not cut"
    );
    assert!(took < Duration::from_secs(8), "the connection stayed open");
    let metrics = fetch(req(&proxy, "slow", "/_rampart/metrics")).await.text();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("rampart_client_send_timeouts_total"))
        .unwrap_or_default()
        .to_owned();
    assert_eq!(line, "rampart_client_send_timeouts_total 1", "{metrics}");
}
