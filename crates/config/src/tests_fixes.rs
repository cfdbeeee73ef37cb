//! Every `fix:` line works when pasted: each bad file below is repaired by doing literally what
//! its diagnostics' fixes say (replace the line with `write it as …`, rename the key, add the
//! line, move the line or the section), one fix at a time. After each fix the problem it named
//! is gone; at the end the file has no error and means what its author meant.

use super::*;

/// A bad file and what the repaired file must mean.
struct Case {
    name: &'static str,
    src: &'static str,
    means: fn(&Config) -> bool,
}

/// A rule's keys ARC2 requires, so that no note or warning other than the case's own appears.
const KEYS: &str = "rule_type = \"Whitelist\"\nenable_logging = false\nignore_query_string = false\nenable_sql_injection_protection = false\nenable_compression = false\nenable_minification = false\nenable_webp_transformation = false\n";

fn rule(c: &Config) -> &RuleConfig {
    &c.rules[0]
}

fn origin(c: &Config) -> String {
    rule(c).upstreams[0].authority.as_str().to_owned()
}

const CASES: &[Case] = &[
    Case {
        name: "integer seconds given as a duration",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = \"1h\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| rule(c).max_age_seconds == 3600,
    },
    Case {
        name: "integer seconds given as a compound duration",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = \"1h30m\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| rule(c).max_age_seconds == 5400,
    },
    Case {
        name: "integer seconds given as a duration without quotes",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 10m\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| rule(c).max_age_seconds == 600,
    },
    Case {
        name: "a global timeout given as a duration",
        src: "listen = [\"127.0.0.1:8080\"]\nshutdown_timeout_seconds = \"2m\"\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| c.shutdown_timeout.as_secs() == 120,
    },
    Case {
        name: "an integer in quotes",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = \"3600\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = \"3000\"\n",
        means: |c| rule(c).max_age_seconds == 3600 && origin(c) == "127.0.0.1:3000",
    },
    Case {
        name: "an array of strings given one string",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\npaths = \"/shop\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| rule(c).paths == ["/shop"],
    },
    Case {
        name: "listen given one address",
        src: "listen = \"127.0.0.1:8081\"\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| c.listen_http == ["127.0.0.1:8081".parse().expect("addr")],
    },
    Case {
        name: "an IPv4 origin without quotes",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = 127.0.0.1\nforward_port_http = 3000\n",
        means: |c| origin(c) == "127.0.0.1:3000",
    },
    Case {
        name: "an IPv6 origin without quotes",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv6 = ::1\nforward_port_http = 3000\n",
        means: |c| origin(c) == "[::1]:3000",
    },
    Case {
        name: "listen given one address without quotes",
        src: "listen = 127.0.0.1:8082\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| c.listen_http == ["127.0.0.1:8082".parse().expect("addr")],
    },
    Case {
        name: "a listening address without quotes",
        src: "listening_address = 127.0.0.2\nlistening_port_http = 8080\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| c.listen_http == ["127.0.0.2:8080".parse().expect("addr")],
    },
    Case {
        name: "a word without quotes",
        src: "listen = [\"127.0.0.1:8080\"]\nlogging_level = info\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| c.logging_level == "info",
    },
    Case {
        name: "a boolean written as a word",
        src: "listen = [\"127.0.0.1:8080\"]\nadd_logging = no\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\nstore_set_cookie = \"yes\"\n",
        means: |c| !c.add_logging && rule(c).store_set_cookie,
    },
    Case {
        name: "a string given as a number",
        src: "listen = [\"127.0.0.1:8080\"]\napi_key = 1234567890123456789\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| c.admin.api_key.as_deref() == Some("1234567890123456789"),
    },
    Case {
        name: "a size given as a boolean",
        src: "listen = [\"127.0.0.1:8080\"]\ncache_memory = true\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| c.cache.memory == 512 << 20,
    },
    Case {
        name: "a boolean in an error-page table given as a word",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n[proxy_rules.error_pages]\norigin_errors = \"no\"\n",
        means: |c| !rule(c).error_pages.origin_errors,
    },
    Case {
        name: "a domain written as a URL",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]]\ndomain = \"https://www.shop.test:443/\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| rule(c).domain_text == "www.shop.test",
    },
    Case {
        name: "a Unicode domain",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]]\ndomain = \"bücher.example\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| rule(c).domain_text == "xn--bcher-kva.example",
    },
    Case {
        name: "a misspelt origin port",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nfoward_port_http = 18081\n",
        means: |c| origin(c) == "127.0.0.1:18081",
    },
    Case {
        name: "a missing lifetime",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]]\ndomain = \"a.test\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| rule(c).max_age_seconds == 3600,
    },
    Case {
        name: "a path-rule section before its rule",
        src: "listen = [\"127.0.0.1:8080\"]\n\n[[proxy_rules.path_rules]]\npaths = [\"/a\"]\nrule_type = \"Whitelist\"\nmax_age_seconds = 5\n\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| rule(c).path_rules.len() == 1 && origin(c) == "127.0.0.1:3000",
    },
    Case {
        name: "a path-rule header with one bracket",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n[proxy_rules.path_rules]\npaths = [\"/a\"]\nrule_type = \"Whitelist\"\nmax_age_seconds = 5\n",
        means: |c| rule(c).path_rules.len() == 1,
    },
    Case {
        name: "a header that lost a bracket",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n",
        means: |c| c.rules.len() == 1,
    },
    Case {
        name: "a global key after the rules",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\nworkers = 3\n",
        means: |c| c.workers == 3,
    },
    Case {
        name: "a rule's key after its path rules",
        src: "listen = [\"127.0.0.1:8080\"]\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\n[[proxy_rules.path_rules]]\npaths = [\"/a\"]\nrule_type = \"Whitelist\"\nmax_age_seconds = 5\nforward_port_http = 3000\n",
        means: |c| origin(c) == "127.0.0.1:3000",
    },
];

