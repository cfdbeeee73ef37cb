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

/// Maps byte offsets in the source to 1-based line and column numbers.
#[derive(Debug)]
pub(crate) struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub(crate) fn new(src: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(src.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    /// 1-based (line, column); the column counts characters, not bytes.
    pub(crate) fn position(&self, src: &str, offset: usize) -> (usize, usize) {
        let offset = offset.min(src.len());
        let line = match self.starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let start = self.starts[line];
        let column = src
            .get(start..offset)
            .map_or(offset - start, |s| s.chars().count());
        (line + 1, column + 1)
    }
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
}
