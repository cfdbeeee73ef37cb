//! Every `rampart check` output the README and the docs show is what the program prints.
//!
//! In the Markdown, `<!-- check-input: NAME -->` stands on the line before a ```toml block and
//! `<!-- check-output: NAME -->` on the line before the ```text block that shows what
//! `rampart check --config rampart.toml` prints for it (stderr, then the summary line on
//! stdout). The test writes the block to `rampart.toml`, runs the real binary on it and compares.
//! On a mismatch it prints the right text; `RAMPART_BLESS_DOCS=1` writes it into the document.
//!
//! The worker count is the machine's when the file does not set `workers`: the docs say on which
//! machine their sample was made, and the number shown is kept.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut out = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// A marked block: its name, and the lines of its body (0-based, end exclusive).
struct Block {
    name: String,
    body: std::ops::Range<usize>,
}

/// The blocks marked with `<!-- {marker}: NAME -->` on the line before their opening fence.
fn marked(lines: &[&str], marker: &str) -> Vec<Block> {
    let prefix = format!("<!-- {marker}: ");
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(name) = l
            .trim()
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix("-->"))
        else {
            continue;
        };
        assert!(
            lines.get(i + 1).is_some_and(|f| f.starts_with("```")),
            "line {}: `{marker}` is not followed by a fenced block",
            i + 1
        );
        let start = i + 2;
        let len = lines[start..]
            .iter()
            .position(|f| f.starts_with("```"))
            .unwrap_or_else(|| panic!("line {}: the block is not closed", i + 2));
        out.push(Block {
            name: name.trim().to_owned(),
            body: start..start + len,
        });
    }
    out
}

/// What `rampart check` prints for `toml`, as a user who saved it as `rampart.toml` sees it.
fn check(dir: &Path, toml: &str) -> String {
    std::fs::write(dir.join("rampart.toml"), toml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rampart"))
        .args(["check", "--config", "rampart.toml"])
        .current_dir(dir)
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    )
}

/// `actual` with its default worker count (this machine's) replaced by the one `shown` gives.
fn same_machine(actual: &str, shown: &str, toml: &str) -> String {
    let workers = |text: &str| {
        text.split(" worker(s)")
            .next()
            .filter(|_| text.contains(" worker(s)"))
            .and_then(|t| t.rsplit(' ').next())
            .map(str::to_owned)
    };
    let default = std::thread::available_parallelism().map_or(1, |n| n.get());
    let sets_workers = toml.lines().any(|l| l.trim_start().starts_with("workers"));
    match (workers(actual), workers(shown)) {
        (Some(a), Some(s)) if !sets_workers && a == default.to_string() => {
            actual.replacen(&format!(" {a} worker(s)"), &format!(" {s} worker(s)"), 1)
        }
        _ => actual.to_owned(),
    }
}

#[test]
fn every_check_output_in_the_docs_is_what_check_prints() {
    let bless = std::env::var_os("RAMPART_BLESS_DOCS").is_some_and(|v| v == "1");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("docs-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut failures = Vec::new();
    let mut compared = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let inputs: HashMap<String, String> = marked(&lines, "check-input")
            .into_iter()
            .map(|b| (b.name, lines[b.body].join("\n") + "\n"))
            .collect();
        let outputs = marked(&lines, "check-output");
        for name in inputs.keys() {
            if !outputs.iter().any(|o| &o.name == name) {
                failures.push(format!(
                    "{}: `{name}` has no check-output block",
                    doc.display()
                ));
            }
        }
        let mut rewritten: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
        // From the last block up, so that the line numbers of the others stay right.
        for out in outputs.iter().rev() {
            let Some(toml) = inputs.get(&out.name) else {
                failures.push(format!(
                    "{}:{}: no check-input block named `{}`",
                    doc.display(),
                    out.body.start,
                    out.name
                ));
                continue;
            };
            compared += 1;
            let shown = lines[out.body.clone()].join("\n") + "\n";
            let actual = same_machine(&check(&dir, toml), &shown, toml);
            if actual != shown {
                failures.push(format!(
                    "{}:{}: `rampart check` on `{}` prints\n{actual}but the document shows\n{shown}",
                    doc.display(),
                    out.body.start,
                    out.name
                ));
                rewritten.splice(out.body.clone(), actual.lines().map(str::to_owned));
            }
        }
        if bless {
            let mut new = rewritten.join("\n");
            if text.ends_with('\n') {
                new.push('\n');
            }
            if new != text {
                std::fs::write(&doc, new).unwrap();
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        compared >= 4,
        "only {compared} check outputs found in the docs"
    );
    assert!(
        bless || failures.is_empty(),
        "{}\n(RAMPART_BLESS_DOCS=1 writes the right text into the documents)",
        failures.join("\n")
    );
}
