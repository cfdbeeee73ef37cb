//! What the connection sends: the [`Outbox`] its frames wait in until the socket takes them
//! (small frames copied together, bodies queued as the `Bytes` they are, all written with one
//! vectored write), and the response head as an HPACK block ([`response_block`]).
//!
//! Every header block rampart sends is encoded without the dynamic table (RFC 7541 §6.2.2), so
//! a block is valid on any connection: a fresh hit's stored fields are encoded once per object
//! ([`stored_block`]) and copied as they are, with only `age`, `x-arc2-cache-age` and the
//! fields added per response encoded each time.

use rampart_head::Fields;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderName, StatusCode};
use tokio::io::AsyncWrite;

use crate::body::StoredHead;
use crate::http2::hpack;

/// Body chunks up to this size are copied next to their frame header (an iovec of its own
/// costs more than the copy).
pub const COPY_BELOW: usize = 2048;

/// Slices one vectored write takes at most.
const MAX_SLICES: usize = 64;

enum Seg {
    /// A range of the outbox's own buffer.
    Own(Range<usize>),
    Shared(Bytes),
}

/// Bytes queued for the socket, in order.
#[derive(Default)]
pub struct Outbox {
    buf: Vec<u8>,
    /// `buf[..sealed]` belongs to queued segments; `buf[sealed..]` is the open tail, sent after
    /// every segment.
    sealed: usize,
    segs: VecDeque<Seg>,
    /// Bytes of the first segment (or of the tail, when there are none) already written.
    done: usize,
    queued: usize,
}

impl Outbox {
    /// The buffer frames are written into (appended to what is queued).
    pub fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Call after writing into [`Outbox::buf`]: counts what was added since `before`.
    pub fn added(&mut self, before: usize) {
        self.queued += self.buf.len() - before;
    }

    /// Queues `b` after what is queued, without copying it.
    pub fn push_shared(&mut self, b: Bytes) {
        if b.len() < COPY_BELOW {
            self.buf.extend_from_slice(&b);
            self.queued += b.len();
            return;
        }
        if self.buf.len() > self.sealed {
            self.segs.push_back(Seg::Own(self.sealed..self.buf.len()));
            self.sealed = self.buf.len();
        }
        self.queued += b.len();
        self.segs.push_back(Seg::Shared(b));
    }

    /// Bytes not yet written.
    pub fn len(&self) -> usize {
        self.queued
    }

    pub fn is_empty(&self) -> bool {
        self.queued == 0
    }

    /// Writes what is queued until it is all out (`Ready(Ok)`) or the socket is full.
    pub fn poll_write<W: AsyncWrite + Unpin>(
        &mut self,
        w: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while self.queued > 0 {
            let n = {
                let mut slices: [IoSlice<'_>; MAX_SLICES] = [IoSlice::new(&[]); MAX_SLICES];
                let mut k = 0;
                let mut skip = self.done;
                for seg in &self.segs {
                    if k == MAX_SLICES {
                        break;
                    }
                    let b: &[u8] = match seg {
                        Seg::Own(r) => &self.buf[r.clone()],
                        Seg::Shared(b) => b,
                    };
                    slices[k] = IoSlice::new(&b[skip..]);
                    skip = 0;
                    k += 1;
                }
                if k < MAX_SLICES && self.buf.len() > self.sealed {
                    slices[k] = IoSlice::new(&self.buf[self.sealed + skip..]);
                    k += 1;
                }
                match Pin::new(&mut *w).poll_write_vectored(cx, &slices[..k]) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            };
            self.advance(n);
        }
        Poll::Ready(Ok(()))
    }

    fn advance(&mut self, mut n: usize) {
        self.queued -= n;
        while n > 0 {
            let Some(seg) = self.segs.front() else {
                // The tail.
                self.done += n;
                break;
            };
            let len = match seg {
                Seg::Own(r) => r.len(),
                Seg::Shared(b) => b.len(),
            } - self.done;
            if n < len {
                self.done += n;
                return;
            }
            n -= len;
            self.done = 0;
            self.segs.pop_front();
        }
        if self.queued == 0 {
            self.buf.clear();
            self.sealed = 0;
            self.done = 0;
            // A burst's buffer is not kept by an idle connection.
            if self.buf.capacity() > 64 * 1024 {
                self.buf = Vec::new();
            }
        }
    }
}

/// Fields a response never carries over HTTP/2 (RFC 9113 §8.2.2).
fn connection_specific(name: &HeaderName) -> bool {
    name == CONNECTION
        || name == TRANSFER_ENCODING
        || name == UPGRADE
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

/// The HPACK block of a response: `:status`, the stored fields of a hit (`stored`, from the
/// block made once per object) and its age, then `headers`, then `content-length` (the body's
/// exact `length` when the fields have none) and `date` when no field gave one.
pub fn response_block(
    out: &mut Vec<u8>,
    status: StatusCode,
    stored: Option<(StoredHead<'_>, &[u8])>,
    headers: &Fields,
    length: Option<u64>,
) {
    hpack::encode_status(status.as_u16(), out);
    let mut has_date = false;
    if let Some((s, block)) = stored {
        out.extend_from_slice(block);
        has_date = s.wire.has_date;
        let mut digits = [0u8; 20];
        let age = crate::http1::numbers::itoa(s.age, &mut digits);
        hpack::encode_field(b"age", age, out);
        out.extend_from_slice(arc2_age_name());
        hpack::encode_value(age, out);
    }
    let mut has_length = false;
    for (name, value) in headers {
        if connection_specific(name) {
            continue;
        }
        if name == CONTENT_LENGTH {
            has_length = true;
        } else if name == DATE {
            has_date = true;
        }
        if value.is_sensitive() {
            hpack::encode_field_never_indexed(name.as_str().as_bytes(), value.as_bytes(), out);
        } else {
            hpack::encode_field(name.as_str().as_bytes(), value.as_bytes(), out);
        }
    }
    let bodiless = status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
    if let (false, false, Some(n)) = (has_length, bodiless, length) {
        let mut digits = [0u8; 20];
        hpack::encode_field(
            b"content-length",
            crate::http1::numbers::itoa(n, &mut digits),
            out,
        );
    }
    if !has_date {
        date_field(out);
    }
}

thread_local! {
    /// `date` of the current second as an HPACK field (its Huffman coding costs more than the
    /// rest of a hit's header block).
    static DATE_FIELD: RefCell<(u64, Vec<u8>)> = const { RefCell::new((0, Vec::new())) };
}

fn date_field(out: &mut Vec<u8>) {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE_FIELD.with(|d| {
        let mut d = d.borrow_mut();
        if d.0 != secs || d.1.is_empty() {
            let mut text = Vec::with_capacity(29);
            crate::http1::server::write::date(&mut text);
            d.1.clear();
            hpack::encode_field(b"date", &text, &mut d.1);
            d.0 = secs;
        }
        out.extend_from_slice(&d.1);
    });
}

/// `x-arc2-cache-age` as the start of a literal without indexing, encoded once.
fn arc2_age_name() -> &'static [u8] {
    static NAME: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let mut v = Vec::new();
        hpack::encode_field(b"x-arc2-cache-age", b"", &mut v);
        // Without the empty value's length byte.
        v.pop();
        v
    })
}

