//! HPACK (RFC 7541): the decoder of header blocks, with its dynamic table, and a stateless
//! encoder.
//!
//! The encoder never indexes: each field is a literal without indexing (§6.2.2) or never
//! indexed (§6.2.3), its name from the static table when it is there, so an encoded block means
//! the same on every connection and a cached object's block is made once.
//!
//! The decoder bounds what a block costs: past `max_list_size` (§4.1 sizes) fields stop being
//! handed out but the block is still decoded to its end so the dynamic table stays in step
//! ([`HpackError::ListTooLarge`]); a single string longer than that fails before anything is
//! allocated for it; the dynamic table never grows past the size this side announced.

pub mod huffman;
mod table;

use table::{DynamicTable, Entry, ENTRY_OVERHEAD};

/// Errors decoding a header block. Every one is a connection error COMPRESSION_ERROR in HTTP/2,
/// except [`HpackError::ListTooLarge`]: that block was decoded completely and the table stays
/// in sync; the request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HpackError {
    /// The block ends inside a representation, or a string's length passes its end.
    Truncated,
    /// An integer (§5.1) above 2^28 or with more continuation octets than that needs.
    IntegerOverflow,
    /// Index 0, or an index past the static and dynamic tables.
    BadIndex,
    /// A Huffman string with EOS inside or with invalid padding (§5.2).
    BadHuffman,
    /// A dynamic table size update above the limit, or not at the start of the block.
    TableSizeUpdate,
    /// A single string longer than the header list limit.
    StringTooLong,
    /// The decoded header list is larger than the limit.
    ListTooLarge,
}

impl std::fmt::Display for HpackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HpackError::Truncated => "HPACK block truncated",
            HpackError::IntegerOverflow => "HPACK integer overflow",
            HpackError::BadIndex => "HPACK index out of the tables",
            HpackError::BadHuffman => "invalid HPACK Huffman string",
            HpackError::TableSizeUpdate => "HPACK table size update over the limit or misplaced",
            HpackError::StringTooLong => "HPACK string longer than the header list limit",
            HpackError::ListTooLarge => "header list larger than the limit",
        })
    }
}

impl std::error::Error for HpackError {}

/// Continuation octets of an integer (§5.1) beyond the prefix: 4 of them carry 28 bits.
const MAX_INT_SHIFT: u32 = 21;

/// The decoding side of one HTTP/2 connection: its dynamic table and reused scratch buffers.
#[derive(Debug, Clone)]
pub struct Decoder {
    table: DynamicTable,
    max_table_size: usize,
    name_buf: Vec<u8>,
    value_buf: Vec<u8>,
}

impl Decoder {
    /// A decoder whose dynamic table may reach `max_table_size` octets, the
    /// SETTINGS_HEADER_TABLE_SIZE this side announced (4096 by default).
    pub fn new(max_table_size: usize) -> Decoder {
        Decoder {
            table: DynamicTable::new(max_table_size),
            max_table_size,
            name_buf: Vec::new(),
            value_buf: Vec::new(),
        }
    }

    /// Current dynamic table size in octets (§4.1).
    pub fn table_size(&self) -> usize {
        self.table.size()
    }

    /// Decodes one complete header block (HEADERS and CONTINUATION payloads joined), calling
    /// `field(name, value)` for each field in order. Past `max_list_size` (the sum of
    /// name + value + 32 over the fields) fields are no longer handed out, the block is still
    /// decoded to its end, and the result is [`HpackError::ListTooLarge`]. A single string
    /// longer than `max_list_size` fails at once ([`HpackError::StringTooLong`]), and table size
    /// updates are accepted only at the start of the block and up to `max_table_size`.
    pub fn decode(
        &mut self,
        block: &[u8],
        max_list_size: usize,
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let Decoder {
            table,
            max_table_size,
            name_buf,
            value_buf,
        } = self;
        let mut list_size = 0usize;
        let mut emit = |name: &[u8], value: &[u8]| {
            list_size = list_size
                .saturating_add(name.len())
                .saturating_add(value.len())
                .saturating_add(ENTRY_OVERHEAD);
            if list_size <= max_list_size {
                field(name, value);
            }
        };
        let mut pos = 0usize;
        let mut started = false;
        while let Some(&first) = block.get(pos) {
            if first & 0x80 != 0 {
                // §6.1 indexed header field.
                let index = decode_int(block, &mut pos, 7)?;
                let (name, value) = lookup(table, index)?;
                emit(name, value);
            } else if first & 0x40 != 0 {
                // §6.2.1 literal with incremental indexing.
                let index = decode_int(block, &mut pos, 6)?;
                let name = match index {
                    0 => read_string(block, &mut pos, name_buf, max_list_size)?,
                    i => lookup(table, i)?.0,
                };
                let value = read_string(block, &mut pos, value_buf, max_list_size)?;
                let size = name
                    .len()
                    .saturating_add(value.len())
                    .saturating_add(ENTRY_OVERHEAD);
                if table.fits(size) {
                    // A copy first: the name may be an entry this insertion evicts (§4.4).
                    let entry = Entry::new(name, value);
                    emit(entry.name(), entry.value());
                    table.push(entry);
                } else {
                    emit(name, value);
                    table.clear();
                }
            } else if first & 0x20 != 0 {
                // §6.3 dynamic table size update, only before the first field (§4.2).
                if started {
                    return Err(HpackError::TableSizeUpdate);
                }
                let size = decode_int(block, &mut pos, 5)?;
                if size > *max_table_size {
                    return Err(HpackError::TableSizeUpdate);
                }
                table.set_capacity(size);
                continue;
            } else {
                // §6.2.2 without indexing (0000) and §6.2.3 never indexed (0001).
                let index = decode_int(block, &mut pos, 4)?;
                let name = match index {
                    0 => read_string(block, &mut pos, name_buf, max_list_size)?,
                    i => lookup(table, i)?.0,
                };
                let value = read_string(block, &mut pos, value_buf, max_list_size)?;
                emit(name, value);
            }
            started = true;
        }
        if list_size > max_list_size {
            return Err(HpackError::ListTooLarge);
        }
        Ok(())
    }
}

