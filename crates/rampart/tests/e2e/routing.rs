//! End-to-end tests of `routing_rules`: active health checks and `Performance` routing, with
//! real origins and the real rampart process. Multi-threaded runtimes: the origins must keep
//! answering probes while a test waits on the proxy's output (a blocking poll).
#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;

/// A rule for `site` over two origins (priority 1, then 2) with `routing` lines added to
/// `[proxy_rules.routing_rules]`. Nothing is cached, so every request is routed.
fn two_origins(a: &OriginHandle, b: &OriginHandle, routing: &str) -> String {
    format!(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nworkers = 2\n\
         logging_level = \"warn\"\nadd_logging = false\napi_key = \"{API_KEY}\"\n\
         [[proxy_rules]]\ndomain = \"site\"\nmax_age_seconds = 0\nrule_type = \"Whitelist\"\n\
         enable_logging = false\nignore_query_string = false\nenable_sql_injection_protection = false\n\
         enable_compression = false\nenable_minification = false\nenable_webp_transformation = false\n\
         [proxy_rules.routing_rules]\nhttps_only = false\n{routing}\n\
         [[proxy_rules.routing_rules.routing_locations]]\npriority = 1\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\n\
         [[proxy_rules.routing_rules.routing_locations]]\npriority = 2\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\n",
        a.port(),
        b.port()
    )
}

/// An origin answering `/` with `name` and `/health` with 200 while `up` is true, else 500;
/// it records the Host of each probe.
async fn origin(
    name: &'static str,
    up: Arc<AtomicBool>,
    probe_host: Arc<std::sync::Mutex<String>>,
) -> OriginHandle {
    Origin::new()
        .route("/", Reply::text(name))
        .route_fn("/health", move |seen| {
            *probe_host.lock().unwrap() = seen
                .headers
                .get("host")
                .map(|h| h.to_str().unwrap().to_owned())
                .unwrap_or_default();
            Reply::text("health").status(if up.load(Ordering::SeqCst) { 200 } else { 500 })
        })
        .start()
        .await
}

