//! Syntax errors: every one listed, explained in the terms of the mistake that usually causes it,
//! and the rest of the file still checked.
//!
//! A TOML parser stops at the first error. [`recover`] repairs the text one error at a time (a
//! value without quotes gets them, a header that lost a bracket gets it back, any other line is
//! blanked), so the file's other problems are found too: [`Recovered::report`] then merges what
//! the repaired file says about a repaired line (`add_caching = yes` is a boolean key: the fix is
//! `true`, not `"yes"`). Lines keep their numbers throughout, so every position stays right.

use crate::diag::{LineIndex, Severity};
use crate::reader::Sink;

/// Most syntax errors listed for one file.
const MAX_SYNTAX_ERRORS: usize = 20;

/// The text with its syntax errors repaired, and what each error was.
pub(super) struct Recovered {
    pub(super) text: String,
    errors: Vec<SyntaxError>,
    /// The repaired text parses: everything else in the file was checked.
    pub(super) complete: bool,
}

struct SyntaxError {
    line: usize,
    column: usize,
    message: String,
    hint: String,
    /// `key = word`: the word was quoted; what the key really takes decides the fix.
    bare: Option<(String, String)>,
}

/// Lists the file's syntax errors, not only the first, and repairs the text around each.
pub(super) fn recover(src: &str, first: toml_edit::TomlError) -> Recovered {
    let mut text = src.to_owned();
    let mut error = first;
    let mut errors = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..MAX_SYNTAX_ERRORS {
        let mut at = error.span().map_or(0, |s| s.start.min(text.len()));
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        let lines = LineIndex::new(&text);
        let (line, column) = lines.position(&text, at);
        let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[at..].find('\n').map_or(text.len(), |i| at + i);
        let line_text = text[line_start..line_end].to_owned();
        let (message, hint, repair) = explain(&text, line, &line_text, error.message().trim());
        // A value without quotes is reported where it starts, not where TOML gave up on it.
        let column = match &repair {
            Repair::Quote { at, .. } => line_text[..*at].chars().count() + 1,
            _ => column,
        };
        errors.push(SyntaxError {
            line,
            column,
            message,
            hint,
            bare: match &repair {
                Repair::Quote { key, word, .. } => Some((key.clone(), word.clone())),
                _ => None,
            },
        });
        if !seen.insert(line) {
            break;
        }
        match repair {
            Repair::Stop => break,
            Repair::Quote { at, word, .. } => {
                let start = line_start + at;
                text.replace_range(start..start + word.len(), &format!("{word:?}"));
            }
            Repair::Replace(with) => text.replace_range(line_start..line_end, &with),
            Repair::Blank => {
                let blank = " ".repeat(line_text.len());
                text.replace_range(line_start..line_end, &blank)
            }
        }
        match toml_edit::Document::parse(text.as_str()) {
            Ok(_) => {
                return Recovered {
                    text,
                    errors,
                    complete: true,
                }
            }
            Err(e) => error = e,
        }
    }
    Recovered {
        text,
        errors,
        complete: false,
    }
}

impl Recovered {
    /// Adds the syntax errors to `sink`, each merged with what the repaired file says about its
    /// line, and says so when part of the file could not be checked.
    pub(super) fn report(self, sink: &mut Sink<'_>) {
        for e in self.errors {
            let (mut message, mut hint) = (e.message, e.hint);
            if let Some((key, word)) = e.bare {
                // The key's own reader saw the quoted word: its type error names what the key
                // takes, and its fix is the one to follow.
                if let Some(i) = sink.diags.iter().position(|d| {
                    d.line == e.line && d.is_error() && d.message.starts_with("expected ")
                }) {
                    let typed = sink.diags.remove(i);
                    let want = typed
                        .message
                        .strip_prefix("expected ")
                        .and_then(|m| m.split(", found").next())
                        .unwrap_or("another type")
                        .to_owned();
                    message = format!(
                        "not valid TOML: `{word}` is not a value TOML knows; `{key}` takes {want}"
                    );
                    hint = typed.hint;
                }
            }
            sink.push_at(Severity::Error, "", e.line, e.column, message, hint);
        }
        if !self.complete {
            sink.push_at(
                Severity::Error,
                "",
                0,
                0,
                "the rest of the file was not checked: it cannot be read past the syntax errors above",
                "fix them and run `rampart check` again",
            );
        }
    }
}