/// The entry at `index` of the static then the dynamic table (§2.3.3).
fn lookup(table: &DynamicTable, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
    match index {
        0 => Err(HpackError::BadIndex),
        1..=61 => table::static_entry(index).ok_or(HpackError::BadIndex),
        _ => table.get(index - 62).ok_or(HpackError::BadIndex),
    }
}

/// Reads an integer with a `prefix_bits` prefix (§5.1) at `*pos`, moving past it.
fn decode_int(block: &[u8], pos: &mut usize, prefix_bits: u8) -> Result<usize, HpackError> {
    let first = *block.get(*pos).ok_or(HpackError::Truncated)?;
    *pos += 1;
    let mask = (1usize << prefix_bits.clamp(1, 8)) - 1;
    let mut value = usize::from(first) & mask;
    if value < mask {
        return Ok(value);
    }
    let mut shift = 0u32;
    loop {
        let b = *block.get(*pos).ok_or(HpackError::Truncated)?;
        *pos += 1;
        value += usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        if shift > MAX_INT_SHIFT {
            return Err(HpackError::IntegerOverflow);
        }
    }
}

/// Reads a string literal (§5.2) at `*pos`: a slice of `block`, or decoded into `buf` when
/// Huffman-coded. One longer than `limit` fails before it is read.
fn read_string<'a>(
    block: &'a [u8],
    pos: &mut usize,
    buf: &'a mut Vec<u8>,
    limit: usize,
) -> Result<&'a [u8], HpackError> {
    let huffman = block.get(*pos).is_some_and(|b| b & 0x80 != 0);
    let len = decode_int(block, pos, 7)?;
    // A Huffman code is at most 30 bits a symbol and padding under 8 bits.
    let least = if huffman {
        len.saturating_mul(8).saturating_sub(7) / 30
    } else {
        len
    };
    if least > limit {
        return Err(HpackError::StringTooLong);
    }
    let end = pos.checked_add(len).ok_or(HpackError::Truncated)?;
    let raw = block.get(*pos..end).ok_or(HpackError::Truncated)?;
    *pos = end;
    if !huffman {
        return Ok(raw);
    }
    buf.clear();
    huffman::decode_limited(raw, buf, limit)?;
    Ok(buf)
}

