//! The tokenizer: one SQL token at a time, pulled by the folder, as a small fixed struct that
//! points into the input instead of copying it.
//!
//! It follows libinjection's tokenizer: the first byte of a token picks the rule (the byte
//! classes are libinjectionrs's `CHAR_MAP`), words are looked up in the word list, a token's
//! value is its first 31 bytes (libinjection's `LIBINJECTION_SQLI_TOKEN_SIZE - 1`, and the
//! lengths the folder and the whitelist see are those), and in a quote context the input starts
//! inside a string. Where libinjectionrs departs from the C library (variables keep their `@`
//! signs in their value, `--x` counts for the MySQL re-parse in both dialects, every `.` and
//! `` ` `` of a word is tried as a keyword boundary, not only those in its first 31 bytes), this
//! tokenizer does what libinjectionrs does: its verdicts are the reference.

use libinjectionrs::sqli::sqli_data::{CharType, CHAR_MAP};

use super::table::{Key, Tables};
pub(super) use super::token::{Kind, Token, VALUE_MAX};

/// Bytes that end a word.
const WORD_END: [bool; 256] = byte_set(b" []{}<>:\\?=@!#~+-*/&|^%(),';\t\n\x0B\x0C\r\"\xA0\x00");
/// Bytes that end a variable's name.
const VAR_END: [bool; 256] = byte_set(b" <>:\\?=@!#~+-*/&|^%(),;'\t\n\x0B\x0C\r`\"");
/// libinjection's "white" for `--` comments and number suffixes (not the same as the byte class
/// the tokenizer skips).
const WHITE: [bool; 256] = byte_set(b" \t\n\x0B\x0C\r\xA0\x00");

const fn byte_set(bytes: &[u8]) -> [bool; 256] {
    let mut set = [false; 256];
    let mut i = 0;
    while i < bytes.len() {
        set[bytes[i] as usize] = true;
        i += 1;
    }
    set
}

/// The tokenizer over one input in one context.
pub(super) struct Lexer<'s> {
    s: &'s [u8],
    pos: usize,
    /// The quote the input is taken to start inside (`'`, `"`), or 0.
    quote: u8,
    /// MySQL dialect (`#` starts a comment, `--x` is two minus signs); else ANSI.
    mysql: bool,
    tables: &'s Tables,
    /// A `#` or a `--` followed by something other than white space was read: the value is worth
    /// a second reading in the MySQL dialect.
    pub(super) mysql_hint: bool,
}

