//! Runs `rampart-bench websocket` on the rampart build next to it, small: a few hundred idle
//! WebSockets and one short echo round through rampart, HAProxy and NGINX (`.ci/run` installs
//! both), all through real connections. It asserts that every part was measured, nothing about
//! speed or memory.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

#[test]
fn idle_sockets_and_echo_round_trips_are_measured_for_every_proxy() {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_rampart-bench"));
    let rampart = bench.with_file_name("rampart");
    assert!(
        rampart.exists(),
        "build rampart first (`cargo build --workspace`): {} is missing",
        rampart.display()
    );
    let out_file = std::env::temp_dir().join(format!("ws-bench-{}.md", std::process::id()));
    let out = Command::new(&bench)
        .args([
            "websocket",
            "--idle",
            "300",
            "--echo",
            "4",
            "--seconds",
            "1",
        ])
        .args(["--rounds", "1", "--rampart"])
        .arg(&rampart)
        .arg("--out")
        .arg(&out_file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "rampart-bench websocket failed:\n{stderr}"
    );
    let report = std::fs::read_to_string(&out_file).unwrap();
    let _ = std::fs::remove_file(&out_file);
    assert!(report.contains("| 300 |"), "{report}");
    assert!(
        report.contains("100 of them (one in 3) echoed again"),
        "{report}"
    );
    for path in [
        "direct",
        "through rampart",
        "through haproxy",
        "through nginx",
    ] {
        let row = report
            .lines()
            .find(|l| l.starts_with(&format!("| {path}")))
            .unwrap_or_else(|| panic!("no row for {path}:\n{report}\n{stderr}"));
        // round trips/s is a positive number.
        let rate: f64 = row.split('|').nth(2).unwrap().trim().parse().unwrap();
        assert!(rate > 0.0, "{row}");
    }
}
