//! HTTPS end to end: certificates by SNI, ALPN, resumption, file reloads, protocol floors,
//! redirect and HSTS, HTTP/2 over TLS through the same pipeline, origins over TLS, and the
//! local CA. Real rustls clients (and curl/openssl where installed) against the real binary.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use http::Request;
use rustls::HandshakeKind;
use support::tls::{self, eventually, files, TestCa};
use support::*;

/// A rule for `domain` to the origin on `port`, with extra rule lines.
fn rule(domain: &str, port: u16, extra: &str) -> String {
    format!(
        "\n[[proxy_rules]]\ndomain = \"{domain}\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\n\
         forward_port_http = {port}\nrule_type = \"Whitelist\"\nenable_logging = true\nignore_query_string = false\n\
         enable_sql_injection_protection = true\nenable_compression = false\nenable_minification = false\n\
         enable_webp_transformation = false\n{extra}\n"
    )
}

const GLOBAL: &str = "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nlistening_port_https = 0\n\
                      workers = 1\nlogging_level = \"info\"\nadd_logging = true\nadd_sql_injection_protection = true\n";

async fn hello_origin() -> OriginHandle {
    Origin::new()
        .route(
            "*",
            Reply::text("hello\n").header("cache-control", "max-age=60"),
        )
        .start()
        .await
}

#[tokio::test]
async fn sni_selects_the_certificate_of_each_domain() {
    let origin = hello_origin().await;
    let ca = TestCa::new("test CA");
    // a.test also names 127.0.0.1, so a client without SNI can verify it as the default.
    let a = ca.leaf(&["a.test", "127.0.0.1"]);
    let b = ca.leaf(&["b.test"]);
    let (ac, ak) = a.write("a");
    let (bc, bk) = b.write("b");
    let conf = format!(
        "{GLOBAL}{}{}",
        rule("a.test", origin.port(), &files(&ac, &ak)),
        rule("b.test", origin.port(), &files(&bc, &bk))
    );
    let proxy = Proxy::start(&conf);
    let https = proxy.https.expect("an HTTPS listener");
    let client = tls::browser(ca.roots());

    let s = tls::connect(https, "a.test", &client).await.unwrap();
    assert_eq!(tls::peer_leaf(&s), a.der);
    let s = tls::connect(https, "b.test", &client).await.unwrap();
    assert_eq!(tls::peer_leaf(&s), b.der);
    // A request over each, and the origin is told the client used HTTPS.
    for host in ["a.test", "b.test"] {
        let got = tls::get(https, host, "/x", &client).await;
        assert_eq!(got.status, 200, "{host}");
        assert_eq!(got.text(), "hello\n");
        let seen = origin.last();
        assert_eq!(seen.headers["host"], host);
        assert_eq!(seen.headers["x-forwarded-proto"], "https");
    }
    // A name no rule has, and no SNI at all: the handshake fails.
    let err = tls::connect(https, "c.test", &client).await.unwrap_err();
    assert!(err.to_string().contains("alert"), "{err}");
    assert!(tls::connect(https, "127.0.0.1", &client).await.is_err());

    // With a default domain, both get a.test's certificate.
    let proxy = Proxy::start(&format!("tls_default_domain = \"a.test\"\n{conf}"));
    let https = proxy.https.unwrap();
    let s = tls::connect(https, "127.0.0.1", &client).await.unwrap();
    assert_eq!(tls::peer_leaf(&s), a.der);
    let insecure_name = tls::connect(https, "c.test", &client).await;
    // Served a.test's certificate, which the client rejects for c.test.
    let err = insecure_name.unwrap_err().to_string();
    assert!(err.contains("not valid for name"), "{err}");
}

