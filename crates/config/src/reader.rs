//! The raw layer: typed, position-aware reads from the parsed TOML document.
//!
//! serde's derive stops at the first type error, but `rampart check` must list every problem at
//! once with its line and column. So the raw layer is the span-preserving `toml_edit` document,
//! read key by key through [`Section`]: each read checks the type and range, records a diagnostic
//! on failure and returns `None`, and every key never read is reported as unknown when the
//! section is finished. Nothing here panics on user input.

use std::collections::HashSet;
use std::ops::Range;

use toml_edit::{Item, TableLike, Value};

use crate::diag::{Diagnostic, LineIndex, Severity};

/// Collects diagnostics and turns spans into positions.
pub(crate) struct Sink<'s> {
    src: &'s str,
    lines: LineIndex,
    pub(crate) diags: Vec<Diagnostic>,
}

impl<'s> Sink<'s> {
    pub(crate) fn new(src: &'s str) -> Self {
        Sink {
            src,
            lines: LineIndex::new(src),
            diags: Vec::new(),
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
        Section {
            table,
            path,
            span,
            seen: HashSet::new(),
        }
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
                // `"false"` in quotes: the example is the same word without them.
                let example = item
                    .as_str()
                    .map(str::trim)
                    .filter(|w| matches!(*w, "true" | "false"))
                    .unwrap_or("true");
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
                self.wrong_type(sink, key, item, span, "a string", "\"...\"");
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
                // `"80"` in quotes: the example is the same number without them.
                let example = item
                    .as_str()
                    .and_then(|t| t.trim().parse::<i64>().ok())
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
            self.wrong_type(sink, key, item, span, "an array of strings", "[\"...\"]");
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
            self.wrong_type(
                sink,
                key,
                item,
                span,
                "an array of addresses",
                "[\"127.0.0.1:8080\"]",
            );
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
                    format!("write it as a `[{}]` section", self.key_path(key)),
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
                    .map(|(i, t)| Section::new(t, format!("{base}[{i}]"), t.span()))
                    .collect(),
            ),
            Item::Value(Value::Array(arr)) => {
                let mut out = Vec::new();
                for (i, v) in arr.iter().enumerate() {
                    match v {
                        Value::InlineTable(t) => {
                            out.push(Section::new(t, format!("{base}[{i}]"), v.span()))
                        }
                        other => sink.push(
                            Severity::Error,
                            &format!("{base}[{i}]"),
                            other.span(),
                            "expected a table",
                            format!("write each entry as a [[{base}]] section"),
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
                    format!("remove this line and write each entry as a `[[{base}]]` section"),
                );
                None
            }
        }
    }

    /// Reports every key in this section that no reader asked for.
    pub(crate) fn finish(self, sink: &mut Sink<'_>) {
        for (k, item) in self.table.iter() {
            if self.seen.contains(k) {
                continue;
            }
            let span = self
                .table
                .get_key_value(k)
                .and_then(|(key, _)| key.span())
                .or_else(|| item.span());
            let hint = match closest(k, self.seen.iter().copied()) {
                Some(known) => format!("did you mean `{known}`?"),
                None => "check the spelling against docs/configuration.md".to_owned(),
            };
            sink.push(
                Severity::Warning,
                &self.key_path(k),
                span,
                "unknown key, ignored",
                hint,
            );
        }
    }
}

/// The known key nearest to `unknown` when it is a likely misspelling: at most 2 edits
/// (insertions, deletions, substitutions, swaps of neighbours), and fewer than a third of its
/// length.
fn closest<'k>(unknown: &str, known: impl Iterator<Item = &'k str>) -> Option<&'k str> {
    let limit = 2.min(unknown.chars().count() / 3);
    known
        .filter(|k| *k != unknown)
        .map(|k| (edits(&unknown.to_ascii_lowercase(), k), k))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, k)| k)
}

/// Optimal string alignment distance (Levenshtein with adjacent swaps).
fn edits(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
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
