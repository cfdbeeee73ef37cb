//! The verdict: the contexts an input is read in, its fingerprint, and libinjection's checks
//! of a fingerprint (the list of injection shapes, then the whitelist that spares short
//! fingerprints which ordinary text also makes).

use std::fmt;

use super::fold::{fold, Folded, MAX};
use super::table::{tables, Tables};
use super::tokenize::Kind;

/// The token shape that made a value an injection: up to five token-type characters as
/// libinjection writes them (`s&sos`, `1UE`, `X` for an evil comment).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    bytes: [u8; 8],
    len: u8,
}

impl Fingerprint {
    /// The fingerprint's characters (ASCII).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or("?")
    }

    /// The fingerprint's characters.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    fn of(f: &Folded) -> Fingerprint {
        let mut fp = Fingerprint {
            bytes: [0; 8],
            len: 0,
        };
        for t in &f.tokens[..f.count.min(8)] {
            fp.bytes[fp.len as usize] = t.kind as u8;
            fp.len += 1;
        }
        // An evil token makes the whole fingerprint `X`.
        if fp.as_bytes().contains(&(Kind::Evil as u8)) {
            fp.bytes = [0; 8];
            fp.bytes[0] = Kind::Evil as u8;
            fp.len = 1;
        }
        fp
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// `Some(fingerprint)` when `s` is an SQL injection: read as it stands (ANSI, then MySQL if it
/// has a `#` or `--x` comment), then as if it followed a `'` (likewise), then as if it followed
/// a `"` (MySQL); the first reading whose fingerprint is an injection decides.
pub(super) fn detect(s: &[u8]) -> Option<Fingerprint> {
    if s.is_empty() {
        return None;
    }
    let t = tables();
    for quote in [0, b'\''] {
        if quote != 0 && !s.contains(&quote) {
            continue;
        }
        let (found, mysql_hint) = reading(s, quote, false, t);
        if found.is_some() {
            return found;
        }
        if mysql_hint {
            if let (Some(fp), _) = reading(s, quote, true, t) {
                return Some(fp);
            }
        }
    }
    if s.contains(&b'"') {
        return reading(s, b'"', true, t).0;
    }
    None
}

/// One reading: the fingerprint when it is an injection, and whether a MySQL reading is due.
fn reading(s: &[u8], quote: u8, mysql: bool, t: &Tables) -> (Option<Fingerprint>, bool) {
    let f = fold(s, quote, mysql, t);
    let fp = Fingerprint::of(&f);
    let verdict = (t.is_injection_shape(fp.as_bytes()) && !whitelisted(&f, &fp, s)).then_some(fp);
    (verdict, f.mysql_hint)
}

/// libinjection's second look at a fingerprint from its list: short ones that ordinary input
/// makes too are spared unless something else gives them away.
fn whitelisted(f: &Folded, fp: &Fingerprint, s: &[u8]) -> bool {
    let shape = fp.as_bytes();
    let n = shape.len();
    // A comment at the end and `sp_password` anywhere: the T-SQL trick to keep a statement out
    // of the log (libinjectionrs looks for it in UTF-8 input only, in any case).
    if n > 1
        && shape[n - 1] == Kind::Comment as u8
        && s.windows(11)
            .any(|w| w.eq_ignore_ascii_case(b"sp_password"))
        && std::str::from_utf8(s).is_ok()
    {
        return false;
    }
    match n {
        2 => two_spared(f, shape, s),
        3 => three_spared(f, shape, s),
        _ => false,
    }
}