#[tokio::test]
async fn alpn_offers_h2_and_http11() {
    let origin = hello_origin().await;
    let ca = TestCa::new("test CA");
    let (c, k) = ca.leaf(&["a.test"]).write("alpn");
    let proxy = Proxy::start(&format!(
        "{GLOBAL}{}",
        rule("a.test", origin.port(), &files(&c, &k))
    ));
    let https = proxy.https.unwrap();
    let v12_13 = [&rustls::version::TLS13, &rustls::version::TLS12];
    for (offer, want_alpn, want_version) in [
        (
            vec![&b"h2"[..], b"http/1.1"],
            Some(&b"h2"[..]),
            http::Version::HTTP_2,
        ),
        (
            vec![&b"http/1.1"[..], b"h2"],
            Some(&b"h2"[..]),
            http::Version::HTTP_2,
        ),
        (
            vec![&b"http/1.1"[..]],
            Some(&b"http/1.1"[..]),
            http::Version::HTTP_11,
        ),
        (vec![], None, http::Version::HTTP_11),
    ] {
        let config = tls::client_config(ca.roots(), &offer, &v12_13);
        let s = tls::connect(https, "a.test", &config).await.unwrap();
        assert_eq!(s.get_ref().1.alpn_protocol(), want_alpn, "offer {offer:?}");
        let got = tls::get(https, "a.test", "/", &config).await;
        assert_eq!(got.status, 200);
        assert_eq!(got.version, want_version, "offer {offer:?}");
    }

    // curl, where installed, negotiates HTTP/2 too.
    let ca_file = ca.write("alpn-ca");
    let port = https.port();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-s", "--http2", "--cacert"])
            .arg(&ca_file)
            .arg("--resolve")
            .arg(format!("a.test:{port}:127.0.0.1"))
            .args(["-o", "/dev/null", "-w", "%{http_code} %{http_version}"])
            .arg(format!("https://a.test:{port}/"))
            .output()
    })
    .await
    .unwrap();
    match out {
        Ok(o) => assert_eq!(String::from_utf8_lossy(&o.stdout), "200 2"),
        Err(e) => eprintln!("curl not installed ({e}); skipped the curl --http2 check"),
    }
}

/// The GOAWAY frame of an HTTP/2 connection error PROTOCOL_ERROR on stream 0: its header,
/// last stream 0, error code 1.
const GOAWAY_PROTOCOL_ERROR: [u8; 17] = [0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

#[tokio::test]
async fn after_alpn_h2_only_http2_is_spoken() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = hello_origin().await;
    let ca = TestCa::new("test CA");
    let (c, k) = ca.leaf(&["a.test"]).write("strict-h2");
    let proxy = Proxy::start(&format!(
        "{GLOBAL}{}",
        rule("a.test", origin.port(), &files(&c, &k))
    ));
    let https = proxy.https.unwrap();
    let config = tls::client_config(ca.roots(), &[b"h2"], &[&rustls::version::TLS13]);
    // RFC 9113 §3.4: an invalid preface is a connection error, never an HTTP/1.1 answer.
    for sent in [
        &b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"[..],
        b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n",
    ] {
        let mut s = tls::connect(https, "a.test", &config).await.unwrap();
        assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        s.write_all(sent).await.unwrap();
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
        assert!(read.is_ok(), "the connection is closed");
        assert!(
            !got.starts_with(b"HTTP/"),
            "{:?}",
            String::from_utf8_lossy(&got)
        );
        assert!(
            got.windows(17).any(|w| w == GOAWAY_PROTOCOL_ERROR),
            "GOAWAY(PROTOCOL_ERROR) in {got:?}"
        );
    }
    // The same on a plain listener for a client that started the preface and broke it.
    let answer = raw(
        proxy.addr,
        b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n",
        Duration::from_secs(3),
    );
    assert!(
        answer
            .as_bytes()
            .windows(17)
            .any(|w| w == GOAWAY_PROTOCOL_ERROR),
        "{answer:?}"
    );
}

#[tokio::test]
async fn sessions_resume_on_tls13_and_tls12() {
    let origin = hello_origin().await;
    let ca = TestCa::new("test CA");
    let (c, k) = ca.leaf(&["a.test"]).write("resume");
    let proxy = Proxy::start(&format!(
        "{GLOBAL}{}",
        rule("a.test", origin.port(), &files(&c, &k))
    ));
    let https = proxy.https.unwrap();
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        // One client config = one session cache, as in a browser.
        let config = tls::client_config(ca.roots(), &[b"http/1.1"], &[version]);
        let s = tls::connect(https, "a.test", &config).await.unwrap();
        assert_eq!(s.get_ref().1.handshake_kind(), Some(HandshakeKind::Full));
        // A request, so the TLS 1.3 session tickets sent after the handshake are read.
        let got = tls::request(
            s,
            Request::get("/")
                .header("host", "a.test")
                .body(empty())
                .unwrap(),
        )
        .await;
        assert_eq!(got.status, 200);
        let s = tls::connect(https, "a.test", &config).await.unwrap();
        assert_eq!(
            s.get_ref().1.handshake_kind(),
            Some(HandshakeKind::Resumed),
            "{version:?}"
        );
        assert_eq!(s.get_ref().1.protocol_version(), Some(version.version));
    }
}

