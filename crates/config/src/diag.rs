//! Diagnostics produced while validating a configuration file.
//!
//! Every problem names the key (a dotted path such as `proxy_rules[1].forward_ipv4`), the line and
//! column where it was written, what is wrong and how to fix it. Validation never stops at the
//! first problem: all of them are collected and reported together.

use std::fmt;

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The file cannot be used; `rampart check` exits 1 and `rampart run` refuses to start.
    Error,
    /// The file works, but something in it is probably not what the author meant.
    Warning,
    /// A valid key whose feature is not implemented yet: accepted, not yet active.
    Inactive,
    /// Worth knowing, nothing to fix: keys ARC2 requires that a section leaves out, with the
    /// defaults rampart uses. `--strict` leaves notes alone.
    Note,
}

impl Severity {
    fn label(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Inactive => "accepted, not yet active",
            Severity::Note => "note",
        }
    }
}

/// One problem found in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    /// Dotted key path, e.g. `proxy_rules[0].forward_ipv4`; empty for file-level problems.
    pub key: String,
    /// 1-based line, 0 when the problem has no position (e.g. a key that is missing).
    pub line: usize,
    /// 1-based column (in characters), 0 when unknown.
    pub column: usize,
    pub message: String,
    /// How to fix it; may be empty.
    pub hint: String,
}

impl Diagnostic {
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.severity.label())?;
        if self.line > 0 {
            write!(f, " at {}:{}", self.line, self.column)?;
        }
        if !self.key.is_empty() {
            write!(f, " `{}`", self.key)?;
        }
        write!(f, ": {}", self.message)?;
        if !self.hint.is_empty() {
            write!(f, "\n    fix: {}", self.hint)?;
        }
        Ok(())
    }
}

/// Maps byte offsets in the source to 1-based line and column numbers, each in constant time
/// (a file with many problems on one long line must not cost the square of its length).
#[derive(Debug)]
pub(crate) struct LineIndex {
    starts: Vec<usize>,
    /// The characters before each block of [`BLOCK`] bytes: a column is the characters between
    /// two offsets, counted from the nearest block rather than from the line's start.
    chars_before: Vec<usize>,
}

/// Bytes per block of [`LineIndex::chars_before`].
const BLOCK: usize = 1024;

impl LineIndex {
    pub(crate) fn new(src: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(src.match_indices('\n').map(|(i, _)| i + 1));
        let mut chars_before = Vec::with_capacity(src.len() / BLOCK + 1);
        let mut count = 0;
        for block in src.as_bytes().chunks(BLOCK) {
            chars_before.push(count);
            count += chars_in(block);
        }
        chars_before.push(count);
        LineIndex {
            starts,
            chars_before,
        }
    }

    /// The characters that start before byte `offset`.
    fn chars_to(&self, src: &str, offset: usize) -> usize {
        let block = offset / BLOCK;
        let from = block * BLOCK;
        self.chars_before.get(block).copied().unwrap_or(0)
            + src.as_bytes().get(from..offset).map_or(0, chars_in)
    }

    /// 1-based (line, column); the column counts characters, not bytes.
    pub(crate) fn position(&self, src: &str, offset: usize) -> (usize, usize) {
        let offset = offset.min(src.len());
        let line = match self.starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let start = self.starts[line];
        let column = self.chars_to(src, offset) - self.chars_to(src, start);
        (line + 1, column + 1)
    }
}

/// The characters that start in `bytes` (every byte but UTF-8 continuation bytes).
fn chars_in(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b & 0xC0 != 0x80).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_and_count_chars() {
        let src = "a = 1\nbé = 2\n";
        let idx = LineIndex::new(src);
        assert_eq!(idx.position(src, 0), (1, 1));
        assert_eq!(idx.position(src, 6), (2, 1));
        // "bé" is 3 bytes; the '=' after it is column 4.
        assert_eq!(idx.position(src, 10), (2, 4));
    }

    #[test]
    fn columns_on_long_lines_count_chars_across_blocks() {
        let src = format!("x\n{}= 1\n", "é".repeat(3 * BLOCK));
        let idx = LineIndex::new(&src);
        let eq = src.find('=').expect("=");
        assert_eq!(idx.position(&src, eq), (2, 3 * BLOCK + 1));
        assert_eq!(idx.position(&src, src.len()), (3, 1));
    }
}
