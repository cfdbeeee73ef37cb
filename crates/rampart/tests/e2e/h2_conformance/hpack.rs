//! Just enough HPACK (RFC 7541) for the conformance client, written for these tests: an encoder
//! of literal fields (plus the few static indexes a request needs) and a decoder complete enough
//! to read any response header block (static and dynamic table, all literal forms, table size
//! updates, Huffman strings). The Huffman code is rebuilt from the code lengths of Appendix B:
//! the code is canonical, so the lengths alone fix every code.

use std::collections::{HashMap, VecDeque};
use std::sync::OnceLock;

/// RFC 7541 Appendix A: the static table, index 1 first.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// RFC 7541 Appendix B: the length in bits of the code of each symbol 0..=255, then EOS (256).
#[rustfmt::skip]
const CODE_LEN: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, // 0x00
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, // 0x10
     6, 10, 10, 12, 13,  6,  8, 11, 10, 10,  8, 11,  8,  6,  6,  6, // ' '..'/'
     5,  5,  5,  6,  6,  6,  6,  6,  6,  6,  7,  8, 15,  6, 12, 10, // '0'..'?'
    13,  6,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7, // '@'..'O'
     7,  7,  7,  7,  7,  7,  7,  7,  8,  7,  8, 13, 19, 13, 14,  6, // 'P'..'_'
    15,  5,  6,  5,  6,  5,  6,  6,  6,  5,  7,  7,  6,  6,  6,  5, // '`'..'o'
     6,  7,  6,  5,  5,  6,  7,  7,  7,  7,  7, 15, 11, 14, 13, 28, // 'p'..0x7f
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, // 0x80
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, // 0x90
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, // 0xa0
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, // 0xb0
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, // 0xc0
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, // 0xd0
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, // 0xe0
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, // 0xf0
    30, // EOS
];

const EOS: u16 = 256;

/// (length, code) → symbol, for the canonical code the lengths define: codes are handed out in
/// order of length, then symbol, each one more than the last (shifted left as lengths grow).
fn codes() -> &'static HashMap<(u8, u32), u16> {
    static CODES: OnceLock<HashMap<(u8, u32), u16>> = OnceLock::new();
    CODES.get_or_init(|| {
        let mut order: Vec<u16> = (0..=EOS).collect();
        order.sort_by_key(|&s| (CODE_LEN[s as usize], s));
        let mut map = HashMap::new();
        let (mut code, mut len) = (0u32, CODE_LEN[order[0] as usize]);
        for s in order {
            let l = CODE_LEN[s as usize];
            code <<= l - len;
            len = l;
            map.insert((len, code), s);
            code += 1;
        }
        map
    })
}

/// The code of `sym`, for checks against the table's hex column.
pub fn code_of(sym: u16) -> (u32, u8) {
    let (&(len, code), _) = codes().iter().find(|(_, &s)| s == sym).unwrap();
    (code, len)
}

/// RFC 7541 §5.2: a bit at a time down the code; the padding must be fewer than 8 bits, all
/// ones (the EOS code's first bits), and EOS itself must not appear.
pub fn huffman_decode(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let (mut out, mut code, mut len) = (Vec::new(), 0u32, 0u8);
    for bit in bytes
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
    {
        code = code << 1 | u32::from(bit);
        len += 1;
        match codes().get(&(len, code)) {
            Some(&EOS) => return Err("EOS in a Huffman string".into()),
            Some(&s) => {
                out.push(s as u8);
                (code, len) = (0, 0);
            }
            None if len >= 30 => return Err("no Huffman code matches".into()),
            None => {}
        }
    }
    if len > 7 || code != (1 << len) - 1 {
        return Err(format!("bad Huffman padding ({len} bits, {code:#b})"));
    }
    Ok(out)
}

/// §5.1: an integer with an `n`-bit prefix; `flags` are the first byte's bits above the prefix.
pub fn int(out: &mut Vec<u8>, n: u8, flags: u8, value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// §5.2: a string literal, not Huffman-coded.
fn string(out: &mut Vec<u8>, s: &[u8]) {
    int(out, 7, 0, s.len());
    out.extend_from_slice(s);
}

/// §6.2.2: a literal field without indexing, with a new (literal) name.
pub fn literal(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.push(0x00);
    string(out, name.as_bytes());
    string(out, value);
}

/// §6.2.1: a literal field with incremental indexing (it enters the decoder's dynamic table).
pub fn literal_indexed(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0x40);
    string(out, name.as_bytes());
    string(out, value.as_bytes());
}

/// A header block: the static entries a request needs as indexes, all else as literals.
pub fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(name, value) in fields {
        match (name, value) {
            (":method", "GET") => out.push(0x82),
            (":method", "POST") => out.push(0x83),
            (":path", "/") => out.push(0x84),
            (":scheme", "http") => out.push(0x86),
            (":scheme", "https") => out.push(0x87),
            _ => literal(&mut out, name, value.as_bytes()),
        }
    }
    out
}