#[tokio::test]
async fn certificate_files_are_reloaded_when_they_change() {
    let origin = hello_origin().await;
    let ca = TestCa::new("test CA");
    let first = ca.leaf(&["a.test"]);
    let (c, k) = first.write("reload");
    let proxy = Proxy::start(&format!(
        "{GLOBAL}tls_reload_interval_seconds = 1\n{}",
        rule("a.test", origin.port(), &files(&c, &k))
    ));
    let https = proxy.https.unwrap();
    let client = tls::browser(ca.roots());
    let served = async || {
        let s = tls::connect(https, "a.test", &client).await.unwrap();
        tls::peer_leaf(&s)
    };
    assert_eq!(served().await, first.der);

    // Renewed files (as certbot or a secret store would write them): picked up, no restart.
    let second = ca.leaf(&["a.test"]);
    std::fs::write(&c, &second.chain_pem).unwrap();
    std::fs::write(&k, &second.key_pem).unwrap();
    assert!(
        eventually(Duration::from_secs(10), async || served().await
            == second.der)
        .await,
        "the new certificate was not served; {}",
        proxy.output()
    );
    assert!(proxy.wait_for_output("certificate reloaded", Duration::from_secs(5)));

    // A key that does not belong to the certificate: refused, the current one stays.
    let third = ca.leaf(&["a.test"]);
    std::fs::write(&c, &third.chain_pem).unwrap();
    assert!(
        proxy.wait_for_output(
            "the private key does not belong to the certificate",
            Duration::from_secs(10)
        ),
        "{}",
        proxy.output()
    );
    assert_eq!(served().await, second.der);
    let got = tls::get(https, "a.test", "/", &client).await;
    assert_eq!(got.status, 200);
}

/// A TLS 1.1 ClientHello (no supported_versions extension), with SNI a.test.
fn tls11_client_hello() -> Vec<u8> {
    let name = b"a.test";
    let mut sni = vec![0x00, 0x00]; // extension type server_name
    let list_len = 3 + name.len();
    sni.extend_from_slice(&((list_len + 2) as u16).to_be_bytes());
    sni.extend_from_slice(&(list_len as u16).to_be_bytes());
    sni.push(0); // host_name
    sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
    sni.extend_from_slice(name);
    let mut body = vec![0x03, 0x02]; // client_version TLS 1.1
    body.extend_from_slice(&[7u8; 32]); // random
    body.push(0); // no session id
    body.extend_from_slice(&[0x00, 0x04, 0x00, 0x2f, 0x00, 0x35]); // AES-CBC-SHA suites
    body.extend_from_slice(&[0x01, 0x00]); // null compression
    body.extend_from_slice(&(sni.len() as u16).to_be_bytes());
    body.extend_from_slice(&sni);
    let mut hs = vec![0x01];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 0x03, 0x01];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

#[tokio::test]
async fn old_protocol_versions_are_refused() {
    let origin = hello_origin().await;
    let ca = TestCa::new("test CA");
    let (c, k) = ca.leaf(&["a.test"]).write("versions");
    let conf = format!("{GLOBAL}{}", rule("a.test", origin.port(), &files(&c, &k)));
    let proxy = Proxy::start(&conf);
    let https = proxy.https.unwrap();

    // TLS 1.1: the server answers with a protocol_version alert (level 2, description 70).
    let reply = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(https).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&tls11_client_hello()).unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap_or(0);
        buf[..n].to_vec()
    })
    .await
    .unwrap();
    // rustls resolves the certificate before it looks at the version, so a real TLS 1.1
    // ClientHello (which has no signature_algorithms) fails there: handshake_failure (40);
    // a 1.1 hello with TLS 1.2's extensions would get protocol_version (70). Either way: a
    // fatal alert instead of a ServerHello.
    assert!(reply.len() >= 7, "no alert: {reply:?}");
    assert_eq!(
        reply[0], 0x15,
        "an alert record, not a ServerHello: {reply:?}"
    );
    assert_eq!(reply[5], 2, "fatal: {reply:?}");
    assert!([40, 70].contains(&reply[6]), "{reply:?}");

    // OpenSSL's client, where it can still speak TLS 1.1, gets the same alert.
    let port = https.port();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("openssl")
            .args(["s_client", "-tls1_1", "-cipher", "DEFAULT:@SECLEVEL=0"])
            .args(["-servername", "a.test", "-connect"])
            .arg(format!("127.0.0.1:{port}"))
            .stdin(std::process::Stdio::null())
            .output()
    })
    .await
    .unwrap();
    match out {
        Ok(o) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(!o.status.success(), "{text}");
            // "no protocols available" = this OpenSSL build cannot send TLS 1.1 at all.
            if !text.contains("no protocols available") {
                assert!(
                    text.contains("alert handshake failure")
                        || text.contains("alert protocol version"),
                    "{text}"
                );
                assert!(text.contains("Cipher is (NONE)"), "no session: {text}");
            }
        }
        Err(e) => eprintln!("openssl not installed ({e}); skipped"),
    }

    // TLS 1.2 is accepted by default and refused under tls_min_version = "TLS_1_3".
    let tls12 = tls::client_config(ca.roots(), &[b"http/1.1"], &[&rustls::version::TLS12]);
    let s = tls::connect(https, "a.test", &tls12).await.unwrap();
    assert_eq!(
        s.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
    let strict = Proxy::start(&format!("tls_min_version = \"TLS_1_3\"\n{conf}"));
    let err = tls::connect(strict.https.unwrap(), "a.test", &tls12)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("ProtocolVersion"), "{err}");
}