/// The text between the first pair of backticks after `prefix` in `hint`.
fn quoted_after<'h>(hint: &'h str, prefix: &str) -> Option<&'h str> {
    let rest = hint.strip_prefix(prefix)?.strip_prefix('`')?;
    rest.split('`').next()
}

fn is_header(line: &str) -> bool {
    line.trim_start().starts_with('[')
}

/// Does what `d`'s fix says to `lines`; false when the fix is not one a program can follow.
fn apply(lines: &mut Vec<String>, d: &Diagnostic) -> bool {
    let at = d.line.wrapping_sub(1);
    let hint = d.hint.as_str();
    if let Some(text) = quoted_after(hint, "write it as ").filter(|t| t.contains(" = ")) {
        let Some(line) = lines.get_mut(at) else {
            return false;
        };
        let indent = line.len() - line.trim_start().len();
        *line = format!("{}{text}", &line[..indent]);
        return true;
    }
    if let Some(text) = quoted_after(hint, "write the header as ") {
        lines[at] = text.to_owned();
        return true;
    }
    if let Some(header) = quoted_after(hint, "write each entry as a ") {
        if lines.get(at).is_some_and(|l| is_header(l)) {
            lines[at] = header.to_owned();
            return true;
        }
        return false;
    }
    if let Some(key) = quoted_after(hint, "rename it to ") {
        let Some((_, value)) = lines[at].split_once('=') else {
            return false;
        };
        lines[at] = format!("{key} ={value}");
        return true;
    }
    if hint.starts_with("add `") {
        // Each `key = value` the hint names goes below the section's header.
        let added: Vec<String> = hint
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|t| t.contains(" = "))
            .map(str::to_owned)
            .collect();
        if added.is_empty() || !lines.get(at).is_some_and(|l| is_header(l)) {
            return false;
        }
        for (i, a) in added.into_iter().enumerate() {
            lines.insert(at + 1 + i, a);
        }
        return true;
    }
    if hint.starts_with("move it above the first `[[proxy_rules]]`") {
        let line = lines.remove(at);
        let Some(first) = lines.iter().position(|l| l.trim() == "[[proxy_rules]]") else {
            return false;
        };
        lines.insert(first, line);
        return true;
    }
    if hint.starts_with("move it up into its ") {
        // Above the first section header after the rule's own header, above this line.
        let line = lines.remove(at);
        let Some(rule) = lines[..at]
            .iter()
            .rposition(|l| l.trim() == "[[proxy_rules]]")
        else {
            return false;
        };
        let Some(inner) = lines[rule + 1..].iter().position(|l| is_header(l)) else {
            return false;
        };
        lines.insert(rule + 1 + inner, line);
        return true;
    }
    if let Some(rest) = hint.split("move the section at line ").nth(1) {
        let Some(n) = rest
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse::<usize>().ok())
        else {
            return false;
        };
        let start = n - 1;
        let end = lines[start + 1..]
            .iter()
            .position(|l| is_header(l))
            .map_or(lines.len(), |i| start + 1 + i);
        let block: Vec<String> = lines.drain(start..end).collect();
        let Some(rule) = lines[start..]
            .iter()
            .position(|l| l.trim() == "[[proxy_rules]]")
            .map(|i| start + i)
        else {
            return false;
        };
        let to = if rest.contains("below the last key of the ") {
            // After the rule's own keys: before the next header, or at the end.
            lines[rule + 1..]
                .iter()
                .position(|l| is_header(l))
                .map_or(lines.len(), |i| rule + 1 + i)
        } else {
            // "below the `[[proxy_rules]]`": right under its header.
            rule + 1
        };
        for (i, l) in block.into_iter().enumerate() {
            lines.insert(to + i, l);
        }
        return true;
    }
    false
}

