//! rampart's HTTP/1.1 server connection: read → parse the head once (with the framing checks)
//! → hand the request to the pipeline → write the response → wait for the next request.
//!
//! Why not hyper's: every connection there keeps an 8 KiB read and an 8 KiB write buffer for
//! its whole life, and every head was parsed twice (hyper's parse and the framing guard's).
//! Here an idle keep-alive connection holds no buffer at all: reads go into one scratch buffer
//! per worker thread and only the bytes of a request are kept (the head once, as the `Bytes`
//! its fields are slices of). That is what lets 10,000 idle connections cost a few MiB instead
//! of hundreds. HTTP/2 (prior knowledge, or ALPN on TLS) is rampart's own too (`http2::server`).

mod feed;
pub mod head;
pub mod write;

use rampart_head::{Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::BytesMut;

use rampart_screen::h1::Framing;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::body::{ClientBody, ProxyBody};
use crate::error::ProxyError;
use crate::http1::body::Decoder;
use crate::interim::Interim;
use crate::net::read::read_some;
use feed::Feed;
use head::HeadError;

/// Body bytes of a request the pipeline did not read that are skipped to keep the connection
/// (more and it closes after the response).
const SKIP_UNREAD: u64 = 64 * 1024;

/// Limits and timeouts of a connection.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_head: usize,
    pub max_headers: usize,
    /// From a head's first byte to its last.
    pub header_read_timeout: Duration,
    /// Between requests.
    pub keepalive_timeout: Duration,
    /// Between two pieces of a request body still sent to the origin after its answer.
    pub body_idle_timeout: Duration,
    /// The longest a write may wait for the client to take bytes (see `send_timeout.rs`).
    pub send_timeout: Duration,
    /// The transport says goodbye before it closes (TLS: `close_notify`), so a connection that
    /// ends after a response is shut down first. Plain TCP is not: closing the socket sends
    /// the same FIN, and the `shutdown` call cost a system call per connection (one of eight
    /// for a request on a new connection).
    pub close_notify: bool,
    /// A connection idle this long between requests is given back ([`serve`] returns it): its
    /// task then waits with a few hundred bytes instead of the state of a request
    /// (`transport/idle.rs`). `None`: it waits in [`serve`] (TLS).
    pub yield_after: Option<Duration>,
    /// A connection given back and idle this long leaves its task for the worker's table of
    /// parked connections (`transport/park.rs`); `None`: never (the shared runtime).
    pub park_after: Option<Duration>,
}

/// A connection [`serve`] gives back between requests (`limits.yield_after`): its stream, and
/// the end of its keep-alive time.
pub struct Idle<I> {
    pub io: I,
    pub keepalive_until: Instant,
}

