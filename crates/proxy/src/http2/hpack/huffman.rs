//! HPACK's Huffman code (RFC 7541 §5.2, Appendix B).
//!
//! The code is canonical: codes of one length are consecutive in symbol order, and each
//! length starts where the shorter ones end. So the code is given by its lengths alone
//! ([`LENGTHS`], Appendix B's last column) and made from them once. Decoding reads four bits at
//! a time through a table built from the code (a state per inner node of the code tree): a
//! nibble moves to another state and emits at most one symbol, since no code is shorter than
//! five bits.

use std::sync::OnceLock;

use super::HpackError;

/// The code length of each symbol, 0–255 and EOS (256).
#[rustfmt::skip]
const LENGTHS: [u8; 257] = [
    // 0–31
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
    // ' ' – '/'
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
    // '0' – '?'
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
    // '@' – 'O'
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    // 'P' – '_'
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
    // '`' – 'o'
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
    // 'p' – 127
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
    // 128–159
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
    // 160–191
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    // 192–223
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
    // 224–255
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
    // EOS
    30,
];

const EOS: usize = 256;

/// Each symbol's code, right-aligned.
fn codes() -> &'static [u32; 257] {
    static CODES: OnceLock<[u32; 257]> = OnceLock::new();
    CODES.get_or_init(|| {
        let mut codes = [0u32; 257];
        let mut code = 0u32;
        let mut prev = 0u8;
        for len in 1..=30u8 {
            for (sym, &l) in LENGTHS.iter().enumerate() {
                if l == len {
                    code <<= len - prev;
                    prev = len;
                    codes[sym] = code;
                    code += 1;
                }
            }
        }
        codes
    })
}

/// Bytes `src` takes Huffman-coded.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src
        .iter()
        .map(|&b| usize::from(LENGTHS[usize::from(b)]))
        .sum();
    bits.div_ceil(8)
}

/// Appends `src` Huffman-coded, padded with the most significant bits of EOS (ones).
pub fn encode(src: &[u8], out: &mut Vec<u8>) {
    let codes = codes();
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in src {
        let len = u32::from(LENGTHS[usize::from(b)]);
        acc = (acc << len) | u64::from(codes[usize::from(b)]);
        bits += len;
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.push(((acc << pad) | ((1 << pad) - 1)) as u8);
    }
}

/// A decoding step: from a state, four bits lead to `next` and maybe emit `sym`.
#[derive(Clone, Copy, Default)]
struct Step {
    next: u8,
    /// `EMIT`, `FAIL`, `ACCEPT`.
    flags: u8,
    sym: u8,
}

const EMIT: u8 = 1;
/// The nibble reaches EOS: a decoding error (§5.2).
const FAIL: u8 = 2;
/// Ending in `next` is valid: it is the root or on the all-ones path within seven bits of it.
const ACCEPT: u8 = 4;

/// The code tree's inner nodes (256 of them: state 0 is the root), children by bit; a child is
/// `Inner(state)` or `Leaf(symbol)`.
#[derive(Clone, Copy)]
enum Child {
    None,
    Inner(u8),
    Leaf(u16),
}

fn table() -> &'static [[Step; 16]; 256] {
    static TABLE: OnceLock<Box<[[Step; 16]; 256]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let codes = codes();
        // The tree.
        let mut nodes: Vec<[Child; 2]> = vec![[Child::None; 2]];
        for sym in 0..=EOS {
            let (code, len) = (codes[sym], LENGTHS[sym]);
            let mut at = 0usize;
            for i in (0..len).rev() {
                let bit = ((code >> i) & 1) as usize;
                if i == 0 {
                    nodes[at][bit] = Child::Leaf(sym as u16);
                } else {
                    at = match nodes[at][bit] {
                        Child::Inner(n) => usize::from(n),
                        _ => {
                            nodes.push([Child::None; 2]);
                            let n = nodes.len() - 1;
                            nodes[at][bit] = Child::Inner(n as u8);
                            n
                        }
                    };
                }
            }
        }
        // States on the all-ones path within seven bits of the root accept an end.
        let mut accepting = [false; 256];
        accepting[0] = true;
        let mut at = 0usize;
        for _ in 0..7 {
            match nodes[at][1] {
                Child::Inner(n) => {
                    at = usize::from(n);
                    accepting[at] = true;
                }
                _ => break,
            }
        }
        let mut table = Box::new([[Step::default(); 16]; 256]);
        for (state, row) in table.iter_mut().enumerate().take(nodes.len()) {
            for (nibble, step) in row.iter_mut().enumerate() {
                let mut at = state;
                let mut s = Step::default();
                for i in (0..4).rev() {
                    let bit = (nibble >> i) & 1;
                    match nodes[at][bit] {
                        Child::Inner(n) => at = usize::from(n),
                        Child::Leaf(sym) if usize::from(sym) == EOS => {
                            s.flags |= FAIL;
                            break;
                        }
                        Child::Leaf(sym) => {
                            s.flags |= EMIT;
                            s.sym = sym as u8;
                            at = 0;
                        }
                        Child::None => {
                            s.flags |= FAIL;
                            break;
                        }
                    }
                }
                s.next = at as u8;
                if accepting[at] {
                    s.flags |= ACCEPT;
                }
                *step = s;
            }
        }
        table
    })
}

