//! Reading from a socket into a buffer of exactly what arrived: one per-thread scratch buffer
//! takes every read, so an idle connection holds no read buffer of its own.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, ReadBuf};

/// Size of the per-thread read buffer (one read never takes more).
const SCRATCH: usize = 32 * 1024;

thread_local! {
    static SCRATCH_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; SCRATCH].into_boxed_slice());
}

/// Reads what is available (at most [`SCRATCH`] bytes) and returns a copy of exactly that.
/// Empty: end of stream.
pub async fn read_some<R: AsyncRead + Unpin>(io: &mut R) -> io::Result<BytesMut> {
    std::future::poll_fn(|cx| poll_read_some(io, cx)).await
}

/// [`read_some`] as a poll: `Pending` registers `cx` for the socket's next bytes.
pub fn poll_read_some<R: AsyncRead + Unpin>(
    io: &mut R,
    cx: &mut Context<'_>,
) -> Poll<io::Result<BytesMut>> {
    SCRATCH_BUF.with(|s| {
        let mut s = s.borrow_mut();
        let mut rb = ReadBuf::new(&mut s[..]);
        match Pin::new(&mut *io).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(BytesMut::from(rb.filled()))),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    })
}

/// Appends what is available (at most [`SCRATCH`] bytes) to `buf`: `Ready(Ok(0))` is the end
/// of the stream. For connections that keep a buffer while a message is in flight (to
/// origins): the bytes go straight behind what `buf` holds.
pub fn poll_read_into<R: AsyncRead + Unpin>(
    io: &mut R,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
) -> Poll<io::Result<usize>> {
    SCRATCH_BUF.with(|s| {
        let mut s = s.borrow_mut();
        let mut rb = ReadBuf::new(&mut s[..]);
        match Pin::new(&mut *io).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => {
                buf.extend_from_slice(rb.filled());
                Poll::Ready(Ok(rb.filled().len()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    })
}
