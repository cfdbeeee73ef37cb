//! The diagnostics sink: every problem found while reading, with its line and column, the
//! sections muted and the keys ARC2 requires that a section leaves out.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::rc::Rc;

use crate::diag::{Diagnostic, LineIndex, Severity};
use crate::matching::Pattern;

use super::key_path;

/// Collects diagnostics and turns spans into positions.
pub(crate) struct Sink<'s> {
    src: &'s str,
    lines: LineIndex,
    pub(crate) diags: Vec<Diagnostic>,
    /// What each kind of section reads, and its header (kind: the section's path without
    /// indices, `""` for the top level), filled as sections finish.
    pub(crate) kinds: HashMap<String, Kind>,
    /// Keys no reader asked for; [`Sink::resolve_unknown`] reports them once every section is
    /// read, when it is known where else each key belongs.
    pub(super) unknown: Vec<Unknown>,
    /// Sections whose content is never used (a rule whose domain an earlier rule has): their
    /// misspellings are not worth a warning, nor the keys they leave out a note.
    pub(super) muted: HashSet<String>,
    /// Keys ARC2 requires that a section leaves out, with the default used: one note per
    /// section says them all.
    pub(super) left_out: Vec<LeftOut>,
    /// Every regular expression compiled so far, by text and case: a file with thousands of
    /// rules often repeats the same few, and compiling is what reading one costs most.
    patterns: HashMap<(String, bool), Result<Pattern, String>>,
}

/// A key ARC2 requires that a section leaves out.
pub(super) struct LeftOut {
    pub(super) section: String,
    pub(super) span: Option<Range<usize>>,
    pub(super) key: String,
    pub(super) default: String,
}

/// What one kind of section (`[[proxy_rules]]`, `[[proxy_rules.path_rules]]`, the top level, ...)
/// reads.
#[derive(Debug, Clone, Default)]
pub(crate) struct Kind {
    /// How its header is written (`[[proxy_rules]]`); empty for the top level.
    pub(crate) header: String,
    pub(crate) keys: HashSet<&'static str>,
}

/// A key written in a section that does not read it.
pub(super) struct Unknown {
    pub(super) key: String,
    /// The section's path (`proxy_rules[1]`) and kind (`proxy_rules`).
    pub(super) section: String,
    pub(super) kind: String,
    pub(super) span: Option<Range<usize>>,
    /// Where the section's header is.
    pub(super) section_span: Option<Range<usize>>,
    /// The keys written in the same section (shared by its unknown keys).
    pub(super) present: Rc<[String]>,
}

impl<'s> Sink<'s> {
    pub(crate) fn new(src: &'s str) -> Self {
        Sink {
            src,
            lines: LineIndex::new(src),
            diags: Vec::new(),
            kinds: HashMap::new(),
            unknown: Vec::new(),
            muted: HashSet::new(),
            left_out: Vec::new(),
            patterns: HashMap::new(),
        }
    }

    /// [`Pattern::new`], compiled once per text and case for the whole file (a compiled
    /// regular expression is shared by its clones).
    pub(crate) fn pattern(&mut self, text: &str, ignore_case: bool) -> Result<Pattern, String> {
        let key = (text.to_owned(), ignore_case);
        if let Some(p) = self.patterns.get(&key) {
            return p.clone();
        }
        let p = Pattern::new(text, ignore_case);
        self.patterns.insert(key, p.clone());
        p
    }

    /// Records that the section at `section` leaves out `key`, which ARC2 requires; rampart
    /// uses `default`.
    pub(crate) fn lenient(
        &mut self,
        section: &str,
        span: Option<Range<usize>>,
        key: &str,
        default: &str,
    ) {
        self.left_out.push(LeftOut {
            section: section.to_owned(),
            span,
            key: key.to_owned(),
            default: default.to_owned(),
        });
    }

    /// Marks the section at `path` as never used (a rule whose domain an earlier rule has): its
    /// unknown keys and the keys it leaves out are not reported.
    pub(crate) fn mute(&mut self, path: &str) {
        self.muted.insert(path.to_owned());
    }

    /// Whether `section` is muted, or inside a muted section.
    pub(super) fn is_muted(&self, section: &str) -> bool {
        if self.muted.is_empty() {
            return false;
        }
        section
            .match_indices('.')
            .map(|(i, _)| &section[..i])
            .chain(std::iter::once(section))
            .any(|s| self.muted.contains(s))
    }

    /// One note per section that leaves out keys ARC2 requires, naming each with the value
    /// rampart uses. A rule that leaves out `enable_sql_injection_protection` while screening
    /// is on globally gets a warning of its own: its requests are not screened.
    pub(crate) fn lenient_notes(&mut self, screening: bool) {
        let left_out = std::mem::take(&mut self.left_out);
        // Each section's entries, sections in the order they were first seen.
        let mut sections: Vec<(&str, Vec<&LeftOut>)> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for l in &left_out {
            if self.is_muted(&l.section) {
                continue;
            }
            let i = *index.entry(&l.section).or_insert_with(|| {
                sections.push((&l.section, Vec::new()));
                sections.len() - 1
            });
            sections[i].1.push(l);
        }
        for (section, entries) in sections {
            let mut used = Vec::new();
            let mut span = None;
            for l in entries {
                span = l.span.clone();
                if screening && l.key == "enable_sql_injection_protection" {
                    self.push(
                        Severity::Warning,
                        &key_path(section, &l.key),
                        l.span.clone(),
                        "missing, so this rule's requests are not screened for SQL injection, although `add_sql_injection_protection` is on",
                        "add `enable_sql_injection_protection = true` to this rule (or `false` to say it is meant)",
                    );
                    continue;
                }
                used.push(format!("{} = {}", l.key, l.default));
            }
            if used.is_empty() {
                continue;
            }
            self.push(
                Severity::Note,
                section,
                span,
                format!(
                    "leaves out keys ARC2 requires; rampart uses {}",
                    used.join(", ")
                ),
                "nothing to fix; write them out if the file must also load in ARC2 Proxy",
            );
        }
    }

    pub(crate) fn push(
        &mut self,
        severity: Severity,
        key: &str,
        span: Option<Range<usize>>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) {
        let (line, column) = span.map_or((0, 0), |s| self.lines.position(self.src, s.start));
        self.diags.push(Diagnostic {
            severity,
            key: key.to_owned(),
            line,
            column,
            message: message.into(),
            hint: hint.into(),
        });
    }

    /// Records a diagnostic at a known line and column (0: none).
    pub(crate) fn push_at(
        &mut self,
        severity: Severity,
        key: &str,
        line: usize,
        column: usize,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) {
        self.diags.push(Diagnostic {
            severity,
            key: key.to_owned(),
            line,
            column,
            message: message.into(),
            hint: hint.into(),
        });
    }

    /// The 1-based line of a span's start (0 without one).
    pub(crate) fn line_of(&self, span: Option<&Range<usize>>) -> usize {
        span.map_or(0, |s| self.lines.position(self.src, s.start).0)
    }
}
