//! A request body on an HTTP/1.1 connection: its framing decoded strictly (the chunk rules of
//! `rampart_screen::h1`), and the hand-over from the connection, which owns the socket, to the
//! pipeline, which reads the body when and if it needs it.
//!
//! The hand-over is a one-slot rendezvous: the connection reads from the socket only while the
//! pipeline is waiting for the next piece, so a body nobody reads is never buffered, the
//! client is held back by TCP when the origin is slow, and `Expect: 100-continue` is answered
//! only when the body is really wanted.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

/// Longest chunk-size line and trailer section accepted.
const MAX_CHUNK_LINE: usize = 4096;
const MAX_TRAILERS: usize = 16 * 1024;

/// Decodes a body's framing from the bytes the connection reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoder {
    /// `n` bytes still to come.
    Length(u64),
    /// Chunked: in the size line.
    ChunkSize {
        digits: u8,
        ext: bool,
        line: usize,
        size: u64,
    },
    ChunkSizeLf {
        size: u64,
    },
    ChunkData(u64),
    ChunkDataCr,
    ChunkDataLf,
    Trailers {
        line_len: usize,
        cr: bool,
        total: usize,
    },
    Done,
}

impl Decoder {
    pub fn chunked() -> Decoder {
        Decoder::ChunkSize {
            digits: 0,
            ext: false,
            line: 0,
            size: 0,
        }
    }

    pub fn is_done(&self) -> bool {
        *self == Decoder::Done
    }

    /// Takes what it can from the front of `buf`: `Ok(Some(data))` for body bytes, `Ok(None)`
    /// when `buf` is used up (or the body is done) without more data, `Err` on broken framing.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, &'static str> {
        self.decode_keeping(buf, None)
    }

    /// [`Decoder::decode`], appending the bytes of a chunked body's trailer section (its
    /// fields and the final CRLF) to `trailers`.
    pub fn decode_keeping(
        &mut self,
        buf: &mut BytesMut,
        mut trailers: Option<&mut Vec<u8>>,
    ) -> Result<Option<Bytes>, &'static str> {
        loop {
            if buf.is_empty() || self.is_done() {
                return Ok(None);
            }
            match *self {
                Decoder::Length(n) => {
                    let take = n.min(buf.len() as u64);
                    *self = if take == n {
                        Decoder::Done
                    } else {
                        Decoder::Length(n - take)
                    };
                    return Ok(Some(buf.split_to(take as usize).freeze()));
                }
                Decoder::ChunkData(n) => {
                    let take = n.min(buf.len() as u64);
                    *self = if take == n {
                        Decoder::ChunkDataCr
                    } else {
                        Decoder::ChunkData(n - take)
                    };
                    return Ok(Some(buf.split_to(take as usize).freeze()));
                }
                _ => {
                    // Framing bytes, one at a time.
                    let mut used = 0;
                    while used < buf.len() && !matches!(self, Decoder::ChunkData(_) | Decoder::Done)
                    {
                        if let (Decoder::Trailers { .. }, Some(t)) =
                            (&*self, trailers.as_deref_mut())
                        {
                            t.push(buf[used]);
                        }
                        self.byte(buf[used])?;
                        used += 1;
                    }
                    let _ = buf.split_to(used);
                }
            }
        }
    }

    fn byte(&mut self, b: u8) -> Result<(), &'static str> {
        *self = match *self {
            Decoder::ChunkSize {
                digits,
                ext,
                line,
                size,
            } => chunk_size_line(digits, ext, line, size, b)?,
            Decoder::ChunkSizeLf { size } => {
                if b != b'\n' {
                    return Err("chunk-size line not ended by CRLF");
                }
                if size == 0 {
                    Decoder::Trailers {
                        line_len: 0,
                        cr: false,
                        total: 0,
                    }
                } else {
                    Decoder::ChunkData(size)
                }
            }
            Decoder::ChunkDataCr => {
                if b != b'\r' {
                    return Err("chunk data not followed by CRLF");
                }
                Decoder::ChunkDataLf
            }
            Decoder::ChunkDataLf => {
                if b != b'\n' {
                    return Err("chunk data not followed by CRLF");
                }
                Decoder::chunked()
            }
            Decoder::Trailers {
                line_len,
                cr,
                total,
            } => {
                if total >= MAX_TRAILERS {
                    return Err("trailer section too large");
                }
                let total = total + 1;
                match (cr, b) {
                    (false, b'\r') => Decoder::Trailers {
                        line_len,
                        cr: true,
                        total,
                    },
                    (true, b'\n') if line_len == 0 => Decoder::Done,
                    (true, b'\n') => Decoder::Trailers {
                        line_len: 0,
                        cr: false,
                        total,
                    },
                    (false, b'\t' | 0x20..=0x7e | 0x80..=0xff) => Decoder::Trailers {
                        line_len: line_len + 1,
                        cr: false,
                        total,
                    },
                    _ => return Err("invalid trailer field"),
                }
            }
            other => other,
        };
        Ok(())
    }
}