/// `redirect_to_https_status = 301` (NGINX `return 301 https://$host$request_uri`) answers 301
/// instead of the default 308.
#[tokio::test]
async fn redirect_to_https_status_301() {
    let origin = hello_origin().await;
    let ca = TestCa::new("test CA");
    let (c, k) = ca.leaf(&["a.test"]).write("redirect-301");
    let conf = format!(
        "{GLOBAL}{}",
        rule(
            "a.test",
            origin.port(),
            &format!(
                "{}redirect_to_https = true\nredirect_to_https_status = 301\n",
                files(&c, &k)
            )
        )
    );
    let proxy = Proxy::start(&conf);
    let https = proxy.https.unwrap();
    let got = get(&proxy, "a.test", "/page?x=1").await;
    assert_eq!(got.status, 301);
    assert_eq!(
        got.header("location"),
        Some(format!("https://a.test:{}/page?x=1", https.port()).as_str())
    );
    assert_eq!(origin.requests(), 0, "a redirect does not reach the origin");
}

#[tokio::test]
async fn redirect_to_https_and_hsts() {
    let origin = hello_origin().await;
    let ca = TestCa::new("test CA");
    let (c, k) = ca.leaf(&["a.test", "b.test"]).write("hsts");
    let conf = format!(
        "{GLOBAL}{}{}",
        rule(
            "a.test",
            origin.port(),
            &format!(
                "{}redirect_to_https = true\nhsts_max_age_seconds = 31536000\nhsts_include_subdomains = true\n",
                files(&c, &k)
            )
        ),
        rule("b.test", origin.port(), &files(&c, &k))
    );
    let proxy = Proxy::start(&conf);
    let https = proxy.https.unwrap();

    let got = get(&proxy, "a.test", "/page?x=1").await;
    assert_eq!(got.status, 308);
    assert_eq!(
        got.header("location"),
        Some(format!("https://a.test:{}/page?x=1", https.port()).as_str())
    );
    assert_eq!(
        got.header("strict-transport-security"),
        None,
        "never over plain HTTP"
    );
    assert_eq!(origin.requests(), 0, "a redirect does not reach the origin");

    let client = tls::browser(ca.roots());
    let got = tls::get(https, "a.test", "/page?x=1", &client).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.header("strict-transport-security"),
        Some("max-age=31536000; includeSubDomains")
    );
    // A cached answer gets it too (it is added on delivery, not stored).
    let got = tls::get(https, "a.test", "/page?x=1", &client).await;
    assert_eq!(got.header("x-arc2-cache"), Some("Hit"));
    assert!(got.header("strict-transport-security").is_some());
    // Rules without the keys: plain HTTP is served, no HSTS.
    let got = get(&proxy, "b.test", "/").await;
    assert_eq!(got.status, 200);
    let got = tls::get(https, "b.test", "/", &client).await;
    assert_eq!(got.header("strict-transport-security"), None);
}

