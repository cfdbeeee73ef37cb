//! Runs `rampart-bench disk` small on the rampart build next to it: every part (disk-hit with
//! write amplification, large, restart, crash) against rampart and NGINX (`.ci/run` installs
//! it), through real connections and real directories. It asserts that every part was
//! measured for every server and that the crash check found nothing corrupt and no failed
//! request, nothing about speed.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

#[test]
fn every_disk_part_is_measured_for_rampart_and_nginx() {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_rampart-bench"));
    let rampart = bench.with_file_name("rampart");
    assert!(
        rampart.exists(),
        "build rampart first (`cargo build --workspace`): {} is missing",
        rampart.display()
    );
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bench-disk-{}", std::process::id()));
    let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bench-disk-work-{}", std::process::id()));
    let run = Command::new(&bench)
        .args([
            "disk",
            "--objects",
            "400",
            "--object-size",
            "20000",
            "--memory",
            "2MiB",
            "--seconds",
            "1",
            "--rounds",
            "1",
            "--trace",
            "3000",
            "--large-size",
            "20000000",
            "--large-clients",
            "3",
            "--restart-objects",
            "2000",
            "--loader-wait",
            "5",
            "--crash-cycles",
            "3",
            "--rampart",
        ])
        .arg(&rampart)
        .arg("--dir")
        .arg(&work)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "rampart-bench disk failed:\n{stderr}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("disk.json")).unwrap()).unwrap();
    for server in ["rampart", "nginx"] {
        let hit = &json["disk_hit"][server];
        assert!(
            hit["median_cpu_us_per_request"].as_f64().unwrap() > 0.0,
            "{json}"
        );
        assert!(hit["median_hit_ratio"].as_f64().unwrap() > 0.9, "{json}");
        let large = &json["large"][server];
        assert!(
            large["median_cpu_seconds_per_gb"].as_f64().unwrap() > 0.0,
            "{json}"
        );
        assert!(
            json["restart"][server]["first_hit_ms"].as_f64().is_some(),
            "{json}"
        );
    }
    assert!(
        json["restart"]["rampart"]["index_whole_ms"]
            .as_f64()
            .is_some(),
        "{json}"
    );
    assert!(
        json["write_amplification"]["write_amplification"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    let crash = &json["crash"];
    assert_eq!(crash["corrupt"], 0, "{json}");
    assert_eq!(crash["failed_after_restart"], 0, "{json}");
    assert!(
        crash["checked_after_restarts"].as_u64().unwrap() >= 600,
        "{json}"
    );
    assert!(std::fs::read_to_string(out.join("disk.md"))
        .unwrap()
        .contains("## crash"));
    assert!(!work.exists(), "the servers' directories are removed");
    let _ = std::fs::remove_dir_all(&out);
}
