//! The soak's clients, one task each, every one looping until the end of the run: HTTP/1.1
//! keep-alive and HTTP/2 cleartext (hyper's client connections), HTTP/3 (quinn + h3, as in
//! [`crate::h3`]), a new TLS connection per request (rustls on a blocking thread, HTTP/1.1
//! with `Connection: close`), WebSocket echoes (tokio-tungstenite), and a purger. Each request
//! is recorded in the [`super::tally::Tally`] with the outcome [`verify`] gives.
//!
//! A GET sent on a reused connection that the server closed before any byte of the answer is
//! sent once more on a new connection (counted as `retried`), as HTTP clients do (RFC 9112
//! §9.3.1); a POST is sent again only when it provably never left (an HTTP/3 connection that
//! refused to open its stream after the server's GOAWAY).

use std::io::{Read as _, Write as _};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use futures_util::{SinkExt as _, StreamExt as _};
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use super::body::Kind;
use super::rampart::{HOST, WS_HOST};
use super::tally::Outcome;
use super::traffic::{pick, verify, Ctx, Op, Rng, REQUEST_TIMEOUT};

fn failed(cause: impl Into<String>, detail: impl Into<String>) -> Outcome {
    Outcome::Failed {
        cause: cause.into(),
        detail: detail.into(),
    }
}

async fn think(ctx: &Ctx) {
    if !ctx.think.is_zero() {
        tokio::time::sleep(ctx.think).await;
    }
}

/// A hyper client connection.
enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

impl Sender {
    async fn connect(ctx: &Ctx, h2: bool) -> Result<Sender, String> {
        let tcp = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(ctx.http))
            .await
            .map_err(|_| "connect timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        let io = TokioIo::new(tcp);
        if h2 {
            let (s, conn) = http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            Ok(Sender::H2(s))
        } else {
            let (s, conn) = http1::handshake(io).await.map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            Ok(Sender::H1(s))
        }
    }

    async fn ready(&mut self) -> Result<(), hyper::Error> {
        match self {
            Sender::H1(s) => s.ready().await,
            Sender::H2(s) => s.ready().await,
        }
    }

    async fn send(
        &mut self,
        req: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<hyper::body::Incoming>, hyper::Error> {
        match self {
            Sender::H1(s) => s.send_request(req).await,
            Sender::H2(s) => s.send_request(req).await,
        }
    }
}

/// Why hyper gave no answer, in a few stable words.
fn no_answer(e: &hyper::Error) -> &'static str {
    if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
        "connection closed before the answer"
    } else {
        "error before the answer"
    }
}

fn header_of(h: &http::HeaderMap) -> impl Fn(&str) -> Option<String> + '_ {
    move |name| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// An HTTP/1.1 (`h2 == false`) or HTTP/2 cleartext client on one keep-alive connection at a
