//! The raw layer: typed, position-aware reads from the parsed TOML document.
//!
//! serde's derive stops at the first type error, but `rampart check` must list every problem at
//! once with its line and column. So the raw layer is the span-preserving `toml_edit` document,
//! read key by key through [`Section`]: each read checks the type and range, records a diagnostic
//! on failure and returns `None`, and every key never read is reported as unknown when the
//! section is finished. Nothing here panics on user input.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::rc::Rc;

use toml_edit::{Item, TableLike, Value};

use crate::diag::{Diagnostic, LineIndex, Severity};
use crate::matching::Pattern;

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
    unknown: Vec<Unknown>,
    /// Sections whose content is never used (a rule whose domain an earlier rule has): their
    /// misspellings are not worth a warning, nor the keys they leave out a note.
    muted: HashSet<String>,
    /// Keys ARC2 requires that a section leaves out, with the default used: one note per
    /// section says them all.
    left_out: Vec<LeftOut>,
    /// Every regular expression compiled so far, by text and case: a file with thousands of
    /// rules often repeats the same few, and compiling is what reading one costs most.
    patterns: HashMap<(String, bool), Result<Pattern, String>>,
}

/// A key ARC2 requires that a section leaves out.
struct LeftOut {
    section: String,
    span: Option<Range<usize>>,
    key: String,
    default: String,
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
struct Unknown {
    key: String,
    /// The section's path (`proxy_rules[1]`) and kind (`proxy_rules`).
    section: String,
    kind: String,
    span: Option<Range<usize>>,
    /// Where the section's header is.
    section_span: Option<Range<usize>>,
    /// The keys written in the same section (shared by its unknown keys).
    present: Rc<[String]>,
}

/// Keys whose misspelling leaves a protection off: an unknown key that is a near miss of one of
/// these, not set in its section, is an error rather than a warning.
const PROTECTIONS: [&str; 16] = [
    "add_sql_injection_protection",
    "enable_sql_injection_protection",
    "disallowed_user_agents",
    "user_agent",
    "allow_ips",
    "deny_ips",
    "add_rate_limiting",
    "rate_limit_per_second",
    "rate_limit_burst",
    "max_body_size",
    "api_key",
    "strict_path_rules",
    "rule_type",
    "path_rules",
    "paths",
    "redirect_to_https",
];

/// Keys that decide where traffic goes: a near miss of one of these, not set in its section,
/// is an error too (`foward_port_http = 18081` would otherwise forward to port 80).
const ROUTING: [&str; 17] = [
    "forward_addr",
    "forward_ipv4",
    "forward_ipv6",
    "forward_port_http",
    "forward_port_https",
    "forward_tls_name",
    "upstreams",
    "routing_rules",
    "routing_method",
    "routing_locations",
    "priority",
    "domain",
    "listen",
    "listen_https",
    "listening_address",
    "listening_port_http",
    "listening_port_https",
];

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
    fn is_muted(&self, section: &str) -> bool {
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

    /// Reports every key that no section read: a key of another level written where TOML
    /// does not put it where the author meant (an error), a near miss of a known key (linked
    /// with the "missing" warning of the key it was meant to be), or an unknown key.
    /// `catalog` holds every kind's keys even when the file has no such section.
    pub(crate) fn resolve_unknown(&mut self, catalog: &HashMap<String, Kind>) {
        let kinds = |k: &str| self.kinds.get(k).into_iter().chain(catalog.get(k));
        // Each kind's known keys, once (the file's and the catalog's mostly coincide).
        let mut known_keys: HashMap<&str, Vec<&'static str>> = HashMap::new();
        let mut out = Vec::new();
        for u in &self.unknown {
            let muted = self.is_muted(&u.section);
            let header_line = self.line_of(u.section_span.as_ref());
            let header = kinds(&u.kind)
                .map(|k| k.header.clone())
                .next()
                .unwrap_or_default();
            // A key of an enclosing level: TOML put it in this section because it comes after
            // this section's header.
            let outer =
                outer_kinds(&u.kind).find(|o| kinds(o).any(|k| k.keys.contains(u.key.as_str())));
            if let Some(o) = outer {
                let after = if header_line > 0 {
                    format!("the `{header}` header at line {header_line}")
                } else {
                    format!("a `{header}` header")
                };
                let (what, hint) = if o.is_empty() {
                    (
                        "a global key".to_owned(),
                        "move it above the first `[[proxy_rules]]`".to_owned(),
                    )
                } else {
                    let oh = kinds(o)
                        .map(|k| k.header.clone())
                        .next()
                        .unwrap_or_default();
                    (
                        format!("a key of `{oh}`"),
                        format!("move it up into its `{oh}`, above the first section inside that rule (`{header}` here)"),
                    )
                };
                out.push((
                    Severity::Error,
                    u,
                    format!("`{}` is {what}, but it comes after {after}, so TOML reads it as part of that section, where it does nothing", u.key),
                    hint,
                ));
                continue;
            }
            if muted {
                continue;
            }
            // A key of a section nested in this one.
            let inner = catalog
                .iter()
                .chain(self.kinds.iter())
                .filter(|(k, _)| {
                    !k.is_empty()
                        && (u.kind.is_empty()
                            || k.starts_with(&u.kind) && k[u.kind.len()..].starts_with('.'))
                })
                .filter(|(_, k)| k.keys.contains(u.key.as_str()))
                .min_by_key(|(name, _)| (name.matches('.').count(), name.as_str()));
            if let Some((_, k)) = inner {
                out.push((
                    Severity::Warning,
                    u,
                    format!(
                        "`{}` is a key of `{}`; here it does nothing",
                        u.key, k.header
                    ),
                    format!("write it below a `{}` header", k.header),
                ));
                continue;
            }
            let known = known_keys.entry(&u.kind).or_insert_with(|| {
                let mut keys: Vec<&'static str> = kinds(&u.kind)
                    .flat_map(|k| k.keys.iter().copied())
                    .collect();
                keys.sort_unstable();
                keys.dedup();
                keys
            });
            match closest(&u.key, known.iter().copied()) {
                Some(meant) if !u.present.iter().any(|p| p == meant) => {
                    let severity = if PROTECTIONS.contains(&meant) || ROUTING.contains(&meant) {
                        Severity::Error
                    } else {
                        Severity::Warning
                    };
                    out.push((
                        severity,
                        u,
                        format!("unknown key; did you mean `{meant}`, which is not set in this section?"),
                        format!("rename it to `{meant}`"),
                    ));
                }
                Some(meant) => out.push((
                    Severity::Warning,
                    u,
                    "unknown key, ignored".to_owned(),
                    format!("did you mean `{meant}`?"),
                )),
                None => out.push((
                    Severity::Warning,
                    u,
                    "unknown key, ignored".to_owned(),
                    "check the spelling against docs/configuration.md".to_owned(),
                )),
            }
        }
        let resolved: Vec<_> = out
            .into_iter()
            .map(|(sev, u, msg, hint)| {
                (
                    sev,
                    key_path(&u.section, &u.key),
                    u.span.clone(),
                    msg,
                    hint,
                    u.section.clone(),
                )
            })
            .collect();
        self.unknown.clear();
        // The "missing" diagnostics and the left-out keys a misspelling may stand for, found
        // by key rather than searched for each misspelling; used ones are dropped at the end.
        let mut missing: HashMap<String, usize> = HashMap::new();
        for (i, d) in self.diags.iter().enumerate() {
            if d.message.starts_with("missing") {
                missing.entry(d.key.clone()).or_insert(i);
            }
        }
        let mut left_out: HashMap<(&str, &str), usize> = HashMap::new();
        for (i, l) in self.left_out.iter().enumerate() {
            left_out
                .entry((l.section.as_str(), l.key.as_str()))
                .or_insert(i);
        }
        let mut merged_diags = HashSet::new();
        let mut merged_left_out = HashSet::new();
        let mut new = Vec::new();
        for (severity, key, span, mut message, hint, section) in resolved {
            // "did you mean `x`, which is not set": the warning that `x` is missing says the
            // same thing from the other side; one message says both.
            if let Some(meant) = message
                .strip_prefix("unknown key; did you mean `")
                .and_then(|m| m.split('`').next())
                .map(str::to_owned)
            {
                let missing_key = key_path(&section, &meant);
                if let Some(&i) = missing
                    .get(&missing_key)
                    .filter(|i| !merged_diags.contains(*i))
                {
                    merged_diags.insert(i);
                    message = format!(
                        "unknown key; did you mean `{meant}`? `{meant}` is {}",
                        self.diags[i].message
                    );
                } else if let Some(&i) = left_out
                    .get(&(section.as_str(), meant.as_str()))
                    .filter(|i| !merged_left_out.contains(*i))
                {
                    merged_left_out.insert(i);
                    message = format!(
                        "unknown key; did you mean `{meant}`? `{meant}` is not set, so rampart uses `{meant} = {}`",
                        self.left_out[i].default
                    );
                }
            }
            new.push((severity, key, span, message, hint));
        }
        drop(left_out);
        let mut i = 0;
        self.diags.retain(|_| {
            i += 1;
            !merged_diags.contains(&(i - 1))
        });
        let mut i = 0;
        self.left_out.retain(|_| {
            i += 1;
            !merged_left_out.contains(&(i - 1))
        });
        for (severity, key, span, message, hint) in new {
            self.push(severity, &key, span, message, hint);
        }
    }
}

/// The dotted path of `key` inside the section at `path`.
fn key_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// The kinds enclosing `kind`, innermost first: `proxy_rules.path_rules` → `proxy_rules`, `""`.
fn outer_kinds(kind: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(kind);
    std::iter::from_fn(move || {
        let k = rest?;
        if k.is_empty() {
            rest = None;
            return None;
        }
        let outer = k.rfind('.').map_or("", |i| &k[..i]);
        rest = Some(outer);
        Some(outer)
    })
}

/// A section path without its indices: `proxy_rules[2].path_rules[0]` → `proxy_rules.path_rules`.
pub(crate) fn kind_of(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut depth = 0;
    for c in path.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// A value read from the file together with where it was written.
#[derive(Debug, Clone)]
pub(crate) struct At<T> {
    pub(crate) value: T,
    pub(crate) key: String,
    pub(crate) span: Option<Range<usize>>,
}

/// One entry of `listen`/`listen_https`.
pub(crate) struct ListenEntry {
    pub(crate) address: At<String>,
    /// The entry's own `proxy_protocol` (`None`: the global one applies).
    pub(crate) proxy_protocol: Option<At<bool>>,
}

fn entry_missing_address(sink: &mut Sink<'_>, path: &str, span: Option<Range<usize>>) {
    sink.push(
        Severity::Error,
        path,
        span,
        "a listen entry needs an `address`",
        "write { address = \"IP:PORT\", proxy_protocol = true }",
    );
}

/// One TOML table (top level, `[[proxy_rules]]`, an inline table, ...) being read.
pub(crate) struct Section<'d> {
    table: &'d dyn TableLike,
    /// Dotted path of this table, e.g. `proxy_rules[2]`; empty at the top level.
    path: String,
    span: Option<Range<usize>>,
    seen: HashSet<&'static str>,
    /// How its header is written: `[[proxy_rules]]`, `[proxy_rules.routing_rules]`; empty at
    /// the top level.
    header: String,
    /// Its keys are names the file chooses (header names, statuses): none is unknown.
    open: bool,
}

/// The TOML type names used in messages.
fn type_name(item: &Item) -> &'static str {
    match item {
        Item::None => "nothing",
        Item::Table(_) => "a table",
        Item::ArrayOfTables(_) => "an array of tables",
        Item::Value(v) => match v {
            Value::String(_) => "a string",
            Value::Integer(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Boolean(_) => "a boolean",
            Value::Datetime(_) => "a date-time",
            Value::Array(_) => "an array",
            Value::InlineTable(_) => "an inline table",
        },
    }
}

impl<'d> Section<'d> {
    pub(crate) fn new(table: &'d dyn TableLike, path: String, span: Option<Range<usize>>) -> Self {
        let header = match kind_of(&path) {
            k if k.is_empty() => k,
            k => format!("[{k}]"),
        };
        Section {
            table,
            path,
            span,
            seen: HashSet::new(),
            header,
            open: false,
        }
    }