/// Serves HTTP/1.1 requests on `io` until the client closes, an error or timeout ends the
/// connection, or `stop` asks for a graceful end. `carry`: bytes already read. With
/// `limits.yield_after`, a connection idle that long between requests is given back instead
/// (`Some`), its read buffer empty: the state of a request (this future's own, several times
/// what waiting needs) is held only by connections that had one in the last moments. With
/// `at_once` as well (its client paces its requests), it is given back as soon as it has
/// answered everything it read.
///
/// Each request goes: read its head ([`read_head`]) → the pipeline (fed the body as it reads
/// it: [`handle`]) → write the response, and decide what the connection does with a body the
/// pipeline did not read ([`write_response`]).
pub async fn serve<I, H, F>(
    io: I,
    mut carry: BytesMut,
    limits: Limits,
    at_once: bool,
    mut handler: H,
    interim: Option<&Interim>,
    stop: &mut watch::Receiver<bool>,
) -> Option<Idle<I>>
where
    I: AsyncRead + AsyncWrite + Unpin,
    H: FnMut(Request<ClientBody>) -> F,
    F: Future<Output = Response<ProxyBody>>,
{
    // Every write the client does not take within `client_send_timeout_seconds` fails.
    let mut io = crate::transport::send_timeout::TimedWrite::new(io, limits.send_timeout);
    // `carry`: bytes read past the current head (its body, or the next requests).
    let timer = tokio::time::sleep(limits.keepalive_timeout);
    tokio::pin!(timer);
    loop {
        if at_once && carry.is_empty() {
            // One look for a next request already sent; none: the connection goes back to
            // its task to wait (the look registered this task for the socket's next bytes).
            let look = std::future::poll_fn(|cx| {
                Poll::Ready(match crate::net::read::poll_read_some(&mut io, cx) {
                    Poll::Ready(r) => Some(r),
                    Poll::Pending => None,
                })
            });
            match look.await {
                Some(Ok(b)) if !b.is_empty() => carry = b,
                Some(_) => return None,
                None => {
                    return Some(Idle {
                        keepalive_until: Instant::now() + limits.keepalive_timeout,
                        io: io.into_inner(),
                    })
                }
            }
        }
        let head = match read_head(&mut io, &mut carry, &limits, timer.as_mut(), stop).await {
            Recv::Head(h) => h,
            Recv::Refused(e) => {
                boxed!(refuse(&mut io, e)).await;
                return None;
            }
            Recv::End => return None,
            Recv::Idle(keepalive_until) => {
                return Some(Idle {
                    io: io.into_inner(),
                    keepalive_until,
                })
            }
        };
        let ex = write::Exchange {
            head_request: head.method == http::Method::HEAD,
            version: head.version,
            keep_alive: head.keep_alive,
        };
        let (req, mut feed) = request(head);
        // 1xx answers go to HTTP/1.1 clients only (RFC 9110 §15.2).
        let interim = interim.filter(|_| ex.version == http::Version::HTTP_11);
        let mut res = handle(&mut io, &mut carry, handler(req), feed.as_mut(), interim).await;
        if let Some(i) = interim {
            // Interim answers read in the same breath as the final one still go first.
            let late = i.take();
            if !late.is_empty() && write_interim(&mut io, late).await.is_err() {
                return None;
            }
        }
        if res.status() == http::StatusCode::SWITCHING_PROTOCOLS {
            if let Some(tunnel) = res.extensions_mut().remove::<crate::net::tunnel::Tunnel>() {
                // The connection is the WebSocket's from here on.
                boxed!(switch(&mut io, &mut carry, res, tunnel)).await;
                return None;
            }
        }
        if *stop.borrow() {
            res.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
        if !write_response(&mut io, &mut carry, res, feed.as_mut(), ex, &limits).await {
            if limits.close_notify {
                let _ = io.shutdown().await;
            }
            return None;
        }
        // Give back the memory of a large pipelined leftover or body.
        if carry.is_empty() && carry.capacity() > 0 {
            carry = BytesMut::new();
        }
    }
}

/// Writes a `101` and then moves the connection's bytes to and from the origin until the
/// tunnel ends (`net/tunnel.rs`); `carry` holds what the client sent after its head.
async fn switch<I: AsyncRead + AsyncWrite + Unpin>(
    io: &mut I,
    carry: &mut BytesMut,
    res: Response<ProxyBody>,
    tunnel: crate::net::tunnel::Tunnel,
) {
    let mut out = Vec::with_capacity(256);
    write::switching(&mut out, res.headers());
    if io.write_all(&out).await.is_err() || io.flush().await.is_err() {
        return;
    }
    // The access-log record goes with the response: written now, at the switch.
    drop(res);
    let open = crate::telemetry::metrics::get().tunnel_opened();
    let early = carry.split().freeze();
    let (ended, moved) = crate::net::tunnel::run(io, early, tunnel).await;
    tracing::debug!(?ended, ?moved, "WebSocket ended");
    drop(open);
}

/// How long a plaintext connection waits for its next request in [`serve`] (`Limits::
/// yield_after`) before it goes back to the smaller wait of its task (`transport/idle.rs`).
pub const YIELD_AFTER: Duration = Duration::from_millis(50);

/// How long a stopping server still waits for the next request on an idle keep-alive
/// connection. A plaintext connection waiting in [`serve`] sees the stop only when its timer
/// fires or it is given back (`YIELD_AFTER` at most), and its grace starts then.
pub(crate) const STOP_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

// Returned once per request and taken apart at once; boxing the head would allocate per request.
#[allow(clippy::large_enum_variant)]
enum Recv {
    Head(head::Head),
    /// A head that must be answered with an error, then the connection closed.
    Refused(HeadError),
    /// The client closed, went quiet, or the server is stopping.
    End,
    /// Idle for `yield_after` with nothing read: the connection goes back to its task. Its
    /// keep-alive time ends at this instant.
    Idle(Instant),
}

/// Bytes of partial request heads above [`FREE_HEAD`] each, held by all connections together:
/// past it, a connection whose head grows further gets 431. `max_request_head_size` bounds one
/// connection; this bounds them all (1,000 connections holding 60 KB partial heads
/// cost 60 MB).
pub const PARTIAL_HEADS_BUDGET: usize = 32 << 20;

/// What a partial head may hold without counting against [`PARTIAL_HEADS_BUDGET`]: heads of
/// ordinary size never touch the shared counter.
const FREE_HEAD: usize = 8 << 10;

static PARTIAL_HEADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One connection's share of [`PARTIAL_HEADS`], given back when its head is complete or the
/// connection ends.
#[derive(Default)]
struct HeadCharge(usize);

impl HeadCharge {
    /// Charges a partial head of `held` bytes; false when the budget is spent.
    fn hold(&mut self, held: usize) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let want = held.saturating_sub(FREE_HEAD);
        if want <= self.0 {
            return true;
        }
        let more = want - self.0;
        if PARTIAL_HEADS.fetch_add(more, Relaxed) + more > PARTIAL_HEADS_BUDGET {
            PARTIAL_HEADS.fetch_sub(more, Relaxed);
            return false;
        }
        self.0 = want;
        true
    }
}