#[tokio::test]
async fn http2_over_tls_caches_screens_and_logs_like_http11() {
    let origin = hello_origin().await;
    let ca = TestCa::new("test CA");
    let (c, k) = ca.leaf(&["a.test"]).write("h2");
    let proxy = Proxy::start(&format!(
        "{GLOBAL}{}",
        rule("a.test", origin.port(), &files(&c, &k))
    ));
    let https = proxy.https.unwrap();
    let h2 = tls::browser(ca.roots());
    let h1 = tls::client_config(
        ca.roots(),
        &[b"http/1.1"],
        &[&rustls::version::TLS13, &rustls::version::TLS12],
    );

    let got = tls::get(https, "a.test", "/cached", &h2).await;
    assert_eq!(got.version, http::Version::HTTP_2);
    assert_eq!(got.header("x-arc2-cache"), Some("Miss"));
    let got = tls::get(https, "a.test", "/cached", &h2).await;
    assert_eq!(got.header("x-arc2-cache"), Some("Hit"));
    // One cache for every protocol; HTTPS entries apart from plain HTTP's (cache_by_scheme).
    let got = tls::get(https, "a.test", "/cached", &h1).await;
    assert_eq!(got.version, http::Version::HTTP_11);
    assert_eq!(got.header("x-arc2-cache"), Some("Hit"));
    let got = get(&proxy, "a.test", "/cached").await;
    assert_eq!(got.header("x-arc2-cache"), Some("Miss"));
    let got = get(&proxy, "a.test", "/cached").await;
    assert_eq!(got.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(origin.requests(), 2);

    // Screening: SQL injection is refused over HTTP/2 + TLS before the origin sees it.
    let got = tls::get(https, "a.test", "/s?id=1%27%20OR%20%271%27%3D%271", &h2).await;
    assert_eq!(got.status, 403);
    assert_eq!(got.header("x-arc2-cache"), Some("Block"));
    assert_eq!(origin.requests(), 2);

    // The access log names the scheme and protocol.
    assert!(
        proxy.wait_for_output("scheme=https version=HTTP/2 ", Duration::from_secs(5)),
        "{}",
        proxy.output()
    );
}

#[tokio::test]
async fn origins_over_tls_are_verified() {
    let origin_ca = TestCa::new("origin CA");
    let leaf = origin_ca.leaf(&["origin.test"]);
    let tls_origin = Origin::new()
        .route("*", Reply::text("over tls\n"))
        .start_tls(leaf.server_config())
        .await;
    let plain_origin = Origin::new()
        .route("*", Reply::text("plain\n"))
        .start()
        .await;
    let ca_file = origin_ca.write("origin-ca");
    let other_ca = TestCa::new("someone else").write("other-ca");
    let base = "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nworkers = 1\nlogging_level = \"warn\"\n";
    let origin_rule = |ca: &Path, name: &str, extra: &str| {
        format!(
            "{base}proxy_ca_file = {:?}\n{extra}\n[[proxy_rules]]\ndomain = \"o.test\"\nmax_age_seconds = 0\n\
             upstreams = [\"https://127.0.0.1:{}\"]\nforward_tls_name = \"{name}\"\n",
            ca.display().to_string(),
            tls_origin.port()
        )
    };

    // Verified against proxy_ca_file, with the configured name.
    let proxy = Proxy::start(&origin_rule(&ca_file, "origin.test", ""));
    let got = get(&proxy, "o.test", "/a").await;
    assert_eq!(got.status, 200, "{}", proxy.output());
    assert_eq!(got.text(), "over tls\n");
    assert_eq!(tls_origin.requests(), 1);

    // An untrusted issuer and a wrong name: 502, a clear log line, nothing sent.
    for (ca, name, why) in [
        (other_ca.as_path(), "origin.test", "UnknownIssuer"),
        (
            ca_file.as_path(),
            "wrong.test",
            "certificate not valid for name",
        ),
    ] {
        let proxy = Proxy::start(&origin_rule(ca, name, ""));
        let got = get(&proxy, "o.test", "/b").await;
        assert_eq!(got.status, 502, "{why}");
        assert!(
            proxy.wait_for_output("TLS handshake with the origin", Duration::from_secs(5)),
            "{}",
            proxy.output()
        );
        assert!(proxy.output().contains(why), "{}", proxy.output());
    }
    assert_eq!(tls_origin.requests(), 1);

    // proxy_min_tls_version: the ARC2 default (TLS_1_3) refuses a TLS 1.2-only origin.
    let old = Origin::new()
        .route("*", Reply::text("tls12\n"))
        .start_tls({
            let mut c =
                rustls::ServerConfig::builder_with_protocol_versions(&[&rustls::version::TLS12])
                    .with_no_client_auth()
                    .with_cert_resolver(leaf.server_config().cert_resolver.clone());
            c.alpn_protocols = vec![b"http/1.1".to_vec()];
            std::sync::Arc::new(c)
        })
        .await;
    let old_rule = |v: &str| {
        format!(
            "{base}proxy_ca_file = {:?}\nproxy_min_tls_version = \"{v}\"\n[[proxy_rules]]\ndomain = \"o.test\"\n\
             max_age_seconds = 0\nupstreams = [\"https://127.0.0.1:{}\"]\nforward_tls_name = \"origin.test\"\n",
            ca_file.display().to_string(),
            old.port()
        )
    };
    let proxy = Proxy::start(&old_rule("TLS_1_3"));
    assert_eq!(get(&proxy, "o.test", "/").await.status, 502);
    assert!(
        proxy.wait_for_output("ProtocolVersion", Duration::from_secs(5)),
        "{}",
        proxy.output()
    );
    let proxy = Proxy::start(&old_rule("TLS_1_2"));
    assert_eq!(get(&proxy, "o.test", "/").await.text(), "tls12\n");
    // TLS_1_0 is accepted and in effect 1.2.
    let proxy = Proxy::start(&old_rule("TLS_1_0"));
    assert_eq!(get(&proxy, "o.test", "/").await.text(), "tls12\n");

    // forward_port_https is used for clients that came over HTTPS; plain HTTP stays plain.
    let site_ca = TestCa::new("site CA");
    let (c, k) = site_ca.leaf(&["s.test"]).write("site");
    let proxy = Proxy::start(&format!(
        "{base}listening_port_https = 0\nproxy_ca_file = {:?}\n{}",
        ca_file.display().to_string(),
        rule(
            "s.test",
            plain_origin.port(),
            &format!(
                "{}forward_port_https = {}\nforward_tls_name = \"origin.test\"\nmax_age_overrides_origin = false\n",
                files(&c, &k),
                tls_origin.port()
            )
        )
        .replace("max_age_seconds = 60", "max_age_seconds = 0")
    ));
    assert_eq!(get(&proxy, "s.test", "/").await.text(), "plain\n");
    let client = tls::browser(site_ca.roots());
    let got = tls::get(proxy.https.unwrap(), "s.test", "/", &client).await;
    assert_eq!(got.text(), "over tls\n");

    // routing_rules.https_only: TLS to the origin whatever the client used.
    let proxy = Proxy::start(&format!(
        "{base}proxy_ca_file = {:?}\n[[proxy_rules]]\ndomain = \"r.test\"\nmax_age_seconds = 0\n\
         forward_tls_name = \"origin.test\"\n[proxy_rules.routing_rules]\nrouting_method = \"Priority\"\n\
         https_only = true\nenable_health_checks = false\nhealth_check_interval = 30\n\
         [[proxy_rules.routing_rules.routing_locations]]\nforward_ipv4 = \"127.0.0.1\"\nforward_port_https = {}\n",
        ca_file.display().to_string(),
        tls_origin.port()
    ));
    assert_eq!(get(&proxy, "r.test", "/").await.text(), "over tls\n");
}

#[tokio::test]
async fn schemes_with_different_origins_keep_their_own_cache_entries() {
    let origin_ca = TestCa::new("origin CA");
    let tls_origin = Origin::new()
        .route(
            "*",
            Reply::text("from the https origin\n").header("cache-control", "max-age=60"),
        )
        .start_tls(origin_ca.leaf(&["origin.test"]).server_config())
        .await;
    let plain_origin = Origin::new()
        .route(
            "*",
            Reply::text("from the http origin\n").header("cache-control", "max-age=60"),
        )
        .start()
        .await;
    let site_ca = TestCa::new("site CA");
    let (c, k) = site_ca
        .leaf(&["s.test", "same.test", "shared.test"])
        .write("site");
    let ca_file = origin_ca.write("origin-ca");
    let proxy = Proxy::start(
        &(format!(
            "{GLOBAL}proxy_ca_file = {:?}\npurge_allow = [\"127.0.0.0/8\"]\n{}{}",
            ca_file.display().to_string(),
            rule(
                "s.test",
                plain_origin.port(),
                &format!(
                    "{}forward_port_https = {}\nforward_tls_name = \"origin.test\"\n",
                    files(&c, &k),
                    tls_origin.port()
                )
            ),
            // One origin for both schemes: entries apart (the default), or shared.
            rule("same.test", plain_origin.port(), &files(&c, &k)),
        ) + &rule(
            "shared.test",
            plain_origin.port(),
            &format!("{}cache_by_scheme = false\n", files(&c, &k)),
        )),
    );
    let https = proxy.https.unwrap();
    let browser = tls::browser(site_ca.roots());
    let plain = |path: &'static str| get(&proxy, "s.test", path);

    assert_eq!(plain("/p").await.text(), "from the http origin\n");
    let over_tls = tls::get(https, "s.test", "/p", &browser).await;
    assert_eq!(
        over_tls.text(),
        "from the https origin\n",
        "not the plain entry"
    );
    assert_eq!(over_tls.header("x-arc2-cache"), Some("Miss"));
    // Each scheme hits its own entry.
    let again = plain("/p").await;
    assert_eq!(
        (again.text().as_str(), again.header("x-arc2-cache")),
        ("from the http origin\n", Some("Hit"))
    );
    let again = tls::get(https, "s.test", "/p", &browser).await;
    assert_eq!(
        (again.text().as_str(), again.header("x-arc2-cache")),
        ("from the https origin\n", Some("Hit"))
    );
    assert_eq!((plain_origin.requests(), tls_origin.requests()), (1, 1));

    // One PURGE of the URL removes both schemes' entries.
    let purged = send(
        &client(),
        Request::builder()
            .method("PURGE")
            .uri(proxy.url("/p"))
            .header("host", "s.test")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(purged.status, 200, "{}", purged.text());
    assert_eq!(plain("/p").await.header("x-arc2-cache"), Some("Miss"));
    let after = tls::get(https, "s.test", "/p", &browser).await;
    assert_eq!(after.header("x-arc2-cache"), Some("Miss"));
    assert_eq!((plain_origin.requests(), tls_origin.requests()), (2, 2));

    // One origin for both schemes: HTTPS has its own entry (a page made for plain HTTP, with
    // its http:// links, never reaches HTTPS clients) unless the rule shares them.
    get(&proxy, "same.test", "/q").await;
    let apart = tls::get(https, "same.test", "/q", &browser).await;
    assert_eq!(apart.header("x-arc2-cache"), Some("Miss"));
    get(&proxy, "shared.test", "/q").await;
    let shared = tls::get(https, "shared.test", "/q", &browser).await;
    assert_eq!(shared.header("x-arc2-cache"), Some("Hit"));
}

#[tokio::test]
async fn a_silent_tls_origin_fails_over_after_the_connect_timeout() {
    // Accepts connections and never answers the handshake.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for c in silent.incoming().flatten() {
            keep.lock().unwrap().push(c);
        }
    });
    let origin_ca = TestCa::new("origin CA");
    let good = Origin::new()
        .route("*", Reply::text("second origin\n"))
        .start_tls(origin_ca.leaf(&["origin.test"]).server_config())
        .await;
    let proxy = Proxy::start(&format!(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nworkers = 1\nlogging_level = \"warn\"\n\
         proxy_ca_file = {:?}\nproxy_connect_timeout_seconds = 1\nproxy_timeout = 30\n\
         [[proxy_rules]]\ndomain = \"o.test\"\nmax_age_seconds = 0\nforward_tls_name = \"origin.test\"\n\
         upstreams = [\"https://127.0.0.1:{silent_port}\", \"https://127.0.0.1:{}\"]\n",
        origin_ca.write("origin-ca").display().to_string(),
        good.port()
    ));
    let started = Instant::now();
    let got = get(&proxy, "o.test", "/").await;
    assert_eq!(got.text(), "second origin\n", "{}", proxy.output());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "waited {:?}: the handshake was not limited by the connect timeout",
        started.elapsed()
    );
    assert!(
        !held.lock().unwrap().is_empty(),
        "the silent origin was tried first"
    );
    assert!(
        proxy.wait_for_output("no answer within 1s", Duration::from_secs(5)),
        "{}",
        proxy.output()
    );
}