    /// Every key of this table with its value and where it was written, for tables whose keys
    /// are names the file chooses (header names, statuses); none of them is then unknown.
    pub(crate) fn entries(&mut self) -> Vec<(&'d str, At<&'d Item>)> {
        self.open = true;
        self.table
            .iter()
            .map(|(k, item)| {
                let span = self
                    .table
                    .get_key_value(k)
                    .and_then(|(key, _)| key.span())
                    .or_else(|| item.span());
                let at = At {
                    value: item,
                    key: self.key_path(k),
                    span,
                };
                (k, at)
            })
            .collect()
    }

    /// An entry of an array of tables (`[[proxy_rules]]`).
    fn entry(table: &'d dyn TableLike, path: String, span: Option<Range<usize>>) -> Self {
        let mut s = Section::new(table, path, span);
        s.header = format!("[{}]", s.header);
        s
    }

    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    pub(crate) fn span(&self) -> Option<Range<usize>> {
        self.span.clone()
    }

    /// The dotted path of `key` inside this section.
    pub(crate) fn key_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// Whether `key` is written in this section (marks it as known).
    pub(crate) fn has(&mut self, key: &'static str) -> bool {
        self.seen.insert(key);
        self.table.get(key).is_some()
    }

    fn item(&mut self, key: &'static str) -> Option<(&'d Item, Option<Range<usize>>)> {
        self.seen.insert(key);
        let (k, item) = self.table.get_key_value(key)?;
        let span = item.span().or_else(|| k.span());
        Some((item, span))
    }

