//! The PROXY protocol end to end: headers of both versions read on listeners that expect them
//! (the client address feeds X-Forwarded-For, the access log and screening), malformed
//! headers and untrusted peers refused, TLS after the header, headers sent to origins, and
//! HAProxy as a real peer on both sides (`send-proxy-v2` in front, `accept-proxy` behind).
#![allow(clippy::unwrap_used)]

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::tls::{self, TestCa};
use support::*;

/// The `n` plain-HTTP addresses the proxy prints, in configuration order.
fn http_listeners(proxy: &Proxy, n: usize) -> Vec<SocketAddr> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found: Vec<SocketAddr> = proxy
            .stderr
            .lock()
            .unwrap()
            .split("listening on http://")
            .skip(1)
            .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
            .collect();
        if found.len() >= n || Instant::now() > deadline {
            assert_eq!(found.len(), n, "{found:?}");
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `bytes` on a new connection and reads the answer until the peer closes or 3 s pass.
fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    raw(addr, bytes, Duration::from_secs(3))
}

fn v2(src: SocketAddr, dst: SocketAddr, tlvs: &[(u8, &[u8])]) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    let mut block = Vec::new();
    let family = match (src, dst) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            block.extend_from_slice(&s.ip().octets());
            block.extend_from_slice(&d.ip().octets());
            0x11
        }
        (SocketAddr::V6(s), SocketAddr::V6(d)) => {
            block.extend_from_slice(&s.ip().octets());
            block.extend_from_slice(&d.ip().octets());
            0x21
        }
        _ => panic!("one family"),
    };
    block.extend_from_slice(&src.port().to_be_bytes());
    block.extend_from_slice(&dst.port().to_be_bytes());
    for (t, v) in tlvs {
        block.push(*t);
        block.extend_from_slice(&(v.len() as u16).to_be_bytes());
        block.extend_from_slice(v);
    }
    h.extend_from_slice(&[0x21, family]);
    h.extend_from_slice(&(block.len() as u16).to_be_bytes());
    h.extend_from_slice(&block);
    h
}

const GET: &[u8] = b"GET /who HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n";

async fn origin() -> OriginHandle {
    Origin::new()
        .route(
            "*",
            Reply::text("hello\n").header("cache-control", "no-store"),
        )
        .start()
        .await
}