/// Polls `GET /` until it answers `want` (at most `within`).
async fn until_served_by(proxy: &Proxy, want: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if get(proxy, "site", "/").await.text() == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

async fn status(proxy: &Proxy) -> String {
    fetch(req(proxy, "site", "/_rampart/status").header("x-api-key", API_KEY))
        .await
        .text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_take_a_failing_origin_out_and_bring_it_back() {
    let (a_up, b_up) = (
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicBool::new(true)),
    );
    let host = Arc::new(std::sync::Mutex::new(String::new()));
    let a = origin("a", a_up.clone(), host.clone()).await;
    let b = origin("b", b_up.clone(), Arc::default()).await;
    let proxy = Proxy::start(&two_origins(
        &a,
        &b,
        "routing_method = \"Priority\"\nenable_health_checks = true\nhealth_check_interval = 1\nhealth_check_path = \"/health\"",
    ));
    assert_eq!(get(&proxy, "site", "/").await.text(), "a");
    // Probes arrive, with the rule's host name.
    let deadline = Instant::now() + Duration::from_secs(5);
    while host.lock().unwrap().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(*host.lock().unwrap(), "site");

    // a's /health fails: after 3 failed probes its traffic goes to b, and that is logged.
    a_up.store(false, Ordering::SeqCst);
    assert!(
        until_served_by(&proxy, "b", Duration::from_secs(8)).await,
        "{}",
        proxy.output()
    );
    assert!(
        proxy.wait_for_output("out of rotation", Duration::from_secs(1)),
        "{}",
        proxy.output()
    );
    let s = status(&proxy).await;
    assert!(s.contains(&format!("\"origin\":\"127.0.0.1:{}\",\"method\":\"Priority\",\"health_checks\":true,\"healthy\":false", a.port())), "{s}");
    let served_by_a = a.seen().iter().filter(|r| r.uri.path() == "/").count();
    for _ in 0..5 {
        assert_eq!(get(&proxy, "site", "/").await.text(), "b");
    }
    assert_eq!(
        a.seen().iter().filter(|r| r.uri.path() == "/").count(),
        served_by_a
    );

    // Both fail: fail open to the best-ranked origin.
    b_up.store(false, Ordering::SeqCst);
    assert!(
        until_served_by(&proxy, "a", Duration::from_secs(8)).await,
        "{}",
        proxy.output()
    );

    // a recovers: back in rotation after 2 good probes.
    a_up.store(true, Ordering::SeqCst);
    b_up.store(true, Ordering::SeqCst);
    assert!(
        proxy.wait_for_output("back in rotation", Duration::from_secs(8)),
        "{}",
        proxy.output()
    );
    assert!(until_served_by(&proxy, "a", Duration::from_secs(2)).await);
    let s = status(&proxy).await;
    assert!(!s.contains("\"healthy\":false"), "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn performance_routing_prefers_the_faster_origin_and_notices_a_change() {
    // a answers after `a_ms`, b after `b_ms`; a is the better-ranked one.
    let (a_ms, b_ms) = (Arc::new(AtomicU16::new(60)), Arc::new(AtomicU16::new(2)));
    let slow = |name: &'static str, ms: Arc<AtomicU16>| {
        Origin::new().route_fn("/", move |_| {
            Reply::text(name).delay(Duration::from_millis(ms.load(Ordering::SeqCst).into()))
        })
    };
    let a = slow("a", a_ms.clone()).start().await;
    let b = slow("b", b_ms.clone()).start().await;
    let proxy = Proxy::start(&two_origins(&a, &b, "routing_method = \"Performance\"\nenable_health_checks = false\nhealth_check_interval = 30"));
    // Both are tried while they have no average; then b, the faster, takes nearly everything.
    served_by_b(&proxy, 4).await;
    let by_b = served_by_b(&proxy, 40).await;
    assert!(by_b >= 36, "b served {by_b} of 40");
    let s = status(&proxy).await;
    assert!(s.contains("\"method\":\"Performance\""), "{s}");

    // b becomes slow and a fast: the retry of a (one request every 2 s) finds it.
    a_ms.store(2, Ordering::SeqCst);
    b_ms.store(80, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut switched = false;
    while Instant::now() < deadline {
        if served_by_b(&proxy, 10).await <= 1 {
            switched = true;
            break;
        }
    }
    assert!(
        switched,
        "traffic did not move to a: {}",
        status(&proxy).await
    );
}

/// Sends `n` requests; how many b answered.
async fn served_by_b(proxy: &Proxy, n: usize) -> usize {
    let mut by_b = 0;
    for _ in 0..n {
        if get(proxy, "site", "/").await.text() == "b" {
            by_b += 1;
        }
    }
    by_b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_spreads_by_priority_and_primary_wins_under_priority() {
    let a = Origin::new().route("/", Reply::text("a")).start().await;
    let b = Origin::new().route("/", Reply::text("b")).start().await;
    // Weighted: the location's `priority` is its weight (1 and 2 here: one in three to a).
    let proxy = Proxy::start(&two_origins(
        &a,
        &b,
        "routing_method = \"Weighted\"\nenable_health_checks = false\nhealth_check_interval = 30",
    ));
    let by_b = served_by_b(&proxy, 30).await;
    assert_eq!(by_b, 20, "weights 1 and 2 over 30 requests");
    drop(proxy);
    // Priority: `primary = true` beats a better priority number.
    let cfg = two_origins(
        &a,
        &b,
        "routing_method = \"Priority\"\nenable_health_checks = false\nhealth_check_interval = 30",
    )
    .replacen("priority = 2\n", "priority = 2\nprimary = true\n", 1);
    let proxy = Proxy::start(&cfg);
    assert_eq!(served_by_b(&proxy, 5).await, 5);
}