/// time.
pub async fn hyper_client(ctx: Arc<Ctx>, h2: bool, seed: u64) {
    let proto = if h2 { "h2c" } else { "h1" };
    let mut rng = Rng(seed);
    // The connection and how many answers it gave.
    let mut conn: Option<(Sender, u64)> = None;
    while ctx.running() {
        let op = pick(&ctx, &mut rng);
        let class = format!("{proto} {}", op.name());
        let started = Instant::now();
        let mut retried = false;
        let mut connects = 0;
        loop {
            if conn.is_none() {
                connects += 1;
                if connects > 3 {
                    // Three new connections closed before they could take the request.
                    ctx.tally.record(
                        &class,
                        started,
                        false,
                        failed(
                            "connection closed before the answer",
                            "three new connections in a row were closed before the request",
                        ),
                    );
                    break;
                }
                match Sender::connect(&ctx, h2).await {
                    Ok(s) => conn = Some((s, 0)),
                    Err(e) => {
                        ctx.tally
                            .record(&class, started, false, failed("connect failed", e));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        break;
                    }
                }
            }
            let Some((sender, served)) = conn.as_mut() else {
                break;
            };
            let reused = *served > 0;
            if sender.ready().await.is_err() {
                // Closed while idle: not a failure, a new connection.
                conn = None;
                continue;
            }
            let req = op.request(&ctx, h2.then_some("http"), Full::new(op.body(&ctx)));
            let res = match tokio::time::timeout(REQUEST_TIMEOUT, sender.send(req)).await {
                Err(_) => {
                    ctx.tally.record(
                        &class,
                        started,
                        false,
                        failed(
                            "timeout",
                            format!("no answer head within {REQUEST_TIMEOUT:?}"),
                        ),
                    );
                    conn = None;
                    break;
                }
                Ok(Err(e)) => {
                    conn = None;
                    if reused && !retried && op.idempotent() {
                        retried = true;
                        ctx.tally.retried(&class);
                        continue;
                    }
                    ctx.tally.record(
                        &class,
                        started,
                        false,
                        failed(
                            no_answer(&e),
                            format!("{} {}: {e}", op.method(), op.path(&ctx)),
                        ),
                    );
                    break;
                }
                Ok(Ok(res)) => res,
            };
            *served += 1;
            let (parts, body) = res.into_parts();
            let status = parts.status.as_u16();
            let collected = tokio::time::timeout(REQUEST_TIMEOUT, collect(body)).await;
            let outcome = match collected {
                Err(_) => {
                    conn = None;
                    failed(
                        "timeout",
                        format!("body not complete within {REQUEST_TIMEOUT:?}"),
                    )
                }
                Ok(Err(e)) => {
                    conn = None;
                    failed(
                        "body cut",
                        format!("{} {} → {status}: {e}", op.method(), op.path(&ctx)),
                    )
                }
                Ok(Ok(b)) => verify(&ctx, &op, status, &header_of(&parts.headers), &b),
            };
            ctx.tally.record(&class, started, true, outcome);
            break;
        }
        think(&ctx).await;
    }
}

/// Reads a whole response body; `Err` says after how many bytes it broke.
async fn collect(mut body: hyper::body::Incoming) -> Result<Bytes, String> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("after {} bytes: {e}", buf.len()))?;
        if let Ok(d) = frame.into_data() {
            buf.extend_from_slice(&d);
        }
    }
    Ok(buf.freeze())
}

type H3Send = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

