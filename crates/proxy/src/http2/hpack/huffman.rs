//! The Huffman code of HPACK string literals (RFC 7541 §5.2, Appendix B): encoding through a
//! 64-bit accumulator, decoding four bits at a time through a state table built once.

use std::sync::OnceLock;

use super::HpackError;

/// Appendix B: the code of each symbol (byte values 0..=255, then EOS as 256), right-aligned,
/// with its length in bits.
#[rustfmt::skip]
const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28),
    (0xfffffe4, 28), (0xfffffe5, 28), (0xfffffe6, 28), (0xfffffe7, 28),
    (0xfffffe8, 28), (0xffffea, 24), (0x3ffffffc, 30), (0xfffffe9, 28),
    (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28), (0xfffffec, 28),
    (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28), (0xffffff0, 28),
    (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28),
    (0xffffff4, 28), (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28),
    (0xffffff8, 28), (0xffffff9, 28), (0xffffffa, 28), (0xffffffb, 28),
    // 32 ' ' ..= 47 '/'
    (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12),
    (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11),
    (0x3fa, 10), (0x3fb, 10), (0xf9, 8), (0x7fb, 11),
    (0xfa, 8), (0x16, 6), (0x17, 6), (0x18, 6),
    // 48 '0' ..= 63 '?'
    (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6),
    (0x1a, 6), (0x1b, 6), (0x1c, 6), (0x1d, 6),
    (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8),
    (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10),
    // 64 '@' ..= 79 'O'
    (0x1ffa, 13), (0x21, 6), (0x5d, 7), (0x5e, 7),
    (0x5f, 7), (0x60, 7), (0x61, 7), (0x62, 7),
    (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7),
    (0x67, 7), (0x68, 7), (0x69, 7), (0x6a, 7),
    // 80 'P' ..= 95 '_'
    (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7),
    (0x6f, 7), (0x70, 7), (0x71, 7), (0x72, 7),
    (0xfc, 8), (0x73, 7), (0xfd, 8), (0x1ffb, 13),
    (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6),
    // 96 '`' ..= 111 'o'
    (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5),
    (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6),
    (0x27, 6), (0x6, 5), (0x74, 7), (0x75, 7),
    (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5),
    // 112 'p' ..= 127
    (0x2b, 6), (0x76, 7), (0x2c, 6), (0x8, 5),
    (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7),
    (0x79, 7), (0x7a, 7), (0x7b, 7), (0x7ffe, 15),
    (0x7fc, 11), (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28),
    // 128 ..= 143
    (0xfffe6, 20), (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20),
    (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22), (0x7fffd9, 23),
    (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23), (0x7fffdc, 23),
    (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23),
    // 144 ..= 159
    (0xffffec, 24), (0xffffed, 24), (0x3fffd7, 22), (0x7fffe0, 23),
    (0xffffee, 24), (0x7fffe1, 23), (0x7fffe2, 23), (0x7fffe3, 23),
    (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23),
    (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23), (0xffffef, 24),
    // 160 ..= 175
    (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22),
    (0x3fffdc, 22), (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21),
    (0x7fffea, 23), (0x3fffdd, 22), (0x3fffde, 22), (0xfffff0, 24),
    (0x1fffdf, 21), (0x3fffdf, 22), (0x7fffeb, 23), (0x7fffec, 23),
    // 176 ..= 191
    (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21),
    (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23), (0x7fffef, 23),
    (0xfffea, 20), (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22),
    (0x7ffff0, 23), (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23),
    // 192 ..= 207
    (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20), (0x7fff1, 19),
    (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22), (0x1ffffec, 25),
    (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27),
    (0x7ffffdf, 27), (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25),
    // 208 ..= 223
    (0x7fff2, 19), (0x1fffe3, 21), (0x3ffffe6, 26), (0x7ffffe0, 27),
    (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27), (0xfffff2, 24),
    (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26),
    (0xffffffd, 28), (0x7ffffe3, 27), (0x7ffffe4, 27), (0x7ffffe5, 27),
    // 224 ..= 239
    (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21),
    (0x3fffe9, 22), (0x1fffe7, 21), (0x1fffe8, 21), (0x7ffff3, 23),
    (0x3fffea, 22), (0x3fffeb, 22), (0x1ffffee, 25), (0x1ffffef, 25),
    (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),
    // 240 ..= 255
    (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26),
    (0x7ffffe7, 27), (0x7ffffe8, 27), (0x7ffffe9, 27), (0x7ffffea, 27),
    (0x7ffffeb, 27), (0xffffffe, 28), (0x7ffffec, 27), (0x7ffffed, 27),
    (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27), (0x3ffffee, 26),
    // EOS
    (0x3fffffff, 30),
];

