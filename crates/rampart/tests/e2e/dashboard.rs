//! The live dashboard in a real headless Chromium (Debian's `chromium`, driven by
//! playwright-core from `tests/browser/`; `.ci/run` installs both): the page loads without a
//! console error, connects by itself from a `metrics_allow` address, its numbers move with
//! traffic, its charts have a time axis, and its purge button purges.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::path::PathBuf;
use std::process::Command;

use support::*;

fn browser_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_works_in_a_real_browser() {
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
            "/popular",
            Reply::text("popular page").header("cache-control", "max-age=300"),
        )
        .route("*", Reply::text("page"))
        .start()
        .await;
    // The browser and the script's own requests reach rampart as 127.0.0.1:PORT.
    let proxy = Proxy::start(&config_for(
        "127.0.0.1",
        &origin,
        &format!("api_key = \"{API_KEY}\"\nmetrics_allow = [\"127.0.0.1\"]"),
        "",
    ));
    let base = proxy.url("");
    let host = format!("127.0.0.1:{}", proxy.addr.port());
    // Looked at by people changing the page (its layout at 1,400 px).
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-1400.png");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .env("SCREENSHOT", &shot)
            .arg("dashboard.mjs")
            .args([&base, API_KEY, &host])
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
    assert!(out.status.success(), "{r:#}\nstderr:\n{stderr}");
    assert_eq!(r["errors"], serde_json::json!([]), "console errors: {r:#}");
    // From a metrics_allow address the page went live by itself: no key asked, no click.
    assert_eq!(r["loginShown"], false, "{r:#}");
    assert_eq!(r["tracesPanel"], false, "{r:#}");
    // Both charts label their time axis with clock times.
    for t in r["ticks"].as_array().unwrap() {
        assert!(t.as_str().unwrap().contains(':'), "{r:#}");
    }
    // Hosts as the cache keys them: no port.
    assert_eq!(r["topHost"], "127.0.0.1", "{r:#}");
    // At 1,400 px the page uses the width: the board is not held to a narrow column.
    assert!(r["mainWidth"].as_f64().unwrap() > 1300.0, "{r:#}");
    assert!(r["rps"].as_f64().unwrap() > 0.0, "{r:#}");
    assert!(
        r["total"].as_f64().unwrap() >= r["before"].as_f64().unwrap() + 30.0,
        "{r:#}"
    );
    assert!(
        r["topPath"].as_str().unwrap().ends_with("/popular"),
        "{r:#}"
    );
    assert_eq!(r["upstream"], "up", "{r:#}");
    // The origin's response time, from the requests sent to it (also without health probes or
    // Performance routing).
    let origin_time = r["originTime"].as_str().unwrap();
    assert!(
        origin_time.ends_with(" ms") || origin_time.ends_with(" µs"),
        "{r:#}"
    );
    // The hit-ratio and latency chart drew its lines.
    assert!(r["qualityDrawn"].as_u64().unwrap() > 20, "{r:#}");
    // 29 of the 30 lookups of /popular were hits ("since start 96.7 %").
    let hit: f64 = r["hit"]
        .as_str()
        .unwrap()
        .trim_start_matches("since start ")
        .trim_end_matches(" %")
        .parse()
        .unwrap_or_else(|_| panic!("{r:#}"));
    assert!((96.0..97.0).contains(&hit), "{r:#}");
    // Purging needs the key: refused without it, the key field shown, then purged with it.
    assert!(
        r["refused"].as_str().unwrap().starts_with("refused"),
        "{r:#}"
    );
    assert_eq!(r["askedForKey"], true, "{r:#}");
    assert_eq!(r["purged"], "purged 1", "{r:#}");
    // The purge took: the next request goes to the origin again.
    let before = origin.requests();
    let got = fetch(http::Request::get(proxy.url("/popular"))).await;
    assert_eq!(got.header("x-arc2-cache"), Some("Miss"));
    assert_eq!(origin.requests(), before + 1);
}
