//! The process: graceful shutdown, a second instance on a taken port, `run` without a
//! configuration, `rampart demo`, the one-line proxy command, and what `run` says at start.
#![allow(clippy::unwrap_used)]

use crate::support;
use http::Request;
use std::time::{Duration, Instant};
use support::*;
const SIGTERM: i32 = 15;
const SIGINT: i32 = 2;

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_requests() {
    let origin = Origin::new()
        .route(
            "/slow",
            Reply::text("finished").delay(Duration::from_millis(1500)),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("drain", &origin, "", ""));
    let url = proxy.url("/slow");
    let in_flight = tokio::spawn(async move {
        send(
            &client(),
            Request::get(url)
                .header("host", "drain")
                .body(empty())
                .unwrap(),
        )
        .await
    });
    // Wait until the origin has the request, then ask rampart to stop.
    let deadline = Instant::now() + Duration::from_secs(10);
    while origin.requests() == 0 {
        assert!(
            Instant::now() < deadline,
            "request never reached the origin"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.signal(SIGTERM);
    let got = in_flight.await.unwrap();
    assert_eq!(
        (got.status.as_u16(), got.text()),
        (200, "finished".to_owned())
    );
    let proxy = exits_cleanly(proxy).await;
    assert!(
        std::net::TcpStream::connect(proxy.addr).is_err(),
        "still accepting after shutdown"
    );
}

#[tokio::test]
async fn run_names_inactive_keys_once_and_keeps_stdout_for_the_access_log() {
    let origin = Origin::new().route("*", Reply::text("ok")).start().await;
    let proxy = Proxy::start(&config_for(
        "x",
        &origin,
        "azure_table_storage_key = \"k\"\nadd_logging = true",
        "",
    ));
    assert_eq!(get(&proxy, "x", "/").await.status, 200);
    assert!(proxy.wait_for_output("path=/", Duration::from_secs(5)));
    let (out, err) = (
        proxy.stdout.lock().unwrap().clone(),
        proxy.stderr.lock().unwrap().clone(),
    );
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("accepted but not active"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains("azure_table_storage_key"),
        "{err}"
    );
    assert!(err.contains("listening on http://"), "{err}");
    assert!(
        !out.contains("listening on"),
        "startup lines on stdout: {out}"
    );
    assert!(
        out.lines().all(|l| l.contains("path=")),
        "stdout is the access log only: {out}"
    );
}

#[tokio::test]
async fn a_second_instance_on_the_same_port_refuses_to_start() {
    let origin = Origin::new().route("*", Reply::text("first")).start().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = config_for("x", &origin, "", "").replace(
        "listening_port_http = 0",
        &format!("listening_port_http = {port}"),
    );
    let first = Proxy::start(&cfg);
    assert_eq!(first.addr.port(), port);
    // SO_REUSEPORT would let it join silently and split the traffic between two caches.
    let out = Proxy::try_start(&cfg);
    assert!(
        out.contains(&format!("cannot listen on 127.0.0.1:{port}"))
            && out.contains("another process is already listening there"),
        "{out}"
    );
    assert_eq!(get(&first, "x", "/").await.text(), "first");
}

#[test]
fn run_without_config_says_how_to_start() {
    let dir = scratch("empty-dir");
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::process::Command::new(rampart_bin())
        .arg("run")
        .current_dir(&dir)
        .output()
        .unwrap();
    if std::path::Path::new("/etc/rampart/rampart.toml").exists() {
        return; // a machine-wide config would be picked up; nothing to assert here.
    }
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rampart demo") && err.contains("--config"),
        "{err}"
    );
}

#[tokio::test]
async fn demo_serves_its_pages_and_stops_on_ctrl_c() {
    let mut demo = Proxy::spawn(&["demo", "--listen", "127.0.0.1:0"]);
    assert!(
        demo.wait_for_output("Press Ctrl-C", Duration::from_secs(5)),
        "{}",
        demo.output()
    );
    let out = demo.stdout.lock().unwrap().clone();
    assert!(out.contains("curl -i http://"), "{out}");
    let c = client();
    let get = |p: &str| Request::get(demo.url(p)).body(empty()).unwrap();
    let hello = send(&c, get("/")).await;
    assert_eq!(hello.text(), "Hello World!");
    assert_eq!(hello.header("x-arc2-cache"), Some("Miss"));
    let again = send(&c, get("/")).await;
    assert_eq!(
        again.header("x-arc2-cache"),
        Some("Hit"),
        "the demo shows a miss, then a hit"
    );
    let img = send(&c, get("/image.jpg")).await;
    assert_eq!(img.header("content-type"), Some("image/jpeg"));
    assert!(
        img.body.len() > 70_000 && img.body.starts_with(&[0xFF, 0xD8]),
        "a real JPEG of ~73 KB"
    );
    let cookie = send(&c, get("/cookie")).await;
    assert!(cookie.header("set-cookie").is_some());
    let slow = send(&c, get("/slow")).await;
    assert_eq!(slow.header("cache-control"), Some("no-store"));
    // The demo screens for SQL injection, as its printed try-line says.
    assert!(out.contains("SQL injection: 403"), "{out}");
    let sqli = send(&c, get("/search?q=1%27%20OR%20%271%27%3D%271")).await;
    assert_eq!(sqli.status, 403);
    assert_eq!(sqli.header("x-arc2-cache"), Some("Block"));
    demo.signal(SIGINT);
    let code = tokio::task::spawn_blocking(move || demo.wait_exit(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(code, Some(0));
}

/// `rampart demo` says where its state (its local CA) is, and as root keeps it in root's home,
/// never in the service's state directory `/var/lib/rampart`.
#[test]
fn demo_says_where_it_keeps_its_state_and_keeps_out_of_the_services() {
    let home = scratch("demo-home");
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt as _;
        m.uid() == 0
    });
    let expected = home.join(if root {
        ".local/share/rampart-demo"
    } else {
        ".local/share/rampart"
    });
    let mut demo = Proxy::spawn_env(
        &["demo", "--listen", "127.0.0.1:0"],
        &[
            ("HOME", home.to_str().unwrap()),
            ("XDG_DATA_HOME", ""),
            ("STATE_DIRECTORY", ""),
        ],
    );
    assert!(
        demo.wait_for_output("Press Ctrl-C", Duration::from_secs(10)),
        "{}",
        demo.output()
    );
    let out = demo.stdout.lock().unwrap().clone();
    assert!(
        out.contains(&format!("state         : {}", expected.display())),
        "the demo names its state directory {}:\n{out}",
        expected.display()
    );
    assert!(
        expected.join("ca/root.pem").is_file(),
        "the local CA is in the directory the demo names"
    );
    assert!(
        out.contains(&format!(
            "--cacert {}",
            expected.join("ca/root.pem").display()
        )),
        "{out}"
    );
    demo.signal(SIGINT);
    assert_eq!(demo.wait_exit(Duration::from_secs(10)), Some(0));
    let _ = std::fs::remove_dir_all(&home);
}

#[tokio::test]
async fn one_line_proxy_command() {
    let origin = Origin::new()
        .route("*", Reply::text("via proxy cmd"))
        .start()
        .await;
    let to = format!("127.0.0.1:{}", origin.port());
    let proxy = Proxy::spawn(&[
        "proxy",
        "--from",
        "127.0.0.1:0",
        "--to",
        &to,
        "--workers",
        "1",
    ]);
    let got = get(&proxy, "any.host", "/z").await;
    assert_eq!(got.text(), "via proxy cmd");
    // Its own configuration draws no warning.
    let err = proxy.stderr.lock().unwrap().clone();
    assert!(!err.contains("warning"), "{err}");
}

#[test]
fn one_line_proxy_with_a_bad_origin_names_the_flag() {
    for to in ["localhost", "localhost:0", "http://", "a b:80"] {
        let out = std::process::Command::new(rampart_bin())
            .args(["proxy", "--from", "127.0.0.1:0", "--to", to])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{to}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("give the origin as HOST:PORT"), "{to}: {err}");
        assert!(
            !err.contains("--to:"),
            "no position in a file the user never wrote: {err}"
        );
    }
}

/// The harness itself: an assertion inside an origin's handler runs in the origin's task, where
/// a panic would only close a connection. The origin answers 500 and the test fails when its
/// handle is dropped.
#[tokio::test]
#[should_panic(expected = "the test origin panicked: GET /boom: the origin's own assertion")]
async fn a_panic_in_the_test_origin_fails_the_test() {
    let origin = Origin::new()
        .route_fn("/boom", |_| panic!("the origin's own assertion"))
        .start()
        .await;
    let proxy = Proxy::start(&config_for("boom.example", &origin, "", ""));
    let got = get(&proxy, "boom.example", "/boom").await;
    assert_eq!(got.status, 500);
    drop(origin);
}

/// Waits (off the runtime) for a stopping proxy to exit, and checks it exited with 0.
pub(crate) async fn exits_cleanly(mut proxy: Proxy) -> Proxy {
    tokio::task::spawn_blocking(move || {
        let code = proxy.wait_exit(Duration::from_secs(10));
        assert_eq!(code, Some(0), "{}", proxy.output());
        proxy
    })
    .await
    .unwrap()
}
