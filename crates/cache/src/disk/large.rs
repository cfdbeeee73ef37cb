//! Large objects: one file each (`NNNNNNNN.big`), for bodies larger than half a segment, up to
//! `cache_max_object`. Their bodies never enter memory whole: they are written as they arrive
//! from the origin (while the client gets them too) and read back a chunk at a time.
//!
//! A file is the body, then a CRC-32 per [`CHUNK`] of it, then the record head (as in a
//! segment, its body length 0 and its body checksum the CRC-32 of the chunk table), then a
//! trailer: the table's and the head's lengths, the body's length and `RPL1`. It is written
//! under a temporary name, flushed, then renamed: a file with the final name is whole. Every
//! chunk is checked against its CRC before a byte of it is sent; a range reads only the
//! chunks it covers.

use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

pub use crate::extent::{Extent, CHUNK};
pub const TRAILER: usize = 20;
const MAGIC: &[u8; 4] = b"RPL1";

/// The trailer of a large file.
pub fn encode_trailer(table_len: u32, head_len: u32, body_len: u64) -> [u8; TRAILER] {
    let mut t = [0; TRAILER];
    t[..4].copy_from_slice(&table_len.to_be_bytes());
    t[4..8].copy_from_slice(&head_len.to_be_bytes());
    t[8..16].copy_from_slice(&body_len.to_be_bytes());
    t[16..].copy_from_slice(MAGIC);
    t
}

/// Where a large file's parts are, from its trailer and its length; `None` unless they add up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub body_len: u64,
    pub table_at: u64,
    pub table_len: u32,
    pub head_at: u64,
    pub head_len: u32,
}

pub fn decode_trailer(t: &[u8; TRAILER], file_len: u64) -> Option<Layout> {
    if &t[16..] != MAGIC {
        return None;
    }
    let table_len = u32::from_be_bytes([t[0], t[1], t[2], t[3]]);
    let head_len = u32::from_be_bytes([t[4], t[5], t[6], t[7]]);
    let mut b = [0; 8];
    b.copy_from_slice(&t[8..16]);
    let body_len = u64::from_be_bytes(b);
    let chunks = body_len.div_ceil(CHUNK);
    if u64::from(table_len) != chunks * 4 {
        return None;
    }
    let total = body_len
        .checked_add(u64::from(table_len))?
        .checked_add(u64::from(head_len))?
        .checked_add(TRAILER as u64)?;
    if total != file_len {
        return None;
    }
    Some(Layout {
        body_len,
        table_at: body_len,
        table_len,
        head_at: body_len + u64::from(table_len),
        head_len,
    })
}

/// Reads a large file's layout (its trailer).
pub fn layout(file: &File) -> std::io::Result<Layout> {
    let len = file.metadata()?.len();
    if len < TRAILER as u64 {
        return Err(ErrorKind::InvalidData.into());
    }
    let mut t = [0; TRAILER];
    file.read_exact_at(&mut t, len - TRAILER as u64)?;
    decode_trailer(&t, len).ok_or_else(|| ErrorKind::InvalidData.into())
}

/// The chunk table as bytes.
pub fn encode_table(crcs: &[u32]) -> Vec<u8> {
    crcs.iter().flat_map(|c| c.to_be_bytes()).collect()
}

