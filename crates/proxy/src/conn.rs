//! Per-connection plumbing between the socket and hyper: the HTTP/1.1 framing guard and the
//! per-client-address connection table.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use rampart_screen::h1::{Guard, Verdict};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The client socket as hyper sees it: reads pass through the framing guard.
#[derive(Debug)]
pub struct GuardedIo<T> {
    inner: T,
    guard: Option<Guard>,
    phase: Phase,
    peer: SocketAddr,
    /// The part of [`POISON`] not yet handed over.
    unsent: &'static [u8],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    /// The guard refused the stream: the NUL byte was handed over; reads now end the stream.
    Ended,
}

impl<T> GuardedIo<T> {
    pub fn new(inner: T, guard: Guard, peer: SocketAddr) -> Self {
        GuardedIo {
            inner,
            guard: Some(guard),
            phase: Phase::Open,
            peer,
            unsent: &[],
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for GuardedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.phase == Phase::Ended {
            // What did not fit of the poison, then end of stream.
            let n = buf.remaining().min(this.unsent.len());
            buf.put_slice(&this.unsent[..n]);
            this.unsent = &this.unsent[n..];
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let after = buf.filled().len();
        if after == before {
            return Poll::Ready(Ok(()));
        }
        if let Some(guard) = &mut this.guard {
            match guard.feed(&buf.filled()[before..after]) {
                Verdict::Pass => {
                    if guard.is_passthrough() {
                        // HTTP/2 or a head hyper refuses itself: no more checks.
                        this.guard = None;
                    }
                }
                Verdict::Reject {
                    keep,
                    reason,
                    poison,
                } => {
                    tracing::info!(peer = %this.peer, reason, "request refused: ambiguous HTTP/1.1 framing (400, connection closed)");
                    buf.set_filled(before + keep);
                    // hyper answers 400 to it (see rampart_screen::h1); `keep` is less than what
                    // was read and a read buffer holds far more than a few bytes.
                    let room = buf.remaining().min(poison.len());
                    buf.put_slice(&poison[..room]);
                    this.unsent = &poison[room..];
                    this.phase = Phase::Ended;
                    this.guard = None;
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for GuardedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Open connections per client address, when `max_connections_per_ip` is set.
#[derive(Debug)]
pub struct PerIp {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One counted connection; uncounts itself when dropped.
#[derive(Debug)]
pub struct PerIpSlot {
    table: Arc<PerIp>,
    ip: IpAddr,
}

impl PerIp {
    pub fn new(max: usize) -> Arc<PerIp> {
        Arc::new(PerIp {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Counts a new connection from `ip`, or `None` when that address is at its limit.
    pub fn acquire(self: &Arc<Self>, ip: IpAddr) -> Option<PerIpSlot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(PerIpSlot {
            table: self.clone(),
            ip,
        })
    }
}

impl Drop for PerIpSlot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}
