//! The disk tier's bytes: records in segment files, the summary that seals a segment, and the
//! purge log. Every piece carries a CRC-32 of its own, so a torn or altered write is found
//! and skipped, never served.
//!
//! A record (integers big-endian):
//!
//! | bytes  | field                                                              |
//! |--------|--------------------------------------------------------------------|
//! | 0..4   | `RPR1`                                                             |
//! | 4      | kind: 1 an object, 2 a `Vary` marker                               |
//! | 8..12  | key length                                                         |
//! | 12..16 | variant length (a variant's marker generation, then its key)       |
//! | 16..20 | meta length (the object's [`crate::portable::encode_head`], or the marker's) |
//! | 20..24 | body length                                                        |
//! | 24..32 | the response's receive time, µs since the epoch (purges compare it) |
//! | 32..36 | CRC-32 of the body                                                 |
//! | 40..44 | CRC-32 of bytes 0..40, the key, the variant and the meta           |
//!
//! then the key, the variant, the meta and the body. The head (all but the body) is checked
//! before anything of it is believed; the body's checksum before a byte of it is sent.
//!
//! A summary (`RPS1`, segment id, entry count, oldest receive time, then per record its key
//! hash, offset, head and body length, and a CRC-32 of all that) is written when a segment is
//! full, after the segment is on disk: warming the index reads summaries, not records.

use crate::key::CacheKey;

pub const HEADER: usize = 48;
const MAGIC: &[u8; 4] = b"RPR1";
const SUMMARY_MAGIC: &[u8; 4] = b"RPS1";
const SUMMARY_ENTRY: usize = 20;
const SUMMARY_HEAD: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Object = 1,
    Marker = 2,
}

/// A record's fixed header, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub key_len: u32,
    pub variant_len: u32,
    pub meta_len: u32,
    pub body_len: u32,
    pub time: u64,
    pub body_crc: u32,
}

impl Header {
    /// Bytes before the body.
    pub fn head_len(&self) -> usize {
        HEADER + self.key_len as usize + self.variant_len as usize + self.meta_len as usize
    }
}

/// The head of a record (everything but the body, which is written after it).
pub fn encode_head(
    kind: Kind,
    key: &[u8],
    variant: &[u8],
    meta: &[u8],
    body: &[u8],
    time: u64,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + key.len() + variant.len() + meta.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[kind as u8, 0, 0, 0]);
    for n in [key.len(), variant.len(), meta.len(), body.len()] {
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(&time.to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(body).to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&out[..40]);
    crc.update(key);
    crc.update(variant);
    crc.update(meta);
    out.extend_from_slice(&crc.finalize().to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(key);
    out.extend_from_slice(variant);
    out.extend_from_slice(meta);
    out
}

/// The fixed header at the start of `bytes`, if it is one (not yet its checksum: that covers
/// the key, variant and meta too, see [`parse_head`]).
pub fn parse_header(bytes: &[u8]) -> Option<Header> {
    let b = bytes.get(..HEADER)?;
    if &b[..4] != MAGIC || b[5..8] != [0; 3] || b[36..40] != [0; 4] || b[44..48] != [0; 4] {
        return None;
    }
    let kind = match b[4] {
        1 => Kind::Object,
        2 => Kind::Marker,
        _ => return None,
    };
    let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let mut time = [0; 8];
    time.copy_from_slice(&b[24..32]);
    Some(Header {
        kind,
        key_len: u32_at(8),
        variant_len: u32_at(12),
        meta_len: u32_at(16),
        body_len: u32_at(20),
        time: u64::from_be_bytes(time),
        body_crc: u32_at(32),
    })
}

/// A whole, checked head: its header, key, variant and meta.
#[derive(Debug)]
pub struct Head<'a> {
    pub header: Header,
    pub key: &'a [u8],
    pub variant: &'a [u8],
    pub meta: &'a [u8],
}

