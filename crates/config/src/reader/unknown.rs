//! Keys no section read: a key of another level written where TOML does not put it where the
//! author meant, a near miss of a known key, or a key rampart does not know.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use crate::diag::Severity;

use super::key_path;
use super::sink::{Kind, Sink, Unknown};

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

/// An unknown key's diagnostic, before it is merged with the "missing" one it may stand for.
struct Finding {
    severity: Severity,
    /// The key's dotted path.
    key: String,
    span: Option<Range<usize>>,
    /// The path of the section it is written in.
    section: String,
    message: String,
    hint: String,
}

/// Every kind's keys: those the file's sections read and the catalog's (every kind, even one
/// the file has no section of).
struct Levels<'a> {
    file: &'a HashMap<String, Kind>,
    catalog: &'a HashMap<String, Kind>,
}

impl<'a> Levels<'a> {
    /// What `kind` reads, the file's first.
    fn of(
        &self,
        kind: &str,
    ) -> std::iter::Chain<std::option::IntoIter<&'a Kind>, std::option::IntoIter<&'a Kind>> {
        self.file
            .get(kind)
            .into_iter()
            .chain(self.catalog.get(kind))
    }

    /// How the header of `kind` is written.
    fn header(&self, kind: &str) -> String {
        self.of(kind)
            .map(|k| k.header.clone())
            .next()
            .unwrap_or_default()
    }

    /// The keys `kind` reads, sorted, each once.
    fn keys(&self, kind: &str) -> Vec<&'static str> {
        let mut keys: Vec<&'static str> =
            self.of(kind).flat_map(|k| k.keys.iter().copied()).collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }
}

/// A diagnostic's severity, message and hint.
type Said = (Severity, String, String);

impl Sink<'_> {
    /// Reports every key that no section read: a key of another level written where TOML
    /// does not put it where the author meant (an error), a near miss of a known key (linked
    /// with the "missing" warning of the key it was meant to be), or an unknown key.
    /// `catalog` holds every kind's keys even when the file has no such section.
    pub(crate) fn resolve_unknown(&mut self, catalog: &HashMap<String, Kind>) {
        let unknown = std::mem::take(&mut self.unknown);
        let findings = self.findings(&unknown, catalog);
        for f in self.merge_missing(findings) {
            self.push(f.severity, &f.key, f.span, f.message, f.hint);
        }
    }

    /// What each unknown key is, in the order they were found; keys of muted sections are
    /// reported only when they belong to an enclosing level.
    fn findings(&self, unknown: &[Unknown], catalog: &HashMap<String, Kind>) -> Vec<Finding> {
        let levels = Levels {
            file: &self.kinds,
            catalog,
        };
        // Each kind's known keys, once (the file's and the catalog's mostly coincide).
        let mut known_keys: HashMap<&str, Vec<&'static str>> = HashMap::new();
        let mut out = Vec::new();
        for u in unknown {
            let said = if let Some(said) = self.outer_level(&levels, u) {
                said
            } else if self.is_muted(&u.section) {
                continue;
            } else if let Some(said) = inner_level(&levels, u) {
                said
            } else {
                let known = known_keys
                    .entry(&u.kind)
                    .or_insert_with(|| levels.keys(&u.kind));
                misspelling(u, known)
            };
            let (severity, message, hint) = said;
            out.push(Finding {
                severity,
                key: key_path(&u.section, &u.key),
                span: u.span.clone(),
                section: u.section.clone(),
                message,
                hint,
            });
        }
        out
    }

    /// A key of an enclosing level: TOML put it in this section because it comes after this
    /// section's header.
    fn outer_level(&self, levels: &Levels<'_>, u: &Unknown) -> Option<Said> {
        let o =
            outer_kinds(&u.kind).find(|o| levels.of(o).any(|k| k.keys.contains(u.key.as_str())))?;
        let header_line = self.line_of(u.section_span.as_ref());
        let header = levels.header(&u.kind);
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
            let oh = levels.header(o);
            (
                format!("a key of `{oh}`"),
                format!("move it up into its `{oh}`, above the first section inside that rule (`{header}` here)"),
            )
        };
        Some((
            Severity::Error,
            format!("`{}` is {what}, but it comes after {after}, so TOML reads it as part of that section, where it does nothing", u.key),
            hint,
        ))
    }

    /// Merges "did you mean `x`, which is not set" with the warning that `x` is missing (or the
    /// note that rampart uses a default for it): they say the same thing from two sides, so one
    /// message says both, and the merged diagnostic or left-out key is dropped.
    fn merge_missing(&mut self, findings: Vec<Finding>) -> Vec<Finding> {
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
        let mut out = Vec::with_capacity(findings.len());
        for mut f in findings {
            if let Some(meant) = f
                .message
                .strip_prefix("unknown key; did you mean `")
                .and_then(|m| m.split('`').next())
                .map(str::to_owned)
            {
                let missing_key = key_path(&f.section, &meant);
                if let Some(&i) = missing
                    .get(&missing_key)
                    .filter(|i| !merged_diags.contains(*i))
                {
                    merged_diags.insert(i);
                    f.message = format!(
                        "unknown key; did you mean `{meant}`? `{meant}` is {}",
                        self.diags[i].message
                    );
                } else if let Some(&i) = left_out
                    .get(&(f.section.as_str(), meant.as_str()))
                    .filter(|i| !merged_left_out.contains(*i))
                {
                    merged_left_out.insert(i);
                    f.message = format!(
                        "unknown key; did you mean `{meant}`? `{meant}` is not set, so rampart uses `{meant} = {}`",
                        self.left_out[i].default
                    );
                }
            }
            out.push(f);
        }
        drop(left_out);
        drop_indices(&mut self.diags, &merged_diags);
        drop_indices(&mut self.left_out, &merged_left_out);
        out
    }
}

