//! What packaging relies on: `--version`, systemd's notify protocol (readiness, and the main
//! process changing at an upgrade), the unit file, the state directory under systemd, the man
//! page, and the files the container image copies.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::*;

const SIGUSR2: i32 = 12;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn version_names_the_commit_and_the_build_date() {
    let out = Command::new(rampart_bin())
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let v = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let rest = v
        .strip_prefix(&format!("rampart {} (commit ", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{v}"));
    let commit = rest.split([',', ')']).next().unwrap();
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match head {
        Some(h) => assert_eq!(commit, h, "{v}"),
        None => assert_eq!(commit, "unknown", "{v}"),
    }
    let date = rest.split("built ").nth(1).unwrap().trim_end_matches(')');
    assert_eq!(date.len(), 10, "{v}");
    assert!(date.starts_with("20") && date.as_bytes()[4] == b'-', "{v}");
}

/// Receives one datagram within 20 s.
fn receive(sock: &UnixDatagram) -> String {
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buf = [0u8; 512];
    let n = sock.recv(&mut buf).expect("a notification");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_and_the_upgrade_handover_reach_the_notify_socket() {
    let origin = Origin::new().route("*", Reply::text("hi")).start().await;
    let sock_path = scratch("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    let cfg = scratch("notify.toml");
    std::fs::write(&cfg, config_for("x", &origin, "", "")).unwrap();
    let mut proxy = Proxy::spawn_env(
        &["run", "--config", cfg.to_str().unwrap()],
        &[("NOTIFY_SOCKET", sock_path.to_str().unwrap())],
    );
    assert_eq!(receive(&sock), "READY=1");
    assert_eq!(get(&proxy, "x", "/").await.text(), "hi");

    // An upgrade: the new process says it is the main process now.
    proxy.signal(SIGUSR2);
    let said = receive(&sock);
    let pid: u32 = said
        .strip_prefix("MAINPID=")
        .and_then(|r| r.strip_suffix("\nREADY=1"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{said:?}"));
    assert_ne!(pid, proxy.pid());
    assert_eq!(proxy.wait_exit(Duration::from_secs(35)), Some(0));
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
}

#[test]
fn the_systemd_unit_passes_systemd_analyze() {
    let unit = std::fs::read_to_string(repo().join("packaging/rampart.service")).unwrap();
    // The unit as installed names /usr/bin/rampart; verify it against the binary built here.
    let dir = scratch("unit");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rampart.service");
    std::fs::write(&path, unit.replace("/usr/bin/rampart", rampart_bin())).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no", path.to_str().unwrap()])
        .output()
        .expect("systemd-analyze (.ci/run installs systemd)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("rampart.service"), "{text}");
    for line in [
        "Type=notify",
        "NotifyAccess=all",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "StateDirectory=rampart",
        "CacheDirectory=rampart",
    ] {
        assert!(unit.contains(line), "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_directory_under_systemd_is_state_directory() {
    let origin = Origin::new().route("*", Reply::text("hi")).start().await;
    let state = scratch("systemd-state");
    std::fs::create_dir_all(&state).unwrap();
    let cfg = scratch("state.toml");
    let toml = config_for(
        "a.test",
        &origin,
        "listening_port_https = 0",
        "tls = \"internal\"",
    );
    std::fs::write(&cfg, toml).unwrap();
    let proxy = Proxy::spawn_env(
        &["run", "--config", cfg.to_str().unwrap()],
        &[
            ("STATE_DIRECTORY", state.to_str().unwrap()),
            ("HOME", "/nonexistent"),
        ],
    );
    assert!(proxy.https.is_some(), "{}", proxy.output());
    assert!(state.join("ca/root.pem").exists(), "{}", proxy.output());
}

#[test]
fn the_man_page_renders_and_covers_every_command_and_signal() {
    let page = repo().join("packaging/rampart.8");
    let out = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(&page)
        .output()
        .expect("groff");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&page).unwrap();
    let help = Command::new(rampart_bin()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let commands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .unwrap()
        .split("Options:")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 4, "{help}");
    for c in commands {
        assert!(
            text.contains(&format!(".B rampart {c}")),
            "the man page lacks `{c}`"
        );
    }
    for s in ["SIGHUP", "SIGUSR1", "SIGUSR2", "SIGTERM"] {
        assert!(text.contains(s), "the man page lacks {s}");
    }
}

#[test]
fn the_container_image_files_exist_and_its_example_config_is_valid() {
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    assert!(dockerfile.contains("USER 65532:65532"), "non-root");
    assert!(dockerfile.contains("VOLUME [\"/var/lib/rampart\", \"/var/cache/rampart\"]"));
    assert!(dockerfile.contains("/out/var/cache/rampart"));
    assert!(dockerfile.contains("packaging/rampart.toml"));
    // The image is the fully optimised build, and its example passes the strict check.
    assert!(dockerfile.contains("cargo build --profile dist"));
    assert!(dockerfile.contains("check --strict --config /out/etc/rampart/rampart.example.toml"));
    let out = Command::new(rampart_bin())
        .args(["check", "--strict", "--config"])
        .arg(repo().join("packaging/rampart.toml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("0 warning(s)"), "{text}");
}