/// The head `bytes` holds exactly, its checksum verified.
pub fn parse_head(bytes: &[u8]) -> Option<Head<'_>> {
    let header = parse_header(bytes)?;
    if bytes.len() != header.head_len() {
        return None;
    }
    let stored = u32::from_be_bytes([bytes[40], bytes[41], bytes[42], bytes[43]]);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&bytes[..40]);
    crc.update(&bytes[HEADER..]);
    if crc.finalize() != stored {
        return None;
    }
    let rest = &bytes[HEADER..];
    let (key, rest) = rest.split_at(header.key_len as usize);
    let (variant, meta) = rest.split_at(header.variant_len as usize);
    Some(Head {
        header,
        key,
        variant,
        meta,
    })
}

/// Whether `body` is the body `header` was written with.
pub fn body_ok(header: &Header, body: &[u8]) -> bool {
    body.len() == header.body_len as usize && crc32fast::hash(body) == header.body_crc
}

/// FNV-1a over `parts`, each followed by a separator byte: the key hash of the index and its
/// summaries. Its own code, so a library upgrade cannot change the hashes already on disk.
pub fn hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A key as a record holds it: the scheme byte, the host, a NUL and the URL.
pub fn key_bytes(key: &CacheKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + key.len());
    out.push(u8::from(key.is_https()));
    out.extend_from_slice(key.host());
    out.push(0);
    out.extend_from_slice(key.url());
    out
}

/// The key [`key_bytes`] wrote.
pub fn parse_key(bytes: &[u8]) -> Option<CacheKey> {
    let (&https, rest) = bytes.split_first()?;
    let nul = rest.iter().position(|&b| b == 0)?;
    let key = CacheKey::from_parts(&rest[..nul], &rest[nul + 1..])?;
    Some(key.for_https(https == 1))
}

/// Where one record of a segment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryEntry {
    pub hash: u64,
    pub offset: u32,
    pub head: u32,
    pub body: u32,
}

