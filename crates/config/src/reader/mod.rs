//! The raw layer: typed, position-aware reads from the parsed TOML document.
//!
//! serde's derive stops at the first type error, but `rampart check` must list every problem at
//! once with its line and column. So the raw layer is the span-preserving `toml_edit` document,
//! read key by key through [`Section`]: each read checks the type and range, records a diagnostic
//! on failure and returns `None`, and every key never read is reported as unknown when the
//! section is finished. Nothing here panics on user input.
//!
//! [`sink`] collects the diagnostics, [`section`] reads one table key by key, [`unknown`] reports
//! the keys no section read, and [`scalar`] holds the value conversions they share.

use std::ops::Range;

mod scalar;
mod section;
mod sink;
mod unknown;

pub(crate) use scalar::{bool_meant, toml_string};
pub(crate) use section::{ListenEntry, Section};
pub(crate) use sink::{Kind, Sink};

/// The dotted path of `key` inside the section at `path`.
fn key_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
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