    fn wrong_type(
        &self,
        sink: &mut Sink<'_>,
        key: &str,
        item: &Item,
        span: Option<Range<usize>>,
        want: &str,
        example: &str,
    ) {
        sink.push(
            Severity::Error,
            &self.key_path(key),
            span,
            format!("expected {want}, found {}", type_name(item)),
            format!("write it as `{key} = {example}`"),
        );
    }

    /// Records that a key this section requires is missing.
    pub(crate) fn missing(
        &self,
        sink: &mut Sink<'_>,
        key: &str,
        severity: Severity,
        message: &str,
        hint: &str,
    ) {
        sink.push(severity, &self.key_path(key), self.span(), message, hint);
    }

    pub(crate) fn bool(&mut self, sink: &mut Sink<'_>, key: &'static str) -> Option<At<bool>> {
        let (item, span) = self.item(key)?;
        match item.as_value() {
            Some(Value::Boolean(b)) => Some(At {
                value: *b.value(),
                key: self.key_path(key),
                span,
            }),
            _ => {
                let example = bool_meant(item);
                self.wrong_type(sink, key, item, span, "a boolean (true or false)", example);
                None
            }
        }
    }

    pub(crate) fn string(&mut self, sink: &mut Sink<'_>, key: &'static str) -> Option<At<String>> {
        let (item, span) = self.item(key)?;
        match item.as_value() {
            Some(Value::String(s)) => Some(At {
                value: s.value().clone(),
                key: self.key_path(key),
                span,
            }),
            _ => {
                // `forward_port = 80` for a string key: the example is the same text quoted.
                let example = match item.as_value() {
                    Some(v @ (Value::Integer(_) | Value::Float(_) | Value::Boolean(_))) => {
                        toml_string(v.to_string().trim())
                    }
                    _ => "\"...\"".to_owned(),
                };
                self.wrong_type(sink, key, item, span, "a string", &example);
                None
            }
        }
    }

