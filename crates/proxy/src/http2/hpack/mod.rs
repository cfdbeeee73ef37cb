//! HPACK (RFC 7541): the decoder of request header blocks, with its dynamic table, and a
//! stateless encoder.
//!
//! The encoder never adds to a dynamic table: every field is a literal without indexing
//! (§6.2.2) with its name from the static table when it has it, or an indexed `:status` from
//! the static table. Such a block means the same on every connection, so a stored object's
//! fields are encoded once and copied into each response (`http2::server::write`). The cost is
//! a few bytes per response that an indexing encoder would save on a long connection.
//!
//! The decoder bounds what a block may cost: the decoded list (§4.1 sizes) beyond a limit stops
//! being handed out ([`HpackError::ListTooLarge`], the block still decoded to keep the table in
//! step), a single string longer than the limit fails before it is decoded, and the table never
//! grows past the size this side announced.

pub mod huffman;
mod table;

use std::collections::VecDeque;

/// Errors decoding a header block. Each is a connection error (COMPRESSION_ERROR) in HTTP/2,
/// but [`HpackError::ListTooLarge`]: that block was decoded to its end and the request is
/// refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HpackError {
    Truncated,
    IntegerOverflow,
    BadIndex,
    BadHuffman,
    /// A dynamic table size update above the limit, or after a field.
    TableSizeUpdate,
    StringTooLong,
    ListTooLarge,
}

impl std::fmt::Display for HpackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HpackError::Truncated => "a header block cut short",
            HpackError::IntegerOverflow => "an integer too large",
            HpackError::BadIndex => "an index outside the tables",
            HpackError::BadHuffman => "an invalid Huffman string",
            HpackError::TableSizeUpdate => "a table size update out of place or over the limit",
            HpackError::StringTooLong => "a string over the header list limit",
            HpackError::ListTooLarge => "a header list over the limit",
        })
    }
}

/// The overhead §4.1 counts for each entry and field.
const ENTRY_OVERHEAD: usize = 32;

/// A dynamic table entry: name and value in one allocation.
struct Entry {
    buf: Box<[u8]>,
    name_len: usize,
}

impl Entry {
    fn name(&self) -> &[u8] {
        &self.buf[..self.name_len]
    }

    fn value(&self) -> &[u8] {
        &self.buf[self.name_len..]
    }

    fn size(&self) -> usize {
        self.buf.len() + ENTRY_OVERHEAD
    }
}

/// A connection's HPACK decoder.
pub struct Decoder {
    /// Newest first.
    table: VecDeque<Entry>,
    size: usize,
    /// The size the encoder chose (its last size update).
    max: usize,
    /// The size this side announced (SETTINGS_HEADER_TABLE_SIZE): no update may pass it.
    limit: usize,
    /// Huffman decodings of the current field's name and value.
    name_buf: Vec<u8>,
    value_buf: Vec<u8>,
}

/// Where a decoded string lies.
#[derive(Clone, Copy)]
enum Str {
    /// `block[start..end]`.
    Raw(usize, usize),
    /// In the decoder's name or value buffer.
    Decoded,
}

/// Reads an integer with an `n`-bit prefix (§5.1) at `*pos`.
fn int(block: &[u8], pos: &mut usize, n: u8) -> Result<usize, HpackError> {
    let mask = (1usize << n) - 1;
    let first = *block.get(*pos).ok_or(HpackError::Truncated)?;
    *pos += 1;
    let mut value = usize::from(first) & mask;
    if value < mask {
        return Ok(value);
    }
    let mut shift = 0u32;
    loop {
        let b = *block.get(*pos).ok_or(HpackError::Truncated)?;
        *pos += 1;
        value = (usize::from(b & 0x7f) << shift)
            .checked_add(value)
            .ok_or(HpackError::IntegerOverflow)?;
        if b & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        if shift > 28 {
            return Err(HpackError::IntegerOverflow);
        }
    }
}