fn forwarded_for(origin: &OriginHandle) -> String {
    origin
        .last()
        .headers
        .get("x-forwarded-for")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

fn metric(text: &str, line_start: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {line_start} in\n{text}"))
}

// Multi-threaded: the blocking client below must not hold up the origin's task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_of_both_versions_name_the_client() {
    let origin = origin().await;
    // One listener reads PROXY headers, the other (the first) does not.
    let proxy = Proxy::start(&config_for(
        "a.test",
        &origin,
        &format!(
            "listen = [\"127.0.0.1:0\", {{ address = \"127.0.0.3:0\", proxy_protocol = true }}]\n\
             add_logging = true\nlogging_level = \"info\"\napi_key = \"{API_KEY}\"\nworkers = 1\n"
        ),
        "deny_ips = [\"203.0.113.0/24\"]",
    ));
    let listeners = http_listeners(&proxy, 2);
    let (plain, proxied) = (listeners[0], listeners[1]);

    // Version 1, IPv4.
    let mut bytes = b"PROXY TCP4 198.51.100.7 192.0.2.1 40001 80\r\n".to_vec();
    bytes.extend_from_slice(GET);
    let answer = exchange(proxied, &bytes);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(forwarded_for(&origin), "198.51.100.7");

    // Version 2, IPv6, with TLVs (ALPN, authority, a unique id), the request in the same
    // packet as the header.
    let header = v2(
        "[2001:db8::7]:40002".parse().unwrap(),
        "[2001:db8::1]:443".parse().unwrap(),
        &[(0x01, b"http/1.1"), (0x02, b"a.test"), (0x05, b"req-1")],
    );
    let mut bytes = header.clone();
    bytes.extend_from_slice(GET);
    let answer = exchange(proxied, &bytes);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(forwarded_for(&origin), "2001:db8::7");

    // The header split across writes (a slow balancer) is read whole.
    let mut s = TcpStream::connect(proxied).unwrap();
    for piece in header.chunks(5) {
        s.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    s.write_all(GET).unwrap();
    let mut answer = String::new();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // A version 2 LOCAL header (a balancer's own health check): the TCP peer counts.
    let mut bytes = b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00".to_vec();
    bytes.extend_from_slice(GET);
    assert!(exchange(proxied, &bytes).starts_with("HTTP/1.1 200"));
    assert_eq!(forwarded_for(&origin), "127.0.0.1");

    // Screening sees the client the header names: deny_ips holds 203.0.113.0/24.
    let mut bytes = b"PROXY TCP4 203.0.113.9 192.0.2.1 40003 80\r\n".to_vec();
    bytes.extend_from_slice(GET);
    let answer = exchange(proxied, &bytes);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");

    // The access log names the clients.
    for client in ["198.51.100.7", "2001:db8::7", "203.0.113.9"] {
        assert!(
            proxy.wait_for_output(&format!("client={client} "), Duration::from_secs(5)),
            "{client} not logged:\n{}",
            proxy.stdout.lock().unwrap()
        );
    }

    // The other listener reads no header: a PROXY line there is a bad request line, and HTTP
    // works as usual.
    let answer = exchange(plain, b"PROXY TCP4 198.51.100.7 192.0.2.1 40001 80\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let before = origin.requests();
    assert!(exchange(plain, GET).starts_with("HTTP/1.1 200"));
    assert_eq!(origin.requests(), before + 1);
    assert_eq!(forwarded_for(&origin), "127.0.0.1");
}

#[tokio::test]
async fn malformed_headers_and_untrusted_peers_are_closed_without_an_answer() {
    let origin = origin().await;
    let proxy = Proxy::start(&config_for(
        "a.test",
        &origin,
        &format!(
            "proxy_protocol = true\napi_key = \"{API_KEY}\"\nworkers = 1\n\
             listen = [\"127.0.0.1:0\", {{ address = \"127.0.0.2:0\", proxy_protocol = false }}]\n\
             client_header_timeout_seconds = 1\n"
        ),
        "",
    ));
    let listeners = http_listeners(&proxy, 2);
    let (proxied, plain) = (listeners[0], listeners[1]);
    let good_v2 = v2(
        "192.0.2.5:1000".parse().unwrap(),
        "192.0.2.1:80".parse().unwrap(),
        &[],
    );
    let mut bad_version = good_v2.clone();
    bad_version[12] = 0x31;
    let mut bad_family = good_v2.clone();
    bad_family[13] = 0x51;
    let mut long_tlv = good_v2.clone();
    long_tlv[15] += 3;
    long_tlv.extend_from_slice(&[0x01, 0x00, 0x40]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("no header", GET.to_vec()),
        (
            "v1 bad address",
            b"PROXY TCP4 1.2.3 1.2.3.4 1 2\r\n".to_vec(),
        ),
        (
            "v1 family mismatch",
            b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n".to_vec(),
        ),
        (
            "v1 port out of range",
            b"PROXY TCP4 1.2.3.4 1.2.3.4 70000 2\r\n".to_vec(),
        ),
        (
            "v1 line too long",
            format!("PROXY UNKNOWN {}\r\n", "x".repeat(120)).into_bytes(),
        ),
        ("v1 bare LF", b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2\n".to_vec()),
        ("v2 version 3", bad_version),
        ("v2 unknown family", bad_family),
        ("v2 TLV past the end", long_tlv),
    ];
    let before = origin.requests();
    for (name, mut bytes) in cases {
        bytes.extend_from_slice(GET);
        let answer = exchange(proxied, &bytes);
        assert_eq!(answer, "", "{name}: closed without an answer");
    }
    // A header that never completes: closed at the request-head timeout.
    let started = Instant::now();
    assert_eq!(exchange(proxied, b"PROXY TCP4 1.2.3.4"), "");
    assert!(
        started.elapsed() < Duration::from_millis(2900),
        "closed by the server"
    );
    assert_eq!(origin.requests(), before, "nothing forwarded");

    // The plain listener counts refusals in the metrics.
    let text = scrape_at(plain).await;
    assert_eq!(
        metric(
            &text,
            "rampart_proxy_protocol_refused_total{reason=\"malformed\"}"
        ),
        9
    );
    assert_eq!(
        metric(
            &text,
            "rampart_proxy_protocol_refused_total{reason=\"timeout\"}"
        ),
        1
    );
    drop(proxy);

    // Only proxy_protocol_from may send headers: 127.0.0.1 is not in it here.
    let proxy = Proxy::start(&config_for(
        "a.test",
        &origin,
        &format!(
            "proxy_protocol = true\nproxy_protocol_from = [\"10.0.0.0/8\"]\napi_key = \"{API_KEY}\"\n\
             listen = [\"127.0.0.1:0\", {{ address = \"127.0.0.2:0\", proxy_protocol = false }}]\n"
        ),
        "",
    ));
    let listeners = http_listeners(&proxy, 2);
    let mut bytes = b"PROXY TCP4 10.1.1.1 192.0.2.1 1 80\r\n".to_vec();
    bytes.extend_from_slice(GET);
    assert_eq!(exchange(listeners[0], &bytes), "");
    assert_eq!(origin.requests(), before, "nothing forwarded");
    let text = scrape_at(listeners[1]).await;
    assert_eq!(
        metric(
            &text,
            "rampart_proxy_protocol_refused_total{reason=\"untrusted\"}"
        ),
        1
    );
}

async fn scrape_at(addr: SocketAddr) -> String {
    let req = http::Request::get(format!("http://{addr}/_rampart/metrics"))
        .header("authorization", format!("Bearer {API_KEY}"))
        .body(empty())
        .unwrap();
    send(&client(), req).await.text()
}

#[tokio::test]
async fn tls_follows_the_header_on_an_https_listener() {
    let origin = origin().await;
    let ca = TestCa::new("pp CA");
    let (c, k) = ca.leaf(&["a.test"]).write("pp");
    let proxy = Proxy::start(&config_for(
        "a.test",
        &origin,
        "listening_port_https = 0\nproxy_protocol = true\nworkers = 1\n",
        &format!(
            "tls_cert_file = {:?}\ntls_key_file = {:?}\n",
            c.display().to_string(),
            k.display().to_string()
        ),
    ));
    let https = proxy.https.unwrap();
    for (offer, header) in [
        (
            b"h2".to_vec(),
            b"PROXY TCP4 198.51.100.20 192.0.2.1 5000 443\r\n".to_vec(),
        ),
        (
            b"http/1.1".to_vec(),
            v2(
                "[2001:db8::20]:5000".parse().unwrap(),
                "[2001:db8::1]:443".parse().unwrap(),
                &[(0x02, b"a.test")],
            ),
        ),
    ] {
        let mut tcp = tokio::net::TcpStream::connect(https).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut tcp, &header)
            .await
            .unwrap();
        let config = tls::client_config(ca.roots(), &[&offer[..]], &[&rustls::version::TLS13]);
        let connector = tokio_rustls::TlsConnector::from(config);
        let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
        let s = connector.connect(name, tcp).await.unwrap();
        // HTTP/2 carries the authority in the URI; HTTP/1.1 sends origin-form and Host.
        let req = if offer == b"h2" {
            http::Request::get("https://a.test/who")
        } else {
            http::Request::get("/who").header("host", "a.test")
        };
        let got = tls::request(s, req.body(empty()).unwrap()).await;
        assert_eq!(got.status, 200);
        let want = if offer == b"h2" {
            "198.51.100.20"
        } else {
            "2001:db8::20"
        };
        assert_eq!(forwarded_for(&origin), want);
        assert_eq!(origin.last().headers["x-forwarded-proto"], "https");
    }
}

/// A TCP origin that reads what precedes each connection's HTTP (the PROXY header), answers
/// every request on it, and records (header, requests on that connection).
struct RawOrigin {
    port: u16,
    seen: Arc<Mutex<Vec<Connection>>>,
}

/// (bytes before the first request, requests served) of one origin connection.
type Connection = (Vec<u8>, usize);

impl RawOrigin {
    fn start() -> RawOrigin {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { break };
                let log = log.clone();
                std::thread::spawn(move || {
                    let idx = {
                        let mut l = log.lock().unwrap();
                        l.push((Vec::new(), 0));
                        l.len() - 1
                    };
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let mut header_done = false;
                    loop {
                        let n = match s.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        buf.extend_from_slice(&chunk[..n]);
                        if !header_done {
                            // The request line starts with GET; what precedes it is the header.
                            let Some(at) = buf.windows(4).position(|w| w == b"GET ") else {
                                continue;
                            };
                            log.lock().unwrap()[idx].0 = buf[..at].to_vec();
                            buf.drain(..at);
                            header_done = true;
                        }
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            buf.drain(..end + 4);
                            log.lock().unwrap()[idx].1 += 1;
                            let _ = s.write_all(
                                b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncache-control: no-store\r\n\r\nok\n",
                            );
                        }
                    }
                });
            }
        });
        RawOrigin { port, seen }
    }
}