impl Drop for HeadCharge {
    fn drop(&mut self) {
        if self.0 > 0 {
            PARTIAL_HEADS.fetch_sub(self.0, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// recv: reads until `carry` starts with a complete head, within the keep-alive timeout for
/// its first byte and the header read timeout for the rest.
async fn read_head<I: AsyncRead + Unpin>(
    io: &mut I,
    carry: &mut BytesMut,
    limits: &Limits,
    mut timer: Pin<&mut tokio::time::Sleep>,
    stop: &mut watch::Receiver<bool>,
) -> Recv {
    let mut started: Option<Instant> = None;
    let mut closing: Option<Instant> = None;
    // While idle: when to give the connection back (`yield_after`; never: the end), and when
    // the keep-alive time ends, both from the first moment it was idle (empty lines the client
    // sends do not move them).
    let mut idle: Option<(Instant, Instant)> = None;
    let mut charge = HeadCharge::default();
    loop {
        if !carry.is_empty() {
            match head::parse(carry, limits.max_head, limits.max_headers) {
                Ok(Some(h)) => return Recv::Head(h),
                Ok(None) => {}
                Err(e) => return Recv::Refused(e),
            }
        }
        let stopping = *stop.borrow();
        if stopping && carry.is_empty() && closing.is_some_and(|t| Instant::now() >= t) {
            return Recv::End;
        }
        let deadline = match (carry.is_empty(), started) {
            // Stopping: an idle connection gets a short grace for the request its client may
            // already have sent (answered with `Connection: close`), so closing it does not
            // race that request.
            (true, _) if stopping => *closing.get_or_insert_with(|| {
                (Instant::now() + STOP_GRACE).min(Instant::now() + limits.keepalive_timeout)
            }),
            (true, _) => {
                let (at, until) = *idle.get_or_insert_with(|| {
                    let now = Instant::now();
                    let until = now + limits.keepalive_timeout;
                    (limits.yield_after.map_or(until, |after| now + after), until)
                });
                at.min(until)
            }
            (false, Some(t)) => t + limits.header_read_timeout,
            (false, None) => {
                let t = Instant::now();
                started = Some(t);
                t + limits.header_read_timeout
            }
        };
        // Moving a tokio timer costs ~120 instructions, and every request would move it: it
        // stays where it is unless it must fire sooner (or has fired), and firing early only
        // means one more turn here.
        if deadline < timer.deadline() || timer.is_elapsed() {
            timer.as_mut().reset(deadline);
        }
        tokio::select! {
            biased;
            r = read_some(io) => match r {
                Ok(b) if b.is_empty() => return Recv::End,
                Ok(b) => {
                    // An incomplete head starts its timeout at the next turn (`started`):
                    // a complete one never reads the clock for it.
                    if carry.is_empty() {
                        *carry = b;
                    } else {
                        carry.extend_from_slice(&b);
                    }
                    if carry.len() > FREE_HEAD && !charge.hold(carry.capacity()) {
                        tracing::info!(
                            budget = PARTIAL_HEADS_BUDGET,
                            "partial request heads of all connections over their budget; 431"
                        );
                        return Recv::Refused(HeadError::TooLarge);
                    }
                }
                Err(_) => return Recv::End,
            },
            _ = &mut timer => {
                if Instant::now() < deadline {
                    continue;
                }
                if carry.is_empty() && *stop.borrow() && closing.is_none() {
                    // A stop seen only now (below): the grace starts.
                    continue;
                }
                if let Some((at, until)) = idle.filter(|_| carry.is_empty() && !*stop.borrow()) {
                    if at < until && Instant::now() >= at {
                        return Recv::Idle(until);
                    }
                }
                if !carry.is_empty() {
                    tracing::debug!("request head not complete within the header read timeout; closing");
                }
                return Recv::End;
            }
            // A stop starts the grace above; a dropped sender (no one can stop us any more)
            // ends the connection at once. A connection given back when idle (`yield_after`)
            // does not wait for it: waiting costs ~250 instructions a request, and within
            // `yield_after` the timer above or the wait it is given back to sees the stop.
            r = stop.changed(), if carry.is_empty() && !*stop.borrow() && limits.yield_after.is_none() => {
                if r.is_err() {
                    return Recv::End;
                }
            }
        }
    }
}

/// The request for the pipeline, and the feed of its body if it has one.
fn request(head: head::Head) -> (Request<ClientBody>, Option<Feed>) {
    let (decoder, length) = match head.framing {
        Framing::None => (None, None),
        Framing::Length(n) => (Some(Decoder::Length(n)), Some(n)),
        Framing::Chunked => (Some(Decoder::chunked()), None),
    };
    let (body, feed) = match decoder {
        None => (ClientBody::Empty, None),
        Some(d) => {
            let (feeder, incoming) = crate::http1::body::channel(length);
            let feed = Feed::new(feeder, d, head.expects_continue);
            (ClientBody::H1(incoming), Some(feed))
        }
    };
    let mut req = Request::new(body);
    *req.method_mut() = head.method;
    *req.uri_mut() = head.uri;
    *req.version_mut() = head.version;
    *req.headers_mut() = head.headers;
    (req, feed)
}

/// handle: runs the pipeline while its body is fed to it (from `carry` and the socket, as it
/// asks for more), and writes the origin's interim answers (`interim`) as they come.
async fn handle<I, F>(
    io: &mut I,
    carry: &mut BytesMut,
    handling: F,
    mut feed: Option<&mut Feed>,
    interim: Option<&Interim>,
) -> Response<ProxyBody>
where
    I: AsyncRead + AsyncWrite + Unpin,
    F: Future<Output = Response<ProxyBody>>,
{
    tokio::pin!(handling);
    if feed.is_none() {
        let Some(i) = interim else {
            return handling.await;
        };
        // No body to feed: the pipeline, and between its steps the interim answers it passed
        // on (a hit answers at the first poll and never looks at them).
        loop {
            let next = std::future::poll_fn(|cx| {
                if let Poll::Ready(res) = handling.as_mut().poll(cx) {
                    return Poll::Ready(Ok(res));
                }
                i.poll_take(cx).map(Err)
            })
            .await;
            match next {
                Ok(res) => return res,
                Err(answers) => {
                    if write_interim(io, answers).await.is_err() {
                        i.clear();
                    }
                }
            }
        }
    }
    Box::pin(async {
        loop {
            let feeding = feed.as_deref().is_some_and(Feed::active);
            tokio::select! {
                biased;
                res = &mut handling => break res,
                _ = step(feed.as_deref_mut(), io, carry), if feeding => {}
                answers = take_interim(interim), if interim.is_some() => {
                    if write_interim(io, answers).await.is_err() {
                        // The client is gone: the pipeline finds out when it writes.
                        if let Some(i) = interim {
                            i.clear();
                        }
                    }
                }
            }
        }
    })
    .await
}

/// [`Feed::step`] when there is a feed.
async fn step<I: AsyncRead + AsyncWrite + Unpin>(
    feed: Option<&mut Feed>,
    io: &mut I,
    carry: &mut BytesMut,
) {
    match feed {
        Some(f) => f.step(io, carry).await,
        None => std::future::pending().await,
    }
}

/// The interim answers waiting for this connection, once there are some.
async fn take_interim(interim: Option<&Interim>) -> Vec<(http::StatusCode, rampart_head::Fields)> {
    match interim {
        Some(i) => std::future::poll_fn(|cx| i.poll_take(cx)).await,
        None => std::future::pending().await,
    }
}

/// Writes interim answers (their fields as the origin sent them, hop-by-hop ones out), flushed
/// so they arrive before the final answer is ready.
async fn write_interim<W: AsyncWrite + Unpin>(
    io: &mut W,
    answers: Vec<(http::StatusCode, rampart_head::Fields)>,
) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(256);
    for (status, mut headers) in answers {
        crate::headers::strip_hop_by_hop(&mut headers);
        write::interim(&mut out, status, &headers);
    }
    io.write_all(&out).await?;
    io.flush().await
}

/// Writes the response. A body the pipeline did not read to its end decides whether
/// the connection can carry another request, and the head says so; with an origin answering
/// while the body still streams to it, the body goes on being fed while the response is
/// written. Returns whether the connection stays open.
async fn write_response<I: AsyncRead + AsyncWrite + Unpin>(
    io: &mut I,
    carry: &mut BytesMut,
    mut res: Response<ProxyBody>,
    mut feed: Option<&mut Feed>,
    mut ex: write::Exchange,
    limits: &Limits,
) -> bool {
    let mut duplex = false;
    if let Some(f) = feed.as_deref_mut() {
        if f.broken {
            ex.keep_alive = false;
        } else if !f.finished && !f.decoder.is_done() {
            if f.continue_owed || res.status().as_u16() >= 400 {
                // An answer about the request (its body too large, too slow, refused…), or a
                // client still waiting for 100 Continue: the rest of the body is not waited for.
                ex.keep_alive = false;
            } else if !f.feeder.reader_gone() {
                // The origin answers while the body still streams to it.
                duplex = true;
            } else if !f.skip_buffered(carry) {
                ex.keep_alive = false;
            }
        }
    }
    let stored = res.body().stored_head();
    let hint = http_body::Body::size_hint(res.body()).exact();
    // Room for the head, and for a small body sent in the same write.
    let room = stored.map_or(0, |s| s.wire.block.len())
        + hint.filter(|n| *n <= write::COALESCE as u64).unwrap_or(0) as usize;
    let mut out = Vec::with_capacity(512 + room);
    let (framing, keep_alive) =
        write::head(&mut out, res.status(), stored, res.headers(), hint, ex);
    // Boxed, as the pipeline's future: between requests the connection keeps only what it
    // needs to wait for the next head.
    let sent = match feed.as_deref_mut() {
        Some(f) if duplex => {
            Box::pin(async {
                let (mut rd, mut wr) = tokio::io::split(&mut *io);
                let sending = write::send(&mut wr, out, framing, res.body_mut());
                tokio::pin!(sending);
                loop {
                    tokio::select! {
                        biased;
                        r = &mut sending => break r,
                        _ = f.pump(&mut rd, carry), if f.active() => {}
                    }
                }
            })
            .await
        }
        // Head and body in one buffer: one write, without the boxed sender's state.
        _ if whole(&mut out, framing, res.body_mut()) => match io.write_all(&out).await {
            Ok(()) => io.flush().await.map(|()| write::Sent::Complete),
            Err(e) => Err(e),
        },
        _ => boxed!(write::send(&mut *io, out, framing, res.body_mut())).await,
    };
    drop(res);
    match sent {
        Ok(write::Sent::Complete) => {}
        Ok(write::Sent::Cut) | Err(_) => return false,
    }
    let Some(f) = feed else {
        return keep_alive;
    };
    if duplex && keep_alive && f.active() {
        // The origin answered early but still reads the body: the rest goes to it.
        boxed!(f.pump_to_end(io, carry, limits.body_idle_timeout)).await;
    }
    if f.broken {
        false
    } else if keep_alive && !f.decoder.is_done() {
        // The rest of a body the origin did not wait for.
        boxed!(f.skip(io, carry, SKIP_UNREAD, limits.header_read_timeout)).await
    } else {
        keep_alive
    }
}

/// Whether the response is all in `out` for one write: no body is sent (HEAD, 1xx, 204, 304), or a
/// body already in memory, as long as its length says, fits in the same write
/// ([`write::COALESCE`]) and is put after its head. False: the body is as it was.
fn whole(out: &mut Vec<u8>, framing: write::Framing, body: &mut ProxyBody) -> bool {
    match framing {
        write::Framing::None => true,
        write::Framing::Length(n) if n <= write::COALESCE.saturating_sub(out.len()) as u64 => {
            match body.take_whole(n as usize) {
                Some(b) => {
                    out.extend_from_slice(&b);
                    true
                }
                None => false,
            }
        }
        _ => false,
    }
}

/// Answers a refused head and ends the connection.
async fn refuse<W: AsyncWrite + Unpin>(io: &mut W, e: HeadError) {
    let (error, reason) = match e {
        HeadError::Bad(reason) => (ProxyError::BadRequest(reason), reason),
        HeadError::TooLarge => (ProxyError::HeadTooLarge, "request head too large"),
        HeadError::UriTooLong => (ProxyError::UriTooLong, "request target too long"),
        HeadError::Version => (
            ProxyError::VersionNotSupported,
            "HTTP version not supported",
        ),
    };
    tracing::info!(reason, "request refused before routing (connection closed)");
    let mut res = error.to_response();
    crate::telemetry::metrics::get().malformed(res.status().as_u16());
    res.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    let ex = write::Exchange {
        head_request: false,
        version: http::Version::HTTP_11,
        keep_alive: false,
    };
    let mut out = Vec::with_capacity(256);
    let hint = http_body::Body::size_hint(res.body()).exact();
    let (framing, _) = write::head(&mut out, res.status(), None, res.headers(), hint, ex);
    let _ = write::send(io, out, framing, res.body_mut()).await;
    let _ = io.shutdown().await;
}