fn two_spared(f: &Folded, shape: &[u8], s: &[u8]) -> bool {
    let (a, b) = (&f.tokens[0], &f.tokens[1]);
    // `1 UNION` alone is a phrase; with anything folded away it is an attack.
    if shape[1] == Kind::Union as u8 {
        return f.read == 2;
    }
    // A `#` second (operator or comment): too many false positives.
    if b.byte(s, 0) == b'#' {
        return true;
    }
    // `word --` and `word #` end many sentences; `word /*` does not.
    if a.kind == Kind::Bareword && b.kind == Kind::Comment && b.byte(s, 0) != b'/' {
        return true;
    }
    if a.kind == Kind::Number && b.kind == Kind::Comment {
        if b.byte(s, 0) == b'/' || f.read > 2 {
            return false;
        }
        // After a number the comment counts when white space, `/*` or `--` follows the number
        // (`1 --`, `1--`). libinjection reads that byte at the number's length from the start
        // of the input, not from the number (a bug, kept for the same verdicts), and a byte
        // above 127 counts as white space (signed char).
        let i = a.len as usize;
        return match s.get(i) {
            None => true,
            Some(&c) => {
                !((c as i8) <= 32
                    || (c == b'/' && s.get(i + 1) == Some(&b'*'))
                    || (c == b'-' && s.get(i + 1) == Some(&b'-')))
            }
        };
    }
    // A `--` comment with text after it is prose; a bare `--` at the end is a probe.
    b.len > 2 && b.byte(s, 0) == b'-'
}

fn three_spared(f: &Folded, shape: &[u8], s: &[u8]) -> bool {
    let (a, b, c) = (&f.tokens[0], &f.tokens[1], &f.tokens[2]);
    // `foo' + 'bar`: an injection only as `…foo' + 'bar…` inside one quoted value.
    if shape == b"sos" || shape == b"s&s" {
        return !(a.open == 0 && c.close == 0 && a.close == c.open);
    }
    // 'sexy and 17' is not an injection, 'sexy and 17<18' is.
    if [&b"s&n"[..], b"n&1", b"1&1", b"1&v", b"1&s"].contains(&shape) && f.read == 3 {
        return true;
    }
    // A keyword in the middle is prose unless it is MySQL's `INTO OUTFILE` / `INTO DUMPFILE`.
    b.kind == Kind::Keyword && !(b.len >= 5 && b.starts_with_into(s))
}