/// The decoding side: the dynamic table (§2.3.2) and its size limit (§4.2).
#[derive(Debug)]
pub struct Decoder {
    table: VecDeque<(String, String)>,
    size: usize,
    max: usize,
    /// Our SETTINGS_HEADER_TABLE_SIZE: no size update may exceed it.
    limit: usize,
    /// The limit fell below `max`: the next block must open with a size update (§4.2).
    update_due: bool,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max: 4096,
            limit: 4096,
            update_due: false,
        }
    }
}

/// A cursor over a header block.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let (&b, rest) = self.0.split_first().ok_or("header block ends early")?;
        self.0 = rest;
        Ok(b)
    }
    fn int(&mut self, n: u8) -> Result<usize, String> {
        let max = (1usize << n) - 1;
        let mut v = (self.byte()? as usize) & max;
        if v < max {
            return Ok(v);
        }
        for shift in (0..35).step_by(7) {
            let b = self.byte()?;
            v += ((b & 0x7f) as usize) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("integer too long".into())
    }
    fn string(&mut self) -> Result<String, String> {
        let huffman = self.0.first().is_some_and(|b| b & 0x80 != 0);
        let len = self.int(7)?;
        if len > self.0.len() {
            return Err("string runs past the block".into());
        }
        let (raw, rest) = self.0.split_at(len);
        self.0 = rest;
        let bytes = if huffman {
            huffman_decode(raw)?
        } else {
            raw.to_vec()
        };
        String::from_utf8(bytes).map_err(|e| e.to_string())
    }
}

impl Decoder {
    /// Our SETTINGS_HEADER_TABLE_SIZE changed to `limit`.
    pub fn limit(&mut self, limit: usize) {
        self.limit = limit;
        self.update_due = limit < self.max;
    }

    /// §4.1: an entry's size is its name and value plus 32.
    fn insert(&mut self, field: (String, String)) {
        self.size += field.0.len() + field.1.len() + 32;
        self.table.push_front(field);
        self.evict();
    }
    fn evict(&mut self) {
        while self.size > self.max {
            let (n, v) = self.table.pop_back().unwrap();
            self.size -= n.len() + v.len() + 32;
        }
    }
    fn get(&self, index: usize) -> Result<(String, String), String> {
        match index {
            0 => Err("index 0".into()),
            1..=61 => Ok((STATIC[index - 1].0.into(), STATIC[index - 1].1.into())),
            _ => self
                .table
                .get(index - 62)
                .cloned()
                .ok_or_else(|| format!("index {index} beyond the tables")),
        }
    }

    /// Decodes one whole header block into its fields, in order.
    pub fn decode(&mut self, block: &[u8]) -> Result<Vec<(String, String)>, String> {
        let mut input = Input(block);
        let mut fields = Vec::new();
        if self.update_due && block.first().is_none_or(|b| b & 0xe0 != 0x20) {
            return Err("no table size update after SETTINGS_HEADER_TABLE_SIZE fell".into());
        }
        self.update_due = false;
        while let Some(&b) = input.0.first() {
            if b & 0x80 != 0 {
                fields.push(self.get(input.int(7)?)?);
            } else if b & 0xe0 == 0x20 {
                if !fields.is_empty() {
                    return Err("a table size update after a field".into());
                }
                self.max = input.int(5)?;
                if self.max > self.limit {
                    return Err(format!("table size {} over our {}", self.max, self.limit));
                }
                self.evict();
            } else {
                let (n, indexing) = if b & 0x40 != 0 { (6, true) } else { (4, false) };
                let index = input.int(n)?;
                let name = match index {
                    0 => input.string()?,
                    i => self.get(i)?.0,
                };
                let field = (name, input.string()?);
                if indexing {
                    self.insert(field.clone());
                }
                fields.push(field);
            }
        }
        Ok(fields)
    }
}

/// RFC 7541 Appendix C.4's Huffman strings decode to their text, and the code is complete.
#[test]
fn hpack_huffman_decodes_the_rfc_7541_examples() {
    let hex = |s: &str| -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    };
    for (coded, text) in [
        ("f1e3 c2e5 f23a 6ba0 ab90 f4ff", "www.example.com"),
        ("a8eb 1064 9cbf", "no-cache"),
        ("25a8 49e9 5ba9 7d7f", "custom-key"),
        ("25a8 49e9 5bb8 e8b4 bf", "custom-value"),
        ("6402", "302"),
        ("aec3 771a 4b", "private"),
        (
            "d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff",
            "Mon, 21 Oct 2013 20:13:21 GMT",
        ),
        (
            "9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3",
            "https://www.example.com",
        ),
    ] {
        assert_eq!(huffman_decode(&hex(coded)).unwrap(), text.as_bytes());
    }
    // Kraft: a complete prefix code's 2^-len sum to exactly 1.
    let sum: u64 = CODE_LEN.iter().map(|&l| 1u64 << (30 - l)).sum();
    assert_eq!(sum, 1 << 30);
    assert_eq!(code_of(0), (0x1ff8, 13));
    assert_eq!(code_of(203), (0x7ffffde, 27));
    assert_eq!(code_of(EOS), (0x3fffffff, 30));
}