/// An interim (1xx) response's block: its status and fields.
pub fn interim_block(out: &mut Vec<u8>, status: StatusCode, headers: &Fields) {
    hpack::encode_status(status.as_u16(), out);
    for (name, value) in headers {
        if !connection_specific(name) {
            hpack::encode_field(name.as_str().as_bytes(), value.as_bytes(), out);
        }
    }
}

/// A trailer block: the fields alone.
pub fn fields_block(out: &mut Vec<u8>, headers: &http::HeaderMap) {
    for (name, value) in headers {
        if !connection_specific(name) {
            hpack::encode_field(name.as_str().as_bytes(), value.as_bytes(), out);
        }
    }
}

/// A stored object's wire block (`name: value\r\n` lines, `rampart_cache::store::WireFields`)
/// as an HPACK block without the dynamic table: made once per object, on its first HTTP/2 hit.
pub fn stored_block(wire: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(wire.len());
    for line in wire.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let value = value.strip_prefix(b" ").unwrap_or(value);
        hpack::encode_field(name, value, &mut out);
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outbox_keeps_order_across_copied_and_shared_bytes() {
        let mut o = Outbox::default();
        let before = o.buf().len();
        o.buf().extend_from_slice(b"head1");
        o.added(before);
        o.push_shared(Bytes::from(vec![b'x'; COPY_BELOW]));
        let before = o.buf().len();
        o.buf().extend_from_slice(b"head2");
        o.added(before);
        o.push_shared(Bytes::from_static(b"small"));
        let mut sink: Vec<u8> = Vec::new();
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(
            o.poll_write(&mut sink, &mut cx),
            Poll::Ready(Ok(()))
        ));
        let mut want = b"head1".to_vec();
        want.extend_from_slice(&vec![b'x'; COPY_BELOW]);
        want.extend_from_slice(b"head2small");
        assert_eq!(sink, want);
        assert!(o.is_empty());
    }

    #[test]
    fn a_stored_block_decodes_to_the_wire_fields() {
        let block =
            stored_block(b"etag: \"v1\"\r\ncontent-type: text/plain\r\nx-arc2-cache: HIT\r\n");
        let mut d = hpack::Decoder::new(4096);
        let mut got = Vec::new();
        d.decode(&block, 1 << 20, |n, v| got.push((n.to_vec(), v.to_vec())))
            .expect("decodes");
        assert_eq!(
            got,
            vec![
                (b"etag".to_vec(), b"\"v1\"".to_vec()),
                (b"content-type".to_vec(), b"text/plain".to_vec()),
                (b"x-arc2-cache".to_vec(), b"HIT".to_vec()),
            ]
        );
        // Nothing entered the dynamic table: the block is valid on any connection.
        assert_eq!(d.table_size(), 0);
    }
}