/// Whether `d` is still there, at its key, or for a syntax error at its line.
fn still_there(v: &Validated, fixed: &Diagnostic) -> Option<String> {
    v.diagnostics
        .iter()
        .filter(|d| matches!(d.severity, Severity::Error | Severity::Warning))
        .find(|d| {
            if fixed.key.is_empty() {
                d.line == fixed.line && d.key.is_empty()
            } else {
                d.key == fixed.key
            }
        })
        .map(|d| d.to_string())
}

#[test]
fn every_fix_line_works_when_pasted() {
    let mut failures = Vec::new();
    for case in CASES {
        // The keys ARC2 requires, so that the only problems are the case's own.
        let src = case
            .src
            .replacen("[[proxy_rules]]\n", &format!("[[proxy_rules]]\n{KEYS}"), 1);
        let mut lines: Vec<String> = src.lines().map(str::to_owned).collect();
        let mut applied = Vec::new();
        let outcome = loop {
            let text = lines.join("\n") + "\n";
            let v = validate(&text, 2);
            let next = v
                .diagnostics
                .iter()
                .filter(|d| matches!(d.severity, Severity::Error | Severity::Warning))
                .find(|d| {
                    let mut probe = lines.clone();
                    apply(&mut probe, d)
                })
                .cloned();
            let Some(d) = next else {
                break Ok(v);
            };
            if applied.len() >= 6 {
                break Err(format!("still not fixed after {applied:?}: {d}"));
            }
            let before = lines.clone();
            apply(&mut lines, &d);
            applied.push(d.hint.clone());
            let after = validate(&(lines.join("\n") + "\n"), 2);
            if let Some(left) = still_there(&after, &d) {
                break Err(format!(
                    "after following `{}`\n{}\nthe problem is still there: {left}",
                    d.hint,
                    before
                        .iter()
                        .zip(&lines)
                        .filter(|(a, b)| a != b)
                        .map(|(a, b)| format!("  {a:?} -> {b:?}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                ));
            }
        };
        match outcome {
            Ok(v) if v.errors().next().is_some() => failures.push(format!(
                "{}: after {applied:?}, errors without a fix a program can follow:\n{}",
                case.name,
                v.errors()
                    .map(|d| format!("  {d}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )),
            Ok(v) => match &v.config {
                Some(c) if (case.means)(c) => {}
                Some(_) => failures.push(format!(
                    "{}: the file the fixes {applied:?} make does not mean what it said:\n{}",
                    case.name,
                    lines.join("\n")
                )),
                None => failures.push(format!(
                    "{}: no configuration: {:?}",
                    case.name, v.diagnostics
                )),
            },
            Err(e) => failures.push(format!("{}: {e}", case.name)),
        }
        if applied.is_empty() {
            failures.push(format!("{}: the file had nothing to fix", case.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
