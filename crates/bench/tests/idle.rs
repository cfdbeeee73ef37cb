//! Runs `rampart-bench idle` on the rampart build next to it, small: a few hundred idle
//! keep-alive connections to rampart, NGINX and HAProxy (`.ci/run` installs both), all through
//! real connections. It asserts that every server was measured and answered again afterwards,
//! nothing about memory.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

#[test]
fn idle_connections_are_measured_for_every_server() {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_rampart-bench"));
    let rampart = bench.with_file_name("rampart");
    assert!(
        rampart.exists(),
        "build rampart first (`cargo build --workspace`): {} is missing",
        rampart.display()
    );
    let out_file = std::env::temp_dir().join(format!("idle-bench-{}.md", std::process::id()));
    let out = Command::new(&bench)
        .args(["idle", "--connections", "300", "--rampart"])
        .arg(&rampart)
        .arg("--out")
        .arg(&out_file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rampart-bench idle failed:\n{stderr}");
    let report = std::fs::read_to_string(&out_file).unwrap();
    let _ = std::fs::remove_file(&out_file);
    for server in ["rampart", "nginx", "haproxy"] {
        let row = report
            .lines()
            .find(|l| l.starts_with(&format!("| {server} |")))
            .unwrap_or_else(|| panic!("no row for {server}:\n{report}\n{stderr}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // RSS before is a positive number of MiB, and every connection asked again answered.
        let before: f64 = cells[4].trim_end_matches(" MiB").parse().unwrap();
        assert!(before > 0.0, "{row}");
        let (answered, asked) = cells[8].split_once('/').unwrap();
        assert!(asked.parse::<u32>().unwrap() > 0, "{row}");
        assert_eq!(answered, asked, "{row}");
    }
}
