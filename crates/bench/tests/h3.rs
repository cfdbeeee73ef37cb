//! Runs `rampart-bench h3` on the rampart build next to it, small: one short round of HTTPS/2
//! and HTTP/3 hits against rampart and Caddy (`.ci/run` installs Caddy and h2load), through real
//! connections. It asserts that every part was measured and that nothing failed, nothing about
//! speed.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

#[test]
fn http3_and_https2_hits_are_measured_for_rampart_and_caddy() {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_rampart-bench"));
    let rampart = bench.with_file_name("rampart");
    assert!(
        rampart.exists(),
        "build rampart first (`cargo build --workspace`): {} is missing",
        rampart.display()
    );
    let out_file = std::env::temp_dir().join(format!("h3-bench-{}.md", std::process::id()));
    let out = Command::new(&bench)
        .args([
            "h3",
            "--seconds",
            "1",
            "--rounds",
            "1",
            "--connections",
            "4",
        ])
        .arg("--rampart")
        .arg(&rampart)
        .arg("--out")
        .arg(&out_file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rampart-bench h3 failed:\n{stderr}");
    let report = std::fs::read_to_string(&out_file).unwrap();
    let _ = std::fs::remove_file(&out_file);
    for (server, protocol) in [
        ("rampart, cache hit", "HTTPS/2"),
        ("rampart, cache hit", "HTTP/3"),
        ("Caddy, fixed response (no cache)", "HTTPS/2"),
        ("Caddy, fixed response (no cache)", "HTTP/3"),
    ] {
        let row = report
            .lines()
            .find(|l| l.starts_with(&format!("| {server} | {protocol} |")))
            .unwrap_or_else(|| panic!("no row for {server} {protocol}:\n{report}\n{stderr}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let rate: f64 = cells[3].parse().unwrap();
        let cpu: f64 = cells[4].parse().unwrap();
        assert!(rate > 0.0 && cpu > 0.0, "{row}");
        assert_eq!(cells[5], "0", "errors: {row}");
    }
    assert!(report.contains("an HTTP/3 hit costs"), "{report}");
}
