//! A body kept on disk ([`Extent`]): a large object's, which never enters memory whole. It is
//! read a chunk at a time as it is sent, each chunk checked against its CRC-32 first. It knows
//! nothing of the tier that made it beyond [`ExtentSink`], where it counts what it reads and
//! reports what fails.
//!
//! Its first chunk is read and checked when it is made ([`Extent::open`]), before a response
//! head can be sent: a body bad from its first byte is a miss, not a response cut at once. A
//! chunk found bad later cuts the response (its head is out) and tells the tier, which drops
//! the object, so the next request fetches it again.

use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;

/// Bytes per checksummed chunk (and per read).
pub const CHUNK: u64 = 128 << 10;

/// Where an extent counts its reads and reports its faults (the disk tier).
pub trait ExtentSink: Send + Sync {
    fn read(&self, bytes: u64);
    fn fault(&self, e: &std::io::Error);
    /// A chunk of the extent made from `file` (the tier's id for it) could not be read or
    /// failed its checksum: the object must not be served again.
    fn corrupt(&self, file: u32);
}

/// A body on disk: read a chunk at a time, each checked.
pub struct Extent {
    file: Arc<File>,
    len: u64,
    crcs: Box<[u32]>,
    /// The first chunk, read and checked when the extent was made.
    first: Bytes,
    /// The tier: its counters, and its fault log; and its id for the file.
    sink: Arc<dyn ExtentSink>,
    id: u32,
}

impl std::fmt::Debug for Extent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extent").field("len", &self.len).finish()
    }
}

impl Extent {
    /// The extent of `len` bytes in `file` (the tier's file `id`), its first chunk read and
    /// checked now: an error, reported to the tier, when it is not whole.
    pub(crate) fn open(
        file: Arc<File>,
        id: u32,
        len: u64,
        crcs: Box<[u32]>,
        sink: Arc<dyn ExtentSink>,
    ) -> std::io::Result<Extent> {
        let mut e = Extent {
            file,
            len,
            crcs,
            first: Bytes::new(),
            sink,
            id,
        };
        e.first = e.chunk(0)?;
        Ok(e)
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Up to `max` bytes from `start` (never past the end of the chunk `start` is in), read
    /// and checked: the chunk that holds them is read whole and its CRC compared. An error
    /// for a chunk that cannot be read or fails its checksum (never its bytes).
    pub fn read(&self, start: u64, max: usize) -> std::io::Result<Bytes> {
        if start >= self.len {
            return Ok(Bytes::new());
        }
        let i = start / CHUNK;
        let at = i * CHUNK;
        let chunk = if i == 0 {
            self.first.clone()
        } else {
            self.chunk(i)?
        };
        let from = (start - at) as usize;
        let to = chunk.len().min(from.saturating_add(max));
        Ok(chunk.slice(from..to))
    }

    /// Chunk `i`, read whole and checked (counted; a failure reported, and the object
    /// dropped by the tier).
    fn chunk(&self, i: u64) -> std::io::Result<Bytes> {
        let at = i * CHUNK;
        if at >= self.len {
            return Ok(Bytes::new());
        }
        let n = CHUNK.min(self.len - at) as usize;
        let mut buf = vec![0; n];
        let res = self.file.read_exact_at(&mut buf, at).and_then(|()| {
            let want = self.crcs.get(i as usize).copied();
            if want == Some(crc32fast::hash(&buf)) {
                Ok(())
            } else {
                Err(std::io::Error::new(
                    ErrorKind::InvalidData,
                    format!("chunk {i} failed its checksum"),
                ))
            }
        });
        if let Err(e) = res {
            self.sink.fault(&e);
            self.sink.corrupt(self.id);
            return Err(e);
        }
        self.sink.read(n as u64);
        Ok(Bytes::from(buf))
    }
}