    /// A string or a boolean (`cache_disk = "/dir"` or `cache_disk = false`).
    pub(crate) fn string_or_bool(
        &mut self,
        sink: &mut Sink<'_>,
        key: &'static str,
        example: &str,
    ) -> Option<At<Result<String, bool>>> {
        let (item, span) = self.item(key)?;
        let value = match item.as_value() {
            Some(Value::String(s)) => Ok(s.value().clone()),
            Some(Value::Boolean(b)) => Err(*b.value()),
            _ => {
                self.wrong_type(sink, key, item, span, "a string or a boolean", example);
                return None;
            }
        };
        Some(At {
            value,
            key: self.key_path(key),
            span,
        })
    }

    /// A lifetime in seconds (`expires`), at most [`MAX_LIFETIME`]: an integer, a duration string (`"7d"`, `"1h30m"`), or
    /// `"off"` (`Some(At { value: None })`); a wrong value is reported and `None`.
    pub(crate) fn seconds_or_off(
        &mut self,
        sink: &mut Sink<'_>,
        key: &'static str,
    ) -> Option<At<Option<u64>>> {
        let (item, span) = self.item(key)?;
        let value = match item.as_value() {
            Some(Value::Integer(i)) if *i.value() >= 0 => Some(Some(*i.value() as u64)),
            Some(Value::String(s)) if s.value().trim().eq_ignore_ascii_case("off") => Some(None),
            Some(Value::String(s)) => duration_millis(s.value().trim())
                .filter(|ms| *ms >= 0 && ms % 1000 == 0)
                .map(|ms| Some((ms / 1000) as u64)),
            _ => None,
        }
        .filter(|v| v.is_none_or(|secs| secs <= MAX_LIFETIME));
        let Some(value) = value else {
            let want = "a lifetime up to 10 years: seconds, a duration such as \"7d\" or \"12h\", or \"off\"";
            match item.as_value() {
                Some(Value::String(s)) => sink.push(
                    Severity::Error,
                    &self.key_path(key),
                    span,
                    format!("{:?} is not {want}", s.value()),
                    format!("write it as `{key} = \"7d\"` (units: s, m, h, d, w)"),
                ),
                _ => self.wrong_type(sink, key, item, span, want, "\"7d\""),
            }
            return None;
        };
        Some(At {
            value,
            key: self.key_path(key),
            span,
        })
    }

