//! Runs `rampart-bench cluster` on the rampart build next to it, small: one short round of each
//! case against a real `redis-server` (`.ci/run` installs it). It asserts that every case was
//! answered as the case expects (a local hit, a shared hit from Redis, a miss, a refusal), and
//! that the counted Redis commands show where the round trips are: none for an exempt client's
//! hit, one script for a rate-limited client's. Nothing about speed.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

/// The cells of the report's row for `case` on `instance`.
fn row(report: &str, case: &str, instance: &str) -> Vec<String> {
    let line = report
        .lines()
        .find(|l| l.starts_with(&format!("| {case} | {instance} |")))
        .unwrap_or_else(|| panic!("no row for {case} / {instance}:\n{report}"));
    line.split('|').map(|c| c.trim().to_owned()).collect()
}

#[test]
fn what_redis_adds_is_measured_case_by_case() {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_rampart-bench"));
    let rampart = bench.with_file_name("rampart");
    assert!(
        rampart.exists(),
        "build rampart first (`cargo build --workspace`): {} is missing",
        rampart.display()
    );
    let out_dir = std::env::temp_dir().join(format!("cluster-bench-{}", std::process::id()));
    let out = Command::new(&bench)
        .args([
            "cluster",
            "--requests",
            "300",
            "--rounds",
            "1",
            "--connections",
            "4",
        ])
        .arg("--rampart")
        .arg(&rampart)
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "rampart-bench cluster failed:\n{stderr}"
    );
    let report = std::fs::read_to_string(out_dir.join("cluster.md")).unwrap();
    let _ = std::fs::remove_dir_all(&out_dir);
    for (case, instance) in [
        ("local hit, exempt client", "plain"),
        ("local hit, exempt client", "shared-b"),
        ("local hit, rate-limited client", "plain"),
        ("local hit, rate-limited client", "shared-b"),
        ("shared hit (Redis)", "shared-b"),
        ("miss", "plain"),
        ("miss", "shared-b"),
    ] {
        let cells = row(&report, case, instance);
        assert_eq!(
            cells[8], "300/300",
            "{case} / {instance}:\n{report}\n{stderr}"
        );
    }
    // The refusing instance admits at most one more request a second.
    let refused = row(&report, "refused client", "refusing");
    let n: usize = refused[8].split('/').next().unwrap().parse().unwrap();
    assert!(n >= 290, "{report}");
    let commands =
        |case: &str, instance: &str| -> f64 { row(&report, case, instance)[7].parse().unwrap() };
    // A PING a second per instance may fall inside a run: well under one command a request.
    assert!(
        commands("local hit, exempt client", "shared-b") < 0.1,
        "{report}"
    );
    assert!(commands("refused client", "refusing") < 0.1, "{report}");
    // The rate-limit script: EVALSHA plus the TIME, GET and SET it runs.
    assert!(
        commands("local hit, rate-limited client", "shared-b") >= 4.0,
        "{report}"
    );
    assert!(
        commands("shared hit (Redis)", "shared-b") >= 3.0,
        "{report}"
    );
}
