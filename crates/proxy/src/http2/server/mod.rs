//! rampart's HTTP/2 server connection (RFC 9113), prior knowledge and ALPN `h2`: one task per
//! connection reads frames ([`conn`]), runs each request's pipeline future and response body
//! in that same task ([`stream`]), and writes every stream's frames through one outbox
//! ([`write`]), so the answers of many streams leave in one write.
//!
//! Why not the h2 crate (through hyper): a cached hit over h2c cost ~37,000 instructions there,
//! most of them in its stream state machine, its frame queues and the HPACK encoding of every
//! response. Here a hit's header block is encoded once per object and copied, DATA goes out as
//! the stored `Bytes`, and a stream is an entry in a vector, not a task. HTTP/2 to origins
//! (gRPC) stays on the h2 crate (`origin/h2.rs`).
//!
//! The defences (RFC 9113 §10.5): a bounded number of streams, header lists and header blocks
//! (CONTINUATION floods), decoded sizes (HPACK bombs), client resets of unfinished streams
//! (rapid reset), frames that do nothing (empty DATA, PRIORITY, PING and SETTINGS floods),
//! and a reading pause while the client does not take what is queued for it, so control
//! answers cannot pile up. A client that holds every window shut is cut off after
//! `client_send_timeout_seconds`, as one that does not read at all is.

mod conn;
pub mod head;
mod recv;
mod send;
pub mod stream;
pub mod write;

#[cfg(test)]
mod tests;

use rampart_head::{Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::body::{ClientBody, ProxyBody};
use crate::interim::Interim;

pub use conn::Conn;

/// What a connection's requests become: the pipeline's future for one request, with the
/// stream's own place for interim answers from the origin.
pub type StreamFuture = Pin<Box<dyn Future<Output = Response<ProxyBody>> + Send>>;

/// Limits of an HTTP/2 connection.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    pub max_streams: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: the decoded size of a request's fields.
    pub max_header_list: u32,
    /// A connection that starts no request for this long is closed (GOAWAY).
    pub keepalive_timeout: Duration,
    /// The longest the client may leave queued bytes untaken, or hold a window shut on data
    /// ready to go.
    pub send_timeout: Duration,
}

/// Serves HTTP/2 on `io` (whose first bytes are the client's connection preface) until the
/// client closes, an error ends the connection, no request starts for a keep-alive period, or
/// `stop` asks for a graceful end (GOAWAY, then the streams started finish).
pub async fn serve<I, H>(io: I, limits: Limits, handler: H, stop: &mut watch::Receiver<bool>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send,
    H: FnMut(Request<ClientBody>, std::sync::Arc<Interim>) -> StreamFuture + Send,
{
    let mut conn = Conn::new(io, limits, handler);
    let keepalive = limits.keepalive_timeout;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
    let mut watch =
        tokio::time::interval((limits.send_timeout / 4).max(Duration::from_millis(250)));
    let (mut seen, mut closing) = (0, false);
    loop {
        tokio::select! {
            biased;
            r = std::future::poll_fn(|cx| conn.poll_run(cx)) => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "HTTP/2 connection ended with an error");
                }
                break;
            }
            _ = stop.changed(), if !closing => {
                conn.go_away();
                closing = true;
            }
            _ = watch.tick() => {
                if conn.stalled(limits.send_timeout) {
                    tracing::info!(send_timeout = ?limits.send_timeout, "HTTP/2 client took nothing of its responses for client_send_timeout_seconds; closing the connection");
                    crate::telemetry::metrics::get().send_timeout();
                    break;
                }
            }
            _ = tick.tick() => {
                let now = conn.started();
                if now == seen && !closing {
                    tracing::debug!("idle HTTP/2 connection closed");
                    conn.go_away();
                    closing = true;
                }
                seen = now;
            }
        }
    }
    let mut io = conn.into_io();
    let _ = tokio::time::timeout(Duration::from_secs(1), io.shutdown()).await;
}