    /// A string, or an integer given as its decimal text (for sizes such as `cache_memory`).
    pub(crate) fn string_or_int(
        &mut self,
        sink: &mut Sink<'_>,
        key: &'static str,
    ) -> Option<At<String>> {
        let (item, span) = self.item(key)?;
        let value = match item.as_value() {
            Some(Value::String(s)) => s.value().clone(),
            Some(Value::Integer(i)) if *i.value() >= 0 => i.value().to_string(),
            _ => {
                self.wrong_type(
                    sink,
                    key,
                    item,
                    span,
                    "a size (bytes, or a string such as \"512MiB\")",
                    "\"512MiB\"",
                );
                return None;
            }
        };
        Some(At {
            value,
            key: self.key_path(key),
            span,
        })
    }

    /// An integer in `min..=max`; `unit` names the Rust width or meaning for the message.
    pub(crate) fn int(
        &mut self,
        sink: &mut Sink<'_>,
        key: &'static str,
        min: i64,
        max: i64,
    ) -> Option<At<i64>> {
        let (item, span) = self.item(key)?;
        match item.as_value() {
            Some(Value::Integer(i)) => {
                let v = *i.value();
                if v < min || v > max {
                    sink.push(
                        Severity::Error,
                        &self.key_path(key),
                        span,
                        format!("{v} is out of range"),
                        format!("use a whole number from {min} to {max}"),
                    );
                    None
                } else {
                    Some(At {
                        value: v,
                        key: self.key_path(key),
                        span,
                    })
                }
            }
            _ => {
                // `"80"` in quotes: the example is the same number without them; `"1h"` for
                // a key in seconds: the number of seconds it means.
                let example = item
                    .as_str()
                    .and_then(|t| {
                        let t = t.trim();
                        t.parse::<i64>().ok().or_else(|| duration_in(key, t))
                    })
                    .filter(|v| (min..=max).contains(v))
                    .unwrap_or(min.max(0));
                self.wrong_type(sink, key, item, span, "an integer", &example.to_string());
                None
            }
        }
    }