/// One byte of a chunk-size line (hex digits, then an extension the decoder skips) in the
/// state it leaves.
#[inline]
fn chunk_size_line(
    digits: u8,
    ext: bool,
    line: usize,
    size: u64,
    b: u8,
) -> Result<Decoder, &'static str> {
    if line >= MAX_CHUNK_LINE {
        return Err("chunk-size line too long");
    }
    let line = line + 1;
    Ok(match b {
        b'\r' if digits > 0 => Decoder::ChunkSizeLf { size },
        b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' if !ext => {
            if digits >= 15 {
                return Err("chunk size too large");
            }
            let v = u64::from((b as char).to_digit(16).unwrap_or(0));
            Decoder::ChunkSize {
                digits: digits + 1,
                ext,
                line,
                size: size << 4 | v,
            }
        }
        b';' | b' ' | b'\t' if digits > 0 => Decoder::ChunkSize {
            digits,
            ext: true,
            line,
            size,
        },
        0x21..=0x7e | 0x80..=0xff if ext => Decoder::ChunkSize {
            digits,
            ext,
            line,
            size,
        },
        _ => return Err("invalid chunk-size line"),
    })
}

/// What the connection hands over.
#[derive(Debug)]
pub enum Piece {
    Data(Bytes),
    /// The body ended as its framing said.
    End,
    /// Broken framing, or the client went away mid-body.
    Broken,
}

#[derive(Debug, Default)]
struct Slot {
    piece: Option<Piece>,
    /// The reader is waiting for the next piece.
    wanted: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
    reader_gone: bool,
}

/// The pipeline's end: a `Body` of the client's bytes.
#[derive(Debug)]
pub struct Incoming {
    slot: Arc<Mutex<Slot>>,
    /// Declared length left (Content-Length bodies), for the size hint.
    left: Option<u64>,
    ended: bool,
}

/// The connection's end.
#[derive(Debug)]
pub struct Feeder {
    slot: Arc<Mutex<Slot>>,
}

pub fn channel(length: Option<u64>) -> (Feeder, Incoming) {
    let slot = Arc::new(Mutex::new(Slot::default()));
    (
        Feeder { slot: slot.clone() },
        Incoming {
            slot,
            left: length,
            ended: false,
        },
    )
}

fn lock(slot: &Mutex<Slot>) -> std::sync::MutexGuard<'_, Slot> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

impl Feeder {
    /// Ready when the reader waits for a piece (`true`) or is gone (`false`).
    pub fn poll_wanted(&self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut s = lock(&self.slot);
        if s.reader_gone {
            return Poll::Ready(false);
        }
        if s.wanted && s.piece.is_none() {
            return Poll::Ready(true);
        }
        s.writer = Some(cx.waker().clone());
        Poll::Pending
    }

