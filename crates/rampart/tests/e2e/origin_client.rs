//! rampart's own HTTP/1.1 origin client, end to end: a scripted origin on a raw socket (so it
//! can misbehave exactly), the real proxy, and raw or hyper clients.
//!
//! Keep-alive reuse, an origin that closes idle connections (and one that closes a pooled
//! connection just as it is reused), timeouts, interim answers (103 passed on, 100 not
//! doubled), request and response streaming with a slow client and a slow origin, trailers,
//! and malformed answers: 502, never stored, never reused.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the scripted origin does with one request.
#[derive(Clone)]
enum Act {
    /// Writes these bytes; the connection stays open for the next request.
    Write(Vec<u8>),
    /// Writes these bytes, then closes.
    WriteClose(Vec<u8>),
    /// Writes the pieces with a pause between them (a slow origin).
    Trickle(Vec<Vec<u8>>, Duration),
    /// Writes these bytes, waits, then closes (an origin with a short keep-alive timeout).
    WriteLinger(Vec<u8>, Duration),
    /// Closes without answering.
    Close,
    /// Never answers.
    Hang,
    /// Writes these bytes, reads nothing for a while (the request body stays unread), then
    /// reads until the connection closes or 10 s pass, and records what it drained.
    AnswerThenStall(Vec<u8>, Duration),
}

/// A request as the scripted origin read it.
#[derive(Debug, Clone)]
struct RawSeen {
    head: String,
    body: Vec<u8>,
    /// Which connection (0, 1, …) and which request on it (0, 1, …).
    conn: usize,
    nth: usize,
}

type Script = Arc<dyn Fn(&RawSeen) -> Act + Send + Sync>;

struct RawOrigin {
    port: u16,
    conns: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<RawSeen>>>,
}

impl RawOrigin {
    async fn start(script: impl Fn(&RawSeen) -> Act + Send + Sync + 'static) -> RawOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let conns = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script: Script = Arc::new(script);
        let (c, s) = (conns.clone(), seen.clone());
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                let conn = c.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve_raw(sock, conn, script.clone(), s.clone()));
            }
        });
        RawOrigin { port, conns, seen }
    }

    fn connections(&self) -> usize {
        self.conns.load(Ordering::SeqCst)
    }

    fn requests(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    fn seen(&self) -> Vec<RawSeen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads requests (head, and a `Content-Length` or chunked body) and acts on each.
async fn serve_raw(
    mut sock: TcpStream,
    conn: usize,
    script: Script,
    seen: Arc<Mutex<Vec<RawSeen>>>,
) {
    let mut buf = Vec::new();
    for nth in 0.. {
        let Some(end) = read_until(&mut sock, &mut buf, b"\r\n\r\n").await else {
            return;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let lower = head.to_ascii_lowercase();
        let mut body = Vec::new();
        let early = lower.contains("x-answer-early:");
        if early {
            // Answered before the body is read (below).
        } else if let Some(n) =
            field(&lower, "content-length").and_then(|v| v.parse::<usize>().ok())
        {
            while buf.len() < n {
                if !read_more(&mut sock, &mut buf).await {
                    return;
                }
            }
            body = buf.drain(..n).collect();
        } else if field(&lower, "transfer-encoding").is_some() {
            // Chunked: read to the last chunk and its empty trailer section.
            let Some(end) = read_until(&mut sock, &mut buf, b"0\r\n\r\n").await else {
                return;
            };
            body = buf.drain(..end).collect();
        }
        let r = RawSeen {
            head,
            body,
            conn,
            nth,
        };
        let act = script(&r);
        seen.lock().unwrap().push(r);
        match act {
            Act::Write(b) => {
                if sock.write_all(&b).await.is_err() {
                    return;
                }
            }
            Act::WriteClose(b) => {
                let _ = sock.write_all(&b).await;
                return;
            }
            Act::Trickle(pieces, pause) => {
                for p in pieces {
                    if sock.write_all(&p).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(pause).await;
                }
            }
            Act::WriteLinger(b, pause) => {
                let _ = sock.write_all(&b).await;
                tokio::time::sleep(pause).await;
                return;
            }
            Act::AnswerThenStall(b, pause) => {
                let _ = sock.write_all(&b).await;
                tokio::time::sleep(pause).await;
                let (mut drained, mut chunk) = (0usize, vec![0u8; 64 * 1024]);
                let until = tokio::time::Instant::now() + Duration::from_secs(10);
                let closed = loop {
                    match tokio::time::timeout_at(until, sock.read(&mut chunk)).await {
                        Ok(Ok(0)) | Ok(Err(_)) => break true,
                        Ok(Ok(n)) => drained += n,
                        Err(_) => break false,
                    }
                };
                seen.lock().unwrap().push(RawSeen {
                    head: format!("drained {drained} closed {closed}"),
                    body: Vec::new(),
                    conn,
                    nth: nth + 1,
                });
                return;
            }
            Act::Close => return,
            Act::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
        }
    }
}

/// Reads until `buf` holds `end`; the length up to and including it.
async fn read_until(sock: &mut TcpStream, buf: &mut Vec<u8>, end: &[u8]) -> Option<usize> {
    loop {
        if let Some(i) = buf.windows(end.len()).position(|w| w == end) {
            return Some(i + end.len());
        }
        if !read_more(sock, buf).await {
            return None;
        }
    }
}

async fn read_more(sock: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 16 * 1024];
    match sock.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

/// The value of field `name` (lower case) in a lower-cased head.
fn field<'a>(lower_head: &'a str, name: &str) -> Option<&'a str> {
    lower_head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == name).then(|| v.trim())
    })
}