#[tokio::test]
async fn the_local_ca_issues_certificates_that_survive_a_restart() {
    let origin = hello_origin().await;
    let state = scratch("state-internal");
    let conf = format!(
        "{GLOBAL}state_dir = {:?}\n{}{}",
        state.display().to_string(),
        rule("a.test", origin.port(), "tls = \"internal\"\n"),
        rule("*.wild.test", origin.port(), "tls = \"internal\"\n")
    );
    let root = state.join("ca").join("root.pem");
    let mut first_root = None;
    for round in 0..2 {
        let proxy = Proxy::start(&conf);
        let https = proxy.https.unwrap();
        let pem = std::fs::read_to_string(&root).unwrap();
        // The second start reuses the CA: clients that trusted it keep trusting rampart.
        let first = first_root.get_or_insert_with(|| pem.clone());
        assert_eq!(*first, pem, "round {round}: the root changed");
        let client = tls::browser(tls::roots_from_pem(&pem));
        for host in ["a.test", "x.wild.test"] {
            let got = tls::get(https, host, "/", &client).await;
            assert_eq!(got.status, 200, "round {round}, {host}");
        }
        if round == 0 {
            let key = state.join("ca").join("root.key");
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(&key).unwrap().permissions(),
            );
            assert_eq!(mode & 0o777, 0o600, "the CA key is private");
        }
    }
    // Half a CA is an error at startup, never silently replaced.
    let key = state.join("ca").join("root.key");
    std::fs::rename(&key, state.join("root.key.aside")).unwrap();
    let failed = Proxy::try_start(&conf);
    assert!(
        failed.contains("root.key does not"),
        "startup should fail and name the missing file: {failed}"
    );
    assert_eq!(std::fs::read_to_string(&root).unwrap(), first_root.unwrap());
}