async fn h3_connect(
    ctx: &Ctx,
    endpoint: &quinn::Endpoint,
) -> Result<(quinn::Connection, H3Send), String> {
    let connecting = endpoint.connect(ctx.h3, HOST).map_err(|e| e.to_string())?;
    let conn = tokio::time::timeout(Duration::from_secs(10), connecting)
        .await
        .map_err(|_| "QUIC handshake timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    Ok((conn, send))
}

/// The cause of a request left unanswered on an HTTP/3 connection the server closed gracefully.
pub const GRACEFUL_CLOSE: &str = "connection closed (H3_NO_ERROR) before the answer";

/// Where an HTTP/3 exchange broke.
enum H3Broke {
    /// The request was never sent (the connection refused a new stream: closed, or going
    /// away after the server's GOAWAY).
    NotSent(String),
    /// Sent, no answer.
    BeforeAnswer(String),
    /// Answered, the body broke.
    Body(String),
}

/// One HTTP/3 exchange: `Ok((status, headers, body))`, or where it broke.
async fn h3_exchange(
    ctx: &Ctx,
    send: &mut H3Send,
    op: &Op,
) -> Result<(u16, http::HeaderMap, Bytes), H3Broke> {
    let req = op.request(ctx, Some("https"), ());
    let mut stream = send
        .send_request(req)
        .await
        .map_err(|e| H3Broke::NotSent(e.to_string()))?;
    let body = op.body(ctx);
    // A server that answers before it has read the whole body (an error, the origin gone)
    // may stop the upload with STOP_SENDING (H3_NO_ERROR); its answer is then still to be
    // read (RFC 9114 §4.1.1), so a failed upload only counts when no answer follows.
    let mut sent = Ok(());
    if !body.is_empty() {
        sent = stream.send_data(body).await;
    }
    if sent.is_ok() {
        sent = stream.finish().await;
    }
    let res = match stream.recv_response().await {
        Ok(r) => r,
        Err(e) => {
            let why = match sent {
                Err(s) => format!("{s} (then: {e})"),
                Ok(()) => e.to_string(),
            };
            return Err(H3Broke::BeforeAnswer(why));
        }
    };
    let mut buf = BytesMut::new();
    loop {
        match stream.recv_data().await {
            Ok(Some(mut chunk)) => {
                while chunk.has_remaining() {
                    let c = chunk.chunk();
                    let n = c.len();
                    buf.put_slice(c);
                    chunk.advance(n);
                }
            }
            Ok(None) => break,
            Err(e) => return Err(H3Broke::Body(format!("after {} bytes: {e}", buf.len()))),
        }
    }
    Ok((res.status().as_u16(), res.headers().clone(), buf.freeze()))
}

/// An HTTP/3 client on one QUIC connection at a time.
pub async fn h3_client(ctx: Arc<Ctx>, seed: u64) {
    let mut rng = Rng(seed);
    let endpoint = match quinn::Endpoint::client(std::net::SocketAddr::from(([127, 0, 0, 1], 0))) {
        Ok(mut e) => {
            e.set_default_client_config(ctx.quic.clone());
            e
        }
        Err(e) => {
            ctx.tally
                .note(format!("HTTP/3 client could not bind a UDP socket: {e}"));
            return;
        }
    };
    let mut conn: Option<(quinn::Connection, H3Send, u64)> = None;
    while ctx.running() {
        let op = pick(&ctx, &mut rng);
        let class = format!("h3 {}", op.name());
        let started = Instant::now();
        let mut retried = false;
        loop {
            if conn
                .as_ref()
                .is_some_and(|(c, _, _)| c.close_reason().is_some())
            {
                conn = None;
            }
            if conn.is_none() {
                match h3_connect(&ctx, &endpoint).await {
                    Ok((c, s)) => conn = Some((c, s, 0)),
                    Err(e) => {
                        ctx.tally
                            .record(&class, started, false, failed("h3 connect failed", e));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        break;
                    }
                }
            }
            let Some((c, send, served)) = conn.as_mut() else {
                break;
            };
            let reused = *served > 0;
            let got = tokio::time::timeout(REQUEST_TIMEOUT, h3_exchange(&ctx, send, &op)).await;
            match got {
                Err(_) => {
                    c.close(0x100u32.into(), b"timeout");
                    conn = None;
                    ctx.tally.record(
                        &class,
                        started,
                        false,
                        failed(
                            "timeout",
                            format!("not complete within {REQUEST_TIMEOUT:?}"),
                        ),
                    );
                }
                Ok(Err(H3Broke::NotSent(detail))) => {
                    // A connection that refuses new requests (closed, or going away after the
                    // server's GOAWAY) takes no more: the request goes on a new one, once.
                    c.close(0x100u32.into(), b"gone");
                    conn = None;
                    if reused && !retried {
                        retried = true;
                        ctx.tally.retried(&class);
                        continue;
                    }
                    ctx.tally.record(
                        &class,
                        started,
                        false,
                        failed(
                            "request refused by the connection",
                            format!("{} {}: {detail}", op.method(), op.path(&ctx)),
                        ),
                    );
                }
                Ok(Err(H3Broke::BeforeAnswer(detail))) => {
                    // A server that closes gracefully (H3_NO_ERROR) with this request open has
                    // finished what it accepted before its GOAWAY: this one was not processed
                    // (RFC 9114 §5.2) and may be sent again.
                    let graceful = matches!(
                        c.close_reason(),
                        Some(quinn::ConnectionError::ApplicationClosed(ref a))
                            if a.error_code == quinn::VarInt::from_u32(0x100)
                    );
                    c.close(0x100u32.into(), b"gone");
                    conn = None;
                    if graceful && reused && !retried && op.idempotent() {
                        retried = true;
                        ctx.tally.retried(&class);
                        continue;
                    }
                    ctx.tally.record(
                        &class,
                        started,
                        false,
                        failed(
                            if graceful {
                                GRACEFUL_CLOSE
                            } else {
                                "error before the answer"
                            },
                            format!("{} {}: {detail}", op.method(), op.path(&ctx)),
                        ),
                    );
                }
                Ok(Err(H3Broke::Body(detail))) => {
                    if c.close_reason().is_some() {
                        conn = None;
                    }
                    ctx.tally.record(
                        &class,
                        started,
                        true,
                        failed(
                            "body cut",
                            format!("{} {}: {detail}", op.method(), op.path(&ctx)),
                        ),
                    );
                }
                Ok(Ok((status, headers, body))) => {
                    *served += 1;
                    let outcome = verify(&ctx, &op, status, &header_of(&headers), &body);
                    ctx.tally.record(&class, started, true, outcome);
                }
            }
            break;
        }
        think(&ctx).await;
    }
    if let Some((c, _, _)) = conn {
        c.close(0x100u32.into(), b"done");
    }
    endpoint.wait_idle().await;
}

/// A client that opens a new TLS connection (a full handshake) for every request.
pub async fn tls_client(ctx: Arc<Ctx>, seed: u64) {
    let mut rng = Rng(seed);
    while ctx.running() {
        let op = pick(&ctx, &mut rng);
        let class = format!("tls {}", op.name());
        let started = Instant::now();
        let c = ctx.clone();
        let o = op.clone();
        let (answered, outcome) = tokio::task::spawn_blocking(move || tls_once(&c, &o))
            .await
            .unwrap_or_else(|e| (false, failed("client panic", e.to_string())));
        ctx.tally.record(&class, started, answered, outcome);
        think(&ctx).await;
    }
}

/// One request on a new TLS connection (blocking).
fn tls_once(ctx: &Ctx, op: &Op) -> (bool, Outcome) {
    let what = format!("{} {}", op.method(), op.path(ctx));
    let tcp = match std::net::TcpStream::connect_timeout(&ctx.https, Duration::from_secs(5)) {
        Ok(t) => t,
        Err(e) => return (false, failed("connect failed", format!("{what}: {e}"))),
    };
    let _ = tcp.set_read_timeout(Some(REQUEST_TIMEOUT));
    let _ = tcp.set_write_timeout(Some(REQUEST_TIMEOUT));
    let _ = tcp.set_nodelay(true);
    // invariant: HOST is a valid DNS name.
    let name = rustls::pki_types::ServerName::try_from(HOST).expect("a DNS name");
    let tls = match rustls::ClientConnection::new(ctx.tls.clone(), name) {
        Ok(t) => t,
        Err(e) => return (false, failed("tls setup failed", e.to_string())),
    };
    let mut s = rustls::StreamOwned::new(tls, tcp);
    if let Err(e) = s.write_all(&op.request_bytes(ctx)).and_then(|()| s.flush()) {
        let cause = if s.conn.is_handshaking() {
            "tls handshake failed"
        } else {
            "error before the answer"
        };
        return (false, failed(cause, format!("{what}: {e}")));
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 << 10];
    let read_err = loop {
        match s.read(&mut chunk) {
            Ok(0) => break None,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if framed_complete(&buf) {
                    break None;
                }
            }
            Err(e) => break Some(e),
        }
    };
    match parse_h1(&buf) {
        Parsed::NoHead => {
            let cause = if s.conn.is_handshaking() {
                "tls handshake failed"
            } else {
                "connection closed before the answer"
            };
            (false, failed(cause, format!("{what}: {read_err:?}")))
        }
        Parsed::Cut(status, got) => (
            true,
            failed(
                "body cut",
                format!("{what} → {status}: after {got} bytes ({read_err:?})"),
            ),
        ),
        Parsed::Complete(status, headers, body) => {
            let header = |name: &str| {
                headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.clone())
            };
            (true, verify(ctx, op, status, &header, &body))
        }
    }
}

