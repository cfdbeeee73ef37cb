//! Protocol hardening, end to end: request-smuggling vectors sent as raw bytes (RFC 9112),
//! head size limits, slowloris, idle and per-address connection limits, and HTTP/2 floods
//! (rapid reset, CONTINUATION). Each asserts the response, that the connection is closed where
//! it must be, and what the origin saw.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::*;

async fn counting_origin() -> OriginHandle {
    Origin::new()
        .route("*", Reply::text("fine").header("cache-control", "no-store"))
        .start()
        .await
}

/// Sends `bytes`, returns what came back and how long until the proxy closed.
async fn exchange(addr: SocketAddr, bytes: &'static [u8]) -> (String, Duration) {
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        let out = raw(addr, bytes, Duration::from_secs(5));
        (out, start.elapsed())
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn smuggling_vectors_get_400_and_a_closed_connection() {
    let origin = counting_origin().await;
    let proxy = Proxy::start(&config_for("s", &origin, "", ""));
    let vectors: &[(&str, &'static [u8])] = &[
        ("CL+TE", b"POST / HTTP/1.1\r\nHost: s\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nX"),
        ("TE+CL", b"POST / HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\nContent-Length: 6\r\n\r\n0\r\n\r\nX"),
        ("duplicate CL, different", b"POST / HTTP/1.1\r\nHost: s\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy"),
        ("duplicate CL, same", b"POST / HTTP/1.1\r\nHost: s\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nxy"),
        ("CL list", b"POST / HTTP/1.1\r\nHost: s\r\nContent-Length: 2, 2\r\n\r\nxy"),
        ("CL sign", b"POST / HTTP/1.1\r\nHost: s\r\nContent-Length: +2\r\n\r\nxy"),
        ("CL hex", b"POST / HTTP/1.1\r\nHost: s\r\nContent-Length: 0x2\r\n\r\nxy"),
        ("TE gzip, chunked", b"POST / HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
        ("TE chunked twice", b"POST / HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        ("TE identity", b"POST / HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: identity\r\n\r\n"),
        ("TE xchunked", b"POST / HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n"),
        ("TE in HTTP/1.0", b"POST / HTTP/1.0\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        ("obs-fold", b"GET / HTTP/1.1\r\nHost: s\r\nX-Folded: a\r\n b\r\n\r\n"),
        ("space before colon", b"GET / HTTP/1.1\r\nHost: s\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n"),
        ("NUL in name", b"GET / HTTP/1.1\r\nHost: s\r\nX-B\x00d: 1\r\n\r\n"),
        ("NUL in value", b"GET / HTTP/1.1\r\nHost: s\r\nX-Bad: a\x00b\r\n\r\n"),
        ("bare CR in value", b"GET / HTTP/1.1\r\nHost: s\r\nX-Bad: a\rb\r\n\r\n"),
        ("bad chunk size", b"POST / HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"),
        ("chunk size 0x", b"POST / HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n"),
        ("chunk size overflow", b"POST / HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff1\r\nhello\r\n0\r\n\r\n"),
        ("chunk LF only", b"POST / HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n"),
        ("chunk ext control byte", b"POST / HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\n5;a\x01b\r\nhello\r\n0\r\n\r\n"),
        ("CONNECT", b"CONNECT internal:22 HTTP/1.1\r\nHost: internal:22\r\n\r\n"),
        ("asterisk for GET", b"GET * HTTP/1.1\r\nHost: s\r\n\r\n"),
        ("absolute-form ftp", b"GET ftp://s/ HTTP/1.1\r\nHost: s\r\n\r\n"),
        ("missing Host", b"GET / HTTP/1.1\r\n\r\n"),
        ("two Hosts", b"GET / HTTP/1.1\r\nHost: s\r\nHost: evil\r\n\r\n"),
    ];
    let mut failures = Vec::new();
    for (name, bytes) in vectors {
        let (out, took) = exchange(proxy.addr, bytes).await;
        if !out.starts_with("HTTP/1.1 400") {
            failures.push(format!("{name}: got {:?}", out.lines().next()));
        } else if took >= Duration::from_secs(4) {
            failures.push(format!("{name}: connection left open"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(origin.requests(), 0, "{:?}", origin.seen());
}

#[tokio::test]
async fn a_bad_request_after_a_good_one_only_stops_the_bad_one() {
    let origin = counting_origin().await;
    let proxy = Proxy::start(&config_for("s", &origin, "", ""));
    let (out, took) = exchange(
        proxy.addr,
        b"GET /first HTTP/1.1\r\nHost: s\r\n\r\nPOST /smuggle HTTP/1.1\r\nHost: s\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: s\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert_eq!(out.matches("HTTP/1.1 ").count(), 2, "{out}");
    assert!(out.contains("HTTP/1.1 400"), "{out}");
    assert!(took < Duration::from_secs(4));
    let seen = origin.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].uri.path(), "/first");
}

#[tokio::test]
async fn valid_chunked_and_pipelined_requests_still_work() {
    let origin = counting_origin().await;
    let proxy = Proxy::start(&config_for("s", &origin, "", ""));
    let (out, _) = exchange(
        proxy.addr,
        b"POST /a HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\nPOST /b HTTP/1.1\r\nHost: s\r\nContent-Length: 3\r\n\r\nabcGET http://s/c HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(out.matches("HTTP/1.1 200").count(), 3, "{out}");
    let seen = origin.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!((seen[0].body_len, seen[1].body_len), (11, 3));
    assert_eq!(seen[2].uri.path(), "/c");
}

#[tokio::test]
async fn oversized_heads_get_431() {
    let origin = counting_origin().await;
    let proxy = Proxy::start(&config_for("s", &origin, "max_request_headers = 50", ""));
    let addr = proxy.addr;
    let many: &'static [u8] = Box::leak(
        format!(
            "GET / HTTP/1.1\r\nHost: s\r\n{}\r\n",
            (0..60)
                .map(|i| format!("X-H{i}: v\r\n"))
                .collect::<String>()
        )
        .into_bytes()
        .into_boxed_slice(),
    );
    let (out, _) = exchange(addr, many).await;
    assert!(out.starts_with("HTTP/1.1 431"), "{out}");
    let big: &'static [u8] = Box::leak(
        format!(
            "GET / HTTP/1.1\r\nHost: s\r\nX-Big: {}\r\n\r\n",
            "a".repeat(100 << 10)
        )
        .into_bytes()
        .into_boxed_slice(),
    );
    let (out, _) = exchange(addr, big).await;
    assert!(out.starts_with("HTTP/1.1 431"), "{out}");
    // Far over the limit in one write, with a smuggling attempt behind it: refused, and the
    // request behind it never reaches anyone.
    let huge: &'static [u8] = Box::leak(
        format!(
            "GET / HTTP/1.1\r\nHost: s\r\nX-Pad: {}\r\n\r\nPOST / HTTP/1.1\r\nHost: s\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "a".repeat(400 << 10)
        )
        .into_bytes()
        .into_boxed_slice(),
    );
    let (out, _) = exchange(addr, huge).await;
    assert!(out.starts_with("HTTP/1.1 4"), "{out}");
    assert!(!out.contains("200 OK"), "{out}");
    assert_eq!(origin.requests(), 0);
}

#[tokio::test]
async fn slowloris_does_not_starve_normal_clients() {
    raise_fd_limit();
    let origin = counting_origin().await;
    let proxy = Proxy::start(&config_for(
        "s",
        &origin,
        "client_header_timeout_seconds = 2",
        "",
    ));
    let addr = proxy.addr;
    // 300 connections, each trickling a header line one byte every 300 ms.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut conns: Vec<TcpStream> = (0..300)
                .map(|_| {
                    let mut s = TcpStream::connect(addr).unwrap();
                    s.write_all(b"GET / HTTP/1.1\r\nHost: s\r\nX-Slow: ")
                        .unwrap();
                    s
                })
                .collect();
            let start = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && start.elapsed() < Duration::from_secs(8)
            {
                conns.retain_mut(|s| s.write_all(b"a").is_ok());
                std::thread::sleep(Duration::from_millis(300));
            }
            // Every trickling connection must have been closed by the proxy by now.
            let mut open = 0;
            for s in &mut conns {
                s.set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                let mut buf = [0u8; 512];
                let closed = matches!(s.read(&mut buf), Ok(0) | Err(_))
                    || String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 408");
                if !closed {
                    open += 1;
                }
            }
            open
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..5 {
        let start = Instant::now();
        let got = get(&proxy, "s", "/normal").await;
        assert_eq!(got.status, 200);
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "normal client waited {:?}",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let still_open = tokio::task::spawn_blocking(move || trickler.join().unwrap())
        .await
        .unwrap();
    assert_eq!(
        still_open, 0,
        "trickling connections outlived the header timeout"
    );
    assert_eq!(origin.requests(), 5);
    assert!(
        proxy.peak_rss_kib() < 100 * 1024,
        "{} KiB",
        proxy.peak_rss_kib()
    );
}

#[tokio::test]
async fn idle_keepalive_connections_are_closed() {
    let origin = counting_origin().await;
    let proxy = Proxy::start(&config_for(
        "s",
        &origin,
        "client_keepalive_timeout_seconds = 1",
        "",
    ));
    let addr = proxy.addr;
    let closed_after = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: s\r\n\r\n").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(6))).unwrap();
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        let start = Instant::now();
        // Idle now: the next read sees the close.
        let r = s.read(&mut buf);
        assert!(matches!(r, Ok(0)), "{r:?}");
        start.elapsed()
    })
    .await
    .unwrap();
    assert!(closed_after < Duration::from_secs(4), "{closed_after:?}");
}

#[tokio::test]
async fn per_address_connection_limit() {
    let origin = counting_origin().await;
    let proxy = Proxy::start(&config_for("s", &origin, "max_connections_per_ip = 3", ""));
    let addr = proxy.addr;
    tokio::task::spawn_blocking(move || {
        let open = |_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: s\r\n\r\n").unwrap();
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            (s, String::from_utf8_lossy(&buf[..n]).into_owned())
        };
        let mut held: Vec<_> = (0..3).map(open).collect();
        assert!(held.iter().all(|(_, r)| r.starts_with("HTTP/1.1 200")));
        let (_, fourth) = open(3);
        assert_eq!(
            fourth, "",
            "a fourth connection from one address must be refused"
        );
        held.pop();
        std::thread::sleep(Duration::from_millis(200));
        let (_, again) = open(4);
        assert!(again.starts_with("HTTP/1.1 200"), "{again:?}");
    })
    .await
    .unwrap();
}

// --- HTTP/2 frames by hand -------------------------------------------------------------------

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HPACK: GET, /, http (static table) and `:authority` as a literal without indexing.
fn get_headers(host: &str) -> Vec<u8> {
    let mut b = vec![0x82, 0x84, 0x86, 0x01, host.len() as u8];
    b.extend_from_slice(host.as_bytes());
    b
}

/// Reads frames until GOAWAY or close; true if either happened within `within`.
fn saw_goaway_or_close(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let start = Instant::now();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    while start.elapsed() < within {
        match s.read(&mut chunk) {
            Ok(0) => return true,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
        let mut at = 0;
        while at + 9 <= buf.len() {
            let len = (buf[at] as usize) << 16 | (buf[at + 1] as usize) << 8 | buf[at + 2] as usize;
            if buf[at + 3] == 0x7 {
                return true;
            }
            at += 9 + len;
        }
    }
    false
}

#[tokio::test]
async fn h2_rapid_reset_is_cut_off_and_others_are_served() {
    let origin = Origin::new()
        .route(
            "*",
            Reply::text("slow")
                .header("cache-control", "no-store")
                .delay(Duration::from_millis(100)),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("127.0.0.1", &origin, "workers = 1", ""));
    let addr = proxy.addr;
    let attacker = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.write_all(PREFACE).unwrap();
        s.write_all(&frame(0x4, 0, 0, &[])).unwrap();
        let hb = get_headers("127.0.0.1");
        let mut sent = 0u32;
        'flood: for batch in 0..200u32 {
            let mut out = Vec::new();
            for i in 0..100u32 {
                let id = 1 + 2 * (batch * 100 + i);
                out.extend(frame(0x1, 0x5, id, &hb));
                out.extend(frame(0x3, 0, id, &8u32.to_be_bytes()));
            }
            if s.write_all(&out).is_err() {
                break 'flood;
            }
            sent += 100;
        }
        (saw_goaway_or_close(&mut s, Duration::from_secs(5)), sent)
    });
    // A normal client meanwhile.
    let start = Instant::now();
    let got = send(
        &h2_client(),
        http::Request::get(proxy.url("/normal"))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, 200);
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    let (cut_off, sent) = attacker.await.unwrap();
    assert!(
        cut_off,
        "the proxy kept serving a rapid-reset flood ({sent} streams)"
    );
    // Bounded work: far fewer origin requests than streams opened.
    assert!(
        origin.requests() < 1000,
        "{} origin requests for {sent} reset streams",
        origin.requests()
    );
    assert!(
        proxy.peak_rss_kib() < 200 * 1024,
        "{} KiB",
        proxy.peak_rss_kib()
    );
    // Still healthy afterwards.
    assert_eq!(get(&proxy, "127.0.0.1", "/after").await.status, 200);
}

#[tokio::test]
async fn h2_continuation_flood_is_cut_off() {
    let origin = counting_origin().await;
    let proxy = Proxy::start(&config_for("127.0.0.1", &origin, "workers = 1", ""));
    let addr = proxy.addr;
    let cut_off = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(PREFACE).unwrap();
        s.write_all(&frame(0x4, 0, 0, &[])).unwrap();
        // HEADERS without END_HEADERS, then CONTINUATION frames of literal headers forever.
        let _ = s.write_all(&frame(0x1, 0x1, 1, &get_headers("127.0.0.1")));
        let mut lit = Vec::new();
        for i in 0..400u32 {
            // Literal without indexing, new name: 0x00, name, value (each < 127 bytes).
            let name = format!("x-flood-{i:06}");
            lit.push(0x00);
            lit.push(name.len() as u8);
            lit.extend_from_slice(name.as_bytes());
            lit.push(100);
            lit.extend_from_slice(&[b'v'; 100]);
        }
        for _ in 0..2000 {
            if s.write_all(&frame(0x9, 0, 1, &lit)).is_err() {
                break;
            }
        }
        saw_goaway_or_close(&mut s, Duration::from_secs(5))
    })
    .await
    .unwrap();
    assert!(cut_off, "an endless header block was accepted");
    assert!(
        proxy.peak_rss_kib() < 200 * 1024,
        "{} KiB",
        proxy.peak_rss_kib()
    );
    assert_eq!(origin.requests(), 0);
    assert_eq!(get(&proxy, "127.0.0.1", "/after").await.status, 200);
}

#[tokio::test]
async fn h2_header_trickle_is_closed_by_the_idle_timeout() {
    let origin = counting_origin().await;
    let proxy = Proxy::start(&config_for(
        "127.0.0.1",
        &origin,
        "workers = 1\nclient_keepalive_timeout_seconds = 1",
        "",
    ));
    let addr = proxy.addr;
    let closed_after = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(PREFACE).unwrap();
        s.write_all(&frame(0x4, 0, 0, &[])).unwrap();
        // A HEADERS frame that announces 200 bytes, then one byte every 200 ms: bytes keep
        // moving, but no request ever starts.
        let mut head = frame(0x1, 0x5, 1, &[]);
        head[2] = 200;
        s.write_all(&head).unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(8) {
            if s.write_all(&[0x00]).is_err() {
                break;
            }
            if saw_goaway_or_close(&mut s, Duration::from_millis(200)) {
                break;
            }
        }
        start.elapsed()
    })
    .await
    .unwrap();
    assert!(closed_after < Duration::from_secs(6), "{closed_after:?}");
    assert_eq!(origin.requests(), 0);
}