    /// An array of strings; non-string elements are reported one by one and skipped.
    pub(crate) fn strings(
        &mut self,
        sink: &mut Sink<'_>,
        key: &'static str,
    ) -> Option<At<Vec<At<String>>>> {
        let (item, span) = self.item(key)?;
        let Some(Value::Array(arr)) = item.as_value() else {
            // `paths = "/"`: the example is the value given, in an array.
            let example = match item.as_value() {
                Some(Value::String(one)) => format!("[{}]", toml_string(one.value())),
                _ => "[\"...\"]".to_owned(),
            };
            self.wrong_type(sink, key, item, span, "an array of strings", &example);
            return None;
        };
        let mut out = Vec::with_capacity(arr.len());
        for (i, v) in arr.iter().enumerate() {
            let path = format!("{}[{i}]", self.key_path(key));
            match v {
                Value::String(s) => out.push(At {
                    value: s.value().clone(),
                    key: path,
                    span: v.span(),
                }),
                other => sink.push(
                    Severity::Error,
                    &path,
                    other.span(),
                    format!(
                        "expected a string, found {}",
                        type_name(&Item::Value(other.clone()))
                    ),
                    "quote the value",
                ),
            }
        }
        Some(At {
            value: out,
            key: self.key_path(key),
            span,
        })
    }

    /// A list of listen addresses: each a string (`"IP:PORT"`) or an inline table with
    /// `address` and a per-listener `proxy_protocol` switch. Bad entries are reported and
    /// skipped.
    pub(crate) fn listen_entries(
        &mut self,
        sink: &mut Sink<'_>,
        key: &'static str,
    ) -> Option<At<Vec<ListenEntry>>> {
        let (item, span) = self.item(key)?;
        let Some(Value::Array(arr)) = item.as_value() else {
            // `listen = "127.0.0.1:8080"`: the example is the address given, in an array.
            let example = match item.as_value() {
                Some(Value::String(one)) => format!("[{}]", toml_string(one.value())),
                _ => "[\"127.0.0.1:8080\"]".to_owned(),
            };
            self.wrong_type(sink, key, item, span, "an array of addresses", &example);
            return None;
        };
        let mut out = Vec::with_capacity(arr.len());
        for (i, v) in arr.iter().enumerate() {
            let path = format!("{}[{i}]", self.key_path(key));
            match v {
                Value::String(s) => out.push(ListenEntry {
                    address: At {
                        value: s.value().clone(),
                        key: path,
                        span: v.span(),
                    },
                    proxy_protocol: None,
                }),
                Value::InlineTable(t) => {
                    let mut entry = Section::new(t, path.clone(), v.span());
                    let address = entry.string(sink, "address");
                    let proxy_protocol = entry.bool(sink, "proxy_protocol");
                    entry.finish(sink);
                    match address {
                        Some(address) => out.push(ListenEntry {
                            address,
                            proxy_protocol,
                        }),
                        None => entry_missing_address(sink, &path, v.span()),
                    }
                }
                other => sink.push(
                    Severity::Error,
                    &path,
                    other.span(),
                    format!(
                        "expected an address or an inline table, found {}",
                        type_name(&Item::Value(other.clone()))
                    ),
                    "write \"IP:PORT\" or { address = \"IP:PORT\", proxy_protocol = true }",
                ),
            }
        }
        Some(At {
            value: out,
            key: self.key_path(key),
            span,
        })
    }

