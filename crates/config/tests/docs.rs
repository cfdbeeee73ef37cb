//! Every configuration file shown in the README and the docs passes `rampart check --strict`:
//! a user who copies one gets no warning.
//!
//! A ```toml block that has a `[[proxy_rules]]` section is a whole file and is checked. Blocks
//! that show part of a file, a mistake on purpose, or a file as another project publishes it
//! start with a comment that says so: `# (part of a file`, `# (rejected`, `# (not --strict:`.
//! Certificate and CA files under `/etc/` are the reader's own; that they are missing here is
//! not held against the example.

use std::path::{Path, PathBuf};

fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut out = vec![root.join("README.md"), root.join("packaging/rampart.toml")];
    for e in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The ```toml blocks of a Markdown file, with the line each starts at.
fn toml_blocks(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start();
        match &mut current {
            None if fence.starts_with("```toml") => current = Some((i + 2, String::new())),
            Some(_) if fence.starts_with("```") => out.extend(current.take()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    out
}

#[test]
fn every_example_file_passes_check_strict() {
    // A disk cache directory the test may create.
    let disk = std::env::temp_dir().join(format!("rampart-docs-{}", std::process::id()));
    let mut failures = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("readable");
        let blocks = if doc.extension().is_some_and(|x| x == "toml") {
            vec![(1, text)]
        } else {
            toml_blocks(&text)
        };
        for (line, block) in blocks {
            if !block.contains("[[proxy_rules]]") {
                continue;
            }
            let first = block.lines().next().unwrap_or("");
            if ["# (part of a file", "# (rejected", "# (not --strict:"]
                .iter()
                .any(|m| first.starts_with(m))
            {
                continue;
            }
            let block = block.replace("/var/cache/rampart", &disk.display().to_string());
            checked += 1;
            let v = rampart_config::validate(&block, 2).strict();
            let problems: Vec<String> = v
                .errors()
                .filter(|d| !d.message.starts_with("cannot read \"/etc/"))
                .map(|d| format!("    {d}"))
                .collect();
            if !problems.is_empty() {
                failures.push(format!(
                    "{}:{line}: the block does not pass `check --strict`:\n{}",
                    doc.display(),
                    problems.join("\n")
                ));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&disk);
    assert!(checked >= 5, "only {checked} example files found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every "`KEY = VALUE` → … `fix: write it as KEY = FIXED`" the docs' prose promises is the fix
/// the check gives for that line, in the section where the key belongs.
#[test]
fn every_fix_the_prose_quotes_is_the_one_check_gives() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("docs/configuration.md")).expect("readable");
    // Prose wraps anywhere: one space for each run of whitespace.
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let claim = regex::Regex::new(r"`([a-z_0-9]+ = [^`]+)` → [^→]*?`fix: write it as ([^`]+)`")
        .expect("regex");
    let rule = "[[proxy_rules]]\ndomain = \"a.test\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\nmax_age_seconds = 60\n";
    let mut failures = Vec::new();
    let mut checked = 0;
    for c in claim.captures_iter(&text) {
        let (written, fixed) = (&c[1], &c[2]);
        let key = written.split(" = ").next().unwrap_or("");
        let want = format!("write it as `{fixed}`");
        // The key's own line replaces the rule's, if the rule has one.
        let in_rule = rule
            .lines()
            .filter(|l| !l.starts_with(&format!("{key} = ")))
            .collect::<Vec<_>>()
            .join("\n");
        let global = format!("{written}\n{rule}");
        let local = format!("{in_rule}\n{written}\n");
        let found = [global, local].iter().any(|file| {
            rampart_config::validate(file, 2)
                .diagnostics
                .iter()
                .any(|d| d.hint == want)
        });
        checked += 1;
        if !found {
            failures.push(format!(
                "`{written}`: the docs promise `fix: {want}`, check does not give it"
            ));
        }
    }
    assert!(checked >= 6, "only {checked} quoted fixes found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
