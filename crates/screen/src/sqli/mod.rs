//! The SQL-injection detector.
//!
//! [`Detector`] is the seam: the pipeline and [`crate::inspect`] only know the trait, so the
//! engine can be swapped or tested in isolation. [`Sqli`] is the engine in use: rampart's own
//! implementation of libinjection's algorithm. A tokenizer reads the value as SQL, folds the
//! tokens into a fingerprint of at most five token types (`s&sos`: string, logic operator,
//! string, operator, string), and looks the fingerprint up in libinjection's list of known
//! injection shapes, with libinjection's whitelist for short fingerprints that ordinary text
//! makes too; the value is read as it stands and, when it holds a quote, as if it continued a
//! single- or double-quoted string, and again in the MySQL dialect when a `#` or `--` comment
//! calls for it.
//!
//! The engine's data (the word list with its types, the fingerprint list, the byte classes)
//! are libinjection's, from `libinjectionrs`, the pure-Rust port of libinjection; its code is
//! rampart's: tokens are small fixed structs pointing into the value, words are looked up in
//! hash tables built once over the list (upper-cased in a stack buffer), the fingerprint is a
//! few fixed bytes, and the engine allocates nothing. Its verdicts and fingerprints
//! are checked against `libinjectionrs`'s, which is kept as [`Libinjection`] for that purpose:
//! by unit tests on the token classes and folding rules, by `tests/differential.rs` (the corpora
//! in `testdata/` and ~200,000 generated SQL-ish values) and by the `sqli_diff` fuzz target.
//!
//! Both engines sit behind the same front: values that provably cannot be flagged
//! ([`plain_words`]) skip the engine, and recent verdicts are remembered per thread.

mod engine;
mod fold;
mod table;
mod token;
mod tokenize;

pub use engine::Fingerprint;

/// Something that decides whether one decoded value is an SQL-injection payload.
pub trait Detector: Send + Sync + std::fmt::Debug {
    /// `Some(fingerprint)` when `input` is an injection; the fingerprint names the token shape
    /// that matched (for logs).
    fn detect(&self, input: &[u8]) -> Option<String>;
}

/// rampart's implementation of libinjection's SQL-injection algorithm (the module docs say
/// how it works and how it is checked).
#[derive(Debug, Default, Clone, Copy)]
pub struct Sqli;

impl Sqli {
    /// The engine alone, without the plain-words shortcut and the memo: `Some(fingerprint)`
    /// exactly when libinjection flags `input`.
    pub fn check(input: &[u8]) -> Option<Fingerprint> {
        engine::detect(input)
    }
}

impl Detector for Sqli {
    fn detect(&self, input: &[u8]) -> Option<String> {
        screen(&SQLI_MEMO, input, |v| {
            engine::detect(v).map(|f| f.as_str().to_owned())
        })
    }
}

/// libinjection's SQLi tokenizer and fingerprint list as `libinjectionrs` implements them: the
/// reference [`Sqli`] is checked against (and the engine rampart used before it).
#[derive(Debug, Default, Clone, Copy)]
pub struct Libinjection;

impl Detector for Libinjection {
    fn detect(&self, input: &[u8]) -> Option<String> {
        screen(&LIBINJECTION_MEMO, input, run)
    }
}

/// The front both engines share: plain words skip the engine, and popular values (search
/// terms, filters, cookie values) repeat, so recent verdicts are remembered per thread instead
/// of being worked out again.
fn screen(
    memo: &'static std::thread::LocalKey<Memo>,
    input: &[u8],
    engine: impl Fn(&[u8]) -> Option<String>,
) -> Option<String> {
    if !worth_checking(input) {
        return None;
    }
    if input.len() > MEMO_MAX_VALUE {
        return engine(input);
    }
    memo.with(|memo| {
        let mut memo = memo.borrow_mut();
        if let Some(v) = memo.get(input) {
            return v.clone();
        }
        let verdict = engine(input);
        if memo.len() >= MEMO_ENTRIES {
            memo.clear();
        }
        memo.insert(input.into(), verdict.clone());
        verdict
    })
}

/// Values longer than this are not remembered.
const MEMO_MAX_VALUE: usize = 128;
/// Remembered verdicts per thread (at most ~0.6 MiB); the table is emptied when full.
const MEMO_ENTRIES: usize = 4096;

/// Recent verdicts of one engine on one thread.
type Memo = std::cell::RefCell<std::collections::HashMap<Box<[u8]>, Option<String>>>;

thread_local! {
    static SQLI_MEMO: Memo = Memo::default();
    static LIBINJECTION_MEMO: Memo = Memo::default();
}

/// One `libinjectionrs` verdict.
fn run(input: &[u8]) -> Option<String> {
    let result = libinjectionrs::detect_sqli(input);
    if !result.is_injection() {
        return None;
    }
    Some(
        result
            .fingerprint
            .map(|f| f.to_string())
            .unwrap_or_default(),
    )
}

