//! Runs `rampart-bench --baseline` (a second rampart build beside the first, in the same
//! rounds) for two quick scenarios. Its own test binary: test binaries run one after another,
//! so it never loads the CPUs while `quick.rs` measures.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

/// `--baseline`: a second build runs as the peer `rampart-baseline` in the same rounds, from
/// its own binary (here the same build under another path), and a missing build is refused.
#[test]
fn a_baseline_build_runs_beside_rampart() {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_rampart-bench"));
    let rampart = bench.with_file_name("rampart");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bench-baseline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let baseline = dir.join("rampart-before");
    std::fs::copy(&rampart, &baseline).unwrap();
    let out = dir.join("report");
    let status = Command::new(&bench)
        .args([
            "--quick",
            "--scenarios",
            "cached-hello,pass",
            "--peers",
            "rampart,rampart-baseline",
        ])
        .arg("--rampart")
        .arg(&rampart)
        .arg("--baseline")
        .arg(&baseline)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success(), "rampart-bench --baseline failed");
    let config = std::fs::read_to_string(out.join("configs/rampart-baseline/rampart.toml"));
    assert!(config.unwrap().contains("[[proxy_rules]]"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    for scenario in ["cached-hello", "pass"] {
        for peer in ["rampart", "rampart-baseline"] {
            let run = json["runs"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["scenario"] == scenario && r["peer"] == peer)
                .unwrap_or_else(|| panic!("no run of {peer} in {scenario}"));
            assert!(run["result"]["requests"].as_u64().unwrap() > 0, "{run}");
            assert_eq!(run["result"]["errors"].as_u64().unwrap(), 0, "{run}");
        }
    }
    // A missing baseline build is refused before anything starts.
    let log = Command::new(&bench)
        .args(["--quick", "--scenarios", "pass", "--baseline"])
        .arg(dir.join("no-such-build"))
        .arg("--out")
        .arg(dir.join("refused"))
        .output()
        .unwrap();
    assert!(!log.status.success());
    assert!(
        String::from_utf8_lossy(&log.stderr).contains("no rampart build at"),
        "{}",
        String::from_utf8_lossy(&log.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
