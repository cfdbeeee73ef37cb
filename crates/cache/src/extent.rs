//! A body kept on disk ([`Extent`]): a large object's, which never enters memory whole. It is
//! read a chunk at a time as it is sent, each chunk checked against its CRC-32 first. It knows
//! nothing of the tier that made it beyond [`ExtentSink`], where it counts what it reads and
//! reports what fails.

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
}

/// A body on disk: read a chunk at a time, each checked.
pub struct Extent {
    file: Arc<File>,
    len: u64,
    crcs: Box<[u32]>,
    /// The tier: its counters, and its fault log.
    sink: Arc<dyn ExtentSink>,
}

impl std::fmt::Debug for Extent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extent").field("len", &self.len).finish()
    }
}

impl Extent {
    pub(crate) fn new(
        file: Arc<File>,
        len: u64,
        crcs: Box<[u32]>,
        sink: Arc<dyn ExtentSink>,
    ) -> Extent {
        Extent {
            file,
            len,
            crcs,
            sink,
        }
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
            return Err(e);
        }
        self.sink.read(n as u64);
        let from = (start - at) as usize;
        let to = n.min(from.saturating_add(max));
        Ok(Bytes::from(buf).slice(from..to))
    }
}
