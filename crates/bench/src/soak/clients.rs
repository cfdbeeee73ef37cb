//! The soak's clients, one task each, every one looping until the end of the run: HTTP/1.1
//! keep-alive and HTTP/2 cleartext (hyper's client connections), WebSocket echoes
//! (tokio-tungstenite) and a purger here; HTTP/3 in [`super::h3_client`], a new TLS
//! connection per request in [`super::tls_client`]. Each request is recorded in the
//! [`super::tally::Tally`] with the outcome [`verify`] gives.
//!
//! A GET sent on a reused connection that the server closed before any byte of the answer is
//! sent once more on a new connection (counted as `retried`), as HTTP clients do (RFC 9112
//! §9.3.1); a POST is sent again only when it provably never left or was never processed (an
//! HTTP/3 connection that refused to open its stream after the server's GOAWAY, a request hyper
//! reports canceled: never sent on an HTTP/2 connection that was closing, or an HTTP/2 stream
//! the server refused: above the last stream its GOAWAY accepted, or reset with
//! REFUSED_STREAM, which RFC 9113 §8.7 says was not processed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt as _, StreamExt as _};
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use super::body::Kind;
use super::rampart::WS_HOST;
use super::tally::Outcome;
use super::traffic::{pick, verify, Ctx, Op, Rng, REQUEST_TIMEOUT};

pub(super) fn failed(cause: impl Into<String>, detail: impl Into<String>) -> Outcome {
    Outcome::Failed {
        cause: cause.into(),
        detail: detail.into(),
    }
}

pub(super) async fn think(ctx: &Ctx) {
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

/// Whether the server refused the request's HTTP/2 stream without processing it: a stream above
/// the last one its GOAWAY accepted (the race of a graceful shutdown), or one reset with
/// REFUSED_STREAM (RFC 9113 §6.8, §8.7). Safe to send again, even a POST.
fn refused_stream(e: &hyper::Error) -> bool {
    let Some(h2e) = std::error::Error::source(e).and_then(|s| s.downcast_ref::<h2::Error>()) else {
        return false;
    };
    (h2e.is_go_away() && h2e.is_remote()) || h2e.reason() == Some(h2::Reason::REFUSED_STREAM)
}

/// Why hyper gave no answer, in a few stable words.
fn no_answer(e: &hyper::Error) -> &'static str {
    if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
        "connection closed before the answer"
    } else {
        "error before the answer"
    }
}

pub(super) fn header_of(h: &http::HeaderMap) -> impl Fn(&str) -> Option<String> + '_ {
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
                    // `canceled`: hyper never sent it (the connection was closing: an HTTP/2
                    // GOAWAY at an upgrade), so even a POST may go again, as hyper-util's
                    // pooled client does.
                    let safe = (reused && op.idempotent()) || e.is_canceled() || refused_stream(&e);
                    if ctx.tally.retry_once(&class, &mut retried, safe) {
                        continue;
                    }
                    ctx.tally.record(
                        &class,
                        started,
                        false,
                        failed(
                            no_answer(&e),
                            format!(
                                "{} {}: {e} ({:?})",
                                op.method(),
                                op.path(&ctx),
                                std::error::Error::source(&e)
                            ),
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