/// A TLS connection still in its handshake when the process stops (SIGTERM, or an upgrade's old
/// process) is not closed at once, leaving the client's request unanswered: the handshake
/// completes and the request is answered, with `Connection: close`.
#[tokio::test]
async fn a_handshake_under_way_when_the_process_stops_is_completed_and_answered() {
    let origin = hello_origin().await;
    let ca = TestCa::new("stop CA");
    let (c, k) = ca.leaf(&["a.test"]).write("stop");
    let proxy = Proxy::start(&format!(
        "{GLOBAL}metrics_allow = [\"127.0.0.1\"]\n{}",
        rule("a.test", origin.port(), &files(&c, &k))
    ));
    let https = proxy.https.unwrap();
    // Connected, accepted, and nothing of the handshake sent yet.
    let tcp = tokio::net::TcpStream::connect(https).await.unwrap();
    let accepted = eventually(Duration::from_secs(10), async || {
        let m = get(&proxy, "a.test", "/_rampart/metrics").await.text();
        m.contains("rampart_connections_open{scheme=\"https\"} 1")
    })
    .await;
    assert!(accepted, "the connection was not accepted");
    proxy.signal(15);
    let config = tls::client_config(ca.roots(), &[b"http/1.1"], &[&rustls::version::TLS13]);
    let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
    let s = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .expect("the handshake completes while the process stops");
    let got = tls::request(
        s,
        Request::get("/")
            .header("host", "a.test")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.header("connection"), Some("close"));
}