    /// A single sub-table (`[a.b]` or an inline table).
    pub(crate) fn table(&mut self, sink: &mut Sink<'_>, key: &'static str) -> Option<Section<'d>> {
        let (item, span) = self.item(key)?;
        match item.as_table_like() {
            Some(t) if !matches!(item, Item::ArrayOfTables(_)) => {
                Some(Section::new(t, self.key_path(key), span))
            }
            _ => {
                sink.push(
                    Severity::Error,
                    &self.key_path(key),
                    span,
                    format!("expected a table, found {}", type_name(item)),
                    format!(
                        "write it as a `[{}]` section (below the header of the section it belongs to)",
                        kind_of(&self.key_path(key))
                    ),
                );
                None
            }
        }
    }

    /// An array of tables (`[[a.b]]` or an array of inline tables).
    pub(crate) fn tables(
        &mut self,
        sink: &mut Sink<'_>,
        key: &'static str,
    ) -> Option<Vec<Section<'d>>> {
        let (item, span) = self.item(key)?;
        let base = self.key_path(key);
        match item {
            Item::ArrayOfTables(aot) => Some(
                aot.iter()
                    .enumerate()
                    .map(|(i, t)| Section::entry(t, format!("{base}[{i}]"), t.span()))
                    .collect(),
            ),
            Item::Value(Value::Array(arr)) => {
                let mut out = Vec::new();
                for (i, v) in arr.iter().enumerate() {
                    match v {
                        Value::InlineTable(t) => {
                            out.push(Section::entry(t, format!("{base}[{i}]"), v.span()))
                        }
                        other => sink.push(
                            Severity::Error,
                            &format!("{base}[{i}]"),
                            other.span(),
                            "expected a table",
                            format!("write each entry as a `[[{}]]` section", kind_of(&base)),
                        ),
                    }
                }
                Some(out)
            }
            _ => {
                sink.push(
                    Severity::Error,
                    &base,
                    span,
                    format!("expected an array of tables, found {}", type_name(item)),
                    format!(
                        "write each entry as a `[[{}]]` section (two brackets), below the header of the section it belongs to",
                        kind_of(&base)
                    ),
                );
                None
            }
        }
    }

    /// Records the keys this section reads, and every key in it that no reader asked for
    /// (reported by [`Sink::resolve_unknown`] once the whole file is read).
    pub(crate) fn finish(self, sink: &mut Sink<'_>) {
        if self.open {
            return;
        }
        let kind = kind_of(&self.path);
        let mut present: Option<Rc<[String]>> = None;
        for (k, item) in self.table.iter() {
            if self.seen.contains(k) {
                continue;
            }
            let present = present
                .get_or_insert_with(|| self.table.iter().map(|(k, _)| k.to_owned()).collect())
                .clone();
            let span = self
                .table
                .get_key_value(k)
                .and_then(|(key, _)| key.span())
                .or_else(|| item.span());
            sink.unknown.push(Unknown {
                key: k.to_owned(),
                section: self.path.clone(),
                kind: kind.clone(),
                span,
                section_span: self.span.clone(),
                present,
            });
        }
        let entry = sink.kinds.entry(kind).or_default();
        entry.header = self.header;
        entry.keys.extend(self.seen);
    }
}