/// A sealed segment's summary (see the module notes).
pub fn encode_summary(segment: u32, oldest: u64, entries: &[SummaryEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SUMMARY_HEAD + entries.len() * SUMMARY_ENTRY + 4);
    out.extend_from_slice(SUMMARY_MAGIC);
    out.extend_from_slice(&segment.to_be_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    out.extend_from_slice(&oldest.to_be_bytes());
    for e in entries {
        out.extend_from_slice(&e.hash.to_be_bytes());
        out.extend_from_slice(&e.offset.to_be_bytes());
        out.extend_from_slice(&e.head.to_be_bytes());
        out.extend_from_slice(&e.body.to_be_bytes());
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// The oldest receive time and entries of segment `segment`'s summary; `None` unless `bytes`
/// is exactly one, unaltered.
pub fn decode_summary(bytes: &[u8], segment: u32) -> Option<(u64, Vec<SummaryEntry>)> {
    if bytes.len() < SUMMARY_HEAD + 4 || &bytes[..4] != SUMMARY_MAGIC {
        return None;
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(body).to_be_bytes() != crc {
        return None;
    }
    let u32_at = |i: usize| u32::from_be_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
    let u64_at = |i: usize| {
        let mut b = [0; 8];
        b.copy_from_slice(&body[i..i + 8]);
        u64::from_be_bytes(b)
    };
    if u32_at(4) != segment {
        return None;
    }
    let count = u32_at(8) as usize;
    if body.len() != SUMMARY_HEAD + count.checked_mul(SUMMARY_ENTRY)? {
        return None;
    }
    let entries = (0..count)
        .map(|i| {
            let at = SUMMARY_HEAD + i * SUMMARY_ENTRY;
            SummaryEntry {
                hash: u64_at(at),
                offset: u32_at(at + 8),
                head: u32_at(at + 12),
                body: u32_at(at + 16),
            }
        })
        .collect();
    Some((u64_at(12), entries))
}

/// One purge as the purge log holds it: its time (µs since the epoch), whether it was soft,
/// and its scope ([`crate::store::PurgeScope::encode`]). Framed by its length and a CRC-32.
pub fn encode_purge(time: u64, soft: bool, scope: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(9 + scope.len());
    body.extend_from_slice(&time.to_be_bytes());
    body.push(u8::from(soft));
    body.extend_from_slice(scope);
    let mut out = Vec::with_capacity(8 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// The purges of a purge log, up to the first that is torn or altered.
pub fn decode_purges(mut bytes: &[u8]) -> Vec<(u64, bool, &[u8])> {
    let mut out = Vec::new();
    while bytes.len() >= 8 {
        let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        let crc = [bytes[4], bytes[5], bytes[6], bytes[7]];
        let Some(body) = bytes.get(8..8 + len) else {
            break;
        };
        if len < 9 || crc32fast::hash(body).to_be_bytes() != crc || body[8] > 1 {
            break;
        }
        let mut t = [0; 8];
        t.copy_from_slice(&body[..8]);
        out.push((u64::from_be_bytes(t), body[8] == 1, &body[9..]));
        bytes = &bytes[8 + len..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_head_is_believed_only_whole_and_unaltered() {
        let body = b"the body";
        let head = encode_head(Kind::Object, b"\x00h\x00/a", b"", b"meta", body, 42);
        let h = parse_head(&head).expect("parses");
        assert_eq!(h.key, b"\x00h\x00/a");
        assert_eq!(h.meta, b"meta");
        assert_eq!(h.header.time, 42);
        assert_eq!(h.header.head_len(), head.len());
        assert!(body_ok(&h.header, body));
        assert!(!body_ok(&h.header, b"the bodY"));
        assert!(!body_ok(&h.header, b"the bod"));
        for cut in 0..head.len() {
            assert!(parse_head(&head[..cut]).is_none(), "cut at {cut}");
        }
        for i in 0..head.len() {
            let mut bad = head.clone();
            bad[i] ^= 0x20;
            assert!(parse_head(&bad).is_none(), "flipped byte {i}");
        }
    }

    #[test]
    fn keys_and_hashes_are_stable() {
        let k = CacheKey::new("Example.com:8080", "/a?b", false).for_https(true);
        let b = key_bytes(&k);
        assert_eq!(parse_key(&b), Some(k));
        // The hash is part of the format: it must never change.
        assert_eq!(hash(&[b"a"]), hash(&[b"a"]));
        assert_ne!(hash(&[b"ab", b""]), hash(&[b"a", b"b"]));
        assert_eq!(hash(&[b"example"]), 0xc234_99ee_4446_62da);
    }

    #[test]
    fn summaries_and_purges_refuse_what_they_did_not_write() {
        let e = [
            SummaryEntry {
                hash: 1,
                offset: 0,
                head: 100,
                body: 7,
            },
            SummaryEntry {
                hash: 2,
                offset: 107,
                head: 90,
                body: 0,
            },
        ];
        let s = encode_summary(9, 123, &e);
        assert_eq!(decode_summary(&s, 9), Some((123, e.to_vec())));
        assert_eq!(decode_summary(&s, 8), None, "another segment's summary");
        for cut in 0..s.len() {
            assert!(decode_summary(&s[..cut], 9).is_none());
        }
        let mut log = encode_purge(5, true, b"dhost\0");
        log.extend(encode_purge(6, false, b"*"));
        let whole = log.len();
        log.extend_from_slice(&encode_purge(7, false, b"*")[..10]);
        let p = decode_purges(&log);
        assert_eq!(p, vec![(5, true, &b"dhost\0"[..]), (6, false, &b"*"[..])]);
        log.truncate(whole);
        log[12] ^= 1;
        assert_eq!(decode_purges(&log).len(), 0, "altered: stops there");
    }

    /// The fuzz target's seeds (fuzz/seeds/disk_records) are what the encoders accept, so the
    /// fuzzer starts from real records, not from bytes it must first find the magic of.
    #[test]
    fn the_fuzz_seeds_are_real_records() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/disk_records");
        let read = |n: &str| std::fs::read(dir.join(n)).expect("seed");
        let head = read("record_head");
        let h = parse_head(&head).expect("a record head");
        assert!(crate::portable::decode_parts(h.meta, bytes::Bytes::new(), None).is_some());
        assert!(parse_key(h.key).is_some());
        assert!(decode_summary(&read("summary"), 1).is_some());
        assert_eq!(decode_purges(&read("purges")).len(), 3);
        let t = read("trailer");
        let mut trailer = [0; super::super::large::TRAILER];
        trailer.copy_from_slice(&t);
        assert!(super::super::large::decode_trailer(&trailer, 1000 + 4 + 100 + 20).is_some());
    }
}