impl<'s> Lexer<'s> {
    pub(super) fn new(s: &'s [u8], quote: u8, mysql: bool, tables: &'s Tables) -> Lexer<'s> {
        Lexer {
            s,
            pos: 0,
            quote,
            mysql,
            tables,
            mysql_hint: false,
        }
    }

    /// The next token, or `None` at the end of the input.
    pub(super) fn next_token(&mut self) -> Option<Token> {
        let s = self.s;
        if self.pos == 0 && self.quote != 0 && !s.is_empty() {
            // The input continues a string opened before it.
            let (mut t, end) = quoted(s, 0, self.quote);
            t.open = 0;
            self.pos = end;
            return Some(t);
        }
        while let Some(&c) = s.get(self.pos) {
            if CHAR_MAP[c as usize] == CharType::White {
                self.pos += 1;
                continue;
            }
            let (t, end) = self.token(self.pos, c);
            self.pos = end;
            return Some(t);
        }
        None
    }

    /// The token starting at `p` with byte `c`, and where the next one starts.
    fn token(&mut self, p: usize, c: u8) -> (Token, usize) {
        let s = self.s;
        match CHAR_MAP[c as usize] {
            CharType::White => (Token::span(Kind::Unknown, p, 1), p + 1), // skipped by the caller
            CharType::Bang | CharType::Op2 => self.operator(p),
            CharType::String => quoted(s, p + 1, c),
            CharType::Hash => {
                self.mysql_hint = true;
                if self.mysql {
                    line_comment(s, p)
                } else {
                    one(Kind::Operator, p)
                }
            }
            CharType::Money => self.money(p),
            CharType::Op1 | CharType::Unary => one(Kind::Operator, p),
            CharType::LeftParens => one(Kind::LeftParen, p),
            CharType::RightParens => one(Kind::RightParen, p),
            CharType::Comma => one(Kind::Comma, p),
            CharType::Semicolon => one(Kind::Semicolon, p),
            CharType::LeftBrace => one(Kind::LeftBrace, p),
            CharType::RightBrace => one(Kind::RightBrace, p),
            CharType::Dash => self.dash(p),
            CharType::Number => self.number(p),
            CharType::Slash => slash(s, p),
            CharType::Variable => self.variable(p),
            CharType::Word => self.word(p),
            CharType::BString => self.digits_string(p, |c| c == b'0' || c == b'1'),
            CharType::XString => self.digits_string(p, |c| c.is_ascii_hexdigit()),
            CharType::EString => self.e_string(p),
            CharType::NQString => {
                if s.get(p + 1) == Some(&b'\'') && p + 2 < s.len() {
                    self.e_string(p)
                } else {
                    self.q_string(p, p + 1)
                }
            }
            CharType::QString => self.q_string(p, p),
            CharType::UString => {
                if s.get(p + 1) == Some(&b'&') && s.get(p + 2) == Some(&b'\'') {
                    let (mut t, end) = quoted(s, p + 3, b'\'');
                    t.open = b'u';
                    if t.close == b'\'' {
                        t.close = b'u';
                    }
                    (t, end)
                } else {
                    self.word(p)
                }
            }
            CharType::BWord => match find(s, p, b']') {
                Some(e) => (Token::span(Kind::Bareword, p, e + 1 - p), e + 1),
                None => (Token::span(Kind::Bareword, p, s.len() - p), s.len()),
            },
            CharType::Backslash => {
                if s.get(p + 1) == Some(&b'N') {
                    // MySQL's `\N` is NULL.
                    (Token::span(Kind::Number, p, 2), p + 2)
                } else {
                    one(Kind::Backslash, p)
                }
            }
            CharType::Tick => self.backticks(p),
            CharType::Other => one(Kind::Unknown, p),
        }
    }

    fn lookup(&self, word: &[u8]) -> Kind {
        Key::upper(word)
            .and_then(|k| self.tables.word_type(&k))
            .map_or(Kind::Bareword, Kind::of_entry)
    }

    /// `!`, `&`, `*`, `:`, `<`, `=`, `>`, `|`: `<=>`, a two-byte operator from the list, `:`, or
    /// the byte alone.
    fn operator(&self, p: usize) -> (Token, usize) {
        let s = self.s;
        if p + 1 >= s.len() {
            return one(Kind::Operator, p);
        }
        if s[p..].starts_with(b"<=>") {
            return (Token::span(Kind::Operator, p, 3), p + 3);
        }
        match self.lookup(&s[p..p + 2]) {
            Kind::Bareword => {}
            Kind::Logic => return (Token::span(Kind::Logic, p, 2), p + 2),
            _ => return (Token::span(Kind::Operator, p, 2), p + 2),
        }
        if s[p] == b':' {
            one(Kind::Colon, p)
        } else {
            one(Kind::Operator, p)
        }
    }

    /// `-`: a comment (`--` then white space or the end; `--x` in ANSI), or a minus sign.
    fn dash(&mut self, p: usize) -> (Token, usize) {
        let s = self.s;
        if s.get(p + 1) == Some(&b'-') {
            if s.get(p + 2).is_none_or(|&c| WHITE[c as usize]) {
                return line_comment(s, p);
            }
            self.mysql_hint = true;
            if !self.mysql {
                return line_comment(s, p);
            }
        }
        one(Kind::Operator, p)
    }

    /// A number (`12`, `1.5e3`, `.5`, `0x1F`, `0b101`, `1.5f`), a lone `.`, or a bare word for
    /// a number with an empty exponent (`1e`) or prefix (`0x`).
    fn number(&self, p: usize) -> (Token, usize) {
        let s = self.s;
        let len = s.len();
        if s[p] == b'0' && p + 1 < len {
            let digit: Option<fn(u8) -> bool> = match s[p + 1] {
                b'x' | b'X' => Some(|c: u8| c.is_ascii_hexdigit()),
                b'b' | b'B' => Some(|c: u8| c == b'0' || c == b'1'),
                _ => None,
            };
            if let Some(digit) = digit {
                let e = scan(s, p + 2, digit);
                return if e == p + 2 {
                    (Token::span(Kind::Bareword, p, 2), p + 2)
                } else {
                    (Token::span(Kind::Number, p, e - p), e)
                };
            }
        }
        let mut e = scan(s, p, |c| c.is_ascii_digit());
        if s.get(e) == Some(&b'.') {
            e = scan(s, e + 1, |c| c.is_ascii_digit());
            if e - p == 1 {
                return one(Kind::Dot, p);
            }
        }
        let mut bare = false;
        if matches!(s.get(e), Some(b'e' | b'E')) {
            e += 1;
            if matches!(s.get(e), Some(b'+' | b'-')) {
                e += 1;
            }
            let digits = scan(s, e, |c| c.is_ascii_digit());
            bare = digits == e;
            e = digits;
        }
        if matches!(s.get(e), Some(b'd' | b'D' | b'f' | b'F')) {
            // Oracle's float and double suffixes, when a word does not go on (`1fUNION` is
            // `1f UNION`, `123FROM` is `123 FROM`).
            match s.get(e + 1) {
                None => e += 1,
                Some(&c) if WHITE[c as usize] || c == b';' || c == b'u' || c == b'U' => e += 1,
                Some(_) => {}
            }
        }
        let kind = if bare { Kind::Bareword } else { Kind::Number };
        (Token::span(kind, p, e - p), e)
    }

    /// `@name`, `@@name`, or `@` / `@@` before a quoted or backticked name.
    fn variable(&self, p: usize) -> (Token, usize) {
        let s = self.s;
        let mut q = p + 1;
        if s.get(q) == Some(&b'@') {
            q += 1;
        }
        match s.get(q) {
            Some(b'`') => {
                let (mut t, end) = self.backticks(q);
                t.kind = Kind::Variable;
                return (t, end);
            }
            Some(&c @ (b'\'' | b'"')) => {
                let (mut t, end) = quoted(s, q + 1, c);
                t.kind = Kind::Variable;
                return (t, end);
            }
            _ => {}
        }
        let e = scan(s, q, |c| !VAR_END[c as usize]);
        (Token::span(Kind::Variable, p, e - p), e)
    }

    /// A word: a keyword, function, type… from the list, or a bare word. A word that holds a
    /// `.` or `` ` `` ends there when what comes before is in the list (`SELECT.1`,
    /// ``USER`x` ``).
    fn word(&self, p: usize) -> (Token, usize) {
        let s = self.s;
        let mut e = p;
        while let Some(&c) = s.get(e) {
            if WORD_END[c as usize] {
                break;
            }
            if c == b'.' || c == b'`' {
                let kind = self.lookup(&s[p..e]);
                if kind != Kind::Bareword {
                    return (Token::span(kind, p, e - p), e);
                }
            }
            e += 1;
        }
        let kind = if e - p <= VALUE_MAX {
            self.lookup(&s[p..e])
        } else {
            Kind::Bareword
        };
        (Token::span(kind, p, e - p), e)
    }

    /// A backticked name: a function when the list says so, otherwise a bare word.
    fn backticks(&self, p: usize) -> (Token, usize) {
        let (mut t, end) = quoted(self.s, p + 1, b'`');
        t.kind = if self.lookup(t.bytes(self.s)) == Kind::Function {
            Kind::Function
        } else {
            Kind::Bareword
        };
        (t, end)
    }

    /// `B'0101'` or `X'1F'` as a number; otherwise a word.
    fn digits_string(&self, p: usize, digit: fn(u8) -> bool) -> (Token, usize) {
        let s = self.s;
        if p + 2 < s.len() && s[p + 1] == b'\'' {
            let e = scan(s, p + 2, digit);
            if s.get(e) == Some(&b'\'') {
                return (Token::span(Kind::Number, p, e + 1 - p), e + 1);
            }
        }
        self.word(p)
    }

    /// `E'…'` (and `N'…'`): a string; otherwise a word.
    fn e_string(&self, p: usize) -> (Token, usize) {
        let s = self.s;
        if p + 2 < s.len() && s[p + 1] == b'\'' {
            quoted(s, p + 2, b'\'')
        } else {
            self.word(p)
        }
    }

    /// Oracle's `q'<…>'` (`Q` at `q`, after an `N` or not); otherwise a word from `p`.
    fn q_string(&self, p: usize, q: usize) -> (Token, usize) {
        let s = self.s;
        let len = s.len();
        if q + 2 >= len || !matches!(s[q], b'q' | b'Q') || s[q + 1] != b'\'' {
            return self.word(p);
        }
        let open = s[q + 2];
        if (open as i8) < 33 {
            // Control bytes, space and (as a signed char) every byte above 127.
            return self.word(p);
        }
        let close = match open {
            b'(' => b')',
            b'[' => b']',
            b'{' => b'}',
            b'<' => b'>',
            c => c,
        };
        let from = q + 3;
        let mut t;
        let end;
        match (from..len.saturating_sub(1)).find(|&i| s[i] == close && s[i + 1] == b'\'') {
            Some(i) => {
                t = Token::span(Kind::String, from, i - from);
                t.close = b'q';
                end = i + 2;
            }
            None => {
                t = Token::span(Kind::String, from, len - from);
                end = len;
            }
        }
        t.open = b'q';
        (t, end)
    }

    /// `$`: money (`$1,000.00`), PostgreSQL's `$$…$$` and `$tag$…$tag$` strings, or a bare `$`.
    fn money(&self, p: usize) -> (Token, usize) {
        let s = self.s;
        let len = s.len();
        if p + 1 == len {
            return one(Kind::Bareword, p);
        }
        let e = scan(s, p + 1, |c| c.is_ascii_digit() || c == b'.' || c == b',');
        if e > p + 1 {
            if e == p + 2 && s[p + 1] == b'.' {
                return self.word(p);
            }
            return (Token::span(Kind::Number, p, e - p), e);
        }
        let (from, tag) = if s[p + 1] == b'$' {
            (p + 2, &s[p..p + 2])
        } else {
            let t = scan(s, p + 1, |c| c.is_ascii_alphabetic());
            if t == p + 1 || s.get(t) != Some(&b'$') {
                return one(Kind::Bareword, p);
            }
            (t + 1, &s[p..=t])
        };
        let mut t;
        let end;
        match s[from..].windows(tag.len()).position(|w| w == tag) {
            Some(i) => {
                t = Token::span(Kind::String, from, i);
                t.close = b'$';
                end = from + i + tag.len();
            }
            None => {
                t = Token::span(Kind::String, from, len - from);
                end = len;
            }
        }
        t.open = b'$';
        (t, end)
    }
}

