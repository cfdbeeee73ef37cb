//! End-to-end tests of request coalescing: concurrent misses of one resource send one origin
//! request, waiters stream the leader's response as it arrives, an uncacheable response
//! releases them at once, and misses of a resource whose answer was not shareable go at once.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use http::Request;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_misses_send_one_origin_request() {
    raise_fd_limit();
    let origin = Origin::new()
        .route(
            "/hot",
            Reply::text(&"h".repeat(5000)).delay(Duration::from_millis(800)),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("hot.example", &origin, "", ""));
    let c = client();
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let (c, url) = (c.clone(), proxy.url("/hot"));
        tasks.push(tokio::spawn(async move {
            send(
                &c,
                Request::get(url)
                    .header("host", "hot.example")
                    .body(empty())
                    .unwrap(),
            )
            .await
        }));
    }
    let mut labels = std::collections::HashMap::new();
    for t in tasks {
        let got = t.await.unwrap();
        assert_eq!(got.status, 200);
        assert_eq!(got.body.len(), 5000);
        *labels
            .entry(got.header("cache-status").unwrap_or("").to_owned())
            .or_insert(0) += 1;
    }
    assert_eq!(origin.requests(), 1, "cache-status counts: {labels:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_stream_the_leaders_response_as_it_arrives() {
    let origin = Origin::new()
        .route(
            "/slowbody",
            Reply::trickled(200_000, Duration::from_millis(1500)),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("tr.example", &origin, "", ""));
    let url = proxy.url("/slowbody");
    let first_bytes_within = |url: String| async move {
        use http_body_util::BodyExt;
        let started = std::time::Instant::now();
        let res = client()
            .request(
                Request::get(url)
                    .header("host", "tr.example")
                    .body(empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let label = res
            .headers()
            .get("cache-status")
            .map(|v| v.to_str().unwrap().to_owned());
        let mut body = res.into_body();
        let mut first = None;
        let mut n = 0;
        while let Some(f) = body.frame().await {
            if let Some(d) = f.unwrap().data_ref() {
                n += d.len();
                first.get_or_insert(started.elapsed());
            }
        }
        (first.unwrap(), n, label)
    };
    let leader = tokio::spawn(first_bytes_within(url.clone()));
    // Let the leader's request reach the origin first.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while origin.requests() == 0 {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let waiter = first_bytes_within(url).await;
    let leader = leader.await.unwrap();
    assert_eq!((leader.1, waiter.1), (200_000, 200_000));
    assert_eq!(waiter.2.as_deref(), Some("rampart; fwd=miss; collapsed"));
    assert!(
        waiter.0 < Duration::from_millis(1200),
        "the waiter got its first bytes after {:?}: it waited for the whole body",
        waiter.0
    );
    assert_eq!(origin.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncacheable_responses_release_waiters_at_once() {
    let origin = Origin::new()
        .route(
            "/private",
            Reply::text("mine")
                .header("cache-control", "private")
                .delay(Duration::from_millis(700)),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for("u.example", &origin, "", ""));
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let url = proxy.url("/private");
        tasks.push(tokio::spawn(async move {
            send(
                &client(),
                Request::get(url)
                    .header("host", "u.example")
                    .body(empty())
                    .unwrap(),
            )
            .await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().text(), "mine");
    }
    assert_eq!(origin.requests(), 20, "a private response is never shared");
    // Released waiters fetch in parallel: well under 20 sequential origin delays.
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_whose_answer_was_not_shareable_is_fetched_at_once_until_it_is() {
    // `no-store` until the switch flips, then cacheable.
    let cacheable = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = cacheable.clone();
    let origin = Origin::new()
        .route_fn("/page", move |_| {
            let cc = if flag.load(std::sync::atomic::Ordering::SeqCst) {
                "max-age=60"
            } else {
                "no-store"
            };
            Reply::text("page")
                .header("cache-control", cc)
                .delay(Duration::from_millis(800))
        })
        .start()
        .await;
    let proxy = Proxy::start(&config_for("h.example", &origin, "", ""));
    let wave = |n: usize| {
        let url = proxy.url("/page");
        async move {
            let started = std::time::Instant::now();
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    let url = url.clone();
                    tokio::spawn(async move {
                        send(
                            &client(),
                            Request::get(url)
                                .header("host", "h.example")
                                .body(empty())
                                .unwrap(),
                        )
                        .await
                    })
                })
                .collect();
            for t in tasks {
                assert_eq!(t.await.unwrap().text(), "page");
            }
            started.elapsed()
        }
    };
    // The first answer says no-store: remembered.
    wave(1).await;
    // Ten concurrent misses all go at once: one origin delay, not two (waiting for a leader's
    // head, then fetching).
    let took = wave(10).await;
    assert_eq!(origin.requests(), 11);
    assert!(took < Duration::from_millis(1300), "took {took:?}");
    // The resource turns cacheable: the next answer is stored (and coalescing is back for
    // the key), the rest are hits.
    cacheable.store(true, std::sync::atomic::Ordering::SeqCst);
    wave(1).await;
    let took = wave(10).await;
    assert_eq!(origin.requests(), 12, "stored after it turned cacheable");
    assert!(took < Duration::from_millis(500), "hits: {took:?}");
}
