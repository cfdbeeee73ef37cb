//! End-to-end tests of the cache's memory budget measured where it matters: the process's RSS
//! and `/_rampart/status` under real HTTP traffic.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use http::Request;
use support::*;

#[tokio::test]
async fn memory_budget_holds_while_inserting_ten_times_the_budget() {
    let origin = Origin::new()
        .route("*", Reply::streamed(20_000))
        .start()
        .await;
    let proxy = Proxy::start(&config_for(
        "mem.example",
        &origin,
        &format!("cache_memory = \"1MiB\"\napi_key = \"{API_KEY}\"\nworkers = 1"),
        "",
    ));
    let c = client();
    for i in 0..520 {
        // 520 × 20 KB ≈ 10 MiB of distinct objects through a 1 MiB cache.
        let got = send(
            &c,
            Request::get(proxy.url(&format!("/obj/{i}")))
                .header("host", "mem.example")
                .body(empty())
                .unwrap(),
        )
        .await;
        assert_eq!(got.body.len(), 20_000);
    }
    let status = send(
        &c,
        Request::get(proxy.url("/_rampart/status"))
            .header("x-api-key", API_KEY)
            .body(empty())
            .unwrap(),
    )
    .await
    .text();
    let num = |field: &str| -> u64 {
        let at = status.find(field).unwrap() + field.len() + 2;
        status[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (weight, capacity, entries) = (
        num("\"weight_bytes"),
        num("\"capacity_bytes"),
        num("\"entries"),
    );
    assert_eq!(capacity, 1 << 20);
    assert!(weight <= capacity, "{status}");
    assert!(
        entries >= 20 && weight > capacity / 2,
        "the budget is used: {status}"
    );
    // Recently inserted objects are hits.
    assert_eq!(
        get(&proxy, "mem.example", "/obj/519")
            .await
            .header("x-arc2-cache"),
        Some("Hit")
    );
}

/// A tiny stored object must not keep a slice of the origin connection's read buffer alive (12-byte
/// objects doing so make a 64 MiB cache a process 13× larger). 200,000 distinct tiny objects
/// through a 16 MiB cache: the process's peak RSS stays near the budget (the goal is budget × 1.1 +
/// 40 MiB; the bound here is generous for a debug build), and a purge and refill do not grow it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_objects_do_not_keep_read_buffers_alive_past_the_budget() {
    let origin = Origin::new()
        .route(
            "*",
            Reply::text("Hello World!").header("cache-control", "max-age=3600"),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for(
        "tiny.example",
        &origin,
        &format!(
            "cache_memory = \"16MiB\"\napi_key = \"{API_KEY}\"\nworkers = 1\nadd_rate_limiting = false"
        ),
        "",
    ));
    let proxy = std::sync::Arc::new(proxy);
    let fill = |proxy: std::sync::Arc<Proxy>| async move {
        let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (proxy, next) = (proxy.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                let c = client();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= 200_000 {
                        break;
                    }
                    let got = send(
                        &c,
                        req(&proxy, "tiny.example", &format!("/t?k={i}"))
                            .body(empty())
                            .unwrap(),
                    )
                    .await;
                    assert_eq!(got.body.len(), 12);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    };
    fill(proxy.clone()).await;
    let peak = proxy.peak_rss_kib() / 1024;
    eprintln!("200,000 tiny objects through a 16 MiB cache: peak RSS {peak} MiB");
    let status =
        fetch(req(&proxy, "tiny.example", "/_rampart/status").header("x-api-key", API_KEY))
            .await
            .text();
    assert!(status.contains("\"rss_bytes\":"), "{status}");
    assert!(status.contains("\"capacity_bytes\":16777216"), "{status}");
    assert!(
        peak <= 16 * 11 / 10 + 64,
        "peak RSS {peak} MiB for a 16 MiB cache: {status}"
    );
    let purged = send(
        &client(),
        Request::post(proxy.url("/_rampart/purge?host=tiny.example&scope=domain"))
            .header("x-api-key", API_KEY)
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(purged.status, 200, "{}", purged.text());
    fill(proxy.clone()).await;
    let again = proxy.peak_rss_kib() / 1024;
    assert!(
        again <= peak + 8,
        "a refill after a purge grew the peak from {peak} to {again} MiB"
    );
    // The store was used, and the origin saw every distinct object twice (fill, refill).
    assert_eq!(origin.requests(), 400_000);
}

/// Bodies being collected for the store are charged to `cache_memory` while they stream: the
/// status shows them as reserved, and past a quarter of the budget a miss streams unstored.
#[tokio::test]
async fn bodies_being_collected_are_charged_to_the_budget() {
    let origin = Origin::new()
        .route(
            "*",
            Reply::trickled(600_000, Duration::from_secs(2)).header("cache-control", "max-age=60"),
        )
        .start()
        .await;
    let proxy = std::sync::Arc::new(Proxy::start(&config_for(
        "collect.example",
        &origin,
        &format!("cache_memory = \"4MiB\"\napi_key = \"{API_KEY}\"\nworkers = 1"),
        "",
    )));
    let miss = |path: &'static str| {
        let proxy = proxy.clone();
        tokio::spawn(async move { get(&proxy, "collect.example", path).await })
    };
    let first = miss("/first");
    // The first miss holds its 600 KB; a second one would take the reservations past 1 MiB.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let reserved = loop {
        let status =
            fetch(req(&proxy, "collect.example", "/_rampart/status").header("x-api-key", API_KEY))
                .await
                .text();
        let at = status.find("\"reserved_bytes\":").unwrap() + "\"reserved_bytes\":".len();
        let n: u64 = status[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap();
        if n > 0 || std::time::Instant::now() > deadline {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(reserved >= 600_000, "reserved {reserved}");
    let second = miss("/second").await.unwrap();
    assert_eq!(
        second.body.len(),
        600_000,
        "served in full, though not stored"
    );
    assert_eq!(second.header("cache-status"), Some("rampart; fwd=miss"));
    let first = first.await.unwrap();
    assert_eq!(first.body.len(), 600_000);
    assert_eq!(
        first.header("cache-status"),
        Some("rampart; fwd=miss; stored")
    );
    // Stored: a hit now, and nothing is reserved any more.
    let hit = get(&proxy, "collect.example", "/first").await;
    assert_eq!(hit.header("x-arc2-cache"), Some("Hit"));
    let status =
        fetch(req(&proxy, "collect.example", "/_rampart/status").header("x-api-key", API_KEY))
            .await
            .text();
    assert!(status.contains("\"reserved_bytes\":0,"), "{status}");
    assert_eq!(origin.requests(), 2);
}