/// A one-byte token.
fn one(kind: Kind, p: usize) -> (Token, usize) {
    (Token::span(kind, p, 1), p + 1)
}

/// The end of the run of bytes from `from` that satisfy `f`.
fn scan(s: &[u8], from: usize, f: impl Fn(u8) -> bool) -> usize {
    from + s[from.min(s.len())..].iter().take_while(|&&c| f(c)).count()
}

fn find(s: &[u8], from: usize, c: u8) -> Option<usize> {
    s[from..].iter().position(|&b| b == c).map(|i| from + i)
}

/// A string whose content starts at `from`, closed by `q` (opened by `q` just before `from`,
/// or taken to be open when the input starts inside a string). A quote after an odd number of
/// backslashes, or doubled, does not close it.
fn quoted(s: &[u8], from: usize, q: u8) -> (Token, usize) {
    let mut at = from;
    while let Some(i) = find(s, at.min(s.len()), q) {
        let backslashes = s[..i].iter().rev().take_while(|&&c| c == b'\\').count();
        if backslashes % 2 == 1 {
            at = i + 1;
        } else if s.get(i + 1) == Some(&q) {
            at = i + 2;
        } else {
            let mut t = Token::span(Kind::String, from, i - from);
            t.open = q;
            t.close = q;
            return (t, i + 1);
        }
    }
    let mut t = Token::span(Kind::String, from, s.len() - from);
    t.open = q;
    (t, s.len())
}