/// The number of octets `src` takes Huffman-coded, padding included.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src.iter().map(|&b| usize::from(code_of(b).1)).sum();
    bits.div_ceil(8)
}

/// Appends `src` Huffman-coded, the last octet padded with the high bits of EOS (ones).
pub fn encode(src: &[u8], out: &mut Vec<u8>) {
    // Codes are at most 30 bits and at most 31 bits wait in `acc`, so 61 bits are enough.
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in src {
        let (code, len) = code_of(b);
        acc = (acc << len) | u64::from(code);
        bits += u32::from(len);
        if bits >= 32 {
            bits -= 32;
            out.extend_from_slice(&((acc >> bits) as u32).to_be_bytes());
        }
    }
    while bits >= 8 {
        bits -= 8;
        out.push((acc >> bits) as u8);
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.push(((acc << pad) | ((1 << pad) - 1)) as u8);
    }
}

/// Appends the Huffman-coded string `src` decoded. Fails with [`HpackError::BadHuffman`] on EOS
/// inside the string, padding over 7 bits, or padding that is not all ones (§5.2).
pub fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    decode_limited(src, out, usize::MAX)
}

/// [`decode`], failing with [`HpackError::StringTooLong`] as soon as more than `limit` octets
/// have come out.
pub(super) fn decode_limited(
    src: &[u8],
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<(), HpackError> {
    let start = out.len();
    // Room for every symbol the string can hold (one per 5 bits) or one past the limit, and
    // one octet more: the loop stores a symbol at each nibble and keeps it only when the
    // nibble completes one, so no branch depends on the data.
    let room = (src.len().saturating_mul(8) / 5).min(limit.saturating_add(1));
    out.resize(start.saturating_add(room).saturating_add(1), 0);
    let decoded = decode_into(src, out.get_mut(start..).unwrap_or_default());
    match decoded {
        Ok(n) if n <= limit => {
            out.truncate(start.saturating_add(n));
            Ok(())
        }
        Ok(_) => {
            out.truncate(start);
            Err(HpackError::StringTooLong)
        }
        Err(e) => {
            out.truncate(start);
            Err(e)
        }
    }
}

/// Decodes `src` into `buf`, returning the number of octets decoded; a `buf` too short is
/// [`HpackError::StringTooLong`].
fn decode_into(src: &[u8], buf: &mut [u8]) -> Result<usize, HpackError> {
    let table = decode_table();
    let mut n = 0usize;
    let mut state = 0usize;
    let mut entry = ACCEPT;
    for &b in src {
        let mut flags = 0;
        for nibble in [b >> 4, b & 0x0f] {
            entry = table.0[((state << 4) | usize::from(nibble)) & 0xfff];
            let slot = buf.get_mut(n).ok_or(HpackError::StringTooLong)?;
            *slot = (entry >> 8) as u8;
            n += ((entry & EMIT) >> EMIT.trailing_zeros()) as usize;
            state = (entry & 0xff) as usize;
            flags |= entry;
        }
        if flags & FAIL != 0 {
            return Err(HpackError::BadHuffman);
        }
    }
    if entry & ACCEPT == 0 {
        return Err(HpackError::BadHuffman);
    }
    Ok(n)
}

fn code_of(b: u8) -> (u32, u8) {
    CODES[usize::from(b)]
}

/// A transition emits the symbol in bits 8..16.
const EMIT: u32 = 1 << 16;
/// The state reached may end the string: nothing pending, or up to 7 pending bits all ones.
const ACCEPT: u32 = 1 << 17;
/// The nibble completes EOS, or leaves the code (impossible with a complete code).
const FAIL: u32 = 1 << 18;

/// For each of the 256 inner nodes of the code tree (the states, root 0) and each next nibble:
/// the state reached (bits 0..8), the symbol completed on the way, and the flags above.
struct DecodeTable([u32; 4096]);

fn decode_table() -> &'static DecodeTable {
    static TABLE: OnceLock<Box<DecodeTable>> = OnceLock::new();
    TABLE.get_or_init(build_decode_table)
}