/// The known key nearest to `unknown` when it is a likely misspelling: at most 2 edits
/// (insertions, deletions, substitutions, swaps of neighbours), and fewer than a third of its
/// length.
/// The boolean a value of another type means: `"false"` in quotes, `"no"`, `0` → `false`.
pub(crate) fn bool_meant(item: &Item) -> &'static str {
    let word = match item.as_value() {
        Some(Value::String(w)) => w.value().trim().to_ascii_lowercase(),
        Some(Value::Integer(i)) => i.value().to_string(),
        _ => String::new(),
    };
    match word.as_str() {
        "false" | "no" | "off" | "0" | "n" => "false",
        _ => "true",
    }
}

/// The longest lifetime `expires` gives clients: ten years (NGINX's `expires max` is about as
/// far).
pub(crate) const MAX_LIFETIME: u64 = 10 * 365 * 86_400;

/// A duration written as text (`"1h"`, `"10m"`, `"1h30m"`, `"2d"`) in the unit of `key`: seconds
/// for a key in seconds, milliseconds for one in `_ms`; `None` for other keys or other text.
fn duration_in(key: &str, text: &str) -> Option<i64> {
    let per_second = if key.ends_with("_ms") {
        1000
    } else if ["second", "_sec", "timeout", "interval", "_age"]
        .iter()
        .any(|w| key.contains(w))
    {
        1
    } else {
        return None;
    };
    let total = duration_millis(text)?;
    if per_second == 1000 {
        Some(total)
    } else {
        (total % 1000 == 0).then_some(total / 1000)
    }
}

/// A duration written as text (`"1h"`, `"10m"`, `"1h30m"`, `"2d"`, `"500ms"`) in milliseconds.
pub(crate) fn duration_millis(text: &str) -> Option<i64> {
    let mut total: i64 = 0;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_end = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let (unit, after) = rest.split_at(unit_end);
        let ms: i64 = match unit {
            "ms" => 1,
            "s" | "sec" => 1000,
            "m" | "min" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(ms)?)?;
        rest = after.trim_start();
    }
    Some(total)
}

fn closest<'k>(unknown: &str, known: impl Iterator<Item = &'k str>) -> Option<&'k str> {
    let len = unknown.chars().count();
    let limit = 2.min(len / 3);
    let lower = unknown.to_ascii_lowercase();
    known
        .filter(|k| *k != unknown)
        // Each edit changes the length by one at most: most keys are ruled out by it.
        .filter(|k| k.chars().count().abs_diff(len) <= limit)
        .map(|k| (edits(&lower, k, limit), k))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, k)| k)
}

/// Optimal string alignment distance (Levenshtein with adjacent swaps), or `limit + 1` as soon
/// as it is known to be above `limit`.
fn edits(a: &str, b: &str, limit: usize) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // Three rows of the table: i - 2, i - 1 and i.
    let mut before = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut row = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        row[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (prev[j] + 1).min(row[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(before[j - 2] + 1);
            }
            row[j] = v;
        }
        // Every path to the end crosses this row or the one before (a swap skips one).
        if row.iter().chain(&prev).all(|&v| v > limit) {
            return limit + 1;
        }
        // The oldest row is written over as the next one.
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut row);
    }
    prev[b.len()]
}

/// `text` as a TOML basic string, quotes included (for a fix the reader can paste).
pub(crate) fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspellings_find_their_key() {
        let known = ["forward_ipv4", "forward_port_http", "domain", "paths"];
        assert_eq!(
            closest("foward_ipv4", known.into_iter()),
            Some("forward_ipv4")
        );
        assert_eq!(
            closest("forward_ipv6", known.into_iter()),
            Some("forward_ipv4")
        );
        assert_eq!(closest("Domain", known.into_iter()), Some("domain"));
        assert_eq!(closest("pahts", known.into_iter()), Some("paths"));
        assert_eq!(closest("surprise", known.into_iter()), None);
        assert_eq!(
            closest("ab", ["a"].into_iter()),
            None,
            "short keys are not guessed"
        );
    }
}