#[tokio::test]
async fn headers_are_sent_to_origins_one_connection_per_client() {
    for (version, v1) in [("v1", true), ("v2", false)] {
        let raw = RawOrigin::start();
        let toml = format!(
            "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nworkers = 1\n\
             [[proxy_rules]]\ndomain = \"a.test\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\n\
             send_proxy_protocol = \"{version}\"\nmax_age_seconds = 0\n",
            raw.port
        );
        let proxy = Proxy::start(&toml);
        // Two clients (two source ports), two requests each on one keep-alive connection.
        let mut ports = Vec::new();
        for _ in 0..2 {
            let mut s = TcpStream::connect(proxy.addr).unwrap();
            ports.push(s.local_addr().unwrap().port());
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            for _ in 0..2 {
                s.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
                    .unwrap();
                let mut buf = [0u8; 1024];
                let n = s.read(&mut buf).unwrap();
                assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{version}");
            }
        }
        let seen = raw.seen.lock().unwrap().clone();
        assert_eq!(
            seen.len(),
            2,
            "{version}: one origin connection per client: {seen:?}"
        );
        for ((header, requests), port) in seen.iter().zip(&ports) {
            assert_eq!(*requests, 2, "{version}: the client's connection is reused");
            let want = if v1 {
                format!(
                    "PROXY TCP4 127.0.0.1 127.0.0.1 {port} {}\r\n",
                    proxy.addr.port()
                )
                .into_bytes()
            } else {
                v2(SocketAddr::from(([127, 0, 0, 1], *port)), proxy.addr, &[])
            };
            assert_eq!(header, &want, "{version}");
        }
    }
}

