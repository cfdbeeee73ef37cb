//! Upgrading the binary under load: SIGUSR2 hands the listening sockets to a new process.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use support::*;

const SIGUSR2: i32 = 12;
const SIGKILL: i32 = 9;

/// The process the upgrade started (parsed from the old one's stderr); killed when dropped, as
/// it is not the test's child.
struct Successor(Option<u32>);

impl Successor {
    fn find(proxy: &Proxy) -> Successor {
        assert!(
            proxy.wait_for_output("as process ", Duration::from_secs(10)),
            "{}",
            proxy.output()
        );
        let err = proxy.stderr.lock().unwrap().clone();
        let pid = err
            .split("as process ")
            .nth(1)
            .and_then(|r| r.split(';').next())
            .and_then(|p| p.trim().parse().ok());
        Successor(pid)
    }

    fn alive(&self) -> bool {
        self.0
            .is_some_and(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
    }
}

impl Drop for Successor {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = std::process::Command::new("kill")
                .args([format!("-{SIGKILL}"), pid.to_string()])
                .status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr2_hands_the_sockets_to_a_new_process_without_failing_a_request() {
    let origin = Origin::new().route("*", Reply::text("page")).start().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = config_for("localhost", &origin, "", "").replace(
        "listening_port_http = 0",
        &format!("listening_port_http = {port}"),
    );
    let mut proxy = Proxy::start(&cfg);
    let old = proxy.pid();
    let wrk = std::process::Command::new("wrk")
        .args(["-t2", "-c64", "-d6s", &format!("http://localhost:{port}/")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("wrk (.ci/run installs it)");
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.signal(SIGUSR2);
    let successor = Successor::find(&proxy);
    assert!(
        proxy.wait_for_output("stopping the previous process", Duration::from_secs(20)),
        "{}",
        proxy.output()
    );
    // The old process drains and exits 0; the new one goes on.
    assert_eq!(
        proxy.wait_exit(Duration::from_secs(35)),
        Some(0),
        "{}",
        proxy.output()
    );
    let out = wrk.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("requests in"), "{report}");
    assert!(
        !report.contains("Socket errors"),
        "{report}\n{}",
        proxy.output()
    );
    assert!(!report.contains("Non-2xx"), "{report}");
    assert!(successor.alive(), "{}", proxy.output());
    assert_ne!(successor.0, Some(old));
    let got =
        fetch(http::Request::get(format!("http://127.0.0.1:{port}/")).header("host", "localhost"))
            .await;
    assert_eq!(got.text(), "page");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_process_that_cannot_start_leaves_the_old_one_serving() {
    let origin = Origin::new()
        .route("*", Reply::text("still here"))
        .start()
        .await;
    let path = scratch("upgrade.toml");
    std::fs::write(&path, config_for("x", &origin, "", "")).unwrap();
    let mut proxy = Proxy::spawn(&["run", "--config", path.to_str().unwrap()]);
    // The new process will read a file with an error.
    std::fs::write(&path, "workers = 0\n").unwrap();
    proxy.signal(SIGUSR2);
    let _successor = Successor::find(&proxy);
    assert!(
        proxy.wait_for_output("upgrade failed", Duration::from_secs(20)),
        "{}",
        proxy.output()
    );
    assert_eq!(proxy.wait_exit(Duration::from_millis(200)), None);
    assert_eq!(get(&proxy, "x", "/").await.text(), "still here");
}