/// Appends `value` as an integer with a `prefix_bits`-bit prefix (§5.1); `first` holds the
/// bits of the first octet above the prefix.
pub fn encode_int(value: usize, prefix_bits: u8, first: u8, out: &mut Vec<u8>) {
    let mask = (1usize << prefix_bits.clamp(1, 8)) - 1;
    if value < mask {
        out.push(first | value as u8);
        return;
    }
    out.push(first | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.push((rest & 0x7f) as u8 | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Strings shorter than this are sent as they are: Huffman coding would save two octets at
/// most (5 bits a symbol at best) for the cost of coding them on every response.
const HUFFMAN_FROM: usize = 8;

/// Appends a string literal (§5.2), Huffman-coded when that is shorter (from
/// [`HUFFMAN_FROM`] octets on).
fn encode_string(s: &[u8], out: &mut Vec<u8>) {
    if s.len() < HUFFMAN_FROM {
        encode_int(s.len(), 7, 0, out);
        out.extend_from_slice(s);
        return;
    }
    let coded = huffman::encoded_len(s);
    if coded < s.len() {
        encode_int(coded, 7, 0x80, out);
        huffman::encode(s, out);
    } else {
        encode_int(s.len(), 7, 0, out);
        out.extend_from_slice(s);
    }
}

/// Appends a field value alone as a string literal (§5.2), for a caller that wrote the start of
/// the representation (its name) itself.
pub fn encode_value(value: &[u8], out: &mut Vec<u8>) {
    encode_string(value, out);
}

/// Appends `:status`: the static entry when it is one of 200, 204, 206, 304, 400, 404, 500,
/// else a literal without indexing with the static name index 8.
pub fn encode_status(status: u16, out: &mut Vec<u8>) {
    let index = match status {
        200 => 8,
        204 => 9,
        206 => 10,
        304 => 11,
        400 => 12,
        404 => 13,
        500 => 14,
        _ => {
            encode_int(8, 4, 0x00, out);
            let mut digits = [0u8; 5];
            let mut n = status;
            let mut start = digits.len();
            loop {
                start -= 1;
                if let Some(d) = digits.get_mut(start) {
                    *d = b'0' + (n % 10) as u8;
                }
                n /= 10;
                if n == 0 || start == 0 {
                    break;
                }
            }
            encode_string(digits.get(start..).unwrap_or_default(), out);
            return;
        }
    };
    encode_int(index, 7, 0x80, out);
}

/// Appends one field as a literal without indexing (§6.2.2): the name as a static index when
/// the static table has it (names are lowercase), name and value Huffman-coded when shorter.
pub fn encode_field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    encode_literal(0x00, name, value, out);
}

/// Appends one field as a literal never indexed (§6.2.3), for sensitive values such as
/// `authorization` or cookies, which intermediaries must not index either.
pub fn encode_field_never_indexed(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    encode_literal(0x10, name, value, out);
}

fn encode_literal(first: u8, name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    match table::name_index(name) {
        Some(index) => encode_int(index, 4, first, out),
        None => {
            out.push(first);
            encode_string(name, out);
        }
    }
    encode_string(value, out);
}

/// Appends a dynamic table size update (§6.3) to `size` octets.
pub fn encode_table_size_update(size: usize, out: &mut Vec<u8>) {
    encode_int(size, 5, 0x20, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    type Fields = Vec<(String, String)>;

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|p| {
                let text = std::str::from_utf8(p).expect("ascii");
                u8::from_str_radix(text, 16).expect("hex digits")
            })
            .collect()
    }

    fn decode(d: &mut Decoder, block: &[u8]) -> Result<Fields, HpackError> {
        decode_limited(d, block, 1 << 20)
    }

    fn decode_limited(d: &mut Decoder, block: &[u8], max: usize) -> Result<Fields, HpackError> {
        let mut got = Vec::new();
        d.decode(block, max, |n, v| {
            got.push((
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            ))
        })?;
        Ok(got)
    }

    fn list(l: &[(&str, &str)]) -> Fields {
        l.iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// The dynamic table, newest first, as "name: value".
    fn entries(d: &Decoder) -> Vec<String> {
        (0..)
            .map_while(|i| d.table.get(i))
            .map(|(n, v)| {
                format!(
                    "{}: {}",
                    String::from_utf8_lossy(n),
                    String::from_utf8_lossy(v)
                )
            })
            .collect()
    }

    fn int(bytes: &[u8], prefix: u8) -> Result<usize, HpackError> {
        let mut pos = 0;
        let v = decode_int(bytes, &mut pos, prefix)?;
        assert_eq!(pos, bytes.len());
        Ok(v)
    }

    /// C.1.1: 10 with a 5-bit prefix.
    #[test]
    fn c_1_1_integer_10_prefix_5() {
        let mut out = Vec::new();
        encode_int(10, 5, 0xe0, &mut out);
        assert_eq!(out, [0xea]);
        assert_eq!(int(&out, 5), Ok(10));
    }

    /// C.1.2: 1337 with a 5-bit prefix.
    #[test]
    fn c_1_2_integer_1337_prefix_5() {
        let mut out = Vec::new();
        encode_int(1337, 5, 0, &mut out);
        assert_eq!(out, [0x1f, 0x9a, 0x0a]);
        assert_eq!(int(&out, 5), Ok(1337));
    }

    /// C.1.3: 42 starting at an octet boundary (8-bit prefix).
    #[test]
    fn c_1_3_integer_42_prefix_8() {
        let mut out = Vec::new();
        encode_int(42, 8, 0, &mut out);
        assert_eq!(out, [0x2a]);
        assert_eq!(int(&out, 8), Ok(42));
    }

    /// §5.1: round trips at every prefix size around the limits, and the 2^28 cap.
    #[test]
    fn section_5_1_integer_round_trip_and_overflow() {
        for prefix in 1..=8u8 {
            let mask = (1usize << prefix) - 1;
            for v in [
                0,
                1,
                mask - 1,
                mask,
                mask + 1,
                127 + mask,
                128 + mask,
                1 << 20,
            ] {
                let mut out = Vec::new();
                encode_int(v, prefix, 0, &mut out);
                assert_eq!(int(&out, prefix), Ok(v), "{v} prefix {prefix}");
            }
            let max = mask + (1 << 28) - 1;
            let mut out = Vec::new();
            encode_int(max, prefix, 0, &mut out);
            assert_eq!(out.len(), 5);
            assert_eq!(int(&out, prefix), Ok(max));
            out.clear();
            encode_int(max + 1, prefix, 0, &mut out);
            assert_eq!(int(&out, prefix), Err(HpackError::IntegerOverflow));
        }
        // Redundant zero continuation octets count too.
        assert_eq!(
            int(&[0x1f, 0x80, 0x80, 0x80, 0x80, 0x00], 5),
            Err(HpackError::IntegerOverflow)
        );
        assert_eq!(int(&[0x1f, 0x80, 0x80], 5), Err(HpackError::Truncated));
        assert_eq!(int(&[], 5), Err(HpackError::Truncated));
    }

    /// §5.1: an oversize integer in a block (an index) is IntegerOverflow.
    #[test]
    fn section_5_1_oversize_integer_in_block() {
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode(&mut d, &[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            Err(HpackError::IntegerOverflow)
        );
        let mut d = Decoder::new(4096);
        let huge = [0x00, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(decode(&mut d, &huge), Err(HpackError::IntegerOverflow));
    }

    /// C.2.1: literal with indexing, new name.
    #[test]
    fn c_2_1_literal_with_indexing() {
        let mut d = Decoder::new(4096);
        let block = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
        assert_eq!(
            decode(&mut d, &block),
            Ok(list(&[("custom-key", "custom-header")]))
        );
        assert_eq!(entries(&d), ["custom-key: custom-header"]);
        assert_eq!(d.table_size(), 55);
    }

    /// C.2.2: literal without indexing, indexed name.
    #[test]
    fn c_2_2_literal_without_indexing() {
        let mut d = Decoder::new(4096);
        let block = hex("040c 2f73 616d 706c 652f 7061 7468");
        assert_eq!(
            decode(&mut d, &block),
            Ok(list(&[(":path", "/sample/path")]))
        );
        assert_eq!(d.table_size(), 0);
    }

    /// C.2.3: literal never indexed, new name.
    #[test]
    fn c_2_3_literal_never_indexed() {
        let mut d = Decoder::new(4096);
        let block = hex("1008 7061 7373 776f 7264 0673 6563 7265 74");
        assert_eq!(decode(&mut d, &block), Ok(list(&[("password", "secret")])));
        assert_eq!(d.table_size(), 0);
    }

    /// C.2.4: indexed field.
    #[test]
    fn c_2_4_indexed_field() {
        let mut d = Decoder::new(4096);
        assert_eq!(decode(&mut d, &[0x82]), Ok(list(&[(":method", "GET")])));
        assert_eq!(d.table_size(), 0);
    }

    const C3: [&str; 3] = [
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ];
    const C4: [&str; 3] = [
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ];
    const C5: [&str; 3] = [
        "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
         2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
         6c65 2e63 6f6d",
        "4803 3330 37c1 c0bf",
        "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
         54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
         5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
         3d31",
    ];
    const C6: [&str; 3] = [
        "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
         2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        "4883 640e ffc1 c0bf",
        "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
         77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
         9587 3160 65c0 03ed 4ee5 b106 3d50 07",
    ];

    /// The requests of C.3 and C.4 decode to the same lists and tables.
    fn check_requests(blocks: &[&str; 3]) {
        let mut d = Decoder::new(4096);
        let first = [
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "www.example.com"),
        ];
        assert_eq!(decode(&mut d, &hex(blocks[0])), Ok(list(&first)));
        assert_eq!(entries(&d), [":authority: www.example.com"]);
        assert_eq!(d.table_size(), 57);

        let mut second = first.to_vec();
        second.push(("cache-control", "no-cache"));
        assert_eq!(decode(&mut d, &hex(blocks[1])), Ok(list(&second)));
        assert_eq!(
            entries(&d),
            ["cache-control: no-cache", ":authority: www.example.com"]
        );
        assert_eq!(d.table_size(), 110);

        let third = [
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/index.html"),
            (":authority", "www.example.com"),
            ("custom-key", "custom-value"),
        ];
        assert_eq!(decode(&mut d, &hex(blocks[2])), Ok(list(&third)));
        assert_eq!(
            entries(&d),
            [
                "custom-key: custom-value",
                "cache-control: no-cache",
                ":authority: www.example.com"
            ]
        );
        assert_eq!(d.table_size(), 164);
    }

    /// C.3: requests without Huffman coding, on one connection.
    #[test]
    fn c_3_requests_without_huffman() {
        check_requests(&C3);
    }

    /// C.4: the same requests with Huffman coding.
    #[test]
    fn c_4_requests_with_huffman() {
        check_requests(&C4);
    }

    /// The responses of C.5 and C.6, decoded with a 256-octet table (evictions).
    fn check_responses(blocks: &[&str; 3]) {
        let mut d = Decoder::new(256);
        let date1 = "Mon, 21 Oct 2013 20:13:21 GMT";
        let loc = "https://www.example.com";
        let first = [
            (":status", "302"),
            ("cache-control", "private"),
            ("date", date1),
            ("location", loc),
        ];
        assert_eq!(decode(&mut d, &hex(blocks[0])), Ok(list(&first)));
        assert_eq!(
            entries(&d),
            [
                "location: https://www.example.com",
                "date: Mon, 21 Oct 2013 20:13:21 GMT",
                "cache-control: private",
                ":status: 302"
            ]
        );
        assert_eq!(d.table_size(), 222);

        let second = [
            (":status", "307"),
            ("cache-control", "private"),
            ("date", date1),
            ("location", loc),
        ];
        assert_eq!(decode(&mut d, &hex(blocks[1])), Ok(list(&second)));
        assert_eq!(
            entries(&d),
            [
                ":status: 307",
                "location: https://www.example.com",
                "date: Mon, 21 Oct 2013 20:13:21 GMT",
                "cache-control: private"
            ]
        );
        assert_eq!(d.table_size(), 222);

        let cookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";
        let third = [
            (":status", "200"),
            ("cache-control", "private"),
            ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
            ("location", loc),
            ("content-encoding", "gzip"),
            ("set-cookie", cookie),
        ];
        assert_eq!(decode(&mut d, &hex(blocks[2])), Ok(list(&third)));
        assert_eq!(
            entries(&d),
            [
                format!("set-cookie: {cookie}").as_str(),
                "content-encoding: gzip",
                "date: Mon, 21 Oct 2013 20:13:22 GMT"
            ]
        );
        assert_eq!(d.table_size(), 215);
    }

    /// C.5: responses without Huffman coding, table size 256.
    #[test]
    fn c_5_responses_without_huffman() {
        check_responses(&C5);
    }

    /// C.6: responses with Huffman coding, table size 256.
    #[test]
    fn c_6_responses_with_huffman() {
        check_responses(&C6);
    }

    /// §5.2 / §6: every cut of every Appendix C block, decoded with the table as it was before
    /// that block, fails or (cut between representations) gives a prefix of the fields; never
    /// a panic.
    #[test]
    fn appendix_c_truncated_at_every_cut() {
        for (size, blocks) in [(4096, &C3), (4096, &C4), (256, &C5), (256, &C6)] {
            let mut d = Decoder::new(size);
            for block in blocks.iter().map(|b| hex(b)) {
                let full = decode(&mut d.clone(), &block).expect("the full block decodes");
                for cut in 0..block.len() {
                    match decode(&mut d.clone(), &block[..cut]) {
                        Ok(got) => assert_eq!(got[..], full[..got.len()], "cut {cut}"),
                        Err(e) => assert_eq!(e, HpackError::Truncated, "cut {cut}"),
                    }
                }
                decode(&mut d, &block).expect("decodes");
            }
        }
    }

    /// §5.2: a single representation cut anywhere is Truncated.
    #[test]
    fn single_field_truncated_at_every_cut() {
        let mut blocks = vec![
            hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"),
            hex("1008 7061 7373 776f 7264 0673 6563 7265 74"),
        ];
        let mut b = Vec::new();
        encode_field(b"x-some-long-name", &[b'v'; 300], &mut b);
        blocks.push(b);
        let mut b = Vec::new();
        encode_field_never_indexed(b"cookie", b"session=0123456789abcdef", &mut b);
        blocks.push(b);
        for block in blocks {
            for cut in 1..block.len() {
                let got = decode(&mut Decoder::new(4096), &block[..cut]);
                assert_eq!(got, Err(HpackError::Truncated), "cut {cut} of {block:02x?}");
            }
        }
    }

    /// §6.1: index 0 and indexes past the tables are errors.
    #[test]
    fn section_6_1_bad_index() {
        let mut d = Decoder::new(4096);
        assert_eq!(decode(&mut d, &[0x80]), Err(HpackError::BadIndex));
        assert_eq!(decode(&mut d, &[0xbe]), Err(HpackError::BadIndex));
        assert_eq!(decode(&mut d, &[0x7e, 0x00]), Err(HpackError::BadIndex));
        decode(&mut d, &hex(C3[0])).expect("C.3.1");
        assert_eq!(
            decode(&mut d, &[0xbe]),
            Ok(list(&[(":authority", "www.example.com")]))
        );
        assert_eq!(decode(&mut d, &[0xbf]), Err(HpackError::BadIndex));
    }

    /// §5.2: a string whose declared length passes the end of the block is Truncated.
    #[test]
    fn section_5_2_string_past_end() {
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode(&mut d, &[0x04, 0x0c, b'/']),
            Err(HpackError::Truncated)
        );
        assert_eq!(
            decode(&mut d, &[0x04, 0x8c, 0xff]),
            Err(HpackError::Truncated)
        );
        assert_eq!(
            decode(&mut d, &[0x00, 0x01, b'a']),
            Err(HpackError::Truncated)
        );
    }

    /// §5.2: bad Huffman strings in a block.
    #[test]
    fn section_5_2_bad_huffman_in_block() {
        let mut d = Decoder::new(4096);
        // :path with a value of one octet of ones (8 bits of padding).
        assert_eq!(
            decode(&mut d, &[0x04, 0x81, 0xff]),
            Err(HpackError::BadHuffman)
        );
        // EOS inside.
        assert_eq!(
            decode(&mut d, &[0x04, 0x84, 0xff, 0xff, 0xff, 0xff]),
            Err(HpackError::BadHuffman)
        );
    }

    /// §4.2 / §6.3: size updates only at the start of a block and up to the announced limit.
    #[test]
    fn section_6_3_table_size_update() {
        let mut d = Decoder::new(4096);
        let mut b = Vec::new();
        encode_table_size_update(4097, &mut b);
        assert_eq!(decode(&mut d, &b), Err(HpackError::TableSizeUpdate));

        let mut d = Decoder::new(4096);
        assert_eq!(
            decode(&mut d, &[0x82, 0x20]),
            Err(HpackError::TableSizeUpdate)
        );

        // Two updates in a row at the start, then fields.
        let mut d = Decoder::new(4096);
        let mut b = Vec::new();
        encode_table_size_update(0, &mut b);
        encode_table_size_update(4096, &mut b);
        b.extend_from_slice(&hex(C3[0]));
        assert_eq!(decode(&mut d, &b).map(|f| f.len()), Ok(4));
        assert_eq!(d.table_size(), 57);

        // An update to 0 empties the table; the next block cannot reference the entry.
        assert_eq!(decode(&mut d, &[0x20]), Ok(vec![]));
        assert_eq!(d.table_size(), 0);
        assert_eq!(decode(&mut d, &[0xbe]), Err(HpackError::BadIndex));

        // With a 50-octet maximum the 57-octet entry does not fit: the table stays empty.
        let mut b = Vec::new();
        encode_table_size_update(50, &mut b);
        b.extend_from_slice(&hex(C3[0]));
        assert_eq!(decode(&mut d, &b).map(|f| f.len()), Ok(4));
        assert_eq!(d.table_size(), 0);
    }

    /// §4.4: a new entry whose name is the entry its insertion evicts.
    #[test]
    fn section_4_4_name_of_evicted_entry() {
        let mut d = Decoder::new(4096);
        let mut b = Vec::new();
        encode_table_size_update(64, &mut b);
        b.extend_from_slice(&[0x40, 0x04]);
        b.extend_from_slice(b"aaaa");
        b.push(0x04);
        b.extend_from_slice(b"bbbb");
        b.extend_from_slice(&[0x7e, 0x08]);
        b.extend_from_slice(b"cccccccc");
        assert_eq!(
            decode(&mut d, &b),
            Ok(list(&[("aaaa", "bbbb"), ("aaaa", "cccccccc")]))
        );
        assert_eq!(entries(&d), ["aaaa: cccccccc"]);
        assert_eq!(d.table_size(), 44);
    }

    /// §4.1 list size: ListTooLarge decodes the whole block, so the table stays in step and the
    /// next block can reference what this one added.
    #[test]
    fn list_too_large_keeps_table_in_sync() {
        let mut d = Decoder::new(4096);
        // 42 + 43 + 38 + 57 = 180 octets; the limit stops after the second field.
        let mut got = Vec::new();
        let r = d.decode(&hex(C4[0]), 100, |n, v| got.push((n.to_vec(), v.to_vec())));
        assert_eq!(r, Err(HpackError::ListTooLarge));
        assert_eq!(got.len(), 2);
        assert_eq!(d.table_size(), 57);
        assert_eq!(
            decode(&mut d, &[0xbe]),
            Ok(list(&[(":authority", "www.example.com")]))
        );
        // Exactly at the limit is fine.
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode_limited(&mut d, &hex(C3[0]), 180).map(|f| f.len()),
            Ok(4)
        );
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode_limited(&mut d, &hex(C3[0]), 179),
            Err(HpackError::ListTooLarge)
        );
    }

    /// HPACK bomb: one entry referenced many times stops at the limit, nothing allocated.
    #[test]
    fn list_too_large_many_references() {
        let mut d = Decoder::new(4096);
        let mut b = vec![0x40, 0x01, b'x'];
        encode_int(4000, 7, 0, &mut b);
        b.extend_from_slice(&[b'y'; 4000]);
        b.extend_from_slice(&[0xbe; 10_000]);
        let mut calls = 0;
        let r = d.decode(&b, 64 * 1024, |_, _| calls += 1);
        assert_eq!(r, Err(HpackError::ListTooLarge));
        // 16 fields of 4033 octets fit in 64 KiB: the literal and 15 references.
        assert_eq!(calls, 16);
        assert_eq!(d.table_size(), 4033);
    }

    /// A string longer than the list limit fails at once, before any allocation for it.
    #[test]
    fn string_too_long_without_allocating() {
        for first in [0x00u8, 0x80] {
            let mut d = Decoder::new(4096);
            let mut b = vec![0x00];
            encode_int(1 << 27, 7, first, &mut b);
            b.extend_from_slice(b"abc");
            assert_eq!(
                decode_limited(&mut d, &b, 16 * 1024),
                Err(HpackError::StringTooLong)
            );
            assert_eq!(d.name_buf.capacity(), 0);
            assert_eq!(d.value_buf.capacity(), 0);
        }
        // A present raw value over the limit.
        let mut d = Decoder::new(4096);
        let mut b = Vec::new();
        encode_field(b"x-a", &[0x01; 100], &mut b);
        assert_eq!(
            decode_limited(&mut d, &b, 50),
            Err(HpackError::StringTooLong)
        );
        // A Huffman value that only decodes past the limit: stops near it.
        let mut b = Vec::new();
        encode_field(b"x-a", &[b'a'; 400], &mut b);
        assert_eq!(
            decode_limited(&mut d, &b, 150),
            Err(HpackError::StringTooLong)
        );
        assert!(d.value_buf.capacity() <= 152, "{}", d.value_buf.capacity());
    }

    /// The static `:status` entries are one octet; the others a literal with name index 8.
    #[test]
    fn encode_status_round_trip() {
        for (status, byte) in [
            (200, 0x88),
            (204, 0x89),
            (206, 0x8a),
            (304, 0x8b),
            (400, 0x8c),
            (404, 0x8d),
            (500, 0x8e),
        ] {
            let mut out = Vec::new();
            encode_status(status, &mut out);
            assert_eq!(out, [byte]);
        }
        for status in [0u16, 7, 99, 100, 103, 201, 302, 503, 999, 65535] {
            let mut out = Vec::new();
            encode_status(status, &mut out);
            assert_eq!(out[0], 0x08);
            let got = decode(&mut Decoder::new(4096), &out);
            assert_eq!(got, Ok(list(&[(":status", &status.to_string())])));
        }
        // A short value goes as it is (C.5.1's "302", without indexing).
        let mut out = Vec::new();
        encode_status(302, &mut out);
        assert_eq!(out, [0x08, 0x03, b'3', b'0', b'2']);
    }

    /// §6.2.2: static name indexes, literal names, Huffman only when shorter.
    #[test]
    fn section_6_2_2_encode_field() {
        let mut out = Vec::new();
        encode_field(b"content-type", b"text/html; charset=utf-8", &mut out);
        // Index 31 on a 4-bit prefix: 15 then 16.
        assert_eq!(out[..2], [0x0f, 0x10]);
        let coded = huffman::encoded_len(b"text/html; charset=utf-8");
        assert!(coded < 24);
        assert_eq!(usize::from(out[2]), 0x80 | coded);
        assert_eq!(out.len(), 3 + coded);

        out.clear();
        encode_field(b":path", b"/", &mut out);
        assert_eq!(out, [0x04, 0x01, b'/']);

        // Huffman would be longer: sent as it is.
        out.clear();
        encode_field(b"age", b"{}", &mut out);
        assert_eq!(out, [0x0f, 0x06, 0x02, b'{', b'}']);

        // Under HUFFMAN_FROM octets a string goes as it is, even where Huffman is shorter.
        out.clear();
        encode_field(b"age", b"1234567", &mut out);
        assert_eq!(
            out,
            [0x0f, 0x06, 0x07, b'1', b'2', b'3', b'4', b'5', b'6', b'7']
        );

        // A name outside the static table, Huffman-coded.
        out.clear();
        encode_field(b"x-cache-status", b"HIT", &mut out);
        assert_eq!(out[0], 0x00);
        let coded = huffman::encoded_len(b"x-cache-status");
        assert!(coded < 14);
        assert_eq!(usize::from(out[1]), 0x80 | coded);
        assert_eq!(out[2 + coded..], [0x03, b'H', b'I', b'T']);
        let got = decode(&mut Decoder::new(4096), &out);
        assert_eq!(got, Ok(list(&[("x-cache-status", "HIT")])));
    }

    /// §6.2.3: never indexed starts with 0001 and leaves the table alone.
    #[test]
    fn section_6_2_3_encode_never_indexed() {
        let mut out = Vec::new();
        encode_field_never_indexed(b"authorization", b"Bearer abc", &mut out);
        assert_eq!(out[..2], [0x1f, 0x08]);
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode(&mut d, &out),
            Ok(list(&[("authorization", "Bearer abc")]))
        );
        assert_eq!(d.table_size(), 0);
    }

    /// A whole response block from the encoder decodes back to the same list, table untouched.
    #[test]
    fn encoded_block_round_trip() {
        let fields: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (b"content-type".to_vec(), b"application/json".to_vec()),
            (b"cache-control".to_vec(), b"public, max-age=3600".to_vec()),
            (b"x-custom".to_vec(), (0..=255u8).collect()),
            (b"etag".to_vec(), b"\"abc\"".to_vec()),
            (b"content-length".to_vec(), b"12345".to_vec()),
            (b"x-empty".to_vec(), Vec::new()),
            (b"set-cookie".to_vec(), b"a=b; Secure".to_vec()),
        ];
        let mut block = Vec::new();
        encode_status(206, &mut block);
        for (i, (n, v)) in fields.iter().enumerate() {
            if i % 2 == 0 {
                encode_field(n, v, &mut block);
            } else {
                encode_field_never_indexed(n, v, &mut block);
            }
        }
        // A name written once, then its value (as http2::server::write does).
        let mut name = Vec::new();
        encode_field(b"x-arc2-cache-age", b"", &mut name);
        name.pop();
        block.extend_from_slice(&name);
        encode_value(b"42", &mut block);

        let mut got = Vec::new();
        let mut d = Decoder::new(4096);
        d.decode(&block, 1 << 20, |n, v| got.push((n.to_vec(), v.to_vec())))
            .expect("our block decodes");
        let mut want = vec![(b":status".to_vec(), b"206".to_vec())];
        want.extend(fields);
        want.push((b"x-arc2-cache-age".to_vec(), b"42".to_vec()));
        assert_eq!(got, want);
        assert_eq!(d.table_size(), 0);
    }

    /// Each error has a message.
    #[test]
    fn display() {
        for e in [
            HpackError::Truncated,
            HpackError::IntegerOverflow,
            HpackError::BadIndex,
            HpackError::BadHuffman,
            HpackError::TableSizeUpdate,
            HpackError::StringTooLong,
            HpackError::ListTooLarge,
        ] {
            assert!(!e.to_string().is_empty());
        }
    }

    fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// Robustness: pseudo-random blocks, and Appendix C blocks with random bytes changed, on
    /// long-lived decoders; errors are fine, panics are not, the table never passes its limit.
    #[test]
    fn random_blocks_never_panic() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut d = Decoder::new(4096);
        let mut small = Decoder::new(256);
        for _ in 0..5000 {
            let len = (xorshift(&mut x) % 64) as usize;
            let block: Vec<u8> = (0..len).map(|_| xorshift(&mut x) as u8).collect();
            for cut in 0..=block.len() {
                let _ = d.decode(&block[..cut], 4096, |_, _| {});
            }
            let _ = small.decode(&block, 1 << 16, |_, _| {});
            assert!(d.table_size() <= 4096 && small.table_size() <= 256);
        }
        let valid: Vec<Vec<u8>> = C3
            .iter()
            .chain(&C4)
            .chain(&C5)
            .chain(&C6)
            .map(|b| hex(b))
            .collect();
        for _ in 0..5000 {
            let mut block = valid[(xorshift(&mut x) % valid.len() as u64) as usize].clone();
            for _ in 0..1 + xorshift(&mut x) % 3 {
                let at = (xorshift(&mut x) % block.len() as u64) as usize;
                block[at] = xorshift(&mut x) as u8;
            }
            let _ = d.decode(&block, 1 << 16, |_, _| {});
            let _ = small.decode(&block, 200, |_, _| {});
            assert!(d.table_size() <= 4096 && small.table_size() <= 256);
        }
    }
}