fn ok(body: &str, extra: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn proxy_for(origin: &RawOrigin, global: &str) -> Proxy {
    // Any host: HTTP/2 clients name the proxy's address.
    Proxy::start(&config_for_port(
        "*",
        origin.port,
        &format!("workers = 1\n{global}"),
        "",
    ))
}

/// Sends raw bytes to the proxy and reads until the connection closes or `done` says the
/// answer is complete.
async fn raw_exchange(proxy: &Proxy, request: &[u8], done: impl Fn(&str) -> bool) -> String {
    let mut sock = TcpStream::connect(proxy.addr).await.unwrap();
    sock.write_all(request).await.unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done(&String::from_utf8_lossy(&got)) && Instant::now() < deadline {
        let mut chunk = [0u8; 8192];
        match tokio::time::timeout(Duration::from_secs(5), sock.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn keep_alive_connections_are_reused() {
    let origin = RawOrigin::start(|_| Act::Write(ok("hello", "Cache-Control: no-store\r\n"))).await;
    let proxy = proxy_for(&origin, "");
    for _ in 0..20 {
        let got = get(&proxy, "o.test", "/dynamic").await;
        assert_eq!((got.status.as_u16(), got.text().as_str()), (200, "hello"));
    }
    assert_eq!(origin.requests(), 20);
    assert!(origin.seen().iter().all(|s| s.conn == 0));
    assert_eq!(
        origin.connections(),
        1,
        "one worker, sequential requests: one connection"
    );
    // Pooling off: a connection per request, each told so.
    let origin = RawOrigin::start(|_| Act::Write(ok("x", ""))).await;
    let proxy = proxy_for(&origin, "proxy_keepalive_sec = 0");
    for i in 0..3 {
        assert_eq!(get(&proxy, "o.test", &format!("/n{i}")).await.status, 200);
    }
    assert_eq!(origin.connections(), 3);
    assert!(origin
        .seen()
        .iter()
        .all(|s| s.head.to_ascii_lowercase().contains("connection: close")));
}

#[tokio::test]
async fn an_origin_closing_idle_connections_costs_no_request() {
    // Answers one request per connection and then closes it after a moment, as an origin
    // with a short keep-alive timeout does.
    let origin = RawOrigin::start(|_| {
        Act::WriteLinger(
            ok("one", "Cache-Control: no-store\r\n"),
            Duration::from_millis(50),
        )
    })
    .await;
    let proxy = proxy_for(&origin, "");
    for i in 0..4 {
        let got = get(&proxy, "o.test", "/x").await;
        assert_eq!(got.status, 200, "request {i}: {}", got.text());
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(origin.connections(), 4);

    // Closes a connection at the second request on it, without answering: the pooled
    // connection fails before any byte of the answer, and the request goes again on a new one.
    let origin = RawOrigin::start(|s| {
        if s.nth == 0 {
            Act::Write(ok("fine", "Cache-Control: no-store\r\n"))
        } else {
            Act::Close
        }
    })
    .await;
    let proxy = proxy_for(&origin, "");
    for i in 0..5 {
        let got = get(&proxy, "o.test", "/y").await;
        assert_eq!(
            (got.status.as_u16(), got.text().as_str()),
            (200, "fine"),
            "request {i}"
        );
    }
    // Each request after the first: one closed reuse and one new connection.
    assert_eq!(origin.connections(), 5);
}

/// A body read in full (screening reads form bodies) goes again, whole, when the pooled
/// connection it went out on turns out closed, for an idempotent method (PUT); a POST is
/// never sent twice: the origin may have acted on it.
#[tokio::test]
async fn a_request_read_in_full_is_sent_again_whole_only_when_idempotent() {
    let origin = RawOrigin::start(|s| {
        if s.nth == 0 {
            Act::Write(ok("fine", "Cache-Control: no-store\r\n"))
        } else {
            Act::Close
        }
    })
    .await;
    let proxy = Proxy::start(
        &config_for_port(
            "*",
            origin.port,
            "workers = 1\nadd_sql_injection_protection = true",
            "",
        )
        .replace(
            "enable_sql_injection_protection = false",
            "enable_sql_injection_protection = true",
        ),
    );
    let form = |method: &str| {
        req(&proxy, "o.test", "/form")
            .method(method)
            .header("content-type", "application/x-www-form-urlencoded")
    };
    let c = client();
    let body = "name=alice&note=hello+world";
    assert_eq!(get(&proxy, "o.test", "/warm").await.status, 200);
    let put = send(&c, form("PUT").body(full(body)).unwrap()).await;
    assert_eq!(
        (put.status.as_u16(), put.text().as_str()),
        (200, "fine"),
        "{}",
        proxy.output()
    );
    let puts: Vec<_> = origin
        .seen()
        .into_iter()
        .filter(|s| s.head.starts_with("PUT "))
        .collect();
    assert_eq!(puts.len(), 2, "sent on the closed connection, then again");
    for p in &puts {
        assert_eq!(p.body, b"name=alice&note=hello+world");
        assert!(p.head.to_ascii_lowercase().contains("content-length: 27"));
    }
    assert_eq!((puts[0].nth, puts[1].nth), (1, 0));

    // Warm again: the PUT's retry left a pooled connection the origin will close.
    let post = send(&c, form("POST").body(full(body)).unwrap()).await;
    assert_eq!(post.status, 502, "{}", post.text());
    let posts = origin
        .seen()
        .iter()
        .filter(|s| s.head.starts_with("POST "))
        .count();
    assert_eq!(posts, 1, "a POST is never sent twice");
}

#[tokio::test]
async fn a_silent_origin_times_out_and_its_connection_is_not_reused() {
    let origin = RawOrigin::start(|s| {
        if s.head.contains("/slow") {
            Act::Hang
        } else {
            Act::Write(ok("quick", "Cache-Control: no-store\r\n"))
        }
    })
    .await;
    let proxy = proxy_for(&origin, "proxy_timeout = 1");
    let started = Instant::now();
    let got = get(&proxy, "o.test", "/slow").await;
    assert_eq!(got.status, 504);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let got = get(&proxy, "o.test", "/quick").await;
    assert_eq!((got.status.as_u16(), got.text().as_str()), (200, "quick"));
    assert_eq!(
        origin.connections(),
        2,
        "the timed-out connection was closed"
    );
}

#[tokio::test]
async fn early_hints_reach_http11_clients_and_are_never_stored() {
    let origin = RawOrigin::start(|_| {
        let mut b = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n".to_vec();
        b.extend(ok(
            "page",
            "Cache-Control: max-age=60\r\nLink: </a.css>; rel=preload\r\n",
        ));
        Act::Write(b)
    })
    .await;
    let proxy = proxy_for(&origin, "");
    let complete = |t: &str| t.contains("\r\n\r\npage");
    let got = raw_exchange(&proxy, b"GET /p HTTP/1.1\r\nHost: o.test\r\n\r\n", complete).await;
    let hints = got.find("HTTP/1.1 103 Early Hints\r\n").expect(&got);
    let fin = got.find("HTTP/1.1 200 OK\r\n").expect(&got);
    assert!(hints < fin, "{got}");
    assert!(
        got[hints..fin]
            .to_ascii_lowercase()
            .contains("link: </a.css>; rel=preload"),
        "{got}"
    );
    // The second answer is a hit: no origin request, no interim answer.
    let got = raw_exchange(&proxy, b"GET /p HTTP/1.1\r\nHost: o.test\r\n\r\n", complete).await;
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert_eq!(origin.requests(), 1);
    // HTTP/1.0 clients never get a 1xx.
    let got = raw_exchange(&proxy, b"GET /q HTTP/1.0\r\nHost: o.test\r\n\r\n", complete).await;
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    // HTTP/2 clients get the final answer.
    let c = h2_client();
    let got = send(&c, req(&proxy, "o.test", "/r").body(empty()).unwrap()).await;
    assert_eq!((got.status.as_u16(), got.text().as_str()), (200, "page"));
}

#[tokio::test]
async fn one_100_continue_reaches_the_client() {
    // The origin sends its own 100 Continue before reading the body.
    let origin = RawOrigin::start(|s| {
        let mut b = b"HTTP/1.1 100 Continue\r\n\r\n".to_vec();
        b.extend(ok(&format!("got {}", s.body.len()), ""));
        Act::Write(b)
    })
    .await;
    let proxy = proxy_for(&origin, "");
    let mut sock = TcpStream::connect(proxy.addr).await.unwrap();
    sock.write_all(
        b"POST /up HTTP/1.1\r\nHost: o.test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains("100 Continue\r\n\r\n") {
        assert!(
            read_more(&mut sock, &mut got).await,
            "no 100: {}",
            String::from_utf8_lossy(&got)
        );
    }
    sock.write_all(b"hello").await.unwrap();
    while !String::from_utf8_lossy(&got).contains("got 5") {
        assert!(
            read_more(&mut sock, &mut got).await,
            "{}",
            String::from_utf8_lossy(&got)
        );
    }
    let text = String::from_utf8_lossy(&got);
    assert_eq!(text.matches("100 Continue").count(), 1, "{text}");
    assert_eq!(origin.seen()[0].body, b"hello");
}

#[tokio::test]
async fn malformed_answers_are_502_never_stored_never_reused() {
    let cases: [(&str, &[u8]); 8] = [
        ("/both", b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\nCache-Control: max-age=60\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
        ("/two-lengths", b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\nCache-Control: max-age=60\r\n\r\nabcd"),
        ("/gzip-te", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nCache-Control: max-age=60\r\n\r\n0\r\n\r\n"),
        ("/status", b"HTTP/1.1 2000 OK\r\nContent-Length: 1\r\n\r\nx"),
        ("/garbage", b"SSH-2.0-OpenSSH_9.2\r\n\r\n"),
        ("/space", b"HTTP/1.1 200 OK\r\nContent-Length : 1\r\n\r\nx"),
        ("/huge-head", b""),
        ("/nothing", b""),
    ];
    let origin = RawOrigin::start(move |s| {
        let path = s.head.split_whitespace().nth(1).unwrap_or("").to_owned();
        match path.as_str() {
            "/huge-head" => {
                let mut b = b"HTTP/1.1 200 OK\r\n".to_vec();
                for i in 0..3000 {
                    b.extend(format!("X-Filler-{i}: {}\r\n", "v".repeat(40)).as_bytes());
                }
                b.extend(b"Content-Length: 1\r\n\r\nx");
                Act::WriteClose(b)
            }
            "/nothing" => Act::Close,
            "/fine" => Act::Write(ok("fine", "Cache-Control: no-store\r\n")),
            p => Act::WriteClose(
                cases
                    .iter()
                    .find(|(q, _)| *q == p)
                    .map(|(_, b)| b.to_vec())
                    .unwrap_or_default(),
            ),
        }
    })
    .await;
    let proxy = proxy_for(&origin, "");
    for (path, _) in cases {
        for round in 0..2 {
            let got = get(&proxy, "o.test", path).await;
            assert_eq!(got.status, 502, "{path} round {round}: {}", got.text());
        }
    }
    // Each was asked for twice: nothing was stored.
    let asked = |p: &str| {
        origin
            .seen()
            .iter()
            .filter(|s| s.head.contains(&format!("GET {p} ")))
            .count()
    };
    for (path, _) in cases {
        assert!(asked(path) >= 2, "{path} asked {} times", asked(path));
    }
    // The proxy is fine afterwards.
    assert_eq!(get(&proxy, "o.test", "/fine").await.text(), "fine");
}

#[tokio::test]
async fn a_body_cut_short_is_never_stored() {
    // Announces 10 bytes, sends 4, closes.
    let origin = RawOrigin::start(|_| {
        Act::WriteClose(
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nCache-Control: max-age=60\r\n\r\nabcd"
                .to_vec(),
        )
    })
    .await;
    let proxy = proxy_for(&origin, "");
    for _ in 0..2 {
        let got = raw_exchange(&proxy, b"GET /cut HTTP/1.1\r\nHost: o.test\r\n\r\n", |_| {
            false
        })
        .await;
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        assert!(got.ends_with("abcd"), "cut off after what arrived: {got}");
    }
    assert_eq!(origin.requests(), 2, "the cut body was not stored");
    // A chunked body with broken framing: cut the same way.
    let origin = RawOrigin::start(|_| {
        Act::WriteClose(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nCache-Control: max-age=60\r\n\r\n4\r\nabcdXX\r\n".to_vec())
    })
    .await;
    let proxy = proxy_for(&origin, "");
    for _ in 0..2 {
        let got = raw_exchange(
            &proxy,
            b"GET /bad-chunk HTTP/1.1\r\nHost: o.test\r\n\r\n",
            |_| false,
        )
        .await;
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        assert!(
            !got.contains("\r\n0\r\n\r\n"),
            "never ended as if whole: {got}"
        );
    }
    assert_eq!(origin.requests(), 2);
}

#[tokio::test]
async fn a_slow_origin_streams_to_the_client_as_it_comes() {
    let pieces = vec![
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nCache-Control: max-age=60\r\n\r\n"
            .to_vec(),
        b"5\r\nfirst\r\n".to_vec(),
        b"6\r\nsecond\r\n".to_vec(),
        b"0\r\n\r\n".to_vec(),
    ];
    let origin =
        RawOrigin::start(move |_| Act::Trickle(pieces.clone(), Duration::from_millis(400))).await;
    let proxy = proxy_for(&origin, "");
    let mut sock = TcpStream::connect(proxy.addr).await.unwrap();
    sock.write_all(b"GET /slow HTTP/1.1\r\nHost: o.test\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains("first") {
        assert!(read_more(&mut sock, &mut got).await);
    }
    // The first piece came before the origin sent the second.
    assert!(
        started.elapsed() < Duration::from_millis(750),
        "{:?}",
        started.elapsed()
    );
    while !String::from_utf8_lossy(&got).contains("0\r\n\r\n") {
        assert!(read_more(&mut sock, &mut got).await);
    }
    // Whole: stored, the next one is a hit with both pieces.
    let got = get(&proxy, "o.test", "/slow").await;
    assert_eq!(got.text(), "firstsecond");
    assert_eq!(origin.requests(), 1);
}

#[tokio::test]
async fn a_slow_client_upload_streams_to_the_origin() {
    // The body as the origin read it, framing included: count what the client sent.
    let origin = RawOrigin::start(|s| {
        let sent = s.body.iter().filter(|&&b| b == b'a').count();
        Act::Write(ok(&format!("{sent} bytes"), ""))
    })
    .await;
    let proxy = proxy_for(&origin, "");
    let mut sock = TcpStream::connect(proxy.addr).await.unwrap();
    sock.write_all(b"POST /up HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    for _ in 0..5 {
        sock.write_all(b"400\r\n").await.unwrap();
        sock.write_all(&[b'a'; 0x400]).await.unwrap();
        sock.write_all(b"\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sock.write_all(b"0\r\n\r\n").await.unwrap();
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains("5120 bytes") {
        assert!(
            read_more(&mut sock, &mut got).await,
            "{}",
            String::from_utf8_lossy(&got)
        );
    }
    // Sent on chunked (its length was not known), whole.
    let seen = &origin.seen()[0];
    assert!(
        seen.head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{}",
        seen.head
    );
}

#[tokio::test]
async fn a_slow_client_holds_the_origin_back_and_memory_stays_flat() {
    // 64 MiB from the origin to a client that reads slowly: rampart reads the origin only as
    // fast as the client takes it (the body is not stored: too large).
    const LEN: usize = 64 << 20;
    let origin = RawOrigin::start(|_| {
        let mut b =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {LEN}\r\nCache-Control: no-store\r\n\r\n")
                .into_bytes();
        b.resize(b.len() + LEN, b'z');
        Act::WriteClose(b)
    })
    .await;
    let proxy = proxy_for(&origin, "");
    let before = proxy.rss_kib();
    let mut sock = TcpStream::connect(proxy.addr).await.unwrap();
    sock.write_all(b"GET /big HTTP/1.1\r\nHost: o.test\r\n\r\n")
        .await
        .unwrap();
    let mut total = 0usize;
    let mut chunk = vec![0u8; 64 * 1024];
    // Read a little, slowly.
    for _ in 0..20 {
        total += sock.read(&mut chunk).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let grown = proxy.rss_kib().saturating_sub(before);
    assert!(
        grown < 8 * 1024,
        "rampart grew {grown} KiB while a slow client read 64 MiB"
    );
    while total < LEN {
        let n = sock.read(&mut chunk).await.unwrap();
        assert!(n > 0, "cut at {total}");
        total += n;
    }
}

#[tokio::test]
async fn trailers_of_a_chunked_answer_reach_http2_clients() {
    let origin = RawOrigin::start(|_| {
        Act::Write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\nCache-Control: no-store\r\n\r\n2\r\nhi\r\n0\r\nX-Checksum: abc123\r\n\r\n".to_vec())
    })
    .await;
    let proxy = proxy_for(&origin, "");
    use http_body_util::BodyExt;
    let res = h2_client()
        .request(
            req(&proxy, "o.test", "/t")
                .header("te", "trailers")
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let collected = res.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    assert_eq!(collected.to_bytes(), "hi");
    assert_eq!(
        trailers.get("x-checksum").map(|v| v.as_bytes()),
        Some(&b"abc123"[..])
    );
}

#[tokio::test]
async fn a_background_refresh_never_sends_its_early_hints_to_the_client() {
    let origin = RawOrigin::start(|s| {
        if s.head.contains("GET /swr ") {
            let hints =
                b"HTTP/1.1 103 Early Hints\r\nLink: </refresh.css>; rel=preload\r\n\r\n".to_vec();
            let fin = ok(
                "swr",
                "Cache-Control: max-age=1, stale-while-revalidate=60\r\n",
            );
            Act::Trickle(vec![hints, fin], Duration::from_millis(300))
        } else {
            // A slow pass: in flight while the refresh's 103 arrives.
            Act::Trickle(
                vec![Vec::new(), ok("other", "Cache-Control: no-store\r\n")],
                Duration::from_millis(600),
            )
        }
    })
    .await;
    let proxy = proxy_for(&origin, "");
    let mut sock = TcpStream::connect(proxy.addr).await.unwrap();
    // The miss: its own 103 comes first.
    let first = ask(&mut sock, "/swr", "\r\n\r\nswr").await;
    assert!(first.starts_with("HTTP/1.1 103"), "{first}");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // Stale: served at once, refreshed in the background (whose origin answers 103 first).
    let stale = ask(&mut sock, "/swr", "\r\n\r\nswr").await;
    assert!(stale.starts_with("HTTP/1.1 200"), "{stale}");
    // The next request on the connection gets its own answer and no one else's hints.
    let other = ask(&mut sock, "/other", "\r\n\r\nother").await;
    assert!(other.starts_with("HTTP/1.1 200"), "{other}");
    assert!(!other.contains("refresh.css"), "{other}");
    // The miss, the refresh (done by now) and the pass.
    assert_eq!(origin.requests(), 3);
}

/// Sends `GET path` on `sock` and reads until the answer contains `until`.
async fn ask(sock: &mut TcpStream, path: &str, until: &str) -> String {
    let req = format!("GET {path} HTTP/1.1\r\nHost: o.test\r\n\r\n");
    sock.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains(until) {
        assert!(
            read_more(sock, &mut got).await,
            "{}",
            String::from_utf8_lossy(&got)
        );
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn an_origin_that_answers_early_and_stops_reading_is_let_go() {
    // The origin answers at once, then takes none of the 64 MiB body for 8 s: rampart gives
    // the rest of the upload up after the body's pause limit (1 s) and closes the connection
    // (its metrics say no connection to the origin is open), rather than waiting on it.
    const LEN: usize = 64 << 20;
    let origin = RawOrigin::start(|_| {
        Act::AnswerThenStall(
            ok("early", "Cache-Control: no-store\r\n"),
            Duration::from_secs(8),
        )
    })
    .await;
    let proxy = Proxy::start(&config_for_port(
        "*",
        origin.port,
        "workers = 1\nclient_body_timeout_seconds = 1\nmetrics_allow = [\"127.0.0.0/8\"]",
        "max_body_size = \"128MiB\"",
    ));
    let sock = TcpStream::connect(proxy.addr).await.unwrap();
    let (mut rd, mut wr) = sock.into_split();
    let head = format!(
        "POST /up HTTP/1.1\r\nHost: o.test\r\nX-Answer-Early: 1\r\nContent-Length: {LEN}\r\n\r\n"
    );
    let writer = tokio::spawn(async move {
        wr.write_all(head.as_bytes()).await.unwrap();
        let chunk = vec![b'u'; 1 << 20];
        for _ in 0..LEN >> 20 {
            if wr.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("early") {
        let n = tokio::time::timeout(Duration::from_secs(5), rd.read(&mut chunk))
            .await
            .expect("the early answer")
            .unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
    }
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
    let series = format!(
        "rampart_origin_connections_open{{origin=\"127.0.0.1:{}\"}} ",
        origin.port
    );
    let open = || async {
        let text = get(&proxy, "o.test", "/_rampart/metrics").await.text();
        text.lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(-1.0)
    };
    assert_eq!(
        open().await,
        1.0,
        "the upload's connection is open at first"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while open().await != 0.0 {
        assert!(
            Instant::now() < deadline,
            "the stalled origin connection was still open 5 s after the answer"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    writer.abort();
}

/// `nghttp -nv` (nghttp2's client, installed by `.ci/run`) against `path` over h2c: what it
/// printed, frame by frame.
async fn nghttp(proxy: &Proxy, path: &str) -> String {
    let url = format!("http://127.0.0.1:{}{path}", proxy.addr.port());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("nghttp")
            .args(["-nv", "--timeout=5", &url])
            .output()
            .expect("nghttp (nghttp2-client) runs")
    })
    .await
    .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn early_hints_reach_http2_clients_before_the_answer_and_are_never_stored() {
    // RFC 8297 over HTTP/2 (RFC 9113 §8.1: interim HEADERS before the final ones): the origin
    // sends its 103 with `Link`, waits, then answers 200 (cacheable).
    let origin = RawOrigin::start(|_| {
        let hints =
            b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n"
                .to_vec();
        Act::Trickle(
            vec![hints, ok("page", "Cache-Control: max-age=60\r\n")],
            Duration::from_millis(300),
        )
    })
    .await;
    let proxy = proxy_for(&origin, "");
    let out = nghttp(&proxy, "/page").await;
    let hint = out
        .find(":status: 103")
        .unwrap_or_else(|| panic!("no 103:\n{out}"));
    let fin = out
        .find(":status: 200")
        .unwrap_or_else(|| panic!("no 200:\n{out}"));
    assert!(hint < fin, "the 103 came after the answer:\n{out}");
    let link = out
        .find("link: </style.css>; rel=preload; as=style")
        .unwrap_or(usize::MAX);
    assert!(
        hint < link && link < fin,
        "the 103 lost its Link field:\n{out}"
    );
    // The stored answer is served without the hints, and the origin asked once.
    let again = nghttp(&proxy, "/page").await;
    assert!(again.contains(":status: 200"), "{again}");
    assert!(
        !again.contains(":status: 103"),
        "a hit repeated the hints:\n{again}"
    );
    assert!(!again.contains("style.css"), "{again}");
    assert_eq!(origin.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_hints_reach_http3_clients_before_the_answer() {
    // RFC 9114 §4.1: an interim answer is a HEADERS frame of its own before the final one.
    let origin = RawOrigin::start(|_| {
        let hints =
            b"HTTP/1.1 103 Early Hints\r\nLink: </app.js>; rel=preload; as=script\r\n\r\n".to_vec();
        Act::Trickle(
            vec![hints, ok("page", "Cache-Control: no-store\r\n")],
            Duration::from_millis(200),
        )
    })
    .await;
    let ca = crate::support::tls::TestCa::new("test CA");
    let (c, k) = ca.leaf(&["a.test"]).write("h3-hints");
    let proxy = Proxy::start(&format!(
        "{}http3 = true\n{}",
        crate::http3::GLOBAL,
        crate::http3::rule("a.test", origin.port, &crate::support::tls::files(&c, &k))
    ));
    let udp = proxy.h3.expect("an HTTP/3 socket");
    let mut h3 = crate::support::h3::connect(udp, "a.test", ca.roots())
        .await
        .unwrap();
    let got = h3.get("a.test", "/page").await;
    assert_eq!(got.status, 200);
    assert_eq!(got.text(), "page");
    assert_eq!(h3.interim.len(), 1, "{:?}", h3.interim);
    let (status, fields) = &h3.interim[0];
    assert_eq!(*status, 103);
    assert_eq!(fields["link"], "</app.js>; rel=preload; as=script");
}
