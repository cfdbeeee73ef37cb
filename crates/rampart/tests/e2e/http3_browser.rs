//! HTTP/3 against an independent implementation: Debian's Chromium (its own QUIC stack, driven
//! by playwright-core from `tests/browser/`; `.ci/run` installs both) loads a page from
//! rampart over HTTP/3, fetches a page twice (the second time from rampart's cache), and
//! posts a body.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::path::PathBuf;
use std::process::Command;

use support::tls::TestCa;
use support::*;

fn browser_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// base64(SHA-256(SubjectPublicKeyInfo)) of the certificate in `pem`, as Chromium's
/// `--ignore-certificate-errors-spki-list` wants it (openssl computes it).
fn spki_hash(pem: &str) -> String {
    let cert = scratch("spki.pem");
    std::fs::write(&cert, pem).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl x509 -noout -pubkey -in {:?} | openssl pkey -pubin -outform der \
             | openssl dgst -sha256 -binary | base64",
            cert.display().to_string()
        ))
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_speaks_http3_to_rampart() {
    let dir = browser_dir();
    assert!(
        dir.join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed: run `npm ci --prefix {}` (.ci/run does)",
        dir.display()
    );
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        std::path::Path::new(&chromium).exists(),
        "no Chromium at {chromium}: install Debian's chromium package (.ci/run does)"
    );
    let origin = Origin::new()
        .route(
            "/page",
            Reply::typed(b"<html><body>hello from rampart</body></html>", "text/html")
                .header("cache-control", "max-age=60"),
        )
        .route(
            "/shared",
            Reply::text("shared").header("cache-control", "s-maxage=60, max-age=0"),
        )
        .route_fn("/upload", |s| {
            Reply::text(&format!("got {} bytes", s.body_len))
        })
        .start()
        .await;
    let ca = TestCa::new("test CA");
    let leaf = ca.leaf(&["a.test"]);
    let (c, k) = leaf.write("browser-h3");
    let proxy = Proxy::start(&config_for(
        "a.test",
        &origin,
        "listening_port_https = 0\nhttp3 = true\nadd_logging = true",
        &format!(
            "tls_cert_file = {:?}\ntls_key_file = {:?}\n",
            c.display().to_string(),
            k.display().to_string()
        ),
    ));
    let udp = proxy.h3.expect("an HTTP/3 socket").to_string();
    let spki = spki_hash(&leaf.chain_pem);
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg("http3.mjs")
            .args(["a.test", &udp, &spki])
            .current_dir(browser_dir())
            .env("CHROMIUM", &chromium)
            .output()
            .expect("run node")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no result line.\nstdout:\n{stdout}\nstderr:\n{stderr}"));
    let r: serde_json::Value = serde_json::from_str(line).unwrap();
    eprintln!("{r}");
    assert!(
        out.status.success(),
        "{r:#}\nstderr:\n{stderr}\n{}",
        proxy.output()
    );
    assert_eq!(r["status"], 200, "{r:#}");
    assert_eq!(r["navigation"]["protocol"], "h3", "{r:#}");
    assert_eq!(r["navigation"]["text"], "hello from rampart", "{r:#}");
    assert_eq!(r["again"]["status"], 200, "{r:#}");
    assert_eq!(r["again"]["protocol"], "h3", "{r:#}");
    assert_eq!(r["again"]["cache"], "Hit", "{r:#}");
    assert_eq!(r["again"]["text"], "shared", "{r:#}");
    assert_eq!(r["posted"]["status"], 200, "{r:#}");
    assert_eq!(r["posted"]["text"], "got 100000 bytes", "{r:#}");
    // rampart logged the browser's requests as HTTP/3.
    assert!(
        proxy.wait_for_output("version=HTTP/3", std::time::Duration::from_secs(5)),
        "{}",
        proxy.output()
    );
}