/// How to get past a syntax error.
enum Repair {
    /// Quote `word`, which starts `at` bytes into the line.
    Quote {
        key: String,
        word: String,
        at: usize,
    },
    /// Replace the line.
    Replace(String),
    /// Blank the line.
    Blank,
    /// Give up: what follows would be read wrongly.
    Stop,
}

/// A line of the file as far as sections and keys go.
enum Line {
    /// `[[name]]` (`array`) or `[name]`.
    Header {
        name: String,
        array: bool,
    },
    /// `key = ...`.
    Key(String),
    Other,
}

fn classify(line: &str) -> Line {
    let t = line.trim();
    if let Some(rest) = t.strip_prefix("[[") {
        return Line::Header {
            name: header_name(rest),
            array: true,
        };
    }
    if let Some(rest) = t.strip_prefix('[') {
        return Line::Header {
            name: header_name(rest),
            array: false,
        };
    }
    match t.split_once('=') {
        Some((k, _)) if !t.starts_with('#') => {
            Line::Key(k.trim().trim_matches(['"', '\'']).to_owned())
        }
        _ => Line::Other,
    }
}

/// The dotted name at the start of a header's text (after its brackets).
fn header_name(rest: &str) -> String {
    rest.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .collect()
}

/// A syntax error's message, fix, and how to get past it. `line` is 1-based.
fn explain(text: &str, line: usize, line_text: &str, message: &str) -> (String, String, Repair) {
    let lines: Vec<&str> = text.lines().collect();
    let earlier = &lines[..(line - 1).min(lines.len())];
    if message.starts_with("duplicate key") {
        return duplicate(earlier, line_text);
    }
    match classify(line_text) {
        Line::Header { name, array } if !name.is_empty() => {
            let fixed = if array {
                format!("[[{name}]]")
            } else {
                format!("[{name}]")
            };
            if line_text.trim() != fixed {
                return (
                    format!("not valid TOML: {message}"),
                    format!("write the header as `{fixed}`"),
                    Repair::Replace(fixed),
                );
            }
        }
        Line::Key(key) => {
            if let Some((at, word)) = bare_word(line_text) {
                return (
                    format!("not valid TOML: the value {word:?} is a string and needs quotes"),
                    format!("write it as `{key} = \"{word}\"`"),
                    Repair::Quote { key, word, at },
                );
            }
        }
        _ => {}
    }
    (
        format!("not valid TOML: {message}"),
        "fix the syntax at this position".to_owned(),
        Repair::Blank,
    )
}

/// A value written as a bare word (`key = yes`): where it starts and the word.
fn bare_word(line: &str) -> Option<(usize, String)> {
    let eq = line.find('=')?;
    let after = &line[eq + 1..];
    let start = eq + 1 + (after.len() - after.trim_start().len());
    let word: String = line[start..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '#')
        .collect();
    // A word (`yes`) or text that starts like a number but is none (`127.0.0.1`, `::1`, `1h`).
    let starts = word.starts_with(|c: char| c.is_alphabetic())
        || word.starts_with(|c: char| c.is_ascii_digit() || c == ':')
            && word.parse::<toml_edit::Value>().is_err();
    let bare = starts
        && !matches!(word.as_str(), "true" | "false" | "inf" | "nan")
        && !word.contains(['"', '\'', '[', '{', ',', ']', '}']);
    bare.then_some((start, word))
}

/// A key or header TOML has seen before in the same table: where the first one is, and why
/// TOML reads the two as one table.
fn duplicate(earlier: &[&str], line_text: &str) -> (String, String, Repair) {
    match classify(line_text) {
        Line::Key(key) => duplicate_key(earlier, &key),
        Line::Header { name, array } => duplicate_header(earlier, &name, array),
        Line::Other => (
            "not valid TOML: duplicate key".to_owned(),
            "remove one of the two definitions".to_owned(),
            Repair::Blank,
        ),
    }
}