/// A hand-parsed HTTP/1.1 response.
enum Parsed {
    NoHead,
    /// Status and body bytes received before the framing ended early.
    Cut(u16, usize),
    Complete(u16, Vec<(String, String)>, Vec<u8>),
}

fn framed_complete(buf: &[u8]) -> bool {
    matches!(parse_h1(buf), Parsed::Complete(..))
}

/// Parses a response with `Content-Length` or chunked framing (or none: up to the close).
fn parse_h1(buf: &[u8]) -> Parsed {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Parsed::NoHead;
    };
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
    };
    let rest = &buf[end + 4..];
    if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut body = Vec::new();
        let mut at = 0;
        loop {
            let Some(eol) = rest[at..].windows(2).position(|w| w == b"\r\n") else {
                return Parsed::Cut(status, body.len());
            };
            let line = String::from_utf8_lossy(&rest[at..at + eol]);
            let Ok(n) = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            else {
                return Parsed::Cut(status, body.len());
            };
            at += eol + 2;
            if n == 0 {
                // The last chunk; no trailers are expected.
                return if rest.len() >= at + 2 {
                    Parsed::Complete(status, headers, body)
                } else {
                    Parsed::Cut(status, body.len())
                };
            }
            if rest.len() < at + n + 2 {
                return Parsed::Cut(status, body.len() + rest.len().saturating_sub(at));
            }
            body.extend_from_slice(&rest[at..at + n]);
            at += n + 2;
        }
    }
    match get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        Some(n) if rest.len() >= n => Parsed::Complete(status, headers, rest[..n].to_vec()),
        Some(_) => Parsed::Cut(status, rest.len()),
        None => Parsed::Complete(status, headers, rest.to_vec()),
    }
}

