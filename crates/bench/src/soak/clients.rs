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
    async fn connect(ctx: &Ctx, h2: bool) -> anyhow::Result<Sender> {
        let tcp = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(ctx.http))
            .await
            .map_err(|_| anyhow::anyhow!("connect timed out"))??;
        let _ = tcp.set_nodelay(true);
        let io = TokioIo::new(tcp);
        if h2 {
            let (s, conn) = http2::handshake(TokioExecutor::new(), io).await?;
            tokio::spawn(conn);
            Ok(Sender::H2(s))
        } else {
            let (s, conn) = http1::handshake(io).await?;
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

/// One request of a client, recorded once however often it is sent: its class, when it
/// started, and whether it was already sent again.
pub(super) struct Attempt<'a> {
    pub(super) ctx: &'a Ctx,
    pub(super) op: &'a Op,
    class: String,
    started: Instant,
    retried: bool,
}

impl<'a> Attempt<'a> {
    /// A request of `op` over `proto` (`h1`, `h2c`, `h3`), starting now.
    pub(super) fn new(ctx: &'a Ctx, op: &'a Op, proto: &str) -> Attempt<'a> {
        let class = format!("{proto} {}", op.name());
        Attempt {
            ctx,
            op,
            class,
            started: Instant::now(),
            retried: false,
        }
    }

    /// Records what came of it.
    pub(super) fn record(&self, answered: bool, outcome: Outcome) {
        self.ctx
            .tally
            .record(&self.class, self.started, answered, outcome);
    }

    /// Records it as failed.
    pub(super) fn fail(&self, answered: bool, cause: impl Into<String>, detail: impl Into<String>) {
        self.record(answered, failed(cause, detail));
    }

    /// Whether to send it again: once, when `safe` (counted as retried).
    pub(super) fn again(&mut self, safe: bool) -> bool {
        self.ctx
            .tally
            .retry_once(&self.class, &mut self.retried, safe)
    }

    /// `METHOD path: detail`, as a failure names the request.
    pub(super) fn describe(&self, detail: impl std::fmt::Display) -> String {
        format!("{} {}: {detail}", self.op.method(), self.op.path(self.ctx))
    }
}

/// An HTTP/1.1 (`h2 == false`) or HTTP/2 cleartext client on one keep-alive connection at a
/// time.
pub async fn hyper_client(ctx: Arc<Ctx>, h2: bool, seed: u64) {
    let proto = if h2 { "h2c" } else { "h1" };
    let mut rng = Rng(seed);
    let mut client = HyperClient { h2, conn: None };
    while ctx.running() {
        let op = pick(&ctx, &mut rng);
        client.request(&mut Attempt::new(&ctx, &op, proto)).await;
        think(&ctx).await;
    }
}

/// A hyper client's connection, replaced when it breaks.
struct HyperClient {
    h2: bool,
    /// The connection and how many answers it gave.
    conn: Option<(Sender, u64)>,
}

/// What sending a request once came to.
enum Sent {
    Answer(http::Response<hyper::body::Incoming>),
    /// To be sent again, on a new connection.
    Again,
    /// Recorded as failed.
    Failed,
}

impl HyperClient {
    /// Sends the request (on a new connection when the last one closed; again when that is
    /// safe) and records what came of it.
    async fn request(&mut self, a: &mut Attempt<'_>) {
        let mut connects = 0;
        loop {
            if self.conn.is_none() {
                connects += 1;
                if !self.connect(a, connects).await {
                    return;
                }
            }
            let Some((sender, served)) = self.conn.as_mut() else {
                return;
            };
            let reused = *served > 0;
            if sender.ready().await.is_err() {
                // Closed while idle: not a failure, a new connection.
                self.conn = None;
                continue;
            }
            match self.send(a, reused).await {
                Sent::Answer(res) => return self.receive(a, res).await,
                Sent::Again => continue,
                Sent::Failed => return,
            }
        }
    }

    /// Opens a new connection; `false` (recorded as failed) when it could not, or when this
    /// would be the fourth new one in a row for the request.
    async fn connect(&mut self, a: &Attempt<'_>, connects: u32) -> bool {
        if connects > 3 {
            // Three new connections closed before they could take the request.
            a.fail(
                false,
                "connection closed before the answer",
                "three new connections in a row were closed before the request",
            );
            return false;
        }
        match Sender::connect(a.ctx, self.h2).await {
            Ok(s) => {
                self.conn = Some((s, 0));
                true
            }
            Err(e) => {
                a.fail(false, "connect failed", format!("{e:#}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
                false
            }
        }
    }

    /// Sends the request on the connection and waits for the answer's head.
    async fn send(&mut self, a: &mut Attempt<'_>, reused: bool) -> Sent {
        let Some((sender, served)) = self.conn.as_mut() else {
            return Sent::Failed;
        };
        let (ctx, op) = (a.ctx, a.op);
        let req = op.request(ctx, self.h2.then_some("http"), Full::new(op.body(ctx)));
        match tokio::time::timeout(REQUEST_TIMEOUT, sender.send(req)).await {
            Err(_) => {
                a.fail(
                    false,
                    "timeout",
                    format!("no answer head within {REQUEST_TIMEOUT:?}"),
                );
                self.conn = None;
                Sent::Failed
            }
            Ok(Err(e)) => {
                self.conn = None;
                // `canceled`: hyper never sent it (the connection was closing: an HTTP/2
                // GOAWAY at an upgrade), so even a POST may go again, as hyper-util's
                // pooled client does.
                let safe = (reused && op.idempotent()) || e.is_canceled() || refused_stream(&e);
                if a.again(safe) {
                    return Sent::Again;
                }
                let source = std::error::Error::source(&e);
                a.fail(
                    false,
                    no_answer(&e),
                    a.describe(format!("{e} ({source:?})")),
                );
                Sent::Failed
            }
            Ok(Ok(res)) => {
                *served += 1;
                Sent::Answer(res)
            }
        }
    }

    /// Reads the answer's body and records what [`verify`] makes of it; a body that did not
    /// arrive whole also drops the connection.
    async fn receive(&mut self, a: &Attempt<'_>, res: http::Response<hyper::body::Incoming>) {
        let (parts, body) = res.into_parts();
        let status = parts.status.as_u16();
        let collected = tokio::time::timeout(REQUEST_TIMEOUT, collect(body)).await;
        let outcome = match collected {
            Err(_) => {
                self.conn = None;
                failed(
                    "timeout",
                    format!("body not complete within {REQUEST_TIMEOUT:?}"),
                )
            }
            Ok(Err(e)) => {
                self.conn = None;
                failed(
                    "body cut",
                    format!("{} {} → {status}: {e}", a.op.method(), a.op.path(a.ctx)),
                )
            }
            Ok(Ok(b)) => verify(a.ctx, a.op, status, &header_of(&parts.headers), &b),
        };
        a.record(true, outcome);
    }
}

/// Reads a whole response body; `Err` says after how many bytes it broke.
async fn collect(mut body: hyper::body::Incoming) -> anyhow::Result<Bytes> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| anyhow::anyhow!("after {} bytes: {e}", buf.len()))?;
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
                .await?;
            let status = r.status().as_u16();
            let _ = r.into_body().collect().await;
            Ok::<u16, anyhow::Error>(status)
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
                failed("error before the answer", format!("{e:#}")),
            ),
            Err(_) => ctx
                .tally
                .record("h1 purge", started, false, failed("timeout", "purge")),
        }
    }
}
