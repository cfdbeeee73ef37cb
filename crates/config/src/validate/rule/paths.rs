//! A rule's paths: `paths` (where it applies) and `[[...path_rules]]` (what each path may do,
//! and for how long it is cached).

use super::{blacklist_bypasses, match_type, parse_rule_type};
use crate::model::{PathMatch, PathRuleConfig, RuleType};
use crate::reader::{At, Section, Sink};
use crate::validate::{error, lenient, warn, I64};
use crate::Severity;

/// `paths`: the path prefixes the rule applies to (`/` when absent or empty).
pub(super) fn read_paths(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Vec<String> {
    match s.strings(sink, "paths") {
        Some(list) => {
            for p in &list.value {
                if !p.value.starts_with('/') {
                    warn(
                        sink,
                        p,
                        format!(
                            "path {:?} does not start with `/` and matches no request",
                            p.value
                        ),
                        "start it with `/`",
                    );
                }
            }
            let v: Vec<String> = list.value.into_iter().map(|p| p.value).collect();
            if v.is_empty() {
                vec!["/".to_owned()]
            } else {
                v
            }
        }
        None => vec!["/".to_owned()],
    }
}

/// `[[...path_rules]]`; `None` when one is invalid (every one is reported). A path rule
/// without `max_age_seconds` gets the rule's, `max_age_seconds`.
pub(super) fn read_path_rules(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    max_age_seconds: u64,
    blacklist_note: bool,
) -> Option<Vec<PathRuleConfig>> {
    let mut ok = true;
    let mut path_rules = Vec::new();
    // Where each path rule is (its key path and header), for the shadowing warning.
    let mut places = Vec::new();
    if let Some(sections) = s.tables(sink, "path_rules") {
        for mut pr in sections {
            let place = (pr.path().to_owned(), pr.span());
            let path = pr.string(sink, "path");
            if path.is_none() && !pr.has("path") {
                pr.missing(
                    sink,
                    "path",
                    Severity::Error,
                    "missing `path`",
                    "add `path = \"/static\"`",
                );
            }
            let mt = read_matcher(&mut pr, sink, path.as_ref());
            // NGINX's `location /admin { deny all; }`: refused whatever `strict_path_rules` says.
            let deny = pr.bool(sink, "deny").is_some_and(|b| b.value);
            let rt = read_rule_type(&mut pr, sink, deny, blacklist_note);
            let age = read_max_age(&mut pr, sink, deny, max_age_seconds);
            let max_age_by_status = super::max_age_by_status(&mut pr, sink);
            let request_headers = super::http::header_rules(&mut pr, sink, "request_headers");
            let response_headers = super::http::header_rules(&mut pr, sink, "response_headers");
            let expires = pr.seconds_or_off(sink, "expires").map(|e| e.value);
            pr.finish(sink);
            match (path, mt, rt, age) {
                (Some(path), Some(matcher), Some(rule_type), Some(max_age_seconds)) => path_rules
                    .push(PathRuleConfig {
                        path: path.value,
                        matcher,
                        rule_type,
                        max_age_seconds,
                        max_age_by_status,
                        request_headers,
                        response_headers,
                        expires,
                        deny,
                    }),
                _ => ok = false,
            }
            places.push(place);
        }
    }
    if ok {
        shadowed(sink, &path_rules, &places);
    }
    ok.then_some(path_rules)
}

/// A path rule's `ignore_case` and `match_type`: how its `path` matches.
fn read_matcher(
    pr: &mut Section<'_>,
    sink: &mut Sink<'_>,
    path: Option<&At<String>>,
) -> Option<PathMatch> {
    let ignore_case = pr.bool(sink, "ignore_case").is_some_and(|b| b.value);
    match pr.string(sink, "match_type") {
        Some(m) if m.value == "Regex" => match path {
            Some(p) => match sink.pattern(&p.value, ignore_case) {
                Ok(re) => Some(PathMatch::Regex(re)),
                Err(why) => {
                    error(
                        sink,
                        p,
                        format!("{:?} is not a valid regular expression: {why}", p.value),
                        "write a pattern in Rust's regex syntax, e.g. \"^/api/v[0-9]+/\" (no look-around or back-references)",
                    );
                    None
                }
            },
            None => None,
        },
        Some(m) => match_type(sink, &m).map(|kind| PathMatch::Text { kind, ignore_case }),
        None => {
            if !pr.has("match_type") {
                pr.missing(
                    sink,
                    "match_type",
                    Severity::Error,
                    "missing `match_type`",
                    "add `match_type = \"StartsWith\"`",
                );
            }
            None
        }
    }
}

/// A path rule's `rule_type`: `Whitelist` when left out.
fn read_rule_type(
    pr: &mut Section<'_>,
    sink: &mut Sink<'_>,
    deny: bool,
    blacklist_note: bool,
) -> Option<RuleType> {
    match pr.string(sink, "rule_type") {
        Some(v) => {
            let t = parse_rule_type(sink, &v);
            if blacklist_note && t == Some(RuleType::Blacklist) {
                blacklist_bypasses(sink, &v);
            }
            t
        }
        None => {
            if deny && !pr.has("rule_type") {
                Some(RuleType::Whitelist)
            } else if !pr.has("rule_type") {
                lenient(pr, sink, "rule_type", "\"Whitelist\"");
                Some(RuleType::Whitelist)
            } else {
                None
            }
        }
    }
}

/// A path rule's `max_age_seconds`: the rule's when left out, 0 for a path rule that denies.
fn read_max_age(
    pr: &mut Section<'_>,
    sink: &mut Sink<'_>,
    deny: bool,
    max_age_seconds: u64,
) -> Option<u64> {
    match pr.int(sink, "max_age_seconds", 0, I64) {
        Some(v) => Some(v.value as u64),
        None if deny && !pr.has("max_age_seconds") => Some(0),
        None if !pr.has("max_age_seconds") => {
            lenient(
                pr,
                sink,
                "max_age_seconds",
                &format!("{max_age_seconds} (the rule's)"),
            );
            Some(max_age_seconds)
        }
        None => None,
    }
}

/// Warns about each path rule that can never apply: an earlier one matches every path it
/// does, and the first path rule that matches decides (NGINX users expect the longest
/// prefix to win; rampart, like ARC2, goes by file order).
fn shadowed(
    sink: &mut Sink<'_>,
    rules: &[PathRuleConfig],
    places: &[(String, Option<std::ops::Range<usize>>)],
) {
    for (j, later) in rules.iter().enumerate() {
        let Some(i) = rules[..j].iter().position(|earlier| covers(earlier, later)) else {
            continue;
        };
        let (key, span) = &places[j];
        let first = sink.line_of(places[i].1.as_ref());
        let what = |d: &PathRuleConfig| match (d.deny, d.rule_type) {
            (true, _) => "denies",
            (false, RuleType::Whitelist) => "caches",
            (false, RuleType::Blacklist) => "passes",
        };
        let differ = if what(&rules[i]) == what(later) {
            String::new()
        } else {
            format!(" (it {}; this one {})", what(&rules[i]), what(later))
        };
        sink.push(
            Severity::Warning,
            key,
            span.clone(),
            format!(
                "this path rule never applies: the path rule at line {first} (`{}`) matches every path it does and comes first, and the first path rule that matches decides{differ}",
                rules[i].path
            ),
            format!("move this path rule above the one at line {first}, or remove it"),
        );
    }
}

/// Whether every path `b` matches is matched by `a` too (text comparisons; a regular expression
/// covers only one written the same).
fn covers(a: &PathRuleConfig, b: &PathRuleConfig) -> bool {
    use crate::model::MatchType as M;
    match (&a.matcher, &b.matcher) {
        (
            PathMatch::Text {
                kind: ka,
                ignore_case: ia,
            },
            PathMatch::Text {
                kind: kb,
                ignore_case: ib,
            },
        ) => {
            // A case-sensitive rule does not cover one that ignores case.
            if *ib && !*ia {
                return false;
            }
            let (pa, pb) = if *ia {
                (a.path.to_ascii_lowercase(), b.path.to_ascii_lowercase())
            } else {
                (a.path.clone(), b.path.clone())
            };
            match ka {
                M::Equals => *kb == M::Equals && pa == pb,
                M::StartsWith => matches!(kb, M::Equals | M::StartsWith) && pb.starts_with(&pa),
                M::EndsWith => matches!(kb, M::Equals | M::EndsWith) && pb.ends_with(&pa),
                M::Contains => {
                    matches!(kb, M::Equals | M::StartsWith | M::EndsWith | M::Contains)
                        && pb.contains(&pa)
                }
                M::DoesNotEqual | M::DoesNotContain => false,
            }
        }
        (PathMatch::Regex(_), PathMatch::Regex(_)) => a.path == b.path && a.matcher == b.matcher,
        _ => false,
    }
}