/// NGINX's `return 301 https://$host$request_uri` in the port-80 server: a redirect kept to
/// one scheme (`scheme = "http"`). Without it such a redirect answered HTTPS requests too, and
/// looped.
#[tokio::test]
async fn a_redirect_kept_to_plain_http_does_not_loop_on_https() {
    let origin = hello_origin().await;
    let ca = TestCa::new("test CA");
    let (c, k) = ca.leaf(&["a.test"]).write("redirect-scheme");
    let conf = format!(
        "{GLOBAL}{}",
        rule(
            "a.test",
            origin.port(),
            &format!(
                "{}[[proxy_rules.redirects]]\nfrom = \"^(.*)$\"\nto = \"https://{{host}}$1\"\nscheme = \"http\"\n",
                files(&c, &k)
            )
        )
    );
    let proxy = Proxy::start(&conf);
    let https = proxy.https.unwrap();
    let got = get(&proxy, "a.test", "/page?x=1").await;
    assert_eq!(got.status, 301);
    assert_eq!(got.header("location"), Some("https://a.test/page?x=1"));
    let client = tls::browser(ca.roots());
    let got = tls::get(https, "a.test", "/page?x=1", &client).await;
    assert_eq!(got.status, 200, "HTTPS is served, not redirected again");
    assert_eq!(origin.requests(), 1);
}

/// Empty lines before a request are allowed (RFC 9112 §2.2) but are not a request: over TLS too,
/// a client that sends only them after an answer is closed at the keep-alive time counted from
/// that answer, so two bytes a second cannot hold a TLS session open.
#[tokio::test]
async fn empty_lines_do_not_keep_a_tls_connection_open() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = hello_origin().await;
    let ca = TestCa::new("test CA");
    let a = ca.leaf(&["a.test"]);
    let (ac, ak) = a.write("a");
    let conf = format!(
        "{GLOBAL}client_keepalive_timeout_seconds = 1\n{}",
        rule("a.test", origin.port(), &files(&ac, &ak))
    );
    let proxy = Proxy::start(&conf);
    let https = proxy.https.expect("an HTTPS listener");
    let client = tls::client_config(ca.roots(), &[b"http/1.1"], &[&rustls::version::TLS13]);
    let mut s = tls::connect(https, "a.test", &client).await.unwrap();
    s.write_all(b"GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("hello\n") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the answer");
        got.extend_from_slice(&buf[..n]);
    }
    let answered = Instant::now();
    let closed = loop {
        if answered.elapsed() > Duration::from_secs(5) {
            break answered.elapsed();
        }
        if s.write_all(b"\r\n").await.is_err() {
            break answered.elapsed();
        }
        match tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break answered.elapsed(),
            Ok(Ok(n)) => panic!(
                "answered empty lines: {:?}",
                String::from_utf8_lossy(&buf[..n])
            ),
            Err(_) => {}
        }
    };
    assert!(
        closed < Duration::from_millis(2500),
        "closed {closed:?} after the answer, keep-alive time 1 s"
    );
}