/// A comment to the end of the line (`--`, and `#` in MySQL).
fn line_comment(s: &[u8], p: usize) -> (Token, usize) {
    match find(s, p, b'\n') {
        Some(e) => (Token::span(Kind::Comment, p, e - p), e + 1),
        None => (Token::span(Kind::Comment, p, s.len() - p), s.len()),
    }
}

/// `/`: a C comment, evil when it is a MySQL `/*!` comment or holds another `/*`, or a slash.
fn slash(s: &[u8], p: usize) -> (Token, usize) {
    if s.get(p + 1) != Some(&b'*') {
        return one(Kind::Operator, p);
    }
    let body = &s[p + 2..];
    let close = body.windows(2).position(|w| w == b"*/");
    let end = close.map_or(s.len(), |c| p + 2 + c + 2);
    // The search for a nested `/*` runs one byte into the closing `*/`, as libinjection's does.
    let nested = close.is_some_and(|c| body[..c + 1].windows(2).any(|w| w == b"/*"));
    let kind = if nested || body.first() == Some(&b'!') {
        Kind::Evil
    } else {
        Kind::Comment
    };
    (Token::span(kind, p, end - p), end)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::table::tables;
    use super::*;
    use libinjectionrs::sqli::{SqliFlags, SqliTokenizer};

    /// `(type, value)` of every token of `s` in a context.
    fn lex(s: &str, quote: u8, mysql: bool) -> Vec<(char, String)> {
        let mut l = Lexer::new(s.as_bytes(), quote, mysql, tables());
        let mut out = Vec::new();
        while let Some(t) = l.next_token() {
            let v = String::from_utf8_lossy(t.bytes(s.as_bytes())).into_owned();
            out.push((t.kind as u8 as char, v));
        }
        out
    }

    /// The token types of `s` as it stands, in ANSI.
    fn kinds(s: &str) -> String {
        lex(s, 0, false).iter().map(|(k, _)| *k).collect()
    }

    /// The five contexts libinjection reads a value in, with libinjectionrs's flags for each.
    const CONTEXTS: [(u8, bool, u32); 5] = [
        (0, false, 1 | 8),
        (0, true, 1 | 16),
        (b'\'', false, 2 | 8),
        (b'\'', true, 2 | 16),
        (b'"', true, 4 | 16),
    ];

    /// Every token (type, value, how a string opened and closed) and the MySQL hint are
    /// libinjectionrs's, in every context.
    fn same_tokens(s: &[u8]) {
        for (quote, mysql, flags) in CONTEXTS {
            let ctx = format!("{:?} in context {flags}", String::from_utf8_lossy(s));
            let mut ours = Lexer::new(s, quote, mysql, tables());
            let mut theirs = SqliTokenizer::new(s, SqliFlags::new(flags));
            loop {
                let (a, b) = match (ours.next_token(), theirs.next_token()) {
                    (Some(a), Some(b)) => (a, b),
                    (None, None) => break,
                    (a, b) => panic!("{ctx}: {a:?} against {b:?}"),
                };
                assert_eq!(a.kind as u8 as char, b.token_type.to_char(), "{ctx}");
                assert_eq!(a.bytes(s), &b.val[..b.len], "{ctx}");
                assert_eq!((a.open, a.close), (b.str_open, b.str_close), "{ctx}");
            }
            assert_eq!(
                ours.mysql_hint,
                theirs.stats_comment_ddx != 0 || theirs.stats_comment_hash != 0,
                "{ctx}"
            );
        }
    }

    #[test]
    fn every_byte_in_every_position_tokenizes_as_libinjectionrs_does() {
        // Each byte alone, and in the places where a token rule looks at a neighbour.
        let templates: &[&[u8]] = &[
            b"#",
            b"a#b",
            b"1#",
            b"0x#",
            b"0#",
            b"1.#",
            b"1e#",
            b"1e+#",
            b"1f#",
            b"@#x",
            b"@@#",
            b"$#",
            b"$1#",
            b"$a#",
            b"$$#$$",
            b"'#'",
            b"\"#\"",
            b"`#`",
            b"q'#x#'",
            b"nq'#x#'",
            b"N'#'",
            b"E'#'",
            b"b'#'",
            b"x'#'",
            b"u&'#'",
            b"[#]",
            b"\\#",
            b"-#",
            b"--#",
            b"/#",
            b"/*#*/",
            b":#",
            b"<#",
            b"!#",
            b"|#",
            b"select.#",
            b"a.#",
            b"'\\#'",
            b"q'#",
            b"a#",
            b"#a",
            b"##",
        ];
        for c in 0..=255u8 {
            for t in templates {
                let s: Vec<u8> = t.iter().map(|&b| if b == b'#' { c } else { b }).collect();
                same_tokens(&s);
            }
        }
    }

    #[test]
    fn tricky_inputs_tokenize_as_libinjectionrs_does() {
        for s in [
            &b"1 1.5 .5 1e5 1.5E-3 0x1F 0b101 1.5f 0x 0b2 1e 1.e+ . .e5 1fUNION 123FROM 1dx"[..],
            b"'a\\'b''c' x 'a\\\\' x E'x' N'y' n'z' U&'z' u&'z b'01' x'1f' b'2' X'g'",
            b"q'[a]'b]' nq'(a)' Q'<a>' q'{a}' q'xax' q' x $$a$b$$ $t$x$$t$ $q $t$x",
            b"[a b] `x` `concat` `` ` @a @@b @`c` @'d' @\"e\" @ @@ @.x @$",
            b"<=> != && || :: := : ? ] \\N \\x ; , ( ) { } ~ ^ % !! !<",
            b"SELECT.1 select`x` a.b dbms_lock.sleep utl_http.request(x) sys.x.y",
            b"1 -- x\n2 --x 3 # x /* a */ /*! b */ /* /* */ /*/*/ /* x/*/ /*",
            b"a\xa0b\x00c\x7fd\xffe \xc3\xa9t\xc3\xa9 'x\xa0' --\xa0x",
            b"'",
            b"\"",
            b"`",
            b"\\",
            b"$",
            b"@",
            b"-",
            b"/",
            b"q",
            b"n",
            b"",
            b"0",
            b"a'b\"c`d",
            b"\\'x'",
            b"'\\\\'",
            b"\"\"\"",
            b"''''",
            b"x'' or 1=1",
        ] {
            same_tokens(s);
        }
        let long = format!(
            "{}.x {} `{}`",
            "a".repeat(40),
            "b".repeat(31),
            "c".repeat(35)
        );
        same_tokens(long.as_bytes());
    }

    #[test]
    fn tokens_are_small() {
        assert!(std::mem::size_of::<Token>() <= 16);
    }

    #[test]
    fn numbers() {
        assert_eq!(kinds("1 1.5 .5 1e5 1.5E-3 0x1F 0b101 1.5f"), "11111111");
        assert_eq!(kinds("0x"), "n");
        assert_eq!(kinds("0xg"), "nn");
        assert_eq!(kinds("1e"), "n");
        assert_eq!(kinds("1.e+"), "n");
        assert_eq!(kinds(". .e5"), "..n");
        assert_eq!(lex("1fUNION", 0, false)[0].1, "1f");
        assert_eq!(kinds("123FROM"), "1k");
        assert_eq!(kinds("1dx"), "1n");
        assert_eq!(kinds("\\N \\x"), "1\\n");
        assert_eq!(kinds("$1,000.00 $. $"), "1nn");
    }

    #[test]
    fn strings_and_escapes() {
        assert_eq!(lex("'a\\'b''c' x", 0, false)[0].1, "a\\'b''c");
        assert_eq!(lex("'a\\\\' x", 0, false)[0].1, "a\\\\");
        assert_eq!(kinds("E'x' N'y' U&'z' b'01' x'1f' b'2'"), "sss11ns");
        assert_eq!(lex("q'[a]'b]'", 0, false)[0].1, "a");
        assert_eq!(lex("nq'(a)' z", 0, false)[0].1, "a");
        assert_eq!(kinds("q' x"), "ns");
        assert_eq!(kinds("$$a$b$$ $t$x$$t$ $q"), "ssnn");
        assert_eq!(lex("$t$x$$t$", 0, false)[0].1, "x$");
        // Inside a quote context the input starts in a string.
        assert_eq!(lex("a' or 1", b'\'', false)[0], ('s', "a".into()));
        assert_eq!(kinds("[a b] `x` `concat`"), "nnf");
    }

    #[test]
    fn comments_and_dialects() {
        assert_eq!(kinds("1 -- x"), "1c");
        assert_eq!(kinds("1 --x"), "1c");
        assert_eq!(lex("1 --x", 0, true).len(), 4);
        assert_eq!(kinds("1 # x"), "1on");
        assert_eq!(lex("1 # x", 0, true)[1].0, 'c');
        assert_eq!(kinds("/* a */ /*! b */ /* /* */ /*"), "cXXc");
        // The nested-comment search reaches into the closing `*/`.
        assert_eq!(kinds("/*/*/"), "X");
        assert_eq!(kinds("/* x/*/"), "X");
    }

    #[test]
    fn words_variables_and_operators() {
        assert_eq!(kinds("SELECT.1 select`x` a.b"), "E1Enn");
        assert_eq!(lex("SELECT.1", 0, false)[1].1, ".1");
        assert_eq!(kinds("@a @@b @`c` @'d' @"), "vvvvv");
        assert_eq!(lex("@@version x", 0, false)[0].1, "@@version");
        assert_eq!(kinds("<=> != && || :: : ?"), "oo&&o:?");
        assert_eq!(kinds("a:"), "no");
        assert_eq!(kinds("a < b"), "non");
        let long = format!("{} x", "a".repeat(40));
        assert_eq!(lex(&long, 0, false)[0].1.len(), VALUE_MAX);
    }
}
