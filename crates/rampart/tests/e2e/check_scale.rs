//! `rampart check` on large files, through the real binary: its work grows with the file, not
//! with the square of it (docs/benchmarks.md has the figures).
//!
//! The bound is deliberately loose (a debug build, a shared machine): it only catches the
//! quadratic behaviour coming back, which took minutes here. Speed itself is measured outside
//! the tests.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// Far above what a linear `check` of these files takes in a debug build.
const BOUND: Duration = Duration::from_secs(20);

/// Runs `rampart check` on `text`; fails when it is still running after [`BOUND`]. Returns the
/// exit code and what it printed (stdout, then stderr).
fn check_within_bound(name: &str, text: &str) -> (Option<i32>, String) {
    let path = scratch(name);
    std::fs::write(&path, text).unwrap();
    let out_path = scratch(&format!("{name}.out"));
    let err_path = scratch(&format!("{name}.err"));
    let start = Instant::now();
    let mut child = Command::new(rampart_bin())
        .args(["check", "--config", path.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`rampart check` on {name} ({} bytes) was still running after {BOUND:?}",
                text.len()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let printed =
        std::fs::read_to_string(&out_path).unwrap() + &std::fs::read_to_string(&err_path).unwrap();
    (status.code(), printed)
}

/// The end of what `check` printed, for a failure's message.
fn tail(out: &str) -> &str {
    let mut at = out.len().saturating_sub(2000);
    while !out.is_char_boundary(at) {
        at += 1;
    }
    &out[at..]
}

fn rule(out: &mut String, domain: &str) {
    writeln!(
        out,
        "[[proxy_rules]]\ndomain = \"{domain}\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 8080"
    )
    .unwrap();
}

#[test]
fn check_is_not_quadratic_in_rules_unknown_keys_or_file_size() {
    // 20,000 rules in the ARC2-lenient shape (each leaves out keys ARC2 requires: one note per
    // rule), every tenth with a misspelt key, and 2,000 more whose domain an earlier rule has.
    let mut rules = String::new();
    for i in 0..20_000 {
        rule(&mut rules, &format!("d{i}.example"));
        if i % 10 == 0 {
            rules.push_str("max_age_secnds = 60\n");
        }
    }
    for i in 0..2_000 {
        rule(&mut rules, &format!("d{i}.example"));
        rules.push_str("surprise = 1\n");
    }
    let (code, out) = check_within_bound("rules.toml", &rules);
    assert_eq!(code, Some(0), "{}", tail(&out));
    assert!(
        out.contains("configuration OK (22000 rule(s)"),
        "{out:.2000}"
    );
    assert_eq!(out.matches("this rule is never used").count(), 2_000);
    assert_eq!(out.matches("did you mean `max_age_seconds`").count(), 2_000);

    // 8,000 unknown keys in one section.
    let mut unknown = String::new();
    for i in 0..8_000 {
        writeln!(unknown, "unknown_key_{i} = {i}").unwrap();
    }
    rule(&mut unknown, "u.example");
    let (code, out) = check_within_bound("unknown.toml", &unknown);
    assert_eq!(code, Some(0), "{}", tail(&out));
    assert_eq!(out.matches("unknown key, ignored").count(), 8_000);

    // 4 MB: rules with path rules, field rules and redirects, and one line of 1 MB holding
    // 100,000 mistakes (each reported at its own column).
    let mut big = String::new();
    let mut i = 0;
    while big.len() < 3_000_000 {
        rule(&mut big, &format!("b{i}.example"));
        big.push_str(
            "max_age_seconds = 60\nrule_type = \"Whitelist\"\nenable_logging = true\n\
             ignore_query_string = false\nenable_sql_injection_protection = false\n\
             paths = [\"/a\", \"/b\", \"/c\"]\n\
             [proxy_rules.response_headers]\nset = { \"X-Frame-Options\" = \"DENY\" }\n\
             [[proxy_rules.redirects]]\nfrom = \"^/old/(.*)$\"\nto = \"/new/$1\"\n\
             [[proxy_rules.path_rules]]\npath = \"/static\"\nmatch_type = \"StartsWith\"\n\
             rule_type = \"Whitelist\"\nmax_age_seconds = 600\n",
        );
        i += 1;
    }
    rule(&mut big, "long-line.example");
    big.push_str("paths = [");
    for n in 0..100_000 {
        write!(big, "{}, ", 10_000_000 + n).unwrap();
    }
    big.push_str("]\n");
    assert!(big.len() > 4_000_000);
    let (code, out) = check_within_bound("big.toml", &big);
    assert_eq!(code, Some(1), "{}", tail(&out));
    assert_eq!(
        out.matches("expected a string, found an integer").count(),
        100_000
    );
    // The last mistake, at its column: 10 characters per element after `paths = [`.
    let last = format!(
        ":{}: error: `proxy_rules[{i}].paths[99999]`",
        10 + 99_999 * 10
    );
    assert!(out.contains(&last), "no {last:?} in {}", tail(&out));
}