struct Haproxy(Child);

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts HAProxy with `config`, waiting until `port` accepts; `None` when HAProxy is not
/// installed (`.ci/run` installs it).
fn haproxy(config: &str, port: u16) -> Option<Haproxy> {
    let path = scratch("haproxy.cfg");
    std::fs::write(&path, config).unwrap();
    let child = match Command::new("haproxy")
        .args(["-db", "-f"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(c) => Haproxy(c),
        Err(e) => {
            eprintln!("haproxy not installed ({e}); skipped");
            return None;
        }
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "haproxy did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(child)
}

#[tokio::test]
async fn haproxy_in_front_with_send_proxy_v2_and_behind_with_accept_proxy() {
    let origin = origin().await;
    // Behind rampart: HAProxy reads rampart's PROXY header (accept-proxy) and tells the origin
    // what it said.
    let behind = free_port();
    // rampart, reading HAProxy's header.
    let proxy = Proxy::start(&format!(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nworkers = 1\nproxy_protocol = true\n\
         add_logging = true\nlogging_level = \"info\"\n\
         [[proxy_rules]]\ndomain = \"a.test\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {behind}\n\
         send_proxy_protocol = \"v2\"\nmax_age_seconds = 0\nenable_logging = true\n"
    ));
    let front = free_port();
    let config = format!(
        "defaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
         frontend front\n  bind 127.0.0.1:{front}\n  default_backend rampart\n\
         backend rampart\n  server r {} send-proxy-v2\n\
         frontend behind\n  bind 127.0.0.1:{behind} accept-proxy\n\
           http-request set-header X-PP-Src %[src]\n  http-request set-header X-PP-Dst %[dst]:%[dst_port]\n\
           default_backend origin\n\
         backend origin\n  server o 127.0.0.1:{}\n",
        proxy.addr,
        origin.port()
    );
    let Some(_haproxy) = haproxy(&config, front) else {
        return;
    };
    // The client connects from 127.0.0.2: HAProxy's own connection comes from 127.0.0.1.
    let client = tokio::net::TcpSocket::new_v4().unwrap();
    client.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let s = client
        .connect(SocketAddr::from(([127, 0, 0, 1], front)))
        .await
        .unwrap();
    let got = tls_free_request(s).await;
    assert_eq!(got, 200);
    let seen = origin.last();
    let h = |n: &str| seen.headers.get(n).map(|v| v.to_str().unwrap().to_owned());
    // rampart read HAProxy's header: the client is 127.0.0.2, not HAProxy's 127.0.0.1.
    assert_eq!(h("x-forwarded-for").as_deref(), Some("127.0.0.2"));
    // HAProxy behind read rampart's header: the same client, and as the destination the
    // address the client connected to (HAProxy's front), passed on from HAProxy's header.
    assert_eq!(h("x-pp-src").as_deref(), Some("127.0.0.2"));
    assert_eq!(h("x-pp-dst"), Some(format!("127.0.0.1:{front}")));
    assert!(proxy.wait_for_output("client=127.0.0.2 ", Duration::from_secs(5)));
}

/// One HTTP/1.1 GET for a.test on `s`; the status.
async fn tls_free_request(s: tokio::net::TcpStream) -> u16 {
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s))
        .await
        .unwrap();
    tokio::spawn(conn);
    let res = send
        .send_request(
            http::Request::get("/who")
                .header("host", "a.test")
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap();
    res.status().as_u16()
}
