//! Idle HTTP/1.1 keep-alive connections leave their tasks after `client_idle_park_seconds`
//! without a request (`transport/park.rs`; 1 s here, 5 by default). Each test holds real
//! connections idle past that, reads the
//! `rampart_connections_parked` gauge, and checks what a client sees: the connection is served
//! again (many times, many connections), closed at its keep-alive time, let go when the client
//! closes it, woken when the server stops, and never parked in the middle of a request.
//! The client side is plain blocking sockets: the tests run on a multi-threaded runtime so
//! that the origin (a task of it) answers while a test waits on a read.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::*;

const API_KEY: &str = "k-parking-test";
const HOST: &str = "park.test";

async fn origin() -> OriginHandle {
    Origin::new()
        .route(
            "*",
            Reply::text("parked?").header("cache-control", "no-store"),
        )
        .start()
        .await
}

fn proxy(origin: &OriginHandle, keepalive: u64) -> Proxy {
    proxy_with(origin, keepalive, "client_idle_park_seconds = 1")
}

fn proxy_with(origin: &OriginHandle, keepalive: u64, park: &str) -> Proxy {
    Proxy::start(&config_for(
        HOST,
        origin,
        &format!(
            "workers = 1\napi_key = \"{API_KEY}\"\nclient_keepalive_timeout_seconds = {keepalive}\n{park}"
        ),
        "",
    ))
}

/// A metric's value (the first line that starts with `name`), 0 when absent.
async fn metric(p: &Proxy, name: &str) -> f64 {
    let text = fetch(
        req(p, HOST, "/_rampart/metrics").header("authorization", format!("Bearer {API_KEY}")),
    )
    .await
    .text();
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

async fn parked(p: &Proxy) -> f64 {
    metric(p, "rampart_connections_parked ").await
}

/// One request on `s` and its whole answer (Content-Length framed); the status line.
fn get(s: &mut TcpStream) -> String {
    s.write_all(format!("GET /x HTTP/1.1\r\nHost: {HOST}\r\n\r\n").as_bytes())
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "closed mid-answer: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_owned())
                })
                .and_then(|v| v.parse().ok())
                .unwrap();
            if got.len() >= end + 4 + length {
                assert_eq!(got.len(), end + 4 + length, "more than one answer");
                return text.lines().next().unwrap().to_owned();
            }
        }
    }
}

/// SIGTERM: the process exits within 5 s, and every one of `conns` finds its connection closed.
fn stops_and_lets_go(p: &mut Proxy, conns: &mut [TcpStream]) {
    let asked = Instant::now();
    p.signal(15);
    assert_eq!(p.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    for s in conns {
        let mut buf = [0u8; 64];
        assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)));
    }
}