    pub async fn wanted(&self) -> bool {
        std::future::poll_fn(|cx| self.poll_wanted(cx)).await
    }

    /// Hands a piece over (call once [`Feeder::wanted`] said so).
    pub fn give(&self, piece: Piece) {
        let mut s = lock(&self.slot);
        s.piece = Some(piece);
        s.wanted = false;
        if let Some(w) = s.reader.take() {
            w.wake();
        }
    }

    /// Whether the reader has dropped the body.
    pub fn reader_gone(&self) -> bool {
        lock(&self.slot).reader_gone
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        // A body cut short by the connection ending: the reader sees it broken.
        let mut s = lock(&self.slot);
        if s.piece.is_none() {
            s.piece = Some(Piece::Broken);
        }
        if let Some(w) = s.reader.take() {
            w.wake();
        }
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        let mut s = lock(&self.slot);
        s.reader_gone = true;
        if let Some(w) = s.writer.take() {
            w.wake();
        }
    }
}

/// A broken client body (the pipeline maps it to 400).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the client's request body broke off or its framing was invalid")]
pub struct Broken;

impl Body for Incoming {
    type Data = Bytes;
    type Error = Broken;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Broken>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let mut s = lock(&self.slot);
        match s.piece.take() {
            Some(Piece::Data(d)) => {
                drop(s);
                if let Some(l) = &mut self.left {
                    *l = l.saturating_sub(d.len() as u64);
                }
                Poll::Ready(Some(Ok(Frame::data(d))))
            }
            Some(Piece::End) => {
                drop(s);
                self.ended = true;
                Poll::Ready(None)
            }
            Some(Piece::Broken) => {
                drop(s);
                self.ended = true;
                Poll::Ready(Some(Err(Broken)))
            }
            None => {
                s.wanted = true;
                s.reader = Some(cx.waker().clone());
                if let Some(w) = s.writer.take() {
                    w.wake();
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.left == Some(0)
    }

    fn size_hint(&self) -> SizeHint {
        match self.left {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn decode_all(
        mut d: Decoder,
        input: &[u8],
        step: usize,
    ) -> Result<(Vec<u8>, Decoder), &'static str> {
        let mut out = Vec::new();
        let mut buf = BytesMut::new();
        for piece in input.chunks(step) {
            buf.extend_from_slice(piece);
            while let Some(data) = d.decode(&mut buf)? {
                out.extend_from_slice(&data);
            }
        }
        Ok((out, d))
    }

    #[test]
    fn chunked_in_any_pieces() {
        let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\nNEXT";
        for step in [1, 2, 3, 7, 100] {
            let (out, d) = decode_all(Decoder::chunked(), &body[..body.len() - 4], step).unwrap();
            assert_eq!(out, b"hello world", "step {step}");
            assert!(d.is_done());
        }
        // What follows the body stays in the buffer.
        let mut buf = BytesMut::from(&body[..]);
        let mut d = Decoder::chunked();
        while d.decode(&mut buf).unwrap().is_some() {}
        assert_eq!(&buf[..], b"NEXT");
    }

    #[test]
    fn broken_chunks_are_refused() {
        for bad in [
            &b"5\nhello\r\n"[..],
            b"5\r\nhelloX\r\n",
            b"g\r\n",
            b"1234567890abcdef0\r\n",
            b";\r\n",
            b"\r\n",
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b"-1\r\n",
            b"ffffffffffffffffff\r\n",
            b"5;a\x00b\r\n",
            b"0\r\nBad\x01: x\r\n\r\n",
        ] {
            assert!(decode_all(Decoder::chunked(), bad, 1).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn length() {
        let (out, d) = decode_all(Decoder::Length(5), b"helloGET", 3).unwrap();
        assert_eq!((out.as_slice(), d), (&b"hello"[..], Decoder::Done));
    }
}
