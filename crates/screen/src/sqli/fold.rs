//! Folding: pulls tokens from the tokenizer and reduces them to at most five, the fingerprint's
//! tokens, with libinjection's folding rules (`1 + 1` is a number, `ORDER BY` one word, `- 1`
//! after a keyword just `1`, `((` one parenthesis…).
//!
//! The tokens live in a fixed array of eight small `Copy` structs with two cursors, as in
//! libinjection: `pos`, where the next token read goes, and `left`, how many tokens at the front
//! are settled. Each round looks at the two tokens at `left`, then at three, and a rule either
//! rewrites them and starts the round again or lets `left` move on. The cursors' arithmetic is
//! libinjection's to the letter, quirks included (a rule that drops "the second token" when more
//! than two are pending drops the last one), because the fingerprint depends on it; the rules
//! are in the order libinjection tries them, and the first that matches decides.

use super::table::{Key, Tables};
use super::tokenize::{Kind, Lexer, Token};

/// Fingerprint length.
pub(super) const MAX: usize = 5;

/// The result of folding one input in one context.
pub(super) struct Folded {
    /// The fingerprint's tokens are `tokens[..count]`.
    pub(super) tokens: [Token; MAX + 3],
    pub(super) count: usize,
    /// Tokens read from the tokenizer (comments and skipped tokens included).
    pub(super) read: u32,
    /// The tokenizer saw a reason to read the input again as MySQL.
    pub(super) mysql_hint: bool,
}

/// What a round's rules decided.
enum Step {
    /// Tokens were rewritten: start the round again.
    Again,
    /// Nothing matched: look at more tokens (two-token rules) or settle one (three-token rules).
    Next,
    /// `{` followed by an empty backticked name: the whole input is evil.
    Evil,
}

struct Folder<'s> {
    s: &'s [u8],
    lex: Lexer<'s>,
    tables: &'s Tables,
    v: [Token; MAX + 3],
    pos: usize,
    left: usize,
    more: bool,
    /// The last token read, when it was a comment.
    last_comment: Option<Token>,
    read: u32,
}

/// Folds the tokens of `s` read in the given context.
pub(super) fn fold(s: &[u8], quote: u8, mysql: bool, tables: &Tables) -> Folded {
    let mut lex = Lexer::new(s, quote, mysql, tables);
    let mut read = 0;
    // Leading comments, `(`, types and unary operators say nothing: skip them.
    let first = loop {
        match lex.next_token() {
            None => {
                return Folded {
                    tokens: [EMPTY; MAX + 3],
                    count: 0,
                    read,
                    mysql_hint: lex.mysql_hint,
                }
            }
            Some(t) => {
                read += 1;
                if !(matches!(t.kind, Kind::Comment | Kind::LeftParen | Kind::SqlType)
                    || t.is_unary(s))
                {
                    break t;
                }
            }
        }
    };
    let f = Folder {
        s,
        lex,
        tables,
        v: [first; MAX + 3],
        pos: 1,
        left: 0,
        more: true,
        last_comment: None,
        read,
    };
    f.run()
}

/// Filler for unused slots.
const EMPTY: Token = Token {
    kind: Kind::Unknown,
    len: 0,
    open: 0,
    close: 0,
    merged: 0,
    into: false,
    start: 0,
};

/// Words that are functions when called, variables or names otherwise.
const CALLED: [&[u8]; 11] = [
    b"USER_ID",
    b"USER_NAME",
    b"DATABASE",
    b"PASSWORD",
    b"USER",
    b"CURRENT_USER",
    b"CURRENT_DATE",
    b"CURRENT_TIME",
    b"CURRENT_TIMESTAMP",
    b"LOCALTIME",
    b"LOCALTIMESTAMP",
];