/// A key set twice in one section: where the first one is, and whether the second is a global
/// key written after a section header.
fn duplicate_key(earlier: &[&str], key: &str) -> (String, String, Repair) {
    let numbered = |i: usize| i + 1;
    // The section this line is in starts at the last header above it.
    let header = earlier
        .iter()
        .rposition(|l| matches!(classify(l), Line::Header { .. }));
    let from = header.map_or(0, |h| h + 1);
    let first = earlier[from..]
        .iter()
        .position(|l| matches!(classify(l), Line::Key(k) if k == key))
        .map(|i| from + i);
    let Some(first) = first else {
        return (
            format!("not valid TOML: `{key}` is already defined in this section"),
            "remove one of the two definitions".to_owned(),
            Repair::Blank,
        );
    };
    let Some(h) = header else {
        return (
            format!(
                "not valid TOML: `{key}` is set twice (first at line {})",
                numbered(first)
            ),
            "remove one of the two lines".to_owned(),
            Repair::Blank,
        );
    };
    let header_text = earlier[h].trim();
    let global = super::catalog()
        .get("")
        .is_some_and(|k| k.keys.contains(key));
    let first_rule = earlier.iter().position(
        |l| matches!(classify(l), Line::Header { name, array: true } if name == "proxy_rules"),
    );
    let hint = match first_rule {
        Some(r) if global => format!(
            "if this line is meant as the global `{key}`, move it above the first `[[proxy_rules]]` (line {}); otherwise remove one of the two lines",
            numbered(r)
        ),
        _ => "remove one of the two lines".to_owned(),
    };
    (
        format!(
            "not valid TOML: `{key}` is set twice in one section (first at line {}): every key after the `{header_text}` header at line {} belongs to that section, so TOML reads this line as its second `{key}`",
            numbered(first),
            numbered(h)
        ),
        hint,
        Repair::Blank,
    )
}

/// A section header written twice, or one TOML cannot take as a list of sections because a
/// section nested in it came first.
fn duplicate_header(earlier: &[&str], name: &str, array: bool) -> (String, String, Repair) {
    let numbered = |i: usize| i + 1;
    let written = if array {
        format!("[[{name}]]")
    } else {
        format!("[{name}]")
    };
    // `[[proxy_rules.disallowed_user_agents]]` before any `[[proxy_rules]]` makes
    // `proxy_rules` a plain table; the later `[[proxy_rules]]` then clashes with it.
    let prefix = format!("{name}.");
    let nested = earlier.iter().position(
        |l| matches!(classify(l), Line::Header { name: n, .. } if n.starts_with(&prefix)),
    );
    let own = earlier
        .iter()
        .position(|l| matches!(classify(l), Line::Header { name: n, array: true } if n == name));
    if let Some(n) = nested.filter(|n| own.is_none_or(|o| o > *n)) {
        let inner = earlier[n].trim();
        return (
            format!(
                "not valid TOML: `{written}` cannot come here, because `{inner}` at line {} comes before any `{written}`: TOML then made `{name}` a single table, and it cannot also be a list of `{written}` sections",
                numbered(n)
            ),
            format!(
                "a `{inner}` section belongs to the `{written}` above it: move the section at line {} (its header and its keys) below the last key of the `{written}` it belongs to, after that rule's own keys",
                numbered(n)
            ),
            Repair::Stop,
        );
    }
    let same = earlier
        .iter()
        .rposition(|l| matches!(classify(l), Line::Header { name: n, array: false } if n == name));
    match same {
        Some(s) if !array => (
            format!(
                "not valid TOML: `{written}` is already defined at line {}, in the same section",
                numbered(s)
            ),
            "merge the two sections into one".to_owned(),
            Repair::Stop,
        ),
        _ => (
            format!("not valid TOML: `{name}` is already defined above, as a key or a table"),
            "rename one of the two, or merge them".to_owned(),
            Repair::Stop,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_classified() {
        assert!(
            matches!(classify("[[proxy_rules]]"), Line::Header { name, array: true } if name == "proxy_rules")
        );
        assert!(
            matches!(classify("  [proxy_rules.routing_rules] # x"), Line::Header { name, array: false } if name == "proxy_rules.routing_rules")
        );
        assert!(matches!(classify("a = 1"), Line::Key(k) if k == "a"));
        assert!(matches!(classify("\"a\" = 1"), Line::Key(k) if k == "a"));
        assert!(matches!(classify("# a = 1"), Line::Other));
        assert_eq!(
            bare_word("add_caching = yes # on"),
            Some((14, "yes".into()))
        );
        assert_eq!(bare_word("a = true"), None);
        assert_eq!(bare_word("a = [x]"), None);
        assert_eq!(
            bare_word("forward_ipv4 = 127.0.0.1"),
            Some((15, "127.0.0.1".into()))
        );
        assert_eq!(bare_word("forward_ipv6 = ::1"), Some((15, "::1".into())));
        assert_eq!(bare_word("a = 3600"), None);
        assert_eq!(bare_word("a = 1.5"), None);
        assert_eq!(bare_word("a = 1979-05-27"), None);
    }
}
