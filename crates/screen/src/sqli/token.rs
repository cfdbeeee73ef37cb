//! A token of the tokenizer (`tokenize.rs`): its type ([`Kind`], the character libinjection
//! writes in fingerprints) and where its bytes are in the input ([`Token`], a small fixed struct
//! that points into the input instead of copying it), with the questions the folder and the
//! whitelist ask of it.

use super::table::{entry, Key};

/// A token type; the discriminant is the character libinjection writes in fingerprints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Kind {
    Keyword = b'k',
    Union = b'U',
    Group = b'B',
    Expression = b'E',
    SqlType = b't',
    Function = b'f',
    Bareword = b'n',
    Number = b'1',
    Variable = b'v',
    String = b's',
    Operator = b'o',
    Logic = b'&',
    Comment = b'c',
    Collate = b'A',
    LeftParen = b'(',
    RightParen = b')',
    LeftBrace = b'{',
    RightBrace = b'}',
    Dot = b'.',
    Comma = b',',
    Colon = b':',
    Semicolon = b';',
    Tsql = b'T',
    Unknown = b'?',
    Evil = b'X',
    Fingerprint = b'F',
    Backslash = b'\\',
}

impl Kind {
    /// The kind of a word whose type character in the list is `t`. Words of type `n` (in the
    /// list so that longer phrases can be found) are bare words.
    pub(super) fn of_entry(t: u8) -> Kind {
        match t {
            b'k' => Kind::Keyword,
            b'f' => Kind::Function,
            b'U' => Kind::Union,
            b'E' => Kind::Expression,
            b'T' => Kind::Tsql,
            b't' => Kind::SqlType,
            b'o' => Kind::Operator,
            b'&' => Kind::Logic,
            b'v' => Kind::Variable,
            b'1' => Kind::Number,
            b'A' => Kind::Collate,
            b'B' => Kind::Group,
            b'F' => Kind::Fingerprint,
            _ => Kind::Bareword,
        }
    }
}

/// libinjection keeps this many bytes of a token's value.
pub(super) const VALUE_MAX: usize = 31;

/// One token. Its value is `input[start..start + len]`, unless `merged` says otherwise: two
/// words folded into one (`ORDER BY`) have the value "first second", whose upper-case spelling
/// is the word list's entry `merged - 1`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Token {
    pub(super) kind: Kind,
    /// Length of the value, at most [`VALUE_MAX`].
    pub(super) len: u8,
    /// How a string was opened and closed (`'`, `"`, `` ` ``, `$`, `q`, `u`; 0: not at all).
    pub(super) open: u8,
    pub(super) close: u8,
    pub(super) merged: u16,
    /// For merged words: the value begins with `INTO` in that case.
    pub(super) into: bool,
    pub(super) start: usize,
}

impl Token {
    pub(super) fn span(kind: Kind, start: usize, len: usize) -> Token {
        Token {
            kind,
            len: len.min(VALUE_MAX) as u8,
            open: 0,
            close: 0,
            merged: 0,
            into: false,
            start,
        }
    }

    /// The value's bytes, for a token that is a span of `s`.
    pub(super) fn bytes<'s>(&self, s: &'s [u8]) -> &'s [u8] {
        &s[self.start..self.start + self.len as usize]
    }

    /// Byte `i` of the value (0 past its end). A merged value gives its upper-case spelling,
    /// which is only ever compared with punctuation or without regard to case.
    pub(super) fn byte(&self, s: &[u8], i: usize) -> u8 {
        if i >= self.len as usize {
            return 0;
        }
        if self.merged != 0 {
            entry(self.merged as usize - 1).get(i).copied().unwrap_or(0)
        } else {
            s[self.start + i]
        }
    }

    /// The value equals `upper` (ASCII upper case) ignoring ASCII case.
    pub(super) fn is(&self, s: &[u8], upper: &[u8]) -> bool {
        if self.merged != 0 {
            entry(self.merged as usize - 1) == upper
        } else {
            self.bytes(s).eq_ignore_ascii_case(upper)
        }
    }

    /// Appends the value, upper-cased, to `key`.
    pub(super) fn push_upper(&self, s: &[u8], key: &mut Key) -> bool {
        if self.merged != 0 {
            key.push(entry(self.merged as usize - 1))
        } else {
            key.push(self.bytes(s))
        }
    }

    /// The value begins with `INTO`, exactly so (libinjectionrs compares this case-sensitively).
    pub(super) fn starts_with_into(&self, s: &[u8]) -> bool {
        self.len >= 4
            && if self.merged != 0 {
                self.into
            } else {
                &self.bytes(s)[..4] == b"INTO"
            }
    }

    /// The value is valid UTF-8 and holds a `_` (the collation rule's test).
    pub(super) fn has_underscore(&self, s: &[u8]) -> bool {
        if self.merged != 0 {
            entry(self.merged as usize - 1).contains(&b'_')
        } else {
            let v = self.bytes(s);
            v.contains(&b'_') && std::str::from_utf8(v).is_ok()
        }
    }

    /// `+`, `-`, `!`, `~`, `!!` or `NOT` as an operator.
    pub(super) fn is_unary(&self, s: &[u8]) -> bool {
        self.kind == Kind::Operator
            && match self.len {
                1 => matches!(self.byte(s, 0), b'+' | b'-' | b'!' | b'~'),
                2 => self.is(s, b"!!"),
                3 => self.is(s, b"NOT"),
                _ => false,
            }
    }

    /// `*`, `/`, `-`, `+` or `%` as an operator.
    pub(super) fn is_arithmetic(&self, s: &[u8]) -> bool {
        self.kind == Kind::Operator
            && self.len == 1
            && matches!(self.byte(s, 0), b'*' | b'/' | b'-' | b'+' | b'%')
    }
}
