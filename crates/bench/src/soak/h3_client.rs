//! The soak's HTTP/3 clients: one QUIC connection at a time (opened with [`crate::h3::connect`],
//! the benchmark's own HTTP/3 client), a request per stream, bodies read to their end and
//! judged by [`verify`]. A connection that refuses a new stream (closed, or going away after
//! the server's GOAWAY) is replaced, and the request goes on the new one; so does a GET left
//! unanswered when the server closed gracefully (it was not processed, RFC 9114 §5.2).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};

use super::clients::{header_of, think, Attempt};
use super::rampart::HOST;
use super::traffic::{pick, verify, Ctx, Op, Rng, REQUEST_TIMEOUT};

type H3Send = crate::h3::Sender;

async fn h3_connect(
    ctx: &Ctx,
    endpoint: &quinn::Endpoint,
) -> anyhow::Result<(quinn::Connection, H3Send)> {
    tokio::time::timeout(
        Duration::from_secs(10),
        crate::h3::connect(endpoint, ctx.h3, HOST),
    )
    .await
    .map_err(|_| anyhow::anyhow!("QUIC handshake timed out"))?
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
    let Some(endpoint) = endpoint(&ctx) else {
        return;
    };
    let mut client = H3Client {
        endpoint,
        conn: None,
    };
    while ctx.running() {
        let op = pick(&ctx, &mut rng);
        client.request(&mut Attempt::new(&ctx, &op, "h3")).await;
        think(&ctx).await;
    }
    if let Some((c, _, _)) = client.conn {
        c.close(0x100u32.into(), b"done");
    }
    client.endpoint.wait_idle().await;
}

/// The client's QUIC endpoint; `None` (noted in the tally) when it could not bind.
fn endpoint(ctx: &Ctx) -> Option<quinn::Endpoint> {
    match quinn::Endpoint::client(std::net::SocketAddr::from(([127, 0, 0, 1], 0))) {
        Ok(mut e) => {
            e.set_default_client_config(ctx.quic.clone());
            Some(e)
        }
        Err(e) => {
            ctx.tally
                .note(format!("HTTP/3 client could not bind a UDP socket: {e}"));
            None
        }
    }
}

/// An HTTP/3 client's endpoint and connection, replaced when it closes.
struct H3Client {
    endpoint: quinn::Endpoint,
    /// The connection, its request sender and how many answers it gave.
    conn: Option<(quinn::Connection, H3Send, u64)>,
}

/// What one exchange came to: answered within the timeout, where it broke, or the timeout.
type Exchanged =
    Result<Result<(u16, http::HeaderMap, Bytes), H3Broke>, tokio::time::error::Elapsed>;

impl H3Client {
    /// Sends the request (on a new connection when the last one closed; again when that is
    /// safe) and records what came of it.
    async fn request(&mut self, a: &mut Attempt<'_>) {
        loop {
            if self
                .conn
                .as_ref()
                .is_some_and(|(c, _, _)| c.close_reason().is_some())
            {
                self.conn = None;
            }
            if self.conn.is_none() {
                match h3_connect(a.ctx, &self.endpoint).await {
                    Ok((c, s)) => self.conn = Some((c, s, 0)),
                    Err(e) => {
                        a.fail(false, "h3 connect failed", format!("{e:#}"));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        return;
                    }
                }
            }
            let Some((_, send, served)) = self.conn.as_mut() else {
                return;
            };
            let reused = *served > 0;
            let got = tokio::time::timeout(REQUEST_TIMEOUT, h3_exchange(a.ctx, send, a.op)).await;
            if !self.judge(a, got, reused) {
                return;
            }
        }
    }

    /// Records what came of one exchange, dropping a connection that broke; `true` when the
    /// request is to be sent again instead.
    fn judge(&mut self, a: &mut Attempt<'_>, got: Exchanged, reused: bool) -> bool {
        let Some((c, _, served)) = self.conn.as_mut() else {
            return false;
        };
        match got {
            Err(_) => {
                c.close(0x100u32.into(), b"timeout");
                self.conn = None;
                a.fail(
                    false,
                    "timeout",
                    format!("not complete within {REQUEST_TIMEOUT:?}"),
                );
            }
            Ok(Err(H3Broke::NotSent(detail))) => {
                // A connection that refuses new requests (closed, or going away after the
                // server's GOAWAY) takes no more: the request goes on a new one, once.
                c.close(0x100u32.into(), b"gone");
                self.conn = None;
                if a.again(reused) {
                    return true;
                }
                a.fail(
                    false,
                    "request refused by the connection",
                    a.describe(detail),
                );
            }
            Ok(Err(H3Broke::BeforeAnswer(detail))) => {
                // A server that closes gracefully (H3_NO_ERROR) with this request open has
                // finished what it accepted before its GOAWAY: this one was not processed
                // (RFC 9114 §5.2) and may be sent again.
                let graceful = matches!(
                    c.close_reason(),
                    Some(quinn::ConnectionError::ApplicationClosed(ref closed))
                        if closed.error_code == quinn::VarInt::from_u32(0x100)
                );
                c.close(0x100u32.into(), b"gone");
                self.conn = None;
                if a.again(graceful && reused && a.op.idempotent()) {
                    return true;
                }
                let cause = if graceful {
                    GRACEFUL_CLOSE
                } else {
                    "error before the answer"
                };
                a.fail(false, cause, a.describe(detail));
            }
            Ok(Err(H3Broke::Body(detail))) => {
                if c.close_reason().is_some() {
                    self.conn = None;
                }
                a.fail(true, "body cut", a.describe(detail));
            }
            Ok(Ok((status, headers, body))) => {
                *served += 1;
                a.record(
                    true,
                    verify(a.ctx, a.op, status, &header_of(&headers), &body),
                );
            }
        }
        false
    }
}