fn connect(p: &Proxy) -> TcpStream {
    let s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

const IDLE: Duration = Duration::from_millis(1800);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_parked_and_served_again() {
    let origin = origin().await;
    let p = proxy(&origin, 60);
    let mut s = connect(&p);
    assert_eq!(get(&mut s), "HTTP/1.1 200 OK");
    tokio::time::sleep(IDLE).await;
    assert_eq!(parked(&p).await, 1.0);
    // Served again on the same connection, which is a task again until it idles once more.
    for _ in 0..3 {
        assert_eq!(get(&mut s), "HTTP/1.1 200 OK");
        assert_eq!(parked(&p).await, 0.0);
        tokio::time::sleep(IDLE).await;
        assert_eq!(parked(&p).await, 1.0);
    }
    assert_eq!(origin.requests(), 4);
}

/// By default a connection is parked after 5 s: one that asks about once a second (ARC2's
/// benchmark, a polling client) stays in its task, where parking and waking it on every
/// request cost more CPU than the memory it saves is worth. `0` never parks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_asking_every_second_is_not_parked_by_default() {
    let origin = origin().await;
    for park in ["", "client_idle_park_seconds = 0"] {
        let p = proxy_with(&origin, 60, park);
        let mut s = connect(&p);
        for _ in 0..2 {
            assert_eq!(get(&mut s), "HTTP/1.1 200 OK");
            tokio::time::sleep(IDLE).await;
            assert_eq!(parked(&p).await, 0.0, "{park:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_parked_connections_are_each_served_again() {
    let origin = origin().await;
    let p = proxy(&origin, 60);
    let mut conns: Vec<TcpStream> = (0..200).map(|_| connect(&p)).collect();
    for s in &mut conns {
        assert_eq!(get(s), "HTTP/1.1 200 OK");
    }
    tokio::time::sleep(IDLE).await;
    assert_eq!(parked(&p).await, 200.0);
    // Woken in another order than they were parked; the table's slots are reused.
    for s in conns.iter_mut().rev() {
        assert_eq!(get(s), "HTTP/1.1 200 OK");
    }
    tokio::time::sleep(IDLE).await;
    assert_eq!(parked(&p).await, 200.0);
    for s in conns.iter_mut().step_by(7) {
        assert_eq!(get(s), "HTTP/1.1 200 OK");
    }
    assert_eq!(origin.requests(), 200 + 200 + 29);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_connection_is_closed_at_its_keepalive_time() {
    let origin = origin().await;
    let p = proxy(&origin, 3);
    let mut s = connect(&p);
    assert_eq!(get(&mut s), "HTTP/1.1 200 OK");
    let idle_from = Instant::now();
    tokio::time::sleep(IDLE).await;
    assert_eq!(parked(&p).await, 1.0);
    let mut buf = [0u8; 64];
    let r = s.read(&mut buf);
    let after = idle_from.elapsed();
    assert!(matches!(r, Ok(0)), "{r:?}");
    // 3 s of keep-alive, and the once-a-second sweep.
    assert!(
        after >= Duration::from_millis(2900) && after < Duration::from_secs(6),
        "{after:?}"
    );
    assert_eq!(parked(&p).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_closes_a_parked_connection_lets_it_go() {
    let origin = origin().await;
    let p = proxy(&origin, 60);
    let mut s = connect(&p);
    assert_eq!(get(&mut s), "HTTP/1.1 200 OK");
    tokio::time::sleep(IDLE).await;
    assert_eq!(parked(&p).await, 1.0);
    drop(s);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Woken by the close, served, found closed: nothing is held for it any more.
    assert_eq!(parked(&p).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_progress_is_never_parked() {
    let origin = origin().await;
    let p = proxy(&origin, 60);
    let mut s = connect(&p);
    assert_eq!(get(&mut s), "HTTP/1.1 200 OK");
    // Half a head, then silence past the parking time: it is waiting for the rest (the
    // header timeout applies), not parked.
    s.write_all(format!("GET /y HTTP/1.1\r\nHost: {HOST}\r\n").as_bytes())
        .unwrap();
    tokio::time::sleep(IDLE).await;
    assert_eq!(parked(&p).await, 0.0);
    s.write_all(b"\r\n").unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_lets_parked_connections_go_and_exits() {
    let origin = origin().await;
    let mut p = proxy(&origin, 60);
    let mut conns: Vec<TcpStream> = (0..20).map(|_| connect(&p)).collect();
    for s in &mut conns {
        assert_eq!(get(s), "HTTP/1.1 200 OK");
    }
    tokio::time::sleep(IDLE).await;
    assert_eq!(parked(&p).await, 20.0);
    stops_and_lets_go(&mut p, &mut conns);
}

// Between requests a plaintext connection's request state is given back after 50 ms
// (`transport/idle.rs`); a client whose gaps are longer is served from the small wait at once.
// These tests space requests past that and check every answer, every framing case and the stop.

/// Longer than the 50 ms after which a connection waits in its task's small state.
const PACE: Duration = Duration::from_millis(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_client_gets_every_answer_whole_on_one_connection() {
    let origin = origin().await;
    let p = proxy_with(&origin, 60, "");
    let mut s = connect(&p);
    for _ in 0..6 {
        assert_eq!(get(&mut s), "HTTP/1.1 200 OK");
        tokio::time::sleep(PACE).await;
    }
    // After a pause: two requests in one write, both answered, in order.
    let two =
        format!("GET /a HTTP/1.1\r\nHost: {HOST}\r\n\r\nGET /b HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
    s.write_all(two.as_bytes()).unwrap();
    let mut got = String::new();
    let mut buf = [0u8; 4096];
    while got.matches("parked?").count() < 2 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {got:?}");
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert_eq!(got.matches("HTTP/1.1 200 OK").count(), 2, "{got}");
    tokio::time::sleep(PACE).await;
    // A head split by a pause longer than the pace: the second part completes it.
    s.write_all(format!("GET /c HTTP/1.1\r\nHost: {HOST}\r\n").as_bytes())
        .unwrap();
    tokio::time::sleep(PACE).await;
    s.write_all(b"\r\n").unwrap();
    let n = s.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    tokio::time::sleep(PACE).await;
    // A request with a body after a pause.
    let post = format!("POST /d HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 5\r\n\r\nhello");
    s.write_all(post.as_bytes()).unwrap();
    let n = s.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // Nothing was parked (parking is at 5 s by default).
    assert_eq!(parked(&p).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_connection_is_closed_at_its_keepalive_time_and_when_the_client_closes() {
    let origin = origin().await;
    // Parking off: the connection waits its whole keep-alive time in its task.
    let p = proxy_with(&origin, 1, "client_idle_park_seconds = 0");
    let mut s = connect(&p);
    assert_eq!(get(&mut s), "HTTP/1.1 200 OK");
    tokio::time::sleep(PACE).await;
    assert_eq!(get(&mut s), "HTTP/1.1 200 OK");
    let asked = Instant::now();
    let mut buf = [0u8; 64];
    assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)));
    let waited = asked.elapsed();
    assert!(
        waited > Duration::from_millis(700) && waited < Duration::from_secs(3),
        "closed after {waited:?}, keep-alive time 1 s"
    );
    // Many clients that close between requests: each connection is let go (its slot too:
    // the open-connections gauge comes back to what it was).
    let before = metric(&p, "rampart_connections_open ").await;
    for _ in 0..20 {
        let mut c = connect(&p);
        assert_eq!(get(&mut c), "HTTP/1.1 200 OK");
        tokio::time::sleep(Duration::from_millis(60)).await;
        drop(c);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(&p, "rampart_connections_open ").await > before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(metric(&p, "rampart_connections_open ").await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_lets_paced_connections_go_and_exits() {
    let origin = origin().await;
    let mut p = proxy_with(&origin, 60, "client_idle_park_seconds = 0");
    let mut conns: Vec<TcpStream> = (0..20).map(|_| connect(&p)).collect();
    for s in &mut conns {
        assert_eq!(get(s), "HTTP/1.1 200 OK");
    }
    tokio::time::sleep(PACE).await;
    stops_and_lets_go(&mut p, &mut conns);
}

/// Empty lines before a request (RFC 9112 §2.2) are allowed, but they are not a request: a
/// client that sends only them is closed at the keep-alive time counted from its last answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_lines_do_not_keep_a_connection_open() {
    let origin = origin().await;
    let p = proxy_with(&origin, 1, "client_idle_park_seconds = 0");
    let mut s = connect(&p);
    assert_eq!(get(&mut s), "HTTP/1.1 200 OK");
    let answered = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 64];
    let closed = loop {
        if s.write_all(b"\r\n").is_err() {
            break answered.elapsed();
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) if answered.elapsed() > Duration::from_secs(4) => {
                break answered.elapsed()
            }
            Ok(0) => break answered.elapsed(),
            Ok(n) => panic!(
                "answered empty lines: {:?}",
                String::from_utf8_lossy(&buf[..n])
            ),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        closed < Duration::from_millis(2500),
        "closed {closed:?} after the answer, keep-alive time 1 s"
    );
    // Empty lines before a request are skipped: the request is answered.
    let mut s = connect(&p);
    assert_eq!(get(&mut s), "HTTP/1.1 200 OK");
    tokio::time::sleep(PACE).await;
    s.write_all(b"\r\n").unwrap();
    tokio::time::sleep(PACE).await;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(get(&mut s), "HTTP/1.1 200 OK");
}
