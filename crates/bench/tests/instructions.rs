//! Runs `rampart-bench instructions` on the rampart build next to it with a few hundred
//! requests: every request kind is measured through real connections under callgrind and
//! reported with a plausible count. It asserts nothing about speed.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

#[test]
fn instructions_are_counted_for_every_request_kind() {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_rampart-bench"));
    let rampart = bench.with_file_name("rampart");
    assert!(
        rampart.exists(),
        "build rampart first (`cargo build --workspace`): {} is missing",
        rampart.display()
    );
    let out = Command::new(&bench)
        .args(["instructions", "--requests", "300", "--warmup", "50"])
        .arg(&rampart)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rampart-bench instructions failed (valgrind, h2load and ab are required; .ci/run installs \
         them):\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for kind in ["hit", "pass", "h2-hit", "close"] {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(kind))
            .unwrap_or_else(|| panic!("no line for {kind}:\n{text}"));
        let n: u64 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
        // A debug build: far more than a release build's ~15,000, far less than a million.
        assert!(
            (1_000..5_000_000).contains(&n),
            "{kind}: {n} instructions per request"
        );
    }
}
