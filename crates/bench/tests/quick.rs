//! Runs `rampart-bench --quick` against rampart, NGINX, Apache Traffic Server and h2o and checks
//! the harness produced a sane, complete report. It asserts nothing about speed.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

fn installed(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn quick_run_writes_a_complete_report() {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_rampart-bench"));
    let rampart = bench.with_file_name("rampart");
    assert!(
        rampart.exists(),
        "build rampart first (`cargo build --workspace`): {} is missing",
        rampart.display()
    );
    for tool in ["nginx", "traffic_server", "h2o", "wrk", "ab", "h2load"] {
        assert!(
            installed(tool),
            "{tool} is required for this test (.ci/run installs it)"
        );
    }
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bench-quick-{}", std::process::id()));
    let status = Command::new(&bench)
        .args([
            "--quick",
            "--peers",
            "rampart,nginx,nginx-default,trafficserver,h2o,floor",
            "--out",
        ])
        .arg(&out)
        .arg("--rampart")
        .arg(&rampart)
        .status()
        .unwrap();
    assert!(status.success(), "rampart-bench --quick failed");

    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    const SCENARIOS: [&str; 11] = [
        "cached-hello",
        "cached-image",
        "pass",
        "pass-hello",
        "close",
        "h2",
        "h2-tls",
        "vus",
        "burst",
        "https",
        "https-close",
    ];
    for scenario in SCENARIOS {
        assert!(
            report.contains(&format!("## `{scenario}`")),
            "no section for {scenario}:\n{report}"
        );
    }
    assert!(
        !report.contains("scenario https"),
        "the https scenarios must run, not be skipped:\n{report}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let runs = json["runs"].as_array().unwrap();
    for scenario in SCENARIOS {
        for peer in ["rampart", "nginx"] {
            let run = runs
                .iter()
                .find(|r| r["scenario"] == scenario && r["peer"] == peer)
                .unwrap_or_else(|| panic!("no run of {peer} in {scenario}"));
            assert!(
                run["result"]["requests"].as_u64().unwrap() > 0,
                "{peer} {scenario}: no requests"
            );
            assert!(run["result"]["rps"].as_f64().unwrap() > 0.0);
            assert!(
                run["server_cpu_us_per_request"].as_f64().unwrap() > 0.0,
                "{peer} {scenario}: no CPU measured"
            );
        }
    }
    // Cached scenarios really hit in rampart, over HTTPS too: the origin stays (nearly) flat.
    for scenario in ["cached-hello", "https", "https-close"] {
        let run = runs
            .iter()
            .find(|r| r["scenario"] == scenario && r["peer"] == "rampart")
            .unwrap();
        assert!(run["origin_requests"].as_u64().unwrap() <= 5, "{run}");
    }
    // Traffic Server caches: in every cached scenario but h2c (it has none), the origin stays
    // flat. h2o has no cache: it passes, and answers the connection scenarios' `/hello` from a
    // file, marked as such; it sits out the other cached ones.
    let run_of = |scenario: &str, peer: &str| {
        runs.iter()
            .find(|r| r["scenario"] == scenario && r["peer"] == peer)
            .cloned()
    };
    for scenario in ["cached-hello", "cached-image", "close", "https", "h2-tls"] {
        let run = run_of(scenario, "trafficserver")
            .unwrap_or_else(|| panic!("no run of trafficserver in {scenario}"));
        assert!(run["result"]["requests"].as_u64().unwrap() > 0, "{run}");
        assert!(run["origin_requests"].as_u64().unwrap() <= 5, "{run}");
        assert_eq!(run["fixed_file"], false, "{run}");
    }
    assert!(run_of("h2", "trafficserver").is_none());
    for scenario in ["close", "https", "https-close", "h2", "h2-tls"] {
        let run = run_of(scenario, "h2o").unwrap_or_else(|| panic!("no run of h2o in {scenario}"));
        assert!(run["result"]["requests"].as_u64().unwrap() > 0, "{run}");
        assert_eq!(run["origin_requests"].as_u64().unwrap(), 0, "{run}");
        assert_eq!(run["fixed_file"], true, "{run}");
    }
    for scenario in ["pass", "pass-hello"] {
        let run = run_of(scenario, "h2o").unwrap_or_else(|| panic!("no run of h2o in {scenario}"));
        assert_eq!(run["fixed_file"], false, "{run}");
        assert!(run["origin_requests"].as_u64().unwrap() > 0, "{run}");
    }
    for scenario in ["cached-hello", "cached-image", "vus"] {
        assert!(
            run_of(scenario, "h2o").is_none(),
            "h2o has no cache: {scenario}"
        );
    }
    assert!(report.contains("*fixed file, no cache*"), "{report}");
    // The summary table: every closed-loop row with rampart's CPU beside the best other
    // program's, whoever it is.
    let best = report
        .split("## rampart against the best peer of each row")
        .nth(1)
        .unwrap_or_else(|| panic!("no best-peer table:\n{report}"));
    for scenario in ["cached-hello", "pass", "close", "h2", "h2-tls", "https"] {
        assert!(
            best.contains(&format!("| `{scenario}` ")),
            "no best-peer row for {scenario}"
        );
    }

    // The floor runs where its fixed 12-byte answer is the same work, and nowhere else; the
    // tables state every program's CPU per request as a multiple of it.
    for scenario in ["cached-hello", "close", "vus", "burst"] {
        let run = runs
            .iter()
            .find(|r| r["scenario"] == scenario && r["peer"] == "floor")
            .unwrap_or_else(|| panic!("no run of the floor in {scenario}"));
        assert!(run["result"]["requests"].as_u64().unwrap() > 0);
        assert_eq!(run["result"]["errors"].as_u64().unwrap(), 0, "{run}");
    }
    // The APISIX seed's headline: QPS on one core against both NGINX peers.
    assert!(
        report.contains("## Single-core QPS (the APISIX seed's shape)")
            && report.contains("vs NGINX (default settings)"),
        "{report}"
    );
    for scenario in ["cached-image", "pass", "pass-hello", "h2", "https"] {
        assert!(
            !runs
                .iter()
                .any(|r| r["scenario"] == scenario && r["peer"] == "floor"),
            "the floor does not serve {scenario}"
        );
    }
    assert!(report.contains("× floor"), "{report}");
    // vus and burst restart each peer: the report gives percentiles and memory per connection.
    assert!(report.contains("| p90 | p95 |") && report.contains("RSS per connection"));
    for chart in [
        "cached-hello-0-throughput.svg",
        "cached-hello-0-cpu.svg",
        "pass-0-latency.svg",
        "vus-mean.svg",
        "burst-p99.svg",
    ] {
        let svg = std::fs::read_to_string(out.join("charts").join(chart)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("rampart"),
            "{chart}"
        );
    }
    for config in [
        "configs/rampart/rampart.toml",
        "configs/nginx/nginx.conf",
        "configs/trafficserver/runroot.yaml",
        "configs/trafficserver/etc/records.config",
        "configs/trafficserver/etc/remap.config",
        "configs/h2o/h2o.conf",
    ] {
        assert!(
            out.join(config).exists(),
            "{config} not written into the report folder"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}
