//! WebSocket through rampart, end to end: a real WebSocket client and origin
//! (tokio-tungstenite) over HTTP/1.1 `Upgrade` and over HTTP/2 extended CONNECT (RFC 8441):
//! echo, large frames, the close handshake, the origin closing, the client vanishing, the idle
//! timeout, the per-rule switch, screening of the handshake, and 1,000 sockets at once.
#![allow(clippy::unwrap_used, clippy::result_large_err)]

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use http::HeaderMap;
use support::*;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// A WebSocket origin: echoes every message; `close-me` makes it close (code 4000); `bye`
/// makes it drop the TCP connection. Counts handshakes and ended connections, keeps the last
/// handshake's headers.
#[derive(Clone, Default)]
struct WsOrigin {
    port: u16,
    handshakes: Arc<AtomicUsize>,
    ended: Arc<AtomicUsize>,
    last: Arc<Mutex<HeaderMap>>,
}

async fn ws_origin() -> WsOrigin {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let o = WsOrigin {
        port: l.local_addr().unwrap().port(),
        ..WsOrigin::default()
    };
    let state = o.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { break };
            let state = state.clone();
            tokio::spawn(async move {
                let last = state.last.clone();
                let cb = move |req: &tokio_tungstenite::tungstenite::handshake::server::Request,
                               res| {
                    *last.lock().unwrap() = req.headers().clone();
                    Ok(res)
                };
                let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(s, cb).await else {
                    return;
                };
                state.handshakes.fetch_add(1, Ordering::SeqCst);
                while let Some(Ok(m)) = ws.next().await {
                    match m {
                        Message::Text(t) if t.as_str() == "close-me" => {
                            let _ = ws
                                .close(Some(CloseFrame {
                                    code: 4000.into(),
                                    reason: "origin says bye".into(),
                                }))
                                .await;
                        }
                        Message::Text(t) if t.as_str() == "bye" => break,
                        Message::Text(_) | Message::Binary(_) => {
                            let sent = ws.send(m).await;
                            if sent.is_err() {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                state.ended.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    o
}

fn config(o: &WsOrigin, extra_global: &str, extra_rule: &str) -> String {
    format!(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nworkers = 1\n\
         add_sql_injection_protection = true\n{extra_global}\n\
         [[proxy_rules]]\ndomain = \"a.test\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\n\
         max_age_seconds = 60\nrule_type = \"Whitelist\"\nenable_logging = true\nignore_query_string = false\n\
         enable_sql_injection_protection = true\n{extra_rule}\n\
         [[proxy_rules.disallowed_user_agents]]\nuser_agent = \"badbot\"\nmatch_type = \"Contains\"\n",
        o.port
    )
}

type Ws = WebSocketStream<TcpStream>;

/// A WebSocket handshake with rampart for `ws://a.test{path}`.
async fn connect(proxy: &Proxy, path: &str) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    let tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let req = format!("ws://a.test{path}");
    tokio_tungstenite::client_async(req, tcp)
        .await
        .map(|(ws, _)| ws)
}

async fn next(ws: &mut Ws) -> Option<Message> {
    match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
        Ok(Some(Ok(m))) => Some(m),
        Ok(_) => None,
        Err(_) => panic!("no message within 10 s"),
    }
}

async fn eventually(within: Duration, f: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

#[tokio::test]
async fn echo_large_frames_and_the_close_handshake_over_http11() {
    let o = ws_origin().await;
    let proxy = Proxy::start(&config(
        &o,
        "add_logging = true\nlogging_level = \"info\"",
        "",
    ));
    let mut ws = connect(&proxy, "/chat?room=1").await.unwrap();
    ws.send(Message::text("hello")).await.unwrap();
    assert_eq!(next(&mut ws).await, Some(Message::text("hello")));
    // A 4 MiB binary frame each way, and many small ones in a row.
    let big: Vec<u8> = (0..4 << 20).map(|i| (i % 251) as u8).collect();
    ws.send(Message::binary(big.clone())).await.unwrap();
    assert_eq!(next(&mut ws).await, Some(Message::binary(big)));
    for i in 0..200 {
        ws.send(Message::text(format!("m{i}"))).await.unwrap();
    }
    for i in 0..200 {
        assert_eq!(next(&mut ws).await, Some(Message::text(format!("m{i}"))));
    }
    // The handshake reached the origin with the forwarding fields, the WebSocket ones intact.
    {
        let h = o.last.lock().unwrap();
        assert_eq!(h["host"], "a.test");
        assert_eq!(h["x-forwarded-for"], "127.0.0.1");
        assert_eq!(h["upgrade"], "websocket");
        assert!(h.contains_key("sec-websocket-key"));
    }
    // The client closes: the close frame goes through and comes back.
    ws.close(None).await.unwrap();
    match next(&mut ws).await {
        Some(Message::Close(_)) | None => {}
        Some(other) => panic!("{other:?}"),
    }
    assert!(
        eventually(Duration::from_secs(5), || o.ended.load(Ordering::SeqCst)
            == 1)
        .await
    );
    // Logged with its 101; never cached: a second handshake reaches the origin too.
    assert!(proxy.wait_for_output("status=101", Duration::from_secs(5)));
    let mut ws = connect(&proxy, "/chat?room=1").await.unwrap();
    ws.send(Message::text("again")).await.unwrap();
    assert_eq!(next(&mut ws).await, Some(Message::text("again")));
    assert_eq!(o.handshakes.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_origin_closing_and_the_client_vanishing_end_the_tunnel() {
    let o = ws_origin().await;
    let proxy = Proxy::start(&config(&o, "", ""));
    // The origin's close frame reaches the client, then the connection ends.
    let mut ws = connect(&proxy, "/").await.unwrap();
    ws.send(Message::text("close-me")).await.unwrap();
    match next(&mut ws).await {
        Some(Message::Close(Some(f))) => {
            assert_eq!(u16::from(f.code), 4000);
            assert_eq!(f.reason.as_str(), "origin says bye");
        }
        other => panic!("{other:?}"),
    }
    // The origin dropping its TCP connection ends the client's.
    let mut ws = connect(&proxy, "/").await.unwrap();
    ws.send(Message::text("bye")).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "the client's connection ended");
    // The client vanishing (its socket dropped without a close frame) ends the origin's.
    let before = o.ended.load(Ordering::SeqCst);
    let ws = connect(&proxy, "/").await.unwrap();
    drop(ws);
    assert!(
        eventually(Duration::from_secs(5), || o.ended.load(Ordering::SeqCst)
            > before)
        .await,
        "the origin's connection ended"
    );
}

#[tokio::test]
async fn idle_tunnels_are_closed_and_rules_can_refuse_upgrades() {
    let o = ws_origin().await;
    let proxy = Proxy::start(&config(
        &o,
        "websocket_idle_timeout_seconds = 30",
        "websocket_idle_timeout_seconds = 1",
    ));
    let mut ws = connect(&proxy, "/").await.unwrap();
    // Busy for 2.5 idle periods: a message every 300 ms keeps the tunnel open.
    for i in 0..8 {
        let m = Message::text(format!("busy {i}"));
        ws.send(m.clone()).await.unwrap();
        assert_eq!(next(&mut ws).await, Some(m), "a busy tunnel stays open");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    ws.send(Message::text("x")).await.unwrap();
    assert_eq!(next(&mut ws).await, Some(Message::text("x")));
    let started = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "an idle tunnel is closed");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(900), "{took:?}");
    drop(proxy);

    let proxy = Proxy::start(&config(&o, "", "allow_upgrades = false"));
    let before = o.handshakes.load(Ordering::SeqCst);
    match connect(&proxy, "/").await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => assert_eq!(res.status(), 403),
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert_eq!(o.handshakes.load(Ordering::SeqCst), before);
}

#[tokio::test]
async fn the_handshake_is_screened() {
    let o = ws_origin().await;
    let proxy = Proxy::start(&config(&o, "", ""));
    // SQL injection in the handshake's target.
    match connect(&proxy, "/chat?id=1%27%20OR%20%271%27=%271").await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => assert_eq!(res.status(), 403),
        other => panic!("{:?}", other.map(|_| ())),
    }
    // A disallowed user agent.
    let tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let req = http::Request::get("ws://a.test/")
        .header("host", "a.test")
        .header("user-agent", "badbot/1.0")
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .body(())
        .unwrap();
    match tokio_tungstenite::client_async(req, tcp).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => assert_eq!(res.status(), 403),
        other => panic!("{:?}", other.map(|_| ())),
    }
    // A handshake without its key is a bad request, not forwarded.
    let answer = raw(
        proxy.addr,
        b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        Duration::from_secs(2),
    );
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // CONNECT for anything but a WebSocket over HTTP/2 opens no tunnel.
    let answer = raw(
        proxy.addr,
        b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
        Duration::from_secs(2),
    );
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(o.handshakes.load(Ordering::SeqCst), 0);
}

// Two threads: `raw` blocks the one it runs on while the origin answers on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_the_origin_refuses_is_its_answer_passed_on() {
    // A plain HTTP origin: it answers the handshake with a page, not `101`.
    let origin = Origin::new()
        .route(
            "*",
            Reply::text("not a websocket").header("cache-control", "max-age=60"),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("a.test", &origin, "", ""));
    let answer = raw(
        proxy.addr,
        b"GET /chat HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        Duration::from_secs(2),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("not a websocket"), "{answer}");
    // Passed, never looked up nor stored: labelled as a bypass in both fields.
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains("x-arc2-cache: bypass\r\n"), "{answer}");
    assert!(
        lower.contains("cache-status: rampart; fwd=bypass\r\n"),
        "{answer}"
    );
    assert_eq!(origin.requests(), 1);
}

#[tokio::test]
async fn websocket_over_http2_extended_connect() {
    let o = ws_origin().await;
    let proxy = Proxy::start(&config(&o, "", ""));
    let tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    // Two WebSockets on one HTTP/2 connection.
    let mut streams = Vec::new();
    for _ in 0..2 {
        let mut req = http::Request::builder()
            .method(http::Method::CONNECT)
            .uri("http://a.test/chat")
            .header("sec-websocket-version", "13")
            .body(empty())
            .unwrap();
        req.extensions_mut()
            .insert(hyper::ext::Protocol::from_static("websocket"));
        let mut res = send.send_request(req).await.unwrap();
        assert_eq!(res.status(), 200);
        assert!(!res.headers().contains_key("sec-websocket-accept"));
        let upgraded = hyper::upgrade::on(&mut res).await.unwrap();
        let ws = WebSocketStream::from_raw_socket(
            hyper_util::rt::TokioIo::new(upgraded),
            Role::Client,
            None,
        )
        .await;
        streams.push(ws);
    }
    for (i, ws) in streams.iter_mut().enumerate() {
        ws.send(Message::text(format!("over h2 {i}")))
            .await
            .unwrap();
        let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .unwrap();
        assert_eq!(m.unwrap().unwrap(), Message::text(format!("over h2 {i}")));
    }
    let big = vec![7u8; 1 << 20];
    streams[0].send(Message::binary(big.clone())).await.unwrap();
    let m = tokio::time::timeout(Duration::from_secs(10), streams[0].next())
        .await
        .unwrap();
    assert_eq!(m.unwrap().unwrap(), Message::binary(big));
    assert_eq!(o.handshakes.load(Ordering::SeqCst), 2);
    // The origin saw an HTTP/1.1 handshake with a key rampart made.
    assert_eq!(o.last.lock().unwrap()["sec-websocket-key"].len(), 24);
    for mut ws in streams {
        ws.close(None).await.unwrap();
    }
    assert!(
        eventually(Duration::from_secs(5), || o.ended.load(Ordering::SeqCst)
            == 2)
        .await
    );
}

/// Resident memory of a process, from /proc (KiB).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sockets_at_once_with_bounded_memory() {
    rampart_proxy::server::raise_fd_limit();
    let o = ws_origin().await;
    let proxy = Proxy::start(&config(&o, &format!("api_key = \"{API_KEY}\""), ""));
    // Warm up (the first connections grow the allocator's pools).
    let mut warm = connect(&proxy, "/").await.unwrap();
    warm.send(Message::text("w")).await.unwrap();
    assert_eq!(next(&mut warm).await, Some(Message::text("w")));
    let before = rss_kib(proxy.pid());
    let mut all = Vec::new();
    for i in 0..1000 {
        let mut ws = connect(&proxy, "/").await.unwrap();
        ws.send(Message::text(format!("{i}"))).await.unwrap();
        assert_eq!(next(&mut ws).await, Some(Message::text(format!("{i}"))));
        all.push(ws);
    }
    let grown = rss_kib(proxy.pid()).saturating_sub(before);
    let metrics = fetch(
        req(&proxy, "anything", "/_rampart/metrics")
            .header("authorization", format!("Bearer {API_KEY}")),
    )
    .await
    .text();
    assert!(
        metrics.contains("rampart_websockets_open 1001"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("websocket"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!("1,000 open WebSockets: rampart grew by {grown} KiB");
    // Two sockets and a task each: tens of KiB would mean copy buffers kept while idle.
    assert!(
        grown < 20 * 1024,
        "RSS grew by {grown} KiB for 1,000 idle WebSockets"
    );
    // They all still work.
    for (i, ws) in all.iter_mut().enumerate().step_by(97) {
        ws.send(Message::text(format!("again {i}"))).await.unwrap();
        assert_eq!(next(ws).await, Some(Message::text(format!("again {i}"))));
    }
    drop(all);
    drop(warm);
    assert!(
        eventually(Duration::from_secs(10), || o.ended.load(Ordering::SeqCst)
            == 1001)
        .await,
        "every origin connection ended"
    );
}