/// Removes the elements of `v` at `indices`.
fn drop_indices<T>(v: &mut Vec<T>, indices: &HashSet<usize>) {
    let mut i = 0;
    v.retain(|_| {
        i += 1;
        !indices.contains(&(i - 1))
    });
}

/// A key of a section nested in this one, written above that section's header.
fn inner_level(levels: &Levels<'_>, u: &Unknown) -> Option<Said> {
    let (_, k) = levels
        .catalog
        .iter()
        .chain(levels.file.iter())
        .filter(|(k, _)| {
            !k.is_empty()
                && (u.kind.is_empty()
                    || k.starts_with(&u.kind) && k[u.kind.len()..].starts_with('.'))
        })
        .filter(|(_, k)| k.keys.contains(u.key.as_str()))
        .min_by_key(|(name, _)| (name.matches('.').count(), name.as_str()))?;
    Some((
        Severity::Warning,
        format!(
            "`{}` is a key of `{}`; here it does nothing",
            u.key, k.header
        ),
        format!("write it below a `{}` header", k.header),
    ))
}

/// A near miss of one of the section's `known` keys, or a key rampart does not know. A near
/// miss of a protection or routing key that the section does not set is an error.
fn misspelling(u: &Unknown, known: &[&'static str]) -> Said {
    match closest(&u.key, known.iter().copied()) {
        Some(meant) if !u.present.iter().any(|p| p == meant) => {
            let severity = if PROTECTIONS.contains(&meant) || ROUTING.contains(&meant) {
                Severity::Error
            } else {
                Severity::Warning
            };
            (
                severity,
                format!("unknown key; did you mean `{meant}`, which is not set in this section?"),
                format!("rename it to `{meant}`"),
            )
        }
        Some(meant) => (
            Severity::Warning,
            "unknown key, ignored".to_owned(),
            format!("did you mean `{meant}`?"),
        ),
        None => (
            Severity::Warning,
            "unknown key, ignored".to_owned(),
            "check the spelling against docs/configuration.md".to_owned(),
        ),
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

/// The known key nearest to `unknown` when it is a likely misspelling: at most 2 edits
/// (insertions, deletions, substitutions, swaps of neighbours), and fewer than a third of its
/// length.
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