/// A WebSocket client: connections of up to 30 echoed binary messages (1 byte to 64 KiB), each
/// compared with what was sent.
pub async fn ws_client(ctx: Arc<Ctx>, seed: u64) {
    let mut rng = Rng(seed);
    while ctx.running() {
        let started = Instant::now();
        let opened = async {
            let tcp = TcpStream::connect(ctx.http)
                .await
                .map_err(|e| e.to_string())?;
            let _ = tcp.set_nodelay(true);
            tokio_tungstenite::client_async(format!("ws://{WS_HOST}/echo"), tcp)
                .await
                .map_err(|e| e.to_string())
        };
        let mut ws = match tokio::time::timeout(Duration::from_secs(10), opened).await {
            Ok(Ok((ws, _))) => ws,
            Ok(Err(e)) => {
                ctx.tally
                    .record("ws", started, false, failed("ws handshake failed", e));
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Err(_) => {
                ctx.tally.record(
                    "ws",
                    started,
                    false,
                    failed("ws handshake failed", "timed out"),
                );
                continue;
            }
        };
        for _ in 0..30 {
            if !ctx.running() {
                break;
            }
            let size = 1 + rng.below(64 << 10) as usize;
            let msg = ctx.pool.body(Kind::Ws, rng.next(), size);
            let t = Instant::now();
            let round = async {
                ws.send(Message::binary(msg.clone()))
                    .await
                    .map_err(|e| e.to_string())?;
                loop {
                    match ws.next().await {
                        Some(Ok(Message::Binary(b))) => return Ok(b),
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                        Some(Ok(other)) => return Err(format!("got {other:?}")),
                        Some(Err(e)) => return Err(e.to_string()),
                        None => return Err("closed".to_owned()),
                    }
                }
            };
            match tokio::time::timeout(Duration::from_secs(10), round).await {
                Ok(Ok(b)) if b == msg => ctx.tally.record("ws", t, true, Outcome::Ok),
                Ok(Ok(b)) => {
                    ctx.tally.record(
                        "ws",
                        t,
                        true,
                        Outcome::Wrong(format!(
                            "WebSocket echo of {} bytes came back as {} bytes (first difference at {:?})",
                            msg.len(),
                            b.len(),
                            super::body::first_difference(&b, &msg)
                        )),
                    );
                }
                Ok(Err(e)) => {
                    ctx.tally.record("ws", t, false, failed("ws closed", e));
                    break;
                }
                Err(_) => {
                    ctx.tally
                        .record("ws", t, false, failed("timeout", "no echo within 10 s"));
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(None)).await;
    }
}

/// Purges an object every 2 s (a new HTTP/1.1 connection each), so hits turn into misses and,
/// with Redis, purges go through its stream.
pub async fn purger(ctx: Arc<Ctx>, seed: u64) {
    let mut rng = Rng(seed);
    while ctx.running() {
        tokio::time::sleep(Duration::from_secs(2)).await;
        if !ctx.running() {
            break;
        }
        let op = Op::Purge {
            id: rng.below((ctx.objects / 5).max(1)),
        };
        let started = Instant::now();
        let res = async {
            let mut s = Sender::connect(&ctx, false).await?;
            let r = s
                .send(op.request(&ctx, None, Full::new(Bytes::new())))
                .await
                .map_err(|e| e.to_string())?;
            let status = r.status().as_u16();
            let _ = r.into_body().collect().await;
            Ok::<u16, String>(status)
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, res).await {
            Ok(Ok(status)) => {
                let o = verify(&ctx, &op, status, &|_| None, &[]);
                ctx.tally.record("h1 purge", started, true, o);
            }
            Ok(Err(e)) => ctx.tally.record(
                "h1 purge",
                started,
                false,
                failed("error before the answer", e),
            ),
            Err(_) => ctx
                .tally
                .record("h1 purge", started, false, failed("timeout", "purge")),
        }
    }
}
