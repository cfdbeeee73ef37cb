//! A switched connection's bytes, both ways (WebSocket after `101 Switching Protocols`, or an
//! HTTP/2 extended CONNECT stream): [`Tunnel`] is what the upgrade stage hands the server
//! with the response, [`splice`] moves the bytes until both sides are done or the tunnel has
//! been idle for its timeout.
//!
//! Memory: an idle tunnel holds no buffer. Reads go into one scratch buffer per worker thread
//! and are written on at once; only bytes the other side cannot take yet are kept (as
//! `Bytes`) until it can. That is what keeps 10,000 idle WebSockets within a few dozen MiB
//! where two 8 KiB copy buffers each would take 160.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use std::sync::{Arc, Mutex};

use crate::net::origin_stream::{OriginStream, Prefixed};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The origin's connection after its `101`, with what it sent after the head: carried from
/// the origin client to the WebSocket stage in the response's extensions (which must be
/// `Clone`: the first to take it has it).
#[derive(Clone)]
pub struct OriginSide(Arc<Mutex<Option<Prefixed<OriginStream>>>>);

impl OriginSide {
    pub fn new(io: Prefixed<OriginStream>) -> Self {
        OriginSide(Arc::new(Mutex::new(Some(io))))
    }

    pub fn take(&self) -> Option<Prefixed<OriginStream>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl std::fmt::Debug for OriginSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OriginSide")
    }
}

/// The origin's side of a switched connection, carried to the server in the response's
/// extensions.
#[derive(Clone)]
pub struct Tunnel {
    pub origin: OriginSide,
    /// No byte either way for this long ends the tunnel (`websocket_idle_timeout_seconds`).
    pub idle: Duration,
}

impl std::fmt::Debug for Tunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnel").field("idle", &self.idle).finish()
    }
}

/// Bytes moved by a finished tunnel: (client → origin, origin → client).
pub type Moved = (u64, u64);

/// Why a tunnel ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Both sides closed (or one closed and the other then did).
    Closed,
    /// No byte moved for the idle timeout.
    Idle,
    /// A read or write failed (a peer vanished, reset the connection).
    Failed,
}

/// Waits for the origin's side of `tunnel`, then splices it with `client` (after sending
/// `early`, bytes the client sent after its request head).
pub async fn run<C>(client: C, early: Bytes, tunnel: Tunnel) -> (Ended, Moved)
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let Some(origin) = tunnel.origin.take() else {
        tracing::debug!("the origin's side of the upgrade was taken already");
        return (Ended::Failed, (0, 0));
    };
    splice(client, origin, early, tunnel.idle).await
}

thread_local! {
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; 16 * 1024].into_boxed_slice());
}

/// One direction of a splice.
#[derive(Default)]
struct Half {
    /// Read but not yet written.
    pending: Bytes,
    /// The reader reached its end; the writer is shut down once `pending` is out.
    eof: bool,
    /// The writer has been shut down.
    done: bool,
    moved: u64,
}

impl Half {
    /// Moves what it can from `r` to `w`; `Ready(Ok(true))` when it made progress,
    /// `Ready(Ok(false))` once finished, `Pending` when waiting on either side.
    fn poll<R, W>(&mut self, cx: &mut Context<'_>, r: &mut R, w: &mut W) -> Poll<io::Result<bool>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let mut progressed = false;
        loop {
            if self.done {
                return Poll::Ready(Ok(progressed));
            }
            if !self.pending.is_empty() {
                match Pin::new(&mut *w).poll_write(cx, &self.pending) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => {
                        let _ = self.pending.split_to(n);
                        self.moved += n as u64;
                        progressed = true;
                        if !self.pending.is_empty() {
                            continue;
                        }
                        // The scratch space is per thread: give back what a large write kept.
                        self.pending = Bytes::new();
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return pending_or(progressed),
                }
            }
            if self.eof {
                match Pin::new(&mut *w).poll_shutdown(cx) {
                    Poll::Ready(_) => {
                        self.done = true;
                        return Poll::Ready(Ok(true));
                    }
                    Poll::Pending => return pending_or(progressed),
                }
            }
            // Read into the thread's scratch space and write on at once; keep only the rest.
            let step = SCRATCH.with(|s| {
                let mut s = s.borrow_mut();
                let mut rb = ReadBuf::new(&mut s[..]);
                match Pin::new(&mut *r).poll_read(cx, &mut rb) {
                    Poll::Ready(Ok(())) if rb.filled().is_empty() => Poll::Ready(Ok(None)),
                    Poll::Ready(Ok(())) => {
                        let data = rb.filled();
                        let written = match Pin::new(&mut *w).poll_write(cx, data) {
                            Poll::Ready(Ok(n)) => n,
                            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                            Poll::Pending => 0,
                        };
                        Poll::Ready(Ok(Some((
                            written,
                            Bytes::copy_from_slice(&data[written..]),
                        ))))
                    }
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                }
            });
            match step {
                Poll::Ready(Ok(None)) => {
                    self.eof = true;
                    progressed = true;
                }
                Poll::Ready(Ok(Some((written, rest)))) => {
                    self.moved += written as u64;
                    self.pending = rest;
                    progressed = true;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return pending_or(progressed),
            }
        }
    }
}

fn pending_or(progressed: bool) -> Poll<io::Result<bool>> {
    if progressed {
        Poll::Ready(Ok(true))
    } else {
        Poll::Pending
    }
}

/// Moves bytes between `a` (the client) and `b` (the origin) until both directions have
/// ended, one fails, or nothing moves for `idle`. `early` goes to `b` first.
pub async fn splice<A, B>(mut a: A, mut b: B, early: Bytes, idle: Duration) -> (Ended, Moved)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let mut up = Half {
        pending: early,
        ..Half::default()
    };
    let mut down = Half::default();
    let mut last = Instant::now();
    let mut timer: Pin<Box<Sleep>> = Box::pin(tokio::time::sleep(idle));
    let ended = std::future::poll_fn(|cx| {
        loop {
            let u = up.poll(cx, &mut a, &mut b);
            let d = down.poll(cx, &mut b, &mut a);
            let mut moved = false;
            for r in [&u, &d] {
                match r {
                    Poll::Ready(Err(_)) => return Poll::Ready(Ended::Failed),
                    Poll::Ready(Ok(true)) => moved = true,
                    _ => {}
                }
            }
            if up.done && down.done {
                return Poll::Ready(Ended::Closed);
            }
            if moved {
                last = Instant::now();
                continue;
            }
            // Nothing to do now: the timer decides, from the last byte moved. It is moved
            // only when it fires early (bytes moved since it was set), not on every message:
            // re-arming a timer costs more than the check.
            while timer.as_mut().poll(cx).is_ready() {
                let deadline = last + idle;
                if deadline <= Instant::now() {
                    return Poll::Ready(Ended::Idle);
                }
                timer.as_mut().reset(deadline);
            }
            return Poll::Pending;
        }
    })
    .await;
    (ended, (up.moved, down.moved))
}