/// Appends the decoding of `src`. Fails on EOS inside the string and on padding that is
/// longer than seven bits or not the start of EOS.
pub fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    let table = table();
    let mut state = 0usize;
    let mut accept = true;
    out.reserve(src.len() * 8 / 5);
    for &b in src {
        for nibble in [b >> 4, b & 0xf] {
            let s = table[state][usize::from(nibble)];
            if s.flags & FAIL != 0 {
                return Err(HpackError::BadHuffman);
            }
            if s.flags & EMIT != 0 {
                out.push(s.sym);
            }
            state = usize::from(s.next);
            accept = s.flags & ACCEPT != 0;
        }
    }
    if accept {
        Ok(())
    } else {
        Err(HpackError::BadHuffman)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canonical_code_matches_appendix_b() {
        // (symbol, code as hex, length) rows of RFC 7541 Appendix B.
        let rows: [(usize, u32, u8); 16] = [
            (0, 0x1ff8, 13),
            (1, 0x7fffd8, 23),
            (9, 0xffffea, 24),
            (10, 0x3ffffffc, 30),
            (32, 0x14, 6),
            (48, 0x0, 5),
            (60, 0x7ffc, 15),
            (92, 0x7fff0, 19),
            (116, 0x9, 5),
            (127, 0xffffffc, 28),
            (128, 0xfffe6, 20),
            (195, 0x7fff1, 19),
            (199, 0x1ffffec, 25),
            (211, 0x7ffffe0, 27),
            (255, 0x3ffffee, 26),
            (256, 0x3fffffff, 30),
        ];
        for (sym, code, len) in rows {
            assert_eq!((codes()[sym], LENGTHS[sym]), (code, len), "symbol {sym}");
        }
        // Kraft: a complete prefix code.
        let sum: f64 = LENGTHS.iter().map(|&l| 0.5f64.powi(i32::from(l))).sum();
        assert!((sum - 1.0).abs() < 1e-12, "{sum}");
    }

    #[test]
    fn c4_examples_round_trip() {
        // RFC 7541 C.4.1–C.4.3.
        let cases: [(&[u8], &[u8]); 4] = [
            (
                b"www.example.com",
                &[
                    0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
                ],
            ),
            (b"no-cache", &[0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf]),
            (
                b"custom-key",
                &[0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xa9, 0x7d, 0x7f],
            ),
            (
                b"custom-value",
                &[0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xb8, 0xe8, 0xb4, 0xbf],
            ),
        ];
        for (plain, coded) in cases {
            let mut out = Vec::new();
            encode(plain, &mut out);
            assert_eq!(out, coded);
            assert_eq!(encoded_len(plain), coded.len());
            let mut back = Vec::new();
            decode(coded, &mut back).expect("decodes");
            assert_eq!(back, plain);
        }
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255u8).collect();
        let mut out = Vec::new();
        encode(&all, &mut out);
        let mut back = Vec::new();
        decode(&out, &mut back).expect("decodes");
        assert_eq!(back, all);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for n in 0..500 {
            let s: Vec<u8> = (0..n % 37)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let mut out = Vec::new();
            encode(&s, &mut out);
            let mut back = Vec::new();
            decode(&out, &mut back).expect("decodes");
            assert_eq!(back, s);
        }
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        // §5.2: padding of zeros, padding of eight bits or more, EOS in the string.
        let mut back = Vec::new();
        // 'a' is 00011: five bits then padding 000 (not EOS's ones).
        assert_eq!(
            decode(&[0b0001_1000], &mut back),
            Err(HpackError::BadHuffman)
        );
        // 'a' + 111 is fine; a whole extra 0xff byte of padding is not.
        assert!(decode(&[0b0001_1111], &mut back).is_ok());
        assert_eq!(
            decode(&[0b0001_1111, 0xff], &mut back),
            Err(HpackError::BadHuffman)
        );
        // EOS itself (30 ones) then padding.
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff], &mut back),
            Err(HpackError::BadHuffman)
        );
    }
}
