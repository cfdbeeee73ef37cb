//! Upgrading the binary under load: SIGUSR2 hands the listening sockets to a new process.
#![allow(clippy::unwrap_used)]

use crate::support;
use crate::support::h3 as h3c;

use std::time::{Duration, Instant};

use bytes::Bytes;
use support::tls::{files, TestCa};
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
            signal(pid, SIGKILL);
        }
    }
}

/// Sends `sig` to process `pid` (not the test's child, so not through `Proxy::signal`).
fn signal(pid: u32, sig: i32) {
    let _ = std::process::Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status();
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

/// HTTP/3 across an upgrade. While the old process drains, both processes read the same UDP
/// sockets, and whichever reads a datagram first gets it: each must reach the process whose
/// connection it belongs to (the old one's in-flight response goes on), and a new connection's
/// handshake the new process (the old one no longer accepts). Connection IDs name their process
/// for this; without that, half the new connections would be refused and old ones stall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_survives_an_upgrade_old_connections_finish_and_new_ones_reach_the_new_process() {
    const SLOW_LEN: u64 = 4 << 20;
    let origin = Origin::new()
        .route(
            "/slow",
            // Long enough for the new process to start and the new connections to be tried
            // while the old process still serves this.
            Reply::streamed(SLOW_LEN).delay(Duration::from_secs(10)),
        )
        .route("*", Reply::text("fast"))
        .start()
        .await;
    let ca = TestCa::new("test CA");
    let (c, k) = ca.leaf(&["a.test"]).write("upgrade-h3");
    let mut proxy = Proxy::start(&format!(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nlistening_port_https = 0\n\
         workers = 2\nhttp3 = true\n\n[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 0\n\
         forward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\nrule_type = \"Whitelist\"\n{}\n",
        origin.port(),
        files(&c, &k)
    ));
    let udp = proxy.h3.expect("an HTTP/3 socket");
    // A connection to the old process with a response still to come when it is told to stop.
    let mut first = h3c::connect(udp, "a.test", ca.roots()).await.unwrap();
    assert_eq!(first.get("a.test", "/warm").await.text(), "fast");
    let started = Instant::now();
    let slow = tokio::spawn(async move {
        let req = http::Request::get("https://a.test/slow").body(()).unwrap();
        let got = first.send(req, Bytes::new()).await;
        (got, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.signal(SIGUSR2);
    let successor = Successor::find(&proxy);
    assert!(
        proxy.wait_for_output("stopping the previous process", Duration::from_secs(20)),
        "{}",
        proxy.output()
    );
    // The old process drains (its /slow is in flight); new connections meanwhile.
    let mut failed = Vec::new();
    for i in 0..16 {
        let attempt = async {
            let mut h3 = h3c::connect(udp, "a.test", ca.roots()).await?;
            let req = http::Request::get(format!("https://a.test/n{i}"))
                .body(())
                .unwrap();
            let got = h3.send(req, Bytes::new()).await?;
            if got.text() == "fast" {
                Ok(())
            } else {
                Err(format!("{} {:?}", got.status, got.text()))
            }
        };
        match tokio::time::timeout(Duration::from_secs(3), attempt).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed.push(format!("connection {i}: {e}")),
            Err(_) => failed.push(format!("connection {i}: no answer within 3 s")),
        }
    }
    assert_eq!(
        proxy.wait_exit(Duration::from_millis(10)),
        None,
        "the old process had stopped before the new connections were tried: the test proves \
         nothing\n{}",
        proxy.output()
    );
    assert!(failed.is_empty(), "{failed:#?}\n{}", proxy.output());
    // The new process refuses to be upgraded while the old one drains (links join neighbours
    // only); it says so on the stderr it shares with the old one.
    signal(successor.0.unwrap(), SIGUSR2);
    assert!(
        proxy.wait_for_output("still finishing its HTTP/3", Duration::from_secs(5)),
        "{}",
        proxy.output()
    );
    let (got, took) = slow.await.unwrap();
    let got = got.unwrap_or_else(|e| panic!("{e}\n{}", proxy.output()));
    assert_eq!(got.status, 200);
    assert_eq!(got.body.len() as u64, SLOW_LEN);
    assert!(
        took < Duration::from_secs(16),
        "the in-flight response took {took:?}"
    );
    assert_eq!(
        proxy.wait_exit(Duration::from_secs(20)),
        Some(0),
        "{}",
        proxy.output()
    );
}

/// The disk tier across an upgrade: the new process waits for the directory's lock, which the
/// old one lets go as it starts draining, then serves what the old one wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_cache_survives_an_upgrade() {
    let origin = Origin::new()
        .route_fn("*", |s| {
            Reply::text(&format!("body of {}", s.uri.path())).header("cache-control", "max-age=600")
        })
        .start()
        .await;
    let port = free_port();
    let dir = scratch("upgrade-disk");
    let cfg = config_for(
        "localhost",
        &origin,
        &format!(
            "cache_disk = {:?}\ncache_disk_size = \"64MiB\"\ncache_disk_min_uses = 1\napi_key = \"{API_KEY}\"",
            dir.display().to_string()
        ),
        "",
    )
    .replace(
        "listening_port_http = 0",
        &format!("listening_port_http = {port}"),
    );
    let mut proxy = Proxy::start(&cfg);
    let get_path = |p: String| async move {
        fetch(http::Request::get(format!("http://127.0.0.1:{port}{p}")).header("host", "localhost"))
            .await
    };
    for i in 0..30 {
        assert_eq!(get_path(format!("/u/{i}")).await.status, 200);
    }
    // Written before the upgrade.
    let start = Instant::now();
    loop {
        let m = fetch(
            http::Request::get(format!("http://127.0.0.1:{port}/_rampart/metrics"))
                .header("host", "localhost")
                .header("authorization", format!("Bearer {API_KEY}")),
        )
        .await
        .text();
        if m.contains("rampart_cache_disk_writes_total 30") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{m}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.signal(SIGUSR2);
    let successor = Successor::find(&proxy);
    assert_eq!(
        proxy.wait_exit(Duration::from_secs(35)),
        Some(0),
        "{}",
        proxy.output()
    );
    assert!(successor.alive(), "{}", proxy.output());
    // The new process took the directory over: what the old one wrote is a disk hit.
    let start = Instant::now();
    let mut from_disk = 0;
    for i in 0..30 {
        let got = loop {
            let got = get_path(format!("/u/{i}")).await;
            let disk = got.header("cache-status") == Some("rampart; hit; detail=disk");
            if disk || start.elapsed() > Duration::from_secs(10) {
                break got;
            }
            // A miss before the lock was taken stores in memory; ask for another one.
            if got.header("cache-status") == Some("rampart; hit") {
                break got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(got.text(), format!("body of /u/{i}"));
        from_disk += usize::from(got.header("cache-status") == Some("rampart; hit; detail=disk"));
    }
    assert!(
        from_disk >= 20,
        "{from_disk} of 30 from disk after the upgrade"
    );
    assert!(origin.requests() <= 40, "{}", origin.requests());
    eprintln!("{from_disk} of 30 from disk after the upgrade");
    let _ = std::fs::remove_dir_all(&dir);
}