pub fn decode_table(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A large object being written (see [`crate::disk::DiskStore::begin_large`]): the body's
/// chunks go to the tier's writer as they pass; [`LargeWrite::finish`] completes the file,
/// dropping it unfinished removes it.
pub struct LargeWrite {
    pub(crate) token: u64,
    pub(crate) tx: std::sync::mpsc::SyncSender<super::Job>,
    pub(crate) written: u64,
    pub(crate) limit: u64,
    /// What is queued for the writer (see [`Queue`]).
    pub(crate) queue: Arc<Queue>,
    /// Pieces gathered for the next job (one job per [`BATCH`] bytes).
    pub(crate) batch: Vec<Bytes>,
    pub(crate) batch_len: usize,
    pub(crate) done: bool,
    pub(crate) aborted: Arc<AtomicBool>,
}

/// Bytes sent to the writer in one job.
const BATCH: usize = 256 << 10;
/// Bytes a large write may have queued: past half of it, the body waits for the writer (the
/// origin is read no faster than the disk takes it, as NGINX's temporary file does); a write
/// that would pass all of it is given up.
pub const QUEUED_MAX: u64 = 16 << 20;

/// What a large write has queued for the writer, and the task waiting for room.
#[derive(Debug, Default)]
pub struct Queue {
    pub(crate) bytes: AtomicU64,
    waker: std::sync::Mutex<Option<std::task::Waker>>,
}

impl Queue {
    /// The writer wrote `n` of the queued bytes: wakes the body waiting for room.
    pub(crate) fn written(&self, n: u64) {
        let left = self.bytes.fetch_sub(n, Ordering::AcqRel) - n;
        if left <= QUEUED_MAX / 2 {
            let w = self.waker.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(w) = w {
                w.wake();
            }
        }
    }
}

impl std::fmt::Debug for LargeWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LargeWrite")
            .field("written", &self.written)
            .finish()
    }
}

impl LargeWrite {
    /// Ready when the writer has room for more of the body (at most half of [`QUEUED_MAX`]
    /// queued); the body waits for it before it reads more from the origin.
    pub fn poll_room(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.queue.bytes.load(Ordering::Acquire) <= QUEUED_MAX / 2 {
            return std::task::Poll::Ready(());
        }
        *self.queue.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
        // Written meanwhile: no wake would come.
        if self.queue.bytes.load(Ordering::Acquire) <= QUEUED_MAX / 2 {
            return std::task::Poll::Ready(());
        }
        std::task::Poll::Pending
    }

    /// Queues the next piece; false when the write is given up (longer than
    /// `cache_max_object`, the writer too far behind, an error): drop it then.
    pub fn push(&mut self, chunk: Bytes) -> bool {
        if self.aborted.load(Ordering::Relaxed) {
            return false;
        }
        let n = chunk.len() as u64;
        self.written += n;
        if self.written > self.limit || self.queue.bytes.load(Ordering::Relaxed) + n > QUEUED_MAX {
            return false;
        }
        self.queue.bytes.fetch_add(n, Ordering::Relaxed);
        self.batch_len += chunk.len();
        self.batch.push(chunk);
        self.batch_len < BATCH || self.send_batch()
    }

    fn send_batch(&mut self) -> bool {
        if self.batch.is_empty() {
            return true;
        }
        self.batch_len = 0;
        let job = super::Job::LargeChunk {
            token: self.token,
            data: std::mem::take(&mut self.batch),
            queue: self.queue.clone(),
        };
        if self.tx.try_send(job).is_ok() {
            return true;
        }
        self.aborted.store(true, Ordering::Relaxed);
        false
    }

    /// The body is complete: `object` (its head; its body is not read) names and describes it.
    pub fn finish(
        mut self,
        key: crate::key::CacheKey,
        variant: Option<Bytes>,
        object: Arc<crate::object::Object>,
    ) {
        if !self.send_batch() {
            return;
        }
        self.done = true;
        let job = super::Job::LargeEnd {
            token: self.token,
            len: self.written,
            key,
            variant,
            object,
        };
        if self.tx.try_send(job).is_err() {
            self.aborted.store(true, Ordering::Relaxed);
        }
    }
}

impl Drop for LargeWrite {
    fn drop(&mut self) {
        if !self.done {
            self.aborted.store(true, Ordering::Relaxed);
            let _ = self.tx.try_send(super::Job::LargeAbort(self.token));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trailer_must_add_up() {
        let body = 600_000u64;
        let table = (body.div_ceil(CHUNK) * 4) as u32;
        let t = encode_trailer(table, 100, body);
        let total = body + u64::from(table) + 100 + TRAILER as u64;
        let l = decode_trailer(&t, total).expect("adds up");
        assert_eq!(l.head_at, body + u64::from(table));
        assert_eq!(decode_trailer(&t, total - 1), None, "truncated");
        assert_eq!(
            decode_trailer(&encode_trailer(table + 4, 100, body), total + 4),
            None
        );
        let mut bad = t;
        bad[19] = b'2';
        assert_eq!(decode_trailer(&bad, total), None);
    }
}
