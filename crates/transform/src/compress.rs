//! Brotli, zstd and gzip: one-shot for the encoded copies the cache stores, and streaming (a
//! chunk in, whatever the encoder has ready out) for responses that pass through.
//!
//! The codecs are the field's: Dropbox's pure-Rust brotli port (used by most Rust servers), the
//! zstd crate over the reference C library, and flate2 over miniz_oxide (pure Rust) for gzip.
//!
//! Memory of a streaming encoder is bounded by its window: brotli 2^[`STREAM_BROTLI_WINDOW`],
//! zstd 2^[`STREAM_ZSTD_WINDOW`], gzip 32 KiB, plus the codec's tables (a few hundred KiB at
//! the default levels). One-shot compression of a stored object uses the codecs' full windows.

use std::io::{self, Write};

use bytes::Bytes;
use flate2::write::GzEncoder;
use rampart_cache::encoding::Coding;

/// Compression levels, one per codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Levels {
    /// 0–11.
    pub br: u32,
    /// 1–19.
    pub zstd: i32,
    /// 1–9.
    pub gzip: u32,
}

impl Default for Levels {
    /// What CDNs pick for content compressed on the fly: brotli 5, zstd 3, gzip 6 (the
    /// size/CPU knee of each; see docs/compression.md for the measurements).
    fn default() -> Self {
        Levels {
            br: 5,
            zstd: 3,
            gzip: 6,
        }
    }
}

/// log2 of the brotli window while streaming (512 KiB).
pub const STREAM_BROTLI_WINDOW: u32 = 19;
/// log2 of the brotli window for a stored copy (4 MiB, brotli's default).
const BROTLI_WINDOW: u32 = 22;
/// log2 of the zstd window while streaming (1 MiB).
pub const STREAM_ZSTD_WINDOW: u32 = 20;

/// `data` compressed with `coding` in one go.
pub fn compress(coding: Coding, levels: Levels, data: &[u8]) -> io::Result<Vec<u8>> {
    // Room for a typical ratio; the codecs grow it when needed.
    let out = Vec::with_capacity(data.len() / 3 + 64);
    match coding {
        Coding::Br => {
            let mut w =
                brotli::CompressorWriter::new(out, 32 * 1024, levels.br.min(11), BROTLI_WINDOW);
            w.write_all(data)?;
            Ok(w.into_inner())
        }
        Coding::Zstd => zstd::bulk::compress(data, levels.zstd.clamp(1, 19)),
        Coding::Gzip => {
            let mut w = GzEncoder::new(out, flate2::Compression::new(levels.gzip.clamp(1, 9)));
            w.write_all(data)?;
            w.finish()
        }
    }
}

/// A streaming encoder.
pub struct StreamEncoder {
    inner: Inner,
}

enum Inner {
    Br(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
    Gzip(GzEncoder<Vec<u8>>),
}

impl std::fmt::Debug for StreamEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamEncoder")
    }
}

impl StreamEncoder {
    pub fn new(coding: Coding, levels: Levels) -> io::Result<Self> {
        let inner = match coding {
            Coding::Br => Inner::Br(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                16 * 1024,
                levels.br.min(11),
                STREAM_BROTLI_WINDOW,
            ))),
            Coding::Zstd => {
                let mut e =
                    zstd::stream::write::Encoder::new(Vec::new(), levels.zstd.clamp(1, 19))?;
                e.window_log(STREAM_ZSTD_WINDOW)?;
                Inner::Zstd(e)
            }
            Coding::Gzip => Inner::Gzip(GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(levels.gzip.clamp(1, 9)),
            )),
        };
        Ok(StreamEncoder { inner })
    }

    fn out(&mut self) -> &mut Vec<u8> {
        match &mut self.inner {
            Inner::Br(w) => w.get_mut(),
            Inner::Zstd(w) => w.get_mut(),
            Inner::Gzip(w) => w.get_mut(),
        }
    }

    fn take(&mut self) -> Bytes {
        let out = self.out();
        if out.is_empty() {
            Bytes::new()
        } else {
            Bytes::from(std::mem::take(out))
        }
    }

    /// Feeds `data`; returns the output ready so far (often empty: the encoder buffers).
    pub fn write(&mut self, data: &[u8]) -> io::Result<Bytes> {
        match &mut self.inner {
            Inner::Br(w) => w.write_all(data)?,
            Inner::Zstd(w) => w.write_all(data)?,
            Inner::Gzip(w) => w.write_all(data)?,
        }
        Ok(self.take())
    }

    /// Emits everything fed so far, decodable by the client now (a sync flush: costs a few
    /// bytes and some ratio, so only when the input pauses).
    pub fn flush(&mut self) -> io::Result<Bytes> {
        match &mut self.inner {
            Inner::Br(w) => w.flush()?,
            Inner::Zstd(w) => w.flush()?,
            Inner::Gzip(w) => w.flush()?,
        }
        Ok(self.take())
    }

    /// Ends the stream; returns the rest of the output.
    pub fn finish(self) -> io::Result<Bytes> {
        let out = match self.inner {
            Inner::Br(w) => w.into_inner(),
            Inner::Zstd(w) => w.finish()?,
            Inner::Gzip(w) => w.finish()?,
        };
        Ok(Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn decode(coding: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Coding::Br => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .unwrap_or_default();
            }
            Coding::Zstd => out = zstd::decode_all(data).unwrap_or_default(),
            Coding::Gzip => {
                flate2::read::GzDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap_or_default();
            }
        };
        out
    }

    fn sample() -> Vec<u8> {
        (0..2000)
            .map(|i| format!("<li class=\"item\">entry {i} of the list</li>\n"))
            .collect::<String>()
            .into_bytes()
    }

    #[test]
    fn one_shot_round_trips_and_shrinks() {
        let data = sample();
        for c in Coding::ALL {
            let z = compress(c, Levels::default(), &data).expect("compress");
            assert!(
                z.len() * 5 < data.len(),
                "{c:?}: {} of {}",
                z.len(),
                data.len()
            );
            assert_eq!(decode(c, &z), data, "{c:?}");
        }
    }

    #[test]
    fn streaming_emits_decodable_output_at_each_flush() {
        let data = sample();
        for c in Coding::ALL {
            let mut e = StreamEncoder::new(c, Levels::default()).expect("encoder");
            let mut out = Vec::new();
            let (first, rest) = data.split_at(1000);
            out.extend_from_slice(&e.write(first).expect("write"));
            out.extend_from_slice(&e.flush().expect("flush"));
            // What was sent so far already decodes to the first part (a streaming decoder
            // would show it to the user before the rest arrives).
            assert!(!out.is_empty(), "{c:?}: a flush emits output");
            for chunk in rest.chunks(7000) {
                out.extend_from_slice(&e.write(chunk).expect("write"));
            }
            out.extend_from_slice(&e.finish().expect("finish"));
            assert_eq!(decode(c, &out), data, "{c:?}");
        }
    }
}
