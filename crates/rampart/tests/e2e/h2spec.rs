//! rampart's HTTP/2 server against h2spec, the HTTP/2 conformance tester (145 cases over RFC
//! 9113 §3–§8 and RFC 7541, each named by its section), over h2c and over TLS with ALPN `h2`.
//! `.ci/run` installs h2spec with `go install`; `H2SPEC_BIN` names another build.
//!
//! One case cannot pass on a port that also speaks HTTP/1.1: h2spec's "invalid connection
//! preface" on h2c sends bytes that are not the preface's method, which rampart reads as an
//! HTTP/1.1 request (answered 400, then closed) — an HTTP/2 connection error needs the client
//! to have started the preface (`PRI `), or ALPN `h2`. Over TLS the same case passes.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::process::Command;

use support::tls::{files, TestCa};
use support::*;

/// The cases h2spec failed, as `section: name`, and its summary line.
fn h2spec(host: &str, port: u16, tls: bool) -> (Vec<String>, String) {
    let bin = go_bin(
        "H2SPEC_BIN",
        "h2spec",
        "go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible",
    );
    let report = std::env::temp_dir().join(format!("h2spec-{}-{port}.xml", std::process::id()));
    let mut cmd = Command::new(bin);
    cmd.args(["-h", host, "-p", &port.to_string(), "-o", "3", "-j"])
        .arg(&report);
    if tls {
        cmd.args(["-t", "-k"]);
    }
    let out = cmd.output().expect("h2spec runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.contains("tests,"))
        .unwrap_or_default()
        .to_owned();
    let xml = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no h2spec report ({e}):\n{stdout}"));
    let _ = std::fs::remove_file(&report);
    let attr = |case: &str, name: &str| {
        let start = case.find(&format!("{name}=\""))? + name.len() + 2;
        Some(case[start..].split('"').next()?.to_owned())
    };
    let failed = xml
        .split("<testcase ")
        .skip(1)
        .map(|c| c.split("</testcase>").next().unwrap_or(c))
        .filter(|c| c.contains("<error") || c.contains("<failure"))
        .map(|c| {
            format!(
                "{}: {}",
                attr(c, "package").unwrap_or_default(),
                attr(c, "classname").unwrap_or_default()
            )
        })
        .collect();
    (failed, summary)
}

async fn origin() -> OriginHandle {
    Origin::new()
        .route(
            "*",
            Reply::text("conformance\n").header("cache-control", "max-age=60"),
        )
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2spec_passes_over_h2c() {
    let origin = origin().await;
    let proxy = Proxy::start(&config_for("127.0.0.1", &origin, "workers = 1", ""));
    let port = proxy.addr.port();
    let (failed, summary) = tokio::task::spawn_blocking(move || h2spec("127.0.0.1", port, false))
        .await
        .unwrap();
    assert_eq!(
        failed,
        vec!["http2/3.5: Sends invalid connection preface".to_owned()],
        "{summary}"
    );
    assert!(summary.contains("145 tests"), "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2spec_passes_over_tls() {
    let origin = origin().await;
    let ca = TestCa::new("test CA");
    let (c, k) = ca.leaf(&["localhost"]).write("h2spec");
    let proxy = Proxy::start(&format!(
        "{}{}",
        crate::http3::GLOBAL,
        crate::http3::rule("localhost", origin.port(), &files(&c, &k))
    ));
    let port = proxy.https.expect("an HTTPS listener").port();
    let (failed, summary) = tokio::task::spawn_blocking(move || h2spec("localhost", port, true))
        .await
        .unwrap();
    assert!(failed.is_empty(), "{summary}\n{failed:#?}");
    assert!(summary.contains("145 tests"), "{summary}");
}
