//! libinjection's word list, arranged for look-ups that do not allocate.
//!
//! The list is `libinjectionrs::sqli::sqli_data::SQL_KEYWORDS`: about 1,000 SQL words (upper
//! case, each with its token type) and about 8,400 injection fingerprints (type `F`, stored as
//! `0` + the upper-cased fingerprint). Each half gets its own open-addressing hash table, built
//! once per process; a slot holds a 16-bit tag of the hash and the entry's index in the list, so
//! a probe touches 4 bytes and the list's text is only compared on a tag match. The tables never
//! change after they are built, so the longest probe sequence is fixed whatever the input.
//!
//! A word is looked up by upper-casing it into a [`Key`] on the stack: the list holds no byte
//! outside ASCII (a unit test checks), so a word with any other byte is never found.

use std::sync::OnceLock;

use libinjectionrs::sqli::sqli_data::SQL_KEYWORDS;

/// Longest entry of the list (words are at most 29 bytes, fingerprints 6), rounded up to the
/// key buffer.
pub(super) const KEY_MAX: usize = 32;

/// Up to [`KEY_MAX`] bytes, upper-cased, zero-padded (the hash reads whole 8-byte words).
#[derive(Clone, Copy)]
pub(super) struct Key {
    buf: [u8; KEY_MAX],
    len: usize,
}

impl Key {
    pub(super) const fn new() -> Key {
        Key {
            buf: [0; KEY_MAX],
            len: 0,
        }
    }

    /// `bytes` upper-cased, or `None` when longer than any entry can be.
    pub(super) fn upper(bytes: &[u8]) -> Option<Key> {
        let mut k = Key::new();
        k.push(bytes).then_some(k)
    }

    /// Appends `bytes` upper-cased; false (and the key unchanged) when it would not fit.
    pub(super) fn push(&mut self, bytes: &[u8]) -> bool {
        let end = self.len + bytes.len();
        if end > KEY_MAX {
            return false;
        }
        for (d, s) in self.buf[self.len..end].iter_mut().zip(bytes) {
            *d = s.to_ascii_uppercase();
        }
        self.len = end;
        true
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    fn hash(&self) -> u64 {
        let mut h = (self.len as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for chunk in self.buf[..self.len.div_ceil(8) * 8].chunks_exact(8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            h ^= h >> 31;
        }
        h.wrapping_mul(0x94D0_49BB_1331_11EB)
    }
}

/// One half of the list (words or fingerprints) as a hash table.
pub(super) struct Table {
    /// `tag << 16 | (index + 1)`; 0 is an empty slot.
    slots: Box<[u32]>,
    mask: usize,
}

impl Table {
    fn build(keep: impl Fn(u8) -> bool) -> Table {
        let entries: Vec<usize> = (0..SQL_KEYWORDS.len())
            .filter(|&i| keep(SQL_KEYWORDS[i].token_type))
            .collect();
        let size = (entries.len() * 2).next_power_of_two().max(16);
        let mut slots = vec![0u32; size].into_boxed_slice();
        let mask = size - 1;
        for i in entries {
            let Some(key) = Key::upper(SQL_KEYWORDS[i].word.as_bytes()) else {
                continue; // longer than any input is looked up with: never found
            };
            let h = key.hash();
            let mut at = (h >> 20) as usize & mask;
            while slots[at] != 0 {
                at = (at + 1) & mask;
            }
            slots[at] = ((h >> 48) as u32) << 16 | (i as u32 + 1);
        }
        Table { slots, mask }
    }

    /// The index in `SQL_KEYWORDS` of the entry spelled `key`.
    pub(super) fn get(&self, key: &Key) -> Option<usize> {
        let h = key.hash();
        let tag = (h >> 48) as u32;
        let mut at = (h >> 20) as usize & self.mask;
        loop {
            let slot = self.slots[at];
            if slot == 0 {
                return None;
            }
            if slot >> 16 == tag {
                let i = (slot & 0xFFFF) as usize - 1;
                if SQL_KEYWORDS[i].word.as_bytes() == key.as_bytes() {
                    return Some(i);
                }
            }
            at = (at + 1) & self.mask;
        }
    }
}

/// The word table (every entry that is not a fingerprint) and the fingerprint table.
pub(super) struct Tables {
    pub(super) words: Table,
    pub(super) fingerprints: Table,
}

impl Tables {
    /// The type character of the word spelled `key`, as the list has it.
    pub(super) fn word_type(&self, key: &Key) -> Option<u8> {
        self.words.get(key).map(|i| SQL_KEYWORDS[i].token_type)
    }

    /// Whether `fingerprint` (as the engine writes it, lower-case letters included) is one of
    /// libinjection's injection shapes.
    pub(super) fn is_injection_shape(&self, fingerprint: &[u8]) -> bool {
        let mut k = Key::new();
        !fingerprint.is_empty()
            && k.push(b"0")
            && k.push(fingerprint)
            && self.fingerprints.get(&k).is_some()
    }
}

/// The tables, built on first use (well under a millisecond).
pub(super) fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(|| Tables {
        words: Table::build(|t| t != b'F'),
        fingerprints: Table::build(|t| t == b'F'),
    })
}

/// The text of entry `i` of the list.
pub(super) fn entry(i: usize) -> &'static [u8] {
    SQL_KEYWORDS.get(i).map_or(b"", |k| k.word.as_bytes())
}

/// The type character of entry `i` of the list.
pub(super) fn entry_type(i: usize) -> u8 {
    SQL_KEYWORDS.get(i).map_or(b'n', |k| k.token_type)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_is_found_and_nothing_else() {
        let t = tables();
        for (i, k) in SQL_KEYWORDS.iter().enumerate() {
            assert!(k.word.is_ascii(), "{}", k.word);
            assert!(k.word.len() < KEY_MAX, "{}", k.word);
            let key = Key::upper(k.word.to_ascii_lowercase().as_bytes()).unwrap();
            let table = if k.token_type == b'F' {
                &t.fingerprints
            } else {
                &t.words
            };
            assert_eq!(table.get(&key), Some(i), "{}", k.word);
        }
        for w in ["", "SELECTS", "SELEC", "UNION  ALL", "0", "0N1"] {
            assert_eq!(t.words.get(&Key::upper(w.as_bytes()).unwrap()), None, "{w}");
        }
        assert_eq!(t.word_type(&Key::upper(b"union").unwrap()), Some(b'U'));
        assert_eq!(t.word_type(&Key::upper(b"Order By").unwrap()), Some(b'B'));
        // Fingerprints are not words and words are not fingerprints.
        assert_eq!(t.word_type(&Key::upper(b"0X").unwrap()), None);
        assert!(t.is_injection_shape(b"X"));
        assert!(t.is_injection_shape(b"s&sos"));
        assert!(!t.is_injection_shape(b""));
        assert!(!t.is_injection_shape(b"UNION"));
        assert!(Key::upper(&[b'a'; KEY_MAX + 1]).is_none());
    }
}