/// Values libinjection cannot flag, decided without running it: empty, or plain words.
/// This keeps typical query strings (`page=2&sort=price`, `q=running+shoes`) off the tokenizer.
pub fn worth_checking(input: &[u8]) -> bool {
    !plain_words(input)
}

/// True for ASCII letters, digits and spaces where every letter-led word, and every pair of
/// neighbouring words, is absent from libinjection's keyword table, and every digit-led word is
/// all digits.
///
/// Why libinjection cannot flag such a value: with no quote character it is tokenized once, as
/// it stands (the quote contexts are only tried when a `'` or `"` is present, and the MySQL
/// re-parse only follows `#` or `--` comments); letters-and-digits words that are not keywords
/// become bare words (`n`), digit runs become numbers (`1`); multi-word keywords are only formed
/// by merging two neighbouring words that are themselves a table entry (`ORDER BY`, and
/// `AT TIME` → `AT TIME ZONE`); so the fingerprint is made of `n` and `1` alone, and no
/// fingerprint in libinjection's table is (`tests::no_fingerprint_is_only_words_and_numbers`
/// checks that against the engine's own table). The `sqli` fuzz target checks the whole claim.
pub fn plain_words(input: &[u8]) -> bool {
    if input.len() > 512
        || !input
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b' ')
    {
        return false;
    }
    let mut prev: Option<&[u8]> = None;
    for word in input.split(|&b| b == b' ').filter(|w| !w.is_empty()) {
        if word[0].is_ascii_digit() {
            if !word.iter().all(u8::is_ascii_digit) {
                return false;
            }
        } else if word.len() > 64 || in_word_list(&[word]) {
            return false;
        }
        if let Some(p) = prev {
            if p.len() + 1 + word.len() > 160 || in_word_list(&[p, b" ", word]) {
                return false;
            }
        }
        prev = Some(word);
    }
    true
}

/// Whether the concatenated `parts` spell an entry of libinjection's word list (in any case).
fn in_word_list(parts: &[&[u8]]) -> bool {
    let mut key = table::Key::new();
    // Nothing longer than the key buffer is in the list.
    parts.iter().all(|p| key.push(p)) && table::tables().word_type(&key).is_some()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn classic_payloads_are_flagged() {
        for p in [
            "1' OR '1'='1",
            "admin'--",
            "1 UNION SELECT username, password FROM users",
            "1; DROP TABLE users",
            "' or 1=1 --",
            "1) or sleep(5)#",
            "-1 union all select 1,2,3",
        ] {
            assert!(Sqli.detect(p.as_bytes()).is_some(), "{p}");
            assert!(Libinjection.detect(p.as_bytes()).is_some(), "{p}");
        }
    }

    #[test]
    fn ordinary_values_pass() {
        for p in [
            "running shoes",
            "O'Reilly",
            "it's the dog's toy",
            "select the best option",
            "2",
            "price",
            "en-US",
        ] {
            assert_eq!(Sqli.detect(p.as_bytes()), None, "{p}");
            assert_eq!(Libinjection.detect(p.as_bytes()), None, "{p}");
        }
    }

    #[test]
    fn verdicts_are_remembered_per_engine() {
        let v = b"1' or '1'='1 (memo test)";
        let first = Sqli.detect(v);
        assert!(first.is_some());
        assert_eq!(Sqli.detect(v), first);
        assert_eq!(Libinjection.detect(v), first);
        assert_eq!(
            SQLI_MEMO.with(|m| m.borrow().get(&v[..]).cloned()),
            Some(first)
        );
        // A value longer than the memo keeps is judged every time, the same way.
        let long = [&b"1 union select "[..], &[b'x'; MEMO_MAX_VALUE]].concat();
        assert_eq!(Sqli.detect(&long), Libinjection.detect(&long));
        assert!(SQLI_MEMO.with(|m| m.borrow().get(&long[..]).is_none()));
    }

    #[test]
    fn no_fingerprint_is_only_words_and_numbers() {
        // Fingerprints are stored as `0` + upper-case token types with type 'F'.
        for k in libinjectionrs::sqli::sqli_data::SQL_KEYWORDS {
            if k.token_type == b'F' {
                let shape = &k.word.as_bytes()[1..];
                assert!(
                    !shape.iter().all(|&c| c == b'N' || c == b'1'),
                    "fingerprint {} is made of words and numbers only",
                    k.word
                );
            }
        }
    }

    #[test]
    fn plain_words_are_recognised() {
        for v in [
            "running shoes",
            "running shoes size 10",
            "2",
            "price",
            "a  b",
            "",
        ] {
            assert!(plain_words(v.as_bytes()), "{v}");
        }
        for v in [
            "1 union select 1",
            "select",
            "order by",
            "1union",
            "x or 1",
            "at time",
            "it's",
            "a-b",
            "sleep 5",
        ] {
            assert!(!plain_words(v.as_bytes()), "{v}");
        }
    }
}
