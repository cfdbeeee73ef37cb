//! End-to-end tests of response compression (`enable_compression`, `compression_flags`): a
//! real origin, the real rampart process, real clients that do not decode by themselves, and
//! the reference decoders.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::io::Read;
use std::time::{Duration, Instant};

use http::Request;
use http_body_util::BodyExt as _;
use support::*;

/// A templated page of ~40 KB, as a CMS would send it.
fn page() -> String {
    let mut s = String::from("<!doctype html>\n<html><head><title>Catalogue</title>\n<style>body { font-family: sans-serif; }</style></head><body>\n<ul>\n");
    for i in 0..400 {
        s.push_str(&format!(
            "  <li class=\"product\" data-id=\"{i}\"><a href=\"/p/{i}\">Product {i}</a> <span class=\"price\">{}.99</span></li>\n",
            i * 7 % 100
        ));
    }
    s.push_str("</ul>\n</body></html>\n");
    s
}

fn decode(coding: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        None => out = body.to_vec(),
        Some("br") => {
            brotli::Decompressor::new(body, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("zstd") => out = zstd::decode_all(body).unwrap(),
        Some("gzip") => {
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some(other) => panic!("unexpected coding {other}"),
    }
    out
}

fn config(origin: &OriginHandle, global: &str, flags: &str) -> String {
    // Every host: HTTP/2 requests are routed by their :authority (127.0.0.1:PORT).
    config_for("*", origin, global, "").replace(
        "enable_compression = false",
        &format!("enable_compression = true\n{flags}"),
    )
}

async fn get_with(proxy: &Proxy, path: &str, accept_encoding: Option<&str>) -> Got {
    let mut b = req(proxy, "site", path);
    if let Some(ae) = accept_encoding {
        b = b.header("accept-encoding", ae);
    }
    fetch(b).await
}

fn vary_has_accept_encoding(got: &Got) -> bool {
    got.headers.get_all("vary").iter().any(|v| {
        v.to_str()
            .unwrap()
            .to_ascii_lowercase()
            .contains("accept-encoding")
    })
}

#[tokio::test]
async fn stored_pages_are_compressed_once_and_hits_pick_the_clients_coding() {
    let html = page();
    let origin = Origin::new()
        .route(
            "/page",
            Reply::typed(html.as_bytes(), "text/html; charset=utf-8")
                .header("cache-control", "max-age=600")
                .header("etag", "\"v1\""),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config(&origin, "enable_compression = true", ""));

    // The miss streams compressed for its client.
    let miss = get_with(&proxy, "/page", Some("gzip, deflate, br, zstd")).await;
    assert_eq!(miss.header("x-arc2-cache"), Some("Miss"));
    assert_eq!(miss.header("content-encoding"), Some("br"));
    assert!(vary_has_accept_encoding(&miss));
    assert_eq!(miss.header("etag"), Some("W/\"v1\""));
    assert_eq!(decode(Some("br"), &miss.body), html.as_bytes());
    assert!(
        miss.body.len() * 4 < html.len(),
        "{} of {}",
        miss.body.len(),
        html.len()
    );

    // Hits: the copies are made right after storing; until then a hit is identity.
    let deadline = Instant::now() + Duration::from_secs(10);
    let hit = loop {
        let hit = get_with(&proxy, "/page", Some("gzip, deflate, br, zstd")).await;
        assert_eq!(hit.header("x-arc2-cache"), Some("Hit"));
        if hit.header("content-encoding").is_some() || Instant::now() > deadline {
            break hit;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(hit.header("content-encoding"), Some("br"));
    assert_eq!(
        hit.header("content-length"),
        Some(hit.body.len().to_string().as_str())
    );
    assert_eq!(decode(Some("br"), &hit.body), html.as_bytes());
    assert!(vary_has_accept_encoding(&hit));

    for (ae, want) in [
        (Some("gzip"), Some("gzip")),
        (Some("zstd, gzip;q=0.5"), Some("zstd")),
        (Some("br;q=0, gzip;q=0.5, zstd;q=0.4"), Some("gzip")),
        (Some("identity"), None),
        (None, None),
    ] {
        let got = get_with(&proxy, "/page", ae).await;
        assert_eq!(got.header("x-arc2-cache"), Some("Hit"), "{ae:?}");
        assert_eq!(got.header("content-encoding"), want, "{ae:?}");
        assert_eq!(decode(want, &got.body), html.as_bytes(), "{ae:?}");
        assert!(vary_has_accept_encoding(&got), "{ae:?}");
    }
    // A validator of the encoded copy revalidates it.
    let got = fetch(
        req(&proxy, "site", "/page")
            .header("accept-encoding", "br")
            .header("if-none-match", "W/\"v1\""),
    )
    .await;
    assert_eq!(got.status, 304);
    assert_eq!(origin.requests(), 1, "one origin request for all of it");
    // Over HTTP/2 too (another host name, 127.0.0.1:PORT, so another entry): the miss, then a
    // hit from the copies.
    let h2 = |ae: &'static str| {
        let c = h2_client();
        let url = proxy.url("/page");
        async move {
            send(
                &c,
                Request::get(url)
                    .header("accept-encoding", ae)
                    .body(empty())
                    .unwrap(),
            )
            .await
        }
    };
    let miss = h2("br").await;
    assert_eq!(miss.header("content-encoding"), Some("br"));
    assert_eq!(decode(Some("br"), &miss.body), html.as_bytes());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let hit = h2("zstd").await;
        if hit.header("content-encoding") == Some("zstd") {
            assert_eq!(hit.header("x-arc2-cache"), Some("Hit"));
            assert_eq!(decode(Some("zstd"), &hit.body), html.as_bytes());
            break;
        }
        assert!(Instant::now() < deadline, "no encoded copy over HTTP/2");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(origin.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_waiters_get_the_compressed_answer_the_leader_gets() {
    // One slow origin answer, many clients at once: the leader fetches, the others stream its
    // response. Every one of them is compressed for its own Accept-Encoding.
    let html = page();
    let origin = Origin::new()
        .route(
            "/slow",
            Reply::typed(html.as_bytes(), "text/html; charset=utf-8")
                .header("cache-control", "max-age=600")
                .delay(Duration::from_millis(800)),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config(&origin, "enable_compression = true", ""));
    let c = client();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let ae = if i % 2 == 0 { "gzip" } else { "br, gzip" };
        let (c, url) = (c.clone(), proxy.url("/slow"));
        tasks.push(tokio::spawn(async move {
            let req = Request::get(url)
                .header("host", "site")
                .header("accept-encoding", ae)
                .body(empty())
                .unwrap();
            send(&c, req).await
        }));
    }
    let mut collapsed = 0;
    for task in tasks {
        let got = task.await.unwrap();
        assert_eq!(got.status, 200);
        let status = got.header("cache-status").unwrap_or("").to_owned();
        collapsed += usize::from(status.contains("collapsed"));
        let coding = got.header("content-encoding");
        assert!(
            coding.is_some(),
            "not compressed ({status}): {:?}",
            got.headers
        );
        assert!(vary_has_accept_encoding(&got), "{:?}", got.headers);
        assert_eq!(decode(coding, &got.body), html.as_bytes());
    }
    assert_eq!(origin.requests(), 1);
    assert!(collapsed >= 1, "no coalesced waiter among the answers");
}

#[tokio::test]
async fn only_what_is_worth_compressing_is_compressed() {
    let text = "plain text that compresses well. ".repeat(100);
    let origin = Origin::new()
        .route(
            "/png",
            Reply::typed(&[0x89, b'P', b'N', b'G'].repeat(500), "image/png"),
        )
        .route(
            "/gz",
            Reply::typed(text.as_bytes(), "text/plain").header("content-encoding", "gzip"),
        )
        .route(
            "/nt",
            Reply::typed(text.as_bytes(), "text/plain").header("cache-control", "no-transform"),
        )
        .route("/small", Reply::typed(b"tiny", "text/plain"))
        .route("/big", Reply::typed(text.as_bytes(), "text/plain"))
        .start()
        .await;
    let proxy = Proxy::start(&config(&origin, "enable_compression = true", ""));
    for path in ["/png", "/gz", "/nt", "/small"] {
        let got = get_with(&proxy, path, Some("br, gzip")).await;
        assert_eq!(got.status, 200, "{path}");
        let ce = got.header("content-encoding");
        assert!(
            ce.is_none() || (path == "/gz" && ce == Some("gzip")),
            "{path}: {ce:?}"
        );
    }
    // The origin's own gzip passes through untouched.
    let gz = get_with(&proxy, "/gz", Some("br, gzip")).await;
    assert_eq!(
        gz.body,
        text.as_bytes(),
        "the origin's bytes, not re-encoded"
    );

    // The rule's flags: gzip only, level 9.
    let only_gzip = Proxy::start(&config(
        &origin,
        "enable_compression = true",
        "compression_flags = \"gzip=9\"",
    ));
    let got = get_with(&only_gzip, "/big", Some("br, zstd, gzip")).await;
    assert_eq!(got.header("content-encoding"), Some("gzip"));
    assert_eq!(decode(Some("gzip"), &got.body), text.as_bytes());

    // Off globally: the rule's switch alone does nothing (ARC2 needs both).
    let off = Proxy::start(&config(&origin, "", ""));
    let got = get_with(&off, "/big", Some("br")).await;
    assert_eq!(got.header("content-encoding"), None);
    assert!(off.output().contains("off globally"), "{}", off.output());
}

#[tokio::test]
async fn an_uncacheable_body_is_compressed_as_it_streams() {
    // 64 KiB, a 1.5 s pause, then the rest: the client sees compressed bytes before the pause
    // ends.
    let origin = Origin::new()
        .route(
            "/stream",
            Reply::trickled(200_000, Duration::from_millis(1500))
                .header("cache-control", "no-store"),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config(&origin, "enable_compression = true", ""));
    let start = Instant::now();
    let res = client()
        .request(
            Request::get(proxy.url("/stream"))
                .header("host", "site")
                .header("accept-encoding", "gzip")
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.headers()["content-encoding"], "gzip");
    assert!(res.headers().get("content-length").is_none());
    let mut body = res.into_body();
    let mut bytes = Vec::new();
    let mut first_at = None;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            first_at.get_or_insert(start.elapsed());
            bytes.extend_from_slice(&data);
        }
    }
    let first_at = first_at.unwrap();
    assert!(
        first_at < Duration::from_millis(1200),
        "first bytes after {first_at:?}"
    );
    assert!(start.elapsed() >= Duration::from_millis(1500));
    let decoded = decode(Some("gzip"), &bytes);
    assert_eq!(decoded.len(), 200_000);
    assert!(decoded.iter().all(|&b| b == b'x'));
}

#[tokio::test]
async fn compression_types_and_compression_min_length_choose_what_is_compressed() {
    let json = format!("[{}0]", "1234567890,".repeat(200));
    let routes = [
        ("/json", "application/json", 2000),
        ("/bin", "application/octet-stream", 2000),
        ("/page", "text/html; charset=utf-8", 2000),
        ("/small", "text/html", 600),
        ("/jpeg", "image/jpeg", 2000),
    ];
    let mut origin = Origin::new();
    for (path, ct, len) in routes {
        let body = json.as_bytes()[..len].to_vec();
        origin = origin.route(
            path,
            Reply::typed(&body, ct).header("cache-control", "no-store"),
        );
    }
    let origin = origin.start().await;
    let coding_of = |got: &Got| got.header("content-encoding").map(str::to_owned);
    // Global: JSON taken off the list, octet-stream put on it, 1 KiB threshold; `*/*` would
    // still leave the JPEG alone, a listed exact type would not.
    let global = "enable_compression = true\ncompression_types = [\"text/*\", \"application/octet-stream\"]\ncompression_min_length = \"1KiB\"";
    let proxy = Proxy::start(&config(&origin, global, ""));
    for (path, want) in [
        ("/json", None),
        ("/bin", Some("gzip")),
        ("/page", Some("gzip")),
        ("/small", None),
        ("/jpeg", None),
    ] {
        let got = get_with(&proxy, path, Some("gzip")).await;
        assert_eq!(got.status, 200, "{path}");
        assert_eq!(coding_of(&got).as_deref(), want, "{path}");
        let len = routes.iter().find(|r| r.0 == path).unwrap().2;
        assert_eq!(decode(want, &got.body).len(), len, "{path}");
    }
    // A rule's own list and threshold replace the global ones.
    let proxy = Proxy::start(&config(
        &origin,
        global,
        "compression_types = [\"application/json\", \"*\"]\ncompression_min_length = 100",
    ));
    for (path, want) in [
        ("/json", Some("gzip")),
        ("/small", Some("gzip")),
        ("/bin", Some("gzip")),
        ("/jpeg", None),
    ] {
        let got = get_with(&proxy, path, Some("gzip")).await;
        assert_eq!(coding_of(&got).as_deref(), want, "{path}");
    }
}
