//! HTTP/2 to origins, end to end: `origin_protocol = "h2c"` (prior knowledge) and `"h2"` (TLS,
//! ALPN) with a real HTTP/2 origin (hyper), cached like HTTP/1.1 and multiplexed on one
//! connection; an origin that does not choose `h2` in ALPN; and gRPC through rampart with a
//! real gRPC server and client pair (Python grpcio): unary calls, status and trailers, a large
//! message, and streaming in both directions.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use http::Version;
use support::tls::TestCa;
use support::*;

/// A TLS origin configuration that offers `protocols` in ALPN.
fn offering(leaf: &support::tls::Leaf, protocols: &[&[u8]]) -> Arc<rustls::ServerConfig> {
    let mut c = (*leaf.server_config()).clone();
    c.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
    Arc::new(c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_reach_h2c_and_h2_origins_on_one_connection_and_are_cached() {
    let ca = TestCa::new("origin CA");
    let leaf = ca.leaf(&["origin.test"]);
    let reply = Reply::text("over h2\n").header("cache-control", "max-age=60");
    let h2c = Origin::new().route("*", reply.clone()).start().await;
    let h2 = Origin::new()
        .route("*", reply)
        .start_tls(offering(&leaf, &[b"h2", b"http/1.1"]))
        .await;
    let ca_file = ca.write("origin-ca");
    let proxy = Proxy::start(&format!(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nworkers = 1\n\
         logging_level = \"warn\"\nproxy_ca_file = {:?}\n\
         [[proxy_rules]]\ndomain = \"c.test\"\nupstreams = [\"127.0.0.1:{}\"]\norigin_protocol = \"h2c\"\n\
         max_age_seconds = 60\n\
         [[proxy_rules]]\ndomain = \"t.test\"\nupstreams = [\"https://127.0.0.1:{}\"]\n\
         forward_tls_name = \"origin.test\"\norigin_protocol = \"h2\"\nmax_age_seconds = 60\n",
        ca_file.display().to_string(),
        h2c.port(),
        h2.port()
    ));
    for (host, origin) in [("c.test", &h2c), ("t.test", &h2)] {
        // Ten different paths at once: one connection carries them all.
        let mut calls = Vec::new();
        for i in 0..10 {
            let r = req(&proxy, host, &format!("/p{i}"));
            calls.push(tokio::spawn(fetch(r)));
        }
        for c in calls {
            let got = c.await.unwrap();
            assert_eq!(got.status, 200, "{host}: {}", proxy.output());
            assert_eq!(got.text(), "over h2\n");
        }
        assert_eq!(origin.requests(), 10, "{host}");
        assert_eq!(
            origin.connections(),
            1,
            "{host}: one multiplexed connection"
        );
        let seen = origin.last();
        assert_eq!(seen.version, Version::HTTP_2, "{host}");
        // Host became :authority; the pool key's TLS name did not leak into it.
        assert_eq!(seen.uri.authority().map(|a| a.as_str()), Some(host));
        assert!(!seen.headers.contains_key("host"), "{:?}", seen.headers);
        assert!(seen.headers.contains_key("x-forwarded-for"));
        // Cached like any response.
        let again = get(&proxy, host, "/p3").await;
        assert_eq!(again.status, 200);
        assert_eq!(
            again
                .headers
                .get("x-arc2-cache")
                .map(|v| v.to_str().unwrap()),
            Some("Hit"),
            "{host}: {:?}",
            again.headers
        );
        assert_eq!(origin.requests(), 10, "{host}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_h2_connections_close_after_proxy_keepalive_sec() {
    let origin = Origin::new().route("*", Reply::text("ok\n")).start().await;
    let proxy = Proxy::start(&config_for(
        "c.test",
        &origin,
        "proxy_keepalive_sec = 1\nworkers = 1",
        "origin_protocol = \"h2c\"",
    ));
    assert_eq!(get(&proxy, "c.test", "/a").await.status, 200);
    assert_eq!(get(&proxy, "c.test", "/b").await.status, 200);
    assert_eq!(origin.connections(), 1);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(get(&proxy, "c.test", "/c").await.status, 200);
    assert_eq!(origin.connections(), 2, "the idle connection was closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_does_not_choose_h2_is_a_bad_gateway() {
    let ca = TestCa::new("origin CA");
    let leaf = ca.leaf(&["origin.test"]);
    let ca_file = ca.write("origin-ca-h1");
    // One that offers only HTTP/1.1 (rustls refuses the handshake), one that ignores ALPN
    // (the handshake completes without a protocol: rampart's own check).
    for (alpn, why) in [
        (&[&b"http/1.1"[..]][..], "NoApplicationProtocol"),
        (&[][..], "did not choose HTTP/2"),
    ] {
        let origin = Origin::new()
            .route("*", Reply::text("http/1.1 only\n"))
            .start_tls(offering(&leaf, alpn))
            .await;
        let proxy = Proxy::start(&format!(
            "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nworkers = 1\n\
             logging_level = \"warn\"\nproxy_ca_file = {:?}\n\
             [[proxy_rules]]\ndomain = \"t.test\"\nupstreams = [\"https://127.0.0.1:{}\"]\n\
             forward_tls_name = \"origin.test\"\norigin_protocol = \"h2\"\nmax_age_seconds = 0\n",
            ca_file.display().to_string(),
            origin.port()
        ));
        let got = get(&proxy, "t.test", "/").await;
        assert_eq!(got.status, 502, "{}", proxy.output());
        assert!(
            proxy.wait_for_output(why, Duration::from_secs(5)),
            "{why}: {}",
            proxy.output()
        );
        assert_eq!(origin.requests(), 0);
    }
}

// ---------------------------------------------------------------------------------------------
// gRPC

/// Debian's Python, where `.ci/run` installs grpcio (`python3-grpcio`).
const PYTHON: &str = "/usr/bin/python3";

fn peer_script() -> String {
    format!("{}/tests/grpc/peer.py", env!("CARGO_MANIFEST_DIR"))
}

/// A gRPC server (`peer.py serve`), stopped when dropped.
struct GrpcServer {
    child: Child,
    port: u16,
}

impl GrpcServer {
    fn start(tls: Option<(&std::path::Path, &std::path::Path)>) -> GrpcServer {
        let mut cmd = Command::new(PYTHON);
        cmd.arg(peer_script()).arg("serve");
        if let Some((chain, key)) = tls {
            cmd.arg(chain).arg(key);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{PYTHON} (with python3-grpcio) is needed: {e}"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the gRPC server did not start: {line:?}"));
        GrpcServer { child, port }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs every call of `peer.py call` through `proxy` as `authority`; what came back.
fn grpc_calls(proxy: &Proxy, authority: &str) -> serde_json::Value {
    let out = Command::new(PYTHON)
        .arg(peer_script())
        .arg("call")
        .arg(proxy.addr.port().to_string())
        .arg(authority)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{authority}: {}\nrampart:\n{}",
        String::from_utf8_lossy(&out.stderr),
        proxy.output()
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn grpc_calls_pass_through_with_trailers_and_streams_both_ways() {
    let ca = TestCa::new("origin CA");
    let (chain, key) = ca.leaf(&["origin.test"]).write("grpc-origin");
    let plain = GrpcServer::start(None);
    let tls = GrpcServer::start(Some((&chain, &key)));
    let ca_file = ca.write("grpc-origin-ca");
    let proxy = Proxy::start(&format!(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nworkers = 2\n\
         logging_level = \"warn\"\nproxy_ca_file = {:?}\n\
         [[proxy_rules]]\ndomain = \"c.test\"\nupstreams = [\"127.0.0.1:{}\"]\norigin_protocol = \"h2c\"\n\
         max_age_seconds = 60\nmax_body_size = \"8MiB\"\n\
         [[proxy_rules]]\ndomain = \"t.test\"\nupstreams = [\"https://127.0.0.1:{}\"]\n\
         forward_tls_name = \"origin.test\"\norigin_protocol = \"h2\"\nmax_age_seconds = 60\n\
         max_body_size = \"8MiB\"\n",
        ca_file.display().to_string(),
        plain.port,
        tls.port
    ));
    for authority in ["c.test", "t.test"] {
        let got = grpc_calls(&proxy, authority);
        // The origin saw rampart's forwarding fields; its trailer fields came back.
        let unary = got["unary"].as_str().unwrap();
        assert!(
            unary.starts_with("hello|via=2 rampart|"),
            "{authority}: {got}"
        );
        assert!(
            unary.ends_with("x-forwarded-for=127.0.0.1"),
            "{authority}: {got}"
        );
        assert_eq!(got["trailers"]["x-trailer"], "kept", "{authority}: {got}");
        // A failed call's status (grpc-status in the trailers) and its metadata.
        assert_eq!(got["fail"]["code"], "NOT_FOUND", "{authority}: {got}");
        assert_eq!(got["fail"]["details"], "nothing here");
        assert_eq!(got["fail"]["trailers"]["x-why"], "asked to");
        assert_eq!(got["large"], "3145728 bytes", "{authority}: {got}");
        assert_eq!(
            got["count"],
            serde_json::json!(["0", "1", "2", "3", "4"]),
            "{authority}"
        );
        assert_eq!(got["total"], "60", "{authority}");
        // Ping-pong: each message sent after the previous answer, so both directions streamed.
        assert_eq!(
            got["chat"],
            serde_json::json!(["echo:0", "echo:1", "echo:2", "echo:3", "echo:4"]),
            "{authority}"
        );
        // The server spoke first; the client's stream began only then.
        assert_eq!(
            got["greet"],
            serde_json::json!(["hi", "echo:after-hi"]),
            "{authority}"
        );
    }
    // Never cached (the rules cache for 60 s): the same call made twice reached the origin
    // twice.
    let again = grpc_calls(&proxy, "c.test");
    assert_eq!(again["seq"], serde_json::json!(["3", "4"]), "{again}");
}

/// The gRPC exemptions (no read-ahead, no total body timeout) hold only on rules with an HTTP/2
/// origin: elsewhere the header must not lift an upload's limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_content_type_lifts_no_limit_on_http1_rules() {
    let origin = Origin::new().route("*", Reply::text("ok\n")).start().await;
    let proxy = Proxy::start(&config_for(
        "slow.test",
        &origin,
        "client_body_timeout_seconds = 1\nclient_body_total_timeout_seconds = 2",
        "",
    ));
    let addr = proxy.addr;
    let started = std::time::Instant::now();
    // A byte every 400 ms: never a pause of 1 s, but longer than 2 s in all.
    let answer = tokio::task::spawn_blocking(move || {
        use std::io::{Read as _, Write as _};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
        s.write_all(
            b"POST /echo.Echo/Unary HTTP/1.1\r\nHost: slow.test\r\n\
              Content-Type: application/grpc\r\nContent-Length: 40\r\n\r\n",
        )
        .unwrap();
        let mut w = s.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 0..30 {
                if w.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(400));
            }
        });
        let mut out = vec![0u8; 4096];
        let n = s.read(&mut out).unwrap_or(0);
        String::from_utf8_lossy(&out[..n]).into_owned()
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// Active health checks speak the origin's protocol: an h2c location is probed over HTTP/2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_probes_speak_http2_to_an_h2c_origin() {
    let origin = Origin::new().route("*", Reply::text("ok\n")).start().await;
    let proxy = Proxy::start(&format!(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nworkers = 1\n\
         logging_level = \"warn\"\n\
         [[proxy_rules]]\ndomain = \"c.test\"\nmax_age_seconds = 0\n\
         [proxy_rules.routing_rules]\nrouting_method = \"Priority\"\nhttps_only = false\n\
         enable_health_checks = true\nhealth_check_interval = 1\nhealth_check_path = \"/health\"\n\
         [[proxy_rules.routing_rules.routing_locations]]\npriority = 1\n\
         forward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\norigin_protocol = \"h2c\"\n",
        origin.port()
    ));
    let probe = |s: &Seen| {
        s.uri.path() == "/health"
            && s.headers
                .get("user-agent")
                .is_some_and(|v| v.to_str().unwrap().starts_with("rampart-health-check/"))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !origin.seen().iter().any(probe) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = origin.seen();
    let probes: Vec<_> = seen.iter().filter(|s| probe(s)).collect();
    assert!(!probes.is_empty(), "no probe arrived: {}", proxy.output());
    assert!(
        probes.iter().all(|s| s.version == Version::HTTP_2),
        "{:?}",
        probes.iter().map(|s| s.version).collect::<Vec<_>>()
    );
    assert_eq!(
        probes[0].uri.authority().map(|a| a.as_str()),
        Some("c.test")
    );
}