const _: () = assert!(MAX <= 8);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::table::tables;
    use super::*;
    use libinjectionrs::sqli::{SqliFlags, SqliState};

    /// The five readings, with libinjectionrs's flags for each.
    const READINGS: [(u8, bool, u32); 5] = [
        (0, false, 1 | 8),
        (0, true, 1 | 16),
        (b'\'', false, 2 | 8),
        (b'\'', true, 2 | 16),
        (b'"', true, 4 | 16),
    ];

    /// Our fingerprint of `s` in a reading.
    fn fp(s: &str, quote: u8, mysql: bool) -> String {
        Fingerprint::of(&fold(s.as_bytes(), quote, mysql, tables()))
            .as_str()
            .to_owned()
    }

    /// In every reading, the fingerprint and its verdict are libinjectionrs's; and so is the
    /// overall verdict.
    fn same_as_libinjectionrs(s: &str) {
        for (quote, mysql, flags) in READINGS {
            // Each libinjectionrs call folds again and adds to the state's token count: use a
            // fresh state for each.
            let their_fp = SqliState::new(s.as_bytes(), SqliFlags::new(flags))
                .get_fingerprint()
                .as_str()
                .to_owned();
            let their_verdict = SqliState::new(s.as_bytes(), SqliFlags::new(flags)).is_sqli();
            assert_eq!(fp(s, quote, mysql), their_fp, "{s:?} in reading {flags}");
            let ours = reading(s.as_bytes(), quote, mysql, tables()).0;
            assert_eq!(
                ours.is_some(),
                their_verdict,
                "{s:?} ({their_fp}) in {flags}"
            );
        }
        let theirs = libinjectionrs::detect_sqli(s.as_bytes());
        let theirs = theirs.is_injection().then(|| {
            theirs
                .fingerprint
                .map(|f| f.to_string())
                .unwrap_or_default()
        });
        assert_eq!(detect(s.as_bytes()).map(|f| f.to_string()), theirs, "{s:?}");
    }

    #[test]
    fn folding_rules_fold_as_libinjectionrs_does() {
        for s in [
            // two tokens
            "'a' 'b' 'c' or 1",
            "1;;; drop",
            "1 = -1 union",
            "1 AND +1",
            "1 = CHAR 1",
            "( -1",
            "((- 1) union select 1",
            "1 ORDER BY 1",
            "1 UNION ALL SELECT 1",
            "1 union all distinct select 1",
            "1 NOT IN (1)",
            "a AT TIME ZONE b",
            "x lock in share mode",
            "1 is not distinct from 1",
            "into outfile into dumpfile",
            "; IF 1=1 SELECT 1",
            "; if(1,2,3)",
            "; if exists(x)",
            "user(1)",
            "USER() union",
            "@`user`(1)",
            "@user(1)",
            "database() , password(x)",
            "current_timestamp(1) or 1",
            "1 IN (1)",
            "1 IN BOOLEAN MODE",
            "x not in y",
            "1 LIKE (1)",
            "x not like(1) or 1",
            "CHAR 'x' or 1",
            "int 1 union select",
            "1 COLLATE x_y or 1",
            "1 collate utf8 or 1",
            "1 collate `x_y` or 1",
            "\\%1 union",
            "\\1 or 1",
            "((1)) or ((1",
            "1)) or ((1",
            "{ ``.``.id }",
            "{fn x} or 1",
            "{x 1} union select 1",
            "1} or 1",
            "a } or 1",
            // three tokens
            "1+1 union select",
            "1 + 1 + 1 union select 1",
            "a = b = c",
            "1 and 2 and 3 or 1",
            "@a := 1 union",
            "@a + b union",
            "a.b.c union select",
            "x::int or 1",
            "'a'::text or 1",
            "1,2,3 union select 1",
            "select -(1)",
            "limit +(1)",
            "select - 1",
            "select ~ 'a' from",
            ", -1 or 1",
            "1,-1 union",
            "1,-sin(1) union",
            "db.table union select",
            "select . `foo` from",
            "user(x) or 1",
            "user() or 1",
            // five tokens that restart
            "1,(1) union select 1",
            "1+(1) union select 1",
            "a+(b) union select 1",
            "a+(1) union select 1",
            "1),(1 union select",
            "a)+(b union select",
            // the end
            "1 union select `",
            "1 union select 1 -- x",
            "1 or 1 #",
            "1 or 1 # x",
            "1 /* x */ or 1",
            "1 or 1 /* x */",
            "/* a */ 1 union",
            "-- x\n1 union",
        ] {
            same_as_libinjectionrs(s);
        }
    }

    #[test]
    fn whitelist_spares_as_libinjectionrs_does() {
        for s in [
            "1 union",
            "1 union --",
            "1 union all",
            "x --",
            "x -- y",
            "x #",
            "x /* y",
            "1 /*",
            "1--",
            "1 --",
            "12 --",
            "1#",
            "1 -- x",
            "select --",
            "1a --",
            "x 1 --",
            "1\u{a0}--",
            "'a' + 'b'",
            "a' + 'b",
            "a' + 'b' + 'c",
            "sexy and 17",
            "sexy and 17<18",
            "1 and 1",
            "1 into outfile",
            "1 INTO OUTFILE 'x'",
            "1 into OUTFILE 'x'",
            "1 INTO outfile 'x'",
            "1 or 1",
            "1 or 1 -- sp_password",
            "1 or 1 -- SP_Password",
            "\u{e9}1 union select 1 -- sp_password",
            "/*! union */",
            "1 /* /* */ union",
            "{`` x",
            "x { `` y",
            "O'Reilly",
            "it's the dog's toy",
            "1' OR '1'='1",
            "admin'--",
            "\" or \"\"=\"",
        ] {
            same_as_libinjectionrs(s);
        }
    }

    #[test]
    fn known_fingerprints() {
        let f = |s: &str| detect(s.as_bytes()).map(|f| f.to_string());
        assert_eq!(f("1' OR '1'='1").as_deref(), Some("s&sos"));
        assert_eq!(f("/*! union */").as_deref(), Some("X"));
        assert_eq!(f("1 UNION SELECT 1").as_deref(), Some("1UE1"));
        assert_eq!(f("admin' --").as_deref(), Some("sc"));
        assert_eq!(f("1 union"), None);
        assert_eq!(f("O'Reilly"), None);
        assert_eq!(f(""), None);
        // Non-UTF-8 input is read byte by byte like any other.
        assert_eq!(
            detect(b"\xff' or 1=1 --").map(|f| f.to_string()).as_deref(),
            Some("s&1c")
        );
    }
}
