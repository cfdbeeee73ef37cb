//! The SQL-injection detector.
//!
//! [`Detector`] is the seam: the pipeline and [`crate::inspect`] only know the trait, so the
//! engine can be swapped or tested in isolation. [`Libinjection`] is the engine in use: the
//! pure-Rust port of libinjection (`libinjectionrs`), a tokenizer that folds SQL tokens into a
//! fingerprint and looks it up in libinjection's list of known injection shapes, trying the
//! input as-is and as if inside a single- or double-quoted string.

/// Something that decides whether one decoded value is an SQL-injection payload.
pub trait Detector: Send + Sync + std::fmt::Debug {
    /// `Some(fingerprint)` when `input` is an injection; the fingerprint names the token shape
    /// that matched (for logs).
    fn detect(&self, input: &[u8]) -> Option<String>;
}

/// libinjection's SQLi tokenizer and fingerprint list.
#[derive(Debug, Default, Clone, Copy)]
pub struct Libinjection;

impl Detector for Libinjection {
    fn detect(&self, input: &[u8]) -> Option<String> {
        if !worth_checking(input) {
            return None;
        }
        if input.len() > MEMO_MAX_VALUE {
            return run(input);
        }
        // Popular values (search terms, filters, cookie values) repeat: remember recent
        // verdicts per thread instead of tokenizing them again.
        MEMO.with(|memo| {
            let mut memo = memo.borrow_mut();
            if let Some(v) = memo.get(input) {
                return v.clone();
            }
            let verdict = run(input);
            if memo.len() >= MEMO_ENTRIES {
                memo.clear();
            }
            memo.insert(input.into(), verdict.clone());
            verdict
        })
    }
}

/// Values longer than this are not remembered.
const MEMO_MAX_VALUE: usize = 128;
/// Remembered verdicts per thread (at most ~0.6 MiB); the table is emptied when full.
const MEMO_ENTRIES: usize = 4096;

thread_local! {
    static MEMO: std::cell::RefCell<std::collections::HashMap<Box<[u8]>, Option<String>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// One libinjection verdict.
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
    let words = keywords();
    let mut prev: Option<&[u8]> = None;
    let mut buf = [0u8; 160];
    for word in input.split(|&b| b == b' ').filter(|w| !w.is_empty()) {
        if word[0].is_ascii_digit() {
            if !word.iter().all(u8::is_ascii_digit) {
                return false;
            }
        } else if word.len() > 64 || words.contains(upper(word, &mut buf)) {
            return false;
        }
        if let Some(p) = prev {
            let n = p.len() + 1 + word.len();
            if n <= buf.len() {
                buf[..p.len()].copy_from_slice(p);
                buf[p.len()] = b' ';
                buf[p.len() + 1..n].copy_from_slice(word);
                buf[..n].make_ascii_uppercase();
                if words.contains(&buf[..n]) {
                    return false;
                }
            } else {
                return false;
            }
        }
        prev = Some(word);
    }
    true
}

fn upper<'b>(word: &[u8], buf: &'b mut [u8; 160]) -> &'b [u8] {
    let b = &mut buf[..word.len()];
    b.copy_from_slice(word);
    b.make_ascii_uppercase();
    b
}

/// libinjection's keyword table (upper case), as a set. Only static words are ever inserted,
/// so a fast non-keyed hash (FNV-1a) is safe here.
type KeywordSet = std::collections::HashSet<&'static [u8], std::hash::BuildHasherDefault<Fnv>>;

fn keywords() -> &'static KeywordSet {
    static SET: std::sync::OnceLock<KeywordSet> = std::sync::OnceLock::new();
    SET.get_or_init(|| {
        libinjectionrs::sqli::sqli_data::SQL_KEYWORDS
            .iter()
            .map(|k| k.word.as_bytes())
            .collect()
    })
}

/// FNV-1a, for short static keys.
#[derive(Debug)]
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
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
            assert_eq!(Libinjection.detect(p.as_bytes()), None, "{p}");
        }
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