impl Folder<'_> {
    fn run(mut self) -> Folded {
        loop {
            if self.pos >= MAX && self.five_that_restart() {
                if self.pos > MAX {
                    self.v[1] = self.v[MAX];
                    self.pos = 2;
                } else {
                    self.pos = 1;
                }
                self.left = 0;
            }
            if !self.more || self.left >= MAX {
                self.left = self.pos;
                break;
            }
            self.fill(2);
            if self.pos - self.left < 2 {
                self.left = self.pos;
                continue;
            }
            match self.two() {
                Step::Again => continue,
                Step::Evil => {
                    return Folded {
                        tokens: self.v,
                        count: self.left + 2,
                        read: self.read,
                        mysql_hint: false,
                    }
                }
                Step::Next => {}
            }
            self.fill(3);
            if self.pos - self.left < 3 {
                self.left = self.pos;
                continue;
            }
            match self.three() {
                Step::Again => continue,
                Step::Next | Step::Evil => self.left += 1,
            }
        }
        // A sixth token may have been read to settle the fifth.
        let mut count = self.left.min(MAX);
        // An unclosed, empty backtick at the end is PHP's way to comment out the rest.
        if count > 2 {
            let t = &mut self.v[count - 1];
            if t.kind == Kind::Bareword && t.open == b'`' && t.len == 0 && t.close == 0 {
                t.kind = Kind::Comment;
            }
        }
        if count < MAX {
            if let Some(c) = self.last_comment {
                self.v[count] = c;
                count += 1;
            }
        }
        Folded {
            tokens: self.v,
            count,
            read: self.read,
            mysql_hint: self.lex.mysql_hint,
        }
    }

    /// Reads tokens until `n` are pending after `left` (at most six in all); comments are only
    /// remembered.
    fn fill(&mut self, n: usize) {
        while self.more && self.pos <= MAX && self.pos - self.left < n {
            match self.lex.next_token() {
                None => self.more = false,
                Some(t) => {
                    self.read += 1;
                    if t.kind == Kind::Comment {
                        self.last_comment = Some(t);
                    } else {
                        self.last_comment = None;
                        self.v[self.pos] = t;
                        self.pos += 1;
                    }
                }
            }
        }
    }

    /// Five tokens that libinjection folds from the start again: `1,(1)`, `n+(n)`, `1),(1`,
    /// `n)+(n` and the like.
    fn five_that_restart(&self) -> bool {
        use Kind::*;
        let k = |i: usize| self.v[i].kind;
        matches!(
            (k(0), k(1), k(2), k(3), k(4)),
            (Number, Operator | Comma, LeftParen, Number, RightParen)
                | (Bareword, Operator, LeftParen, Bareword | Number, RightParen)
                | (Number, RightParen, Comma, LeftParen, Number)
                | (Bareword, RightParen, Operator, LeftParen, Bareword)
        )
    }

    /// Drops the last pending token, and optionally resets `left` to 0.
    fn drop_last(&mut self, restart: bool) -> Step {
        self.pos -= 1;
        if restart {
            self.left = 0;
        }
        Step::Again
    }

    /// The rules over the two tokens at `left`.
    fn two(&mut self) -> Step {
        if let Some(step) = self.two_drops() {
            return step;
        }
        let l = self.left;
        if self.merge(l) {
            self.pos -= 1;
            self.left = l.saturating_sub(1);
            return Step::Again;
        }
        self.two_kinds()
    }

    /// The rules over two tokens that drop one of them or back up (`None`: none applies).
    fn two_drops(&mut self) -> Option<Step> {
        use Kind::*;
        let s = self.s;
        let l = self.left;
        let (a, b) = (self.v[l], self.v[l + 1]);
        match (a.kind, b.kind) {
            // `'a' 'b'` is one string to SQL; `;;` one semicolon.
            (String, String) | (Semicolon, Semicolon) => return Some(self.drop_last(false)),
            // `= -`, `AND +`, `= CHAR`: the operator alone.
            (Operator | Logic, _) if b.is_unary(s) || b.kind == SqlType => {
                return Some(self.drop_last(true))
            }
            // `( -`
            (LeftParen, _) if b.is_unary(s) => {
                self.pos -= 1;
                self.left = l.saturating_sub(1);
                return Some(Step::Again);
            }
            _ => {}
        }
        None
    }

    /// The rules over two tokens that change a kind or drop one of them.
    fn two_kinds(&mut self) -> Step {
        use Kind::*;
        let s = self.s;
        let l = self.left;
        let (a, b) = (self.v[l], self.v[l + 1]);
        match (a.kind, b.kind) {
            // T-SQL's `; IF` is a statement, not the function.
            (Semicolon, Function)
                if b.len >= 2
                    && b.byte(s, 0).eq_ignore_ascii_case(&b'I')
                    && b.byte(s, 1).eq_ignore_ascii_case(&b'F') =>
            {
                self.v[l + 1].kind = Tsql;
                Step::Again
            }
            // Words that are functions when called, variables or names otherwise.
            (Bareword | Variable, LeftParen) if CALLED.iter().any(|w| a.is(s, w)) => {
                self.v[l].kind = Function;
                Step::Again
            }
            // `IN (` and `NOT IN (` compare; otherwise `IN` is nothing (`IN BOOLEAN MODE`).
            (Keyword, _) if a.is(s, b"IN") || a.is(s, b"NOT IN") => {
                self.v[l].kind = if b.kind == LeftParen {
                    Operator
                } else {
                    Bareword
                };
                Step::Again
            }
            // `LIKE (` is the function; either way the three-token rules come next.
            (Operator, _) if a.is(s, b"LIKE") || a.is(s, b"NOT LIKE") => {
                if b.kind == LeftParen {
                    self.v[l].kind = Function;
                }
                Step::Next
            }
            // A type before a value (`CHAR 'x'`, `INT 1`) says nothing.
            (SqlType, Bareword | Number | SqlType | LeftParen | Function | Variable | String) => {
                self.v[l] = b;
                self.drop_last(true)
            }
            // `COLLATE x_y`: a name with `_` is a collation (a type).
            (Collate, Bareword) => {
                if b.has_underscore(s) {
                    self.v[l + 1].kind = SqlType;
                    self.left = 0;
                }
                Step::Next
            }
            // T-SQL reads `\%1` as `0 % 1` and `\1` as `1`.
            (Backslash, _) => {
                if b.is_arithmetic(s) {
                    self.v[l].kind = Number;
                } else {
                    self.v[l] = b;
                    self.pos -= 1;
                }
                self.left = 0;
                Step::Again
            }
            (LeftParen, LeftParen) | (RightParen, RightParen) => self.drop_last(true),
            // ODBC's `{fn x}`: drop `{ x`; but MySQL's `{ ``…` is too odd to be honest.
            (LeftBrace, Bareword) => {
                if b.len == 0 {
                    self.v[l + 1].kind = Evil;
                    return Step::Evil;
                }
                self.left = 0;
                self.pos -= 2;
                Step::Again
            }
            (_, RightBrace) => self.drop_last(true),
            _ => Step::Next,
        }
    }

    /// Two neighbouring words that are one in the word list (`ORDER BY`, `UNION ALL`,
    /// `NOT IN`) become the first word, with the merged value and the list's type.
    fn merge(&mut self, l: usize) -> bool {
        use Kind::*;
        let (a, b) = (self.v[l], self.v[l + 1]);
        let word = |k| {
            matches!(
                k,
                Keyword | Bareword | Operator | Union | Function | Expression | Tsql | SqlType
            )
        };
        if !word(a.kind) || !(word(b.kind) || b.kind == Logic) {
            return false;
        }
        let len = a.len as usize + 1 + b.len as usize;
        if len >= 32 {
            return false;
        }
        let mut key = Key::new();
        if !(a.push_upper(self.s, &mut key) && key.push(b" ") && b.push_upper(self.s, &mut key)) {
            return false;
        }
        let Some(i) = self.tables.words.get(&key) else {
            return false;
        };
        let kind = Kind::of_entry(super::table::entry_type(i));
        if kind == Bareword {
            return false;
        }
        let t = &mut self.v[l];
        t.into = a.starts_with_into(self.s);
        t.kind = kind;
        t.len = len as u8;
        t.merged = i as u16 + 1;
        true
    }

    /// The rules over the three tokens at `left`.
    fn three(&mut self) -> Step {
        use Kind::*;
        let s = self.s;
        let l = self.left;
        let (a, b, c) = (self.v[l], self.v[l + 1], self.v[l + 2]);
        // Keep the first of the three.
        let keep_first = |f: &mut Self| {
            f.pos -= 2;
            f.left = 0;
            Step::Again
        };
        // Drop the middle one.
        let drop_middle = |f: &mut Self| {
            f.v[l + 1] = c;
            f.pos -= 1;
            f.left = 0;
            Step::Again
        };
        match (a.kind, b.kind, c.kind) {
            (Number, Operator, Number) => keep_first(self),
            (Operator, k, Operator) if k != LeftParen => keep_first(self),
            (Logic, _, Logic) => keep_first(self),
            (Variable, Operator, Variable | Number | Bareword) => keep_first(self),
            (Bareword | Number, Operator, Number | Bareword) => keep_first(self),
            // PostgreSQL's casts: `x::int`.
            (Bareword | Number | Variable | String, Operator, SqlType)
                if b.len == 2 && b.byte(s, 0) == b':' && b.byte(s, 1) == b':' =>
            {
                keep_first(self)
            }
            // Lists: `1, 2`.
            (
                Bareword | Number | String | Variable,
                Comma,
                Number | Bareword | String | Variable,
            ) => keep_first(self),
            // `SELECT - (`, `LIMIT + (`, `, - (`.
            (Expression | Group | Comma, _, LeftParen) if b.is_unary(s) => drop_middle(self),
            // `SELECT - 1`
            (Keyword | Expression | Group, _, Number | Bareword | Variable | String | Function)
                if b.is_unary(s) =>
            {
                drop_middle(self)
            }
            // `, -1`: and back up, so that `1, -1` folds to `1`.
            (Comma, _, Number | Bareword | Variable | String) if b.is_unary(s) => {
                self.v[l + 1] = c;
                self.left = 0;
                self.pos -= 3;
                Step::Again
            }
            // `, -SIN(1)`
            (Comma, _, Function) if b.is_unary(s) => drop_middle(self),
            // `db.table`
            (Bareword, Dot, Bareword) => keep_first(self),
            // SELECT . `foo`
            (Expression, Dot, Bareword) => drop_middle(self),
            // `USER(x)` is not the function: `USER()` takes no argument.
            (Function, LeftParen, k) if k != RightParen => {
                if a.is(s, b"USER") {
                    self.v[l].kind = Bareword;
                }
                Step::Next
            }
            _ => Step::Next,
        }
    }
}