impl Decoder {
    /// A decoder for a connection that announced `max_table_size` (4096 unless its SETTINGS
    /// said otherwise).
    pub fn new(max_table_size: usize) -> Decoder {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max: max_table_size,
            limit: max_table_size,
            name_buf: Vec::new(),
            value_buf: Vec::new(),
        }
    }

    /// Octets the dynamic table holds (§4.1).
    pub fn table_size(&self) -> usize {
        self.size
    }

    /// Decodes one complete header block, handing each field to `field` in order. Past
    /// `max_list_size` decoded octets (§4.1 sizes) the fields stop being handed out and the
    /// result is [`HpackError::ListTooLarge`] once the block is decoded.
    pub fn decode(
        &mut self,
        block: &[u8],
        max_list_size: usize,
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut pos = 0;
        let mut list = 0usize;
        let mut fields = false;
        while let Some(&b) = block.get(pos) {
            if b & 0x80 != 0 {
                // §6.1 indexed field.
                let index = int(block, &mut pos, 7)?;
                let (name, value) = self.get(index)?;
                list += name.len() + value.len() + ENTRY_OVERHEAD;
                if list <= max_list_size {
                    field(name, value);
                }
                fields = true;
            } else if b & 0xe0 == 0x20 {
                // §6.3 dynamic table size update: only before the first field.
                let size = int(block, &mut pos, 5)?;
                if fields || size > self.limit {
                    return Err(HpackError::TableSizeUpdate);
                }
                self.max = size;
                self.evict(0);
            } else {
                // §6.2: with incremental indexing (01), without (0000) or never indexed (0001).
                let indexing = b & 0x40 != 0;
                let index = int(block, &mut pos, if indexing { 6 } else { 4 })?;
                let name = if index == 0 {
                    Some(self.string(block, &mut pos, max_list_size, true)?)
                } else {
                    self.get(index)?;
                    None
                };
                let value = self.string(block, &mut pos, max_list_size, false)?;
                let (n, v) = {
                    let n: &[u8] = match name {
                        Some(Str::Raw(s, e)) => &block[s..e],
                        Some(Str::Decoded) => &self.name_buf,
                        None => self.get(index)?.0,
                    };
                    let v: &[u8] = match value {
                        Str::Raw(s, e) => &block[s..e],
                        Str::Decoded => &self.value_buf,
                    };
                    (n, v)
                };
                list += n.len() + v.len() + ENTRY_OVERHEAD;
                if list <= max_list_size {
                    field(n, v);
                }
                if indexing {
                    let mut buf = Vec::with_capacity(n.len() + v.len());
                    buf.extend_from_slice(n);
                    buf.extend_from_slice(v);
                    let name_len = n.len();
                    self.insert(Entry {
                        buf: buf.into_boxed_slice(),
                        name_len,
                    });
                }
                fields = true;
            }
        }
        if list > max_list_size {
            return Err(HpackError::ListTooLarge);
        }
        Ok(())
    }

    /// Entry `index` of the static table followed by the dynamic one (§2.3.3).
    fn get(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        if index == 0 {
            return Err(HpackError::BadIndex);
        }
        if let Some((n, v)) = table::STATIC.get(index - 1) {
            return Ok((n, v));
        }
        self.table
            .get(index - table::STATIC.len() - 1)
            .map(|e| (e.name(), e.value()))
            .ok_or(HpackError::BadIndex)
    }

    /// Reads a string literal (§5.2) at `*pos`: a slice of the block, or Huffman-decoded into
    /// the name or value buffer.
    fn string(
        &mut self,
        block: &[u8],
        pos: &mut usize,
        max: usize,
        is_name: bool,
    ) -> Result<Str, HpackError> {
        let huffman = block.get(*pos).ok_or(HpackError::Truncated)? & 0x80 != 0;
        let len = int(block, pos, 7)?;
        if len > max {
            return Err(HpackError::StringTooLong);
        }
        let end = pos.checked_add(len).ok_or(HpackError::Truncated)?;
        let raw = block.get(*pos..end).ok_or(HpackError::Truncated)?;
        *pos = end;
        if !huffman {
            return Ok(Str::Raw(end - len, end));
        }
        let buf = if is_name {
            &mut self.name_buf
        } else {
            &mut self.value_buf
        };
        buf.clear();
        huffman::decode(raw, buf)?;
        Ok(Str::Decoded)
    }

    /// Adds an entry (§4.4): older ones are evicted to make room; one larger than the table
    /// empties it and is not added.
    fn insert(&mut self, e: Entry) {
        let size = e.size();
        if size > self.max {
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.size += size;
        self.table.push_front(e);
    }

    /// Evicts the oldest entries until `room` more octets fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            match self.table.pop_back() {
                Some(e) => self.size -= e.size(),
                None => break,
            }
        }
    }
}

/// Appends an integer (§5.1) with an `prefix_bits`-bit prefix; `first` holds the first octet's
/// bits above the prefix.
pub fn encode_int(value: usize, prefix_bits: u8, first: u8, out: &mut Vec<u8>) {
    let mask = (1usize << prefix_bits) - 1;
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

/// Strings shorter than this are sent as they are: Huffman coding saves a byte at most.
const HUFFMAN_FROM: usize = 8;

/// Appends a field value as a string literal (§5.2), after a field's name.
pub fn encode_value(value: &[u8], out: &mut Vec<u8>) {
    encode_string(value, out);
}

/// Appends a string literal (§5.2), Huffman-coded when that is shorter.
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

/// Appends `:status`: indexed when the static table has it, else a literal with the static
/// name.
pub fn encode_status(status: u16, out: &mut Vec<u8>) {
    let index = match status {
        200 => 8,
        204 => 9,
        206 => 10,
        304 => 11,
        400 => 12,
        404 => 13,
        500 => 14,
        _ => 0,
    };
    if index > 0 {
        out.push(0x80 | index);
        return;
    }
    encode_int(8, 4, 0x00, out);
    let digits = [
        b'0' + (status / 100 % 10) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
    ];
    encode_string(&digits, out);
}

fn literal(first: u8, name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    match table::name_index(name) {
        Some(i) => encode_int(i, 4, first, out),
        None => {
            out.push(first);
            encode_string(name, out);
        }
    }
    encode_string(value, out);
}

/// Appends a field as a literal without indexing (§6.2.2), its name from the static table
/// when it is there (names are lowercase).
pub fn encode_field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    literal(0x00, name, value, out);
}

/// Appends a field as a literal never indexed (§6.2.3): for sensitive values, which no
/// intermediary may index either.
pub fn encode_field_never_indexed(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    literal(0x10, name, value, out);
}

/// Appends a dynamic table size update (§6.3).
pub fn encode_table_size_update(size: usize, out: &mut Vec<u8>) {
    encode_int(size, 5, 0x20, out);
}

#[cfg(test)]
mod tests;
