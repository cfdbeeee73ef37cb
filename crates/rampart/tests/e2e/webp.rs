//! End-to-end tests of WebP transformation (`enable_webp_transformation`,
//! `webp_transformation_min_age`): the demo's real JPEG through the real rampart process, and a
//! decompression bomb.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use support::*;

const JPEG: &[u8] = include_bytes!("../../assets/demo.jpg");
const BROWSER_ACCEPT: &str = "image/avif,image/webp,image/apng,image/*,*/*;q=0.8";

/// A 1×1 PNG whose header claims 60,000 × 60,000 pixels (10.8 GB of RGB once decoded).
fn bomb() -> Vec<u8> {
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&60_000u32.to_be_bytes());
    ihdr.extend_from_slice(&60_000u32.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut z, &[0, 1, 2, 3]).unwrap();
    let idat = z.finish().unwrap();
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend(png_chunk(b"IHDR", &ihdr));
    png.extend(png_chunk(b"IDAT", &idat));
    png.extend(png_chunk(b"IEND", &[]));
    png
}

async fn origin() -> OriginHandle {
    let picture = |body: &[u8], ct: &str, max_age: u32| {
        Reply::typed(body, ct).header("cache-control", &format!("max-age={max_age}"))
    };
    Origin::new()
        .route("/long.jpg", picture(JPEG, "image/jpeg", 86_400))
        .route("/short.jpg", picture(JPEG, "image/jpeg", 3_600))
        .route("/bomb.png", picture(&bomb(), "image/png", 86_400))
        .start()
        .await
}

async fn get_accepting(proxy: &Proxy, path: &str, accept: &str) -> Got {
    fetch(req(proxy, "site", path).header("accept", accept)).await
}

fn varies_on_accept(got: &Got) -> bool {
    got.headers.get_all("vary").iter().any(|v| {
        v.to_str()
            .unwrap()
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("accept"))
    })
}

#[tokio::test]
async fn a_long_lived_jpeg_gets_a_webp_copy_for_browsers_that_accept_it() {
    let origin = origin().await;
    let cfg = config_for("site", &origin, "", "").replace(
        "enable_webp_transformation = false",
        "enable_webp_transformation = true",
    );
    let proxy = Proxy::start(&cfg);
    // Both are stored; the short-lived one is decided at once (not converted).
    assert_eq!(
        get_accepting(&proxy, "/short.jpg", BROWSER_ACCEPT)
            .await
            .body,
        JPEG
    );
    let first = get_accepting(&proxy, "/long.jpg", BROWSER_ACCEPT).await;
    assert_eq!(first.body, JPEG, "the first requests get the original");
    // Every response of a picture that varies says so, the first (the miss) too: a browser
    // cache or a CDN in front must not keep the JPEG for clients that accept WebP.
    assert_eq!(first.header("x-arc2-cache"), Some("Miss"));
    assert!(varies_on_accept(&first), "{:?}", first.headers);
    // The conversion runs off the request path; then hits that accept WebP get it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let webp = loop {
        let got = get_accepting(&proxy, "/long.jpg", BROWSER_ACCEPT).await;
        if got.header("content-type") == Some("image/webp") {
            break got;
        }
        assert_eq!(got.body, JPEG);
        assert!(
            varies_on_accept(&got),
            "a hit before the copy exists: {:?}",
            got.headers
        );
        assert!(Instant::now() < deadline, "no WebP copy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(webp.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(&webp.body[..4], b"RIFF");
    assert_eq!(&webp.body[8..12], b"WEBP");
    assert!(
        webp.body.len() < JPEG.len(),
        "{} of {}",
        webp.body.len(),
        JPEG.len()
    );
    assert_eq!(
        webp.header("content-length"),
        Some(webp.body.len().to_string().as_str())
    );
    assert!(varies_on_accept(&webp));
    // Clients that do not name image/webp get the JPEG, which now says it varies too.
    for accept in ["image/jpeg", "*/*", "image/webp;q=0"] {
        let got = get_accepting(&proxy, "/long.jpg", accept).await;
        assert_eq!(got.header("content-type"), Some("image/jpeg"), "{accept}");
        assert_eq!(got.body, JPEG, "{accept}");
        assert!(varies_on_accept(&got), "{accept}");
    }
    // Stored for 1 hour, under the 6-hour minimum: never converted, and never said to vary.
    let short = get_accepting(&proxy, "/short.jpg", BROWSER_ACCEPT).await;
    assert_eq!(short.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(short.header("content-type"), Some("image/jpeg"));
    assert!(!varies_on_accept(&short), "{:?}", short.headers);
    assert_eq!(origin.requests(), 2);
}

#[tokio::test]
async fn a_decompression_bomb_is_refused_and_the_original_served() {
    let origin = origin().await;
    let cfg = config_for("site", &origin, "", "").replace(
        "enable_webp_transformation = false",
        "enable_webp_transformation = true\nwebp_transformation_min_age = 60",
    );
    let proxy = Proxy::start(&cfg);
    let png = bomb();
    assert_eq!(
        get_accepting(&proxy, "/bomb.png", BROWSER_ACCEPT)
            .await
            .body,
        png
    );
    assert!(
        proxy.wait_for_output("picture not converted to WebP", Duration::from_secs(10)),
        "{}",
        proxy.output()
    );
    assert!(
        proxy.output().contains("refused to decode"),
        "{}",
        proxy.output()
    );
    let again = get_accepting(&proxy, "/bomb.png", BROWSER_ACCEPT).await;
    assert_eq!(again.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(again.body, png);
    // Nothing near the picture's claimed size was allocated.
    assert!(
        proxy.peak_rss_kib() < 200 * 1024,
        "peak RSS {} KiB",
        proxy.peak_rss_kib()
    );
}
