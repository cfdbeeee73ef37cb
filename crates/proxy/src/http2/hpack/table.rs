//! The static table (RFC 7541 Appendix A), the name lookup the encoder uses, and the decoder's
//! dynamic table (§2.3.2, §4).

use std::collections::VecDeque;

/// What §4.1 adds to each entry's name and value lengths to count its size.
pub const ENTRY_OVERHEAD: usize = 32;

/// Appendix A: the 61 static entries; index `i` of HPACK is `STATIC[i - 1]`.
pub const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// The static entry at HPACK index `index` (1 to 61), if there is one.
pub fn static_entry(index: usize) -> Option<(&'static [u8], &'static [u8])> {
    STATIC.get(index.checked_sub(1)?).copied()
}

/// The lowest static-table index whose name is `name` (lowercase), for a name reference.
pub fn name_index(name: &[u8]) -> Option<usize> {
    Some(match name {
        b":authority" => 1,
        b":method" => 2,
        b":path" => 4,
        b":scheme" => 6,
        b":status" => 8,
        b"accept-charset" => 15,
        b"accept-encoding" => 16,
        b"accept-language" => 17,
        b"accept-ranges" => 18,
        b"accept" => 19,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"authorization" => 23,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"cookie" => 32,
        b"date" => 33,
        b"etag" => 34,
        b"expect" => 35,
        b"expires" => 36,
        b"from" => 37,
        b"host" => 38,
        b"if-match" => 39,
        b"if-modified-since" => 40,
        b"if-none-match" => 41,
        b"if-range" => 42,
        b"if-unmodified-since" => 43,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"max-forwards" => 47,
        b"proxy-authenticate" => 48,
        b"proxy-authorization" => 49,
        b"range" => 50,
        b"referer" => 51,
        b"refresh" => 52,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"transfer-encoding" => 57,
        b"user-agent" => 58,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    })
}

/// One dynamic table entry: name and value in one allocation.
#[derive(Debug, Clone)]
pub struct Entry {
    data: Box<[u8]>,
    name_len: usize,
}

impl Entry {
    /// An entry holding copies of `name` and `value`.
    pub fn new(name: &[u8], value: &[u8]) -> Entry {
        let mut data = Vec::with_capacity(name.len().saturating_add(value.len()));
        data.extend_from_slice(name);
        data.extend_from_slice(value);
        Entry {
            data: data.into_boxed_slice(),
            name_len: name.len(),
        }
    }

    /// The entry's name.
    pub fn name(&self) -> &[u8] {
        self.data.get(..self.name_len).unwrap_or_default()
    }

    /// The entry's value.
    pub fn value(&self) -> &[u8] {
        self.data.get(self.name_len..).unwrap_or_default()
    }

    /// Its size as §4.1 counts it.
    pub fn size(&self) -> usize {
        self.data.len().saturating_add(ENTRY_OVERHEAD)
    }
}

/// The dynamic table (§2.3.2): newest entry first, evicted from the back (§4.4).
#[derive(Debug, Clone)]
pub struct DynamicTable {
    entries: VecDeque<Entry>,
    size: usize,
    capacity: usize,
}

impl DynamicTable {
    /// An empty table whose maximum size is `capacity` octets.
    pub fn new(capacity: usize) -> DynamicTable {
        DynamicTable {
            entries: VecDeque::new(),
            size: 0,
            capacity,
        }
    }

    /// The sum of the entries' sizes (§4.1).
    pub fn size(&self) -> usize {
        self.size
    }

    /// The number of entries.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entry `i` places from the newest (0 is HPACK index 62).
    pub fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        self.entries.get(i).map(|e| (e.name(), e.value()))
    }

    /// Sets the maximum size (§4.3), evicting the oldest entries beyond it.
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.evict_to(capacity);
    }

    /// Whether an entry of `size` octets fits at all; one that does not empties the table
    /// when added (§4.4).
    pub fn fits(&self, size: usize) -> bool {
        size <= self.capacity
    }

    /// Empties the table, as adding an entry larger than its maximum size does (§4.4).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.size = 0;
    }

    /// Adds `entry` as the newest, evicting the oldest entries to make room (§4.4).
    pub fn push(&mut self, entry: Entry) {
        let size = entry.size();
        if !self.fits(size) {
            self.clear();
            return;
        }
        self.evict_to(self.capacity - size);
        self.size = self.size.saturating_add(size);
        self.entries.push_front(entry);
    }

    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            match self.entries.pop_back() {
                Some(e) => self.size = self.size.saturating_sub(e.size()),
                None => {
                    self.size = 0;
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appendix A: every static name maps back to its first index.
    #[test]
    fn appendix_a_name_index_matches_static_table() {
        for (i, (name, _)) in STATIC.iter().enumerate() {
            let first = STATIC.iter().position(|(n, _)| n == name).map(|p| p + 1);
            assert_eq!(name_index(name), first, "{}", String::from_utf8_lossy(name));
            assert_eq!(static_entry(i + 1).map(|e| e.0), Some(*name));
        }
        assert_eq!(static_entry(0), None);
        assert_eq!(static_entry(62), None);
        assert_eq!(name_index(b"content-type"), Some(31));
        assert_eq!(name_index(b"Content-Type"), None);
        assert_eq!(name_index(b"x-custom"), None);
    }

    /// §4.4: adding evicts from the oldest end; an entry over the maximum empties the table.
    #[test]
    fn section_4_4_eviction() {
        let mut t = DynamicTable::new(100);
        t.push(Entry::new(b"aaaa", b"bbbb")); // 40
        t.push(Entry::new(b"cccc", b"dddd")); // 40
        assert_eq!(t.size(), 80);
        t.push(Entry::new(b"eeee", b"ffff")); // evicts the first
        assert_eq!(t.size(), 80);
        assert_eq!(t.get(0), Some((&b"eeee"[..], &b"ffff"[..])));
        assert_eq!(t.get(1), Some((&b"cccc"[..], &b"dddd"[..])));
        assert_eq!(t.get(2), None);
        t.set_capacity(40);
        assert_eq!(t.len(), 1);
        t.push(Entry::new(&[b'x'; 60], b""));
        assert_eq!((t.len(), t.size()), (0, 0));
    }
}
