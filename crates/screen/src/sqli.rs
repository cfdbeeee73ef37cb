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
}

/// Values that cannot carry an injection: empty, or a single run of ASCII letters and digits
/// (one bare word or number is one SQL token, and libinjection never flags a lone word or
/// number; `tests::lone_tokens_are_never_flagged` checks that against the engine). This keeps
/// typical query strings (`page=2&sort=price`) off the tokenizer.
fn worth_checking(input: &[u8]) -> bool {
    !input.iter().all(u8::is_ascii_alphanumeric)
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
    fn lone_tokens_are_never_flagged() {
        // The prefilter skips single alphanumeric runs; the engine must agree on them.
        for w in [
            "select",
            "union",
            "or",
            "and",
            "sleep",
            "benchmark",
            "version",
            "1",
            "0",
            "null",
            "drop",
            "table",
            "waitfor",
            "delay",
            "x",
            "1e5",
            "0x41",
            "abc123",
            "ORDER",
            "by",
            "having",
            "exec",
            "xp",
            "user",
            "char",
            "concat",
            "information",
            "schema",
        ] {
            assert!(
                !libinjectionrs::detect_sqli(w.as_bytes()).is_injection(),
                "libinjection flags the lone token {w:?}; the prefilter must not skip it"
            );
        }
    }
}