/// A child in the code tree: an inner node's index, or `LEAF | symbol`; 0 is none (the root is
/// nobody's child).
const LEAF: u16 = 0x8000;

/// The code tree, inner nodes only, the root first.
fn build_tree() -> Vec<[u16; 2]> {
    let mut nodes: Vec<[u16; 2]> = vec![[0, 0]];
    for (sym, &(code, len)) in CODES.iter().enumerate() {
        let mut cur = 0usize;
        for i in (0..len).rev() {
            let bit = ((code >> i) & 1) as usize;
            let Some(child) = nodes.get(cur).map(|n| n[bit]) else {
                break;
            };
            if i == 0 {
                if let Some(n) = nodes.get_mut(cur) {
                    n[bit] = LEAF | sym as u16;
                }
            } else if child == 0 {
                let id = nodes.len();
                nodes.push([0, 0]);
                if let Some(n) = nodes.get_mut(cur) {
                    n[bit] = id as u16;
                }
                cur = id;
            } else {
                cur = usize::from(child);
            }
        }
    }
    nodes
}

fn build_decode_table() -> Box<DecodeTable> {
    let nodes = build_tree();
    // The states where the string may end: the root, and the first 7 nodes down the all-ones
    // path (a prefix of EOS as padding).
    let mut accepting = [false; 256];
    let mut cur = 0usize;
    for _ in 0..8 {
        if let Some(a) = accepting.get_mut(cur) {
            *a = true;
        }
        cur = nodes.get(cur).map_or(0, |n| usize::from(n[1]));
    }
    let mut table = Box::new(DecodeTable([FAIL; 4096]));
    for state in 0..nodes.len().min(256) {
        for nibble in 0..16usize {
            let mut cur = state;
            let mut entry = 0u32;
            for i in (0..4).rev() {
                let child = nodes.get(cur).map_or(0, |n| n[(nibble >> i) & 1]);
                if child & LEAF != 0 {
                    let sym = u32::from(child & !LEAF);
                    if sym == 256 || entry & EMIT != 0 {
                        entry |= FAIL;
                        break;
                    }
                    entry |= EMIT | (sym << 8);
                    cur = 0;
                } else if child == 0 {
                    entry |= FAIL;
                    break;
                } else {
                    cur = usize::from(child);
                }
            }
            if accepting.get(cur).copied().unwrap_or(false) {
                entry |= ACCEPT;
            }
            entry |= (cur & 0xff) as u32;
            if let Some(slot) = table.0.get_mut((state << 4) | nibble) {
                *slot = entry;
            }
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(s: &[u8]) {
        let mut enc = Vec::new();
        encode(s, &mut enc);
        assert_eq!(enc.len(), encoded_len(s));
        let mut dec = Vec::new();
        decode(&enc, &mut dec).expect("round trip decodes");
        assert_eq!(dec, s);
    }

    /// Appendix B: the code is canonical (codes sorted by length then symbol count up by one,
    /// shifted at each longer length) and complete, which catches any typo in the table.
    #[test]
    fn appendix_b_code_is_canonical_and_complete() {
        let mut syms: Vec<usize> = (0..257).collect();
        syms.sort_by_key(|&s| (CODES[s].1, s));
        assert_eq!(CODES[syms[0]], (0, 5));
        for w in syms.windows(2) {
            let (a, la) = CODES[w[0]];
            let (b, lb) = CODES[w[1]];
            assert_eq!(b, (a + 1) << (lb - la), "symbol {}", w[1]);
        }
        assert_eq!(CODES[256], ((1 << 30) - 1, 30));
        let kraft: u64 = CODES.iter().map(|&(_, l)| 1u64 << (30 - l)).sum();
        assert_eq!(kraft, 1 << 30);
        assert_eq!(build_tree().len(), 256);
    }

    /// §5.2 / Appendix B: every byte value alone and all together.
    #[test]
    fn section_5_2_round_trip_all_bytes() {
        for b in 0..=255u8 {
            round_trip(&[b]);
            round_trip(&[b, b, b]);
        }
        let all: Vec<u8> = (0..=255u8).collect();
        round_trip(&all);
        let rev: Vec<u8> = (0..=255u8).rev().collect();
        round_trip(&rev);
        round_trip(b"");
    }

    /// §5.2: pseudo-random strings of every length up to 300.
    #[test]
    fn section_5_2_round_trip_random() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for len in 0..300 {
            let s: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Mostly text, some of everything.
                    if x & 3 == 0 {
                        (x >> 8) as u8
                    } else {
                        b' ' + ((x >> 8) % 95) as u8
                    }
                })
                .collect();
            round_trip(&s);
        }
    }

    /// Appendix C.4.1: "www.example.com".
    #[test]
    fn appendix_c_4_1_string() {
        let coded = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        let mut out = Vec::new();
        encode(b"www.example.com", &mut out);
        assert_eq!(out, coded);
        out.clear();
        decode(&coded, &mut out).expect("C.4.1 decodes");
        assert_eq!(out, b"www.example.com");
    }

    /// §5.2: padding longer than 7 bits is an error.
    #[test]
    fn section_5_2_padding_too_long() {
        let mut out = Vec::new();
        assert_eq!(decode(&[0xff], &mut out), Err(HpackError::BadHuffman));
        // 'a' (00011) then 11 bits of ones.
        assert_eq!(decode(&[0x1f, 0xff], &mut out), Err(HpackError::BadHuffman));
        // 'a' then 3 ones is fine.
        out.clear();
        decode(&[0x1f], &mut out).expect("short padding");
        assert_eq!(out, b"a");
    }

    /// §5.2: padding that is not the most significant bits of EOS (ones) is an error.
    #[test]
    fn section_5_2_padding_not_ones() {
        let mut out = Vec::new();
        // 'a' (00011) then 010.
        assert_eq!(decode(&[0x1a], &mut out), Err(HpackError::BadHuffman));
        // 'a' then 000: this pads with a prefix of '0' (00000), not of EOS.
        assert_eq!(decode(&[0x18], &mut out), Err(HpackError::BadHuffman));
    }

    /// §5.2: the EOS symbol inside a string is an error.
    #[test]
    fn section_5_2_eos_in_string() {
        let mut out = Vec::new();
        // EOS (30 ones) then two ones of padding.
        assert_eq!(decode(&[0xff; 4], &mut out), Err(HpackError::BadHuffman));
        // 'a', EOS, then 'a' again.
        let mut bits: u128 = 0b00011;
        bits = (bits << 30) | ((1 << 30) - 1);
        bits = (bits << 5) | 0b00011;
        bits = (bits << 8) | 0xff; // pad 40 bits to 48
        let bytes = bits.to_be_bytes();
        assert_eq!(
            decode(&bytes[bytes.len() - 6..], &mut out),
            Err(HpackError::BadHuffman)
        );
    }

    /// The limit stops decoding as soon as it is passed.
    #[test]
    fn limit_stops_early() {
        let mut enc = Vec::new();
        encode(&[b'a'; 100], &mut enc);
        let mut out = Vec::new();
        assert_eq!(
            decode_limited(&enc, &mut out, 10),
            Err(HpackError::StringTooLong)
        );
        assert!(out.is_empty());
        out.clear();
        decode_limited(&enc, &mut out, 100).expect("within the limit");
        assert_eq!(out.len(), 100);
    }
}
