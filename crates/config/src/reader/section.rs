//! One TOML table read key by key: each read checks the type and range, records a diagnostic
//! on failure and returns `None`; finishing the section records the keys it did not read.

use std::collections::HashSet;
use std::ops::Range;
use std::rc::Rc;

use toml_edit::{Item, TableLike, Value};

use crate::diag::Severity;

use super::scalar::{bool_meant, duration_in, duration_millis, toml_string, MAX_LIFETIME};
use super::sink::{Sink, Unknown};
use super::{kind_of, At};

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

    /// A fraction from 0 to 1 (`0.05`, or `0` and `1` written as integers).
    pub(crate) fn fraction(&mut self, sink: &mut Sink<'_>, key: &'static str) -> Option<At<f64>> {
        let (item, span) = self.item(key)?;
        let v = match item.as_value() {
            Some(Value::Float(f)) => *f.value(),
            Some(Value::Integer(i)) => *i.value() as f64,
            _ => {
                // `"10%"`: the example is the fraction it means.
                let example = item
                    .as_str()
                    .and_then(|t| t.trim().strip_suffix('%')?.trim().parse::<f64>().ok())
                    .filter(|p| (0.0..=100.0).contains(p))
                    .map_or("0.1".to_owned(), |p| (p / 100.0).to_string());
                self.wrong_type(sink, key, item, span, "a number from 0 to 1", &example);
                return None;
            }
        };
        if !(0.0..=1.0).contains(&v) {
            sink.push(
                Severity::Error,
                &self.key_path(key),
                span,
                format!("{v} is out of range"),
                "use a number from 0 (none) to 1 (all), e.g. 0.1 for a tenth",
            );
            return None;
        }
        Some(At {
            value: v,
            key: self.key_path(key),
            span,
        })
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
