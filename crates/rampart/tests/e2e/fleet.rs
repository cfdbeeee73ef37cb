//! The cache sharded over a fleet (`cache_peers`): real rampart instances, each on its own
//! loopback address, ask a key's owner before the origin. Each object is fetched once for
//! the fleet (also when every instance asks at once); non-owners keep a copy for
//! `cache_peer_local_ttl_seconds`; an owner that is gone costs no request; a marker from
//! anyone but a peer is refused; a request crosses one hop at most.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::Request;
use support::*;

const KEY: &str = "0123456789abcdef0123456789abcdef";
const HOST: &str = "shop.example";

/// `n` free addresses on 127.0.0.2, 127.0.0.3, …
fn addresses(n: usize) -> Vec<SocketAddr> {
    (0..n)
        .map(|i| {
            let ip = format!("127.0.0.{}", i + 2);
            loop {
                let port = free_port();
                if std::net::TcpListener::bind((ip.as_str(), port)).is_ok() {
                    return format!("{ip}:{port}").parse().unwrap();
                }
            }
        })
        .collect()
}

/// One instance's configuration: it listens on `me`, and `peers` are the fleet it knows.
fn member_config(
    origin: &OriginHandle,
    me: SocketAddr,
    peers: &[SocketAddr],
    extra: &str,
) -> String {
    member_config_with(origin, me, peers, extra, "")
}

/// [`member_config`] with `rule` added to the rule.
fn member_config_with(
    origin: &OriginHandle,
    me: SocketAddr,
    peers: &[SocketAddr],
    extra: &str,
    rule: &str,
) -> String {
    let list: Vec<String> = peers.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        "listening_address = \"{}\"\nlistening_port_http = {}\nworkers = 1\n\
         logging_level = \"warn\"\nadd_logging = false\n\
         cache_peers = [{}]\ncache_peer_key = \"{KEY}\"\n{extra}\n\
         [[proxy_rules]]\ndomain = \"{HOST}\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\n\
         forward_port_http = {}\nrule_type = \"Whitelist\"\nenable_logging = false\n\
         ignore_query_string = false\nenable_sql_injection_protection = false\n{rule}\n",
        me.ip(),
        me.port(),
        list.join(", "),
        origin.port()
    )
}

fn start_fleet(origin: &OriginHandle, n: usize, extra: &str) -> (Vec<Proxy>, Vec<SocketAddr>) {
    let addrs = addresses(n);
    let proxies = addrs
        .iter()
        .map(|&a| Proxy::start(&member_config(origin, a, &addrs, extra)))
        .collect();
    (proxies, addrs)
}

async fn get(p: &Proxy, path: &str) -> Got {
    fetch(req(p, HOST, path)).await
}

fn cacheable(body: &str) -> Reply {
    Reply::text(body).header("cache-control", "max-age=60")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_instance_gets_a_key_from_its_owner_and_the_origin_sees_it_once() {
    let origin = Origin::new().route("*", cacheable("object")).start().await;
    let (fleet, addrs) = start_fleet(&origin, 3, "cache_peer_local_ttl_seconds = 0");
    let mut by_peer = 0;
    for k in 0..30 {
        for p in &fleet {
            // A client behind a proxy rampart does not trust, which sent forwarding fields.
            let got = fetch(
                req(p, HOST, &format!("/k/{k}"))
                    .header("x-forwarded-for", "192.0.2.1")
                    .header("forwarded", "for=192.0.2.1")
                    .header("x-forwarded-port", "1"),
            )
            .await;
            assert_eq!(got.status, 200);
            assert_eq!(got.text(), "object");
            // One `Via` of rampart's, through the owner too: the fleet is one cache.
            assert_eq!(
                got.headers.get_all("via").iter().count(),
                1,
                "{:?}",
                got.headers
            );
            by_peer += usize::from(
                got.header("cache-status")
                    .unwrap_or("")
                    .contains("detail=peer"),
            );
        }
    }
    assert_eq!(origin.requests(), 30, "each key fetched once for the fleet");
    // Each key has one owner: the two others asked it (no local copies here), so two of the
    // three answers of every key came through a peer.
    assert_eq!(by_peer, 60);
    for seen in origin.seen() {
        assert!(
            seen.headers.get("x-rampart-peer").is_none(),
            "the peers' marker reached the origin: {:?}",
            seen.headers
        );
        // The forwarding fields the instance the client asked first would have sent (the
        // owner writes them from the marker): the client, not the peer; the port the client
        // came to; one element of rampart's own.
        let h = |name: &str| {
            let v: Vec<&str> = seen
                .headers
                .get_all(name)
                .iter()
                .map(|v| v.to_str().unwrap())
                .collect();
            v.join(", ")
        };
        assert_eq!(
            h("x-forwarded-for"),
            "192.0.2.1, 127.0.0.1",
            "{:?}",
            seen.headers
        );
        assert_eq!(h("x-forwarded-port"), addrs[0].port().to_string());
        assert_eq!(h("x-forwarded-proto"), "http");
        assert_eq!(h("x-forwarded-host"), HOST);
        assert_eq!(
            h("forwarded"),
            format!("for=127.0.0.1;proto=http;host={HOST}")
        );
        assert_eq!(h("via").matches("rampart").count(), 1, "{:?}", seen.headers);
        assert_eq!(h("x-request-id").len(), 32, "{:?}", seen.headers);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxys_forwarded_list_is_extended_once_through_the_owner() {
    let origin = Origin::new().route("*", cacheable("object")).start().await;
    let (fleet, _) = start_fleet(&origin, 2, "trusted_proxies = [\"127.0.0.1\"]");
    let mut by_peer = 0;
    for k in 0..12 {
        let got = fetch(
            req(&fleet[0], HOST, &format!("/t/{k}"))
                .header("x-forwarded-for", "192.0.2.1")
                .header("forwarded", "for=192.0.2.1"),
        )
        .await;
        assert_eq!(got.status, 200);
        by_peer += usize::from(got.header("cache-status").unwrap_or("").contains("peer"));
    }
    assert!(by_peer > 0, "no key of the other member was asked");
    assert_eq!(origin.requests(), 12);
    for seen in origin.seen() {
        let forwarded: Vec<&str> = seen
            .headers
            .get_all("forwarded")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(
            forwarded.join(", "),
            format!("for=192.0.2.1, for=127.0.0.1;proto=http;host={HOST}"),
            "{:?}",
            seen.headers
        );
        assert_eq!(
            seen.headers.get("x-forwarded-for").unwrap(),
            "192.0.2.1, 127.0.0.1"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_on_every_instance_make_one_origin_request() {
    raise_fd_limit();
    let origin = Origin::new()
        .route(
            "/hot",
            cacheable(&"h".repeat(5000)).delay(Duration::from_millis(800)),
        )
        .start()
        .await;
    let (fleet, _) = start_fleet(&origin, 3, "");
    let c = client();
    let mut tasks = Vec::new();
    for i in 0..300 {
        let (c, url) = (c.clone(), fleet[i % 3].url("/hot"));
        tasks.push(tokio::spawn(async move {
            send(
                &c,
                Request::get(url)
                    .header("host", HOST)
                    .body(empty())
                    .unwrap(),
            )
            .await
        }));
    }
    for t in tasks {
        let got = t.await.unwrap();
        assert_eq!(got.status, 200);
        assert_eq!(got.body.len(), 5000);
    }
    assert_eq!(origin.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_owner_keeps_its_copy_for_the_local_ttl_only() {
    let origin = Origin::new().route("*", cacheable("object")).start().await;
    let (fleet, _) = start_fleet(&origin, 2, "cache_peer_local_ttl_seconds = 1");
    // A key the first instance does not own.
    let mut path = None;
    for k in 0..50 {
        let p = format!("/ttl/{k}");
        let got = get(&fleet[0], &p).await;
        if got.header("cache-status") == Some("rampart; fwd=miss; detail=peer") {
            path = Some(p);
            break;
        }
    }
    let path = path.expect("the other instance owns some of 50 keys");
    // (The keys tried before it were this instance's own, fetched from the origin.)
    let fetched = origin.requests();
    // Kept here: a local hit.
    let got = get(&fleet[0], &path).await;
    assert_eq!(got.header("cache-status"), Some("rampart; hit"));
    // Past its local lifetime the owner is asked again (its copy is fresh for a minute).
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let got = get(&fleet[0], &path).await;
    assert_eq!(
        got.header("cache-status"),
        Some("rampart; hit; detail=peer")
    );
    assert_eq!(origin.requests(), fetched);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_that_is_gone_or_stalled_fails_no_request() {
    let origin = Origin::new().route("*", cacheable("object")).start().await;
    let (mut fleet, addrs) = start_fleet(&origin, 3, "cache_peer_timeout_ms = 300");
    let third = fleet.remove(2);
    // Stalled: the process takes connections (the kernel does) and never answers.
    third.signal(libc::SIGSTOP);
    let started = Instant::now();
    for k in 0..20 {
        for p in &fleet {
            let got = get(p, &format!("/gone/{k}")).await;
            assert_eq!(got.status, 200, "{:?}", got.headers);
        }
    }
    // The stalled owner cost one timeout per instance, not one per request: it is skipped
    // once it failed.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    third.signal(libc::SIGCONT);
    drop(third);
    // Gone (its address refuses): still no failed request.
    for k in 0..20 {
        for p in &fleet {
            assert_eq!(get(p, &format!("/dead/{k}")).await.status, 200);
        }
    }
    // Back on its address: asked again once the others' wait is over.
    let back = Proxy::start(&member_config(&origin, addrs[2], &addrs, ""));
    tokio::time::sleep(Duration::from_secs(6)).await;
    let before = origin.requests();
    for k in 0..20 {
        assert_eq!(get(&back, &format!("/back/{k}")).await.status, 200);
        for p in &fleet {
            assert_eq!(get(p, &format!("/back/{k}")).await.status, 200);
        }
    }
    assert_eq!(origin.requests() - before, 20, "each key once again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_marker_from_anyone_but_a_peer_is_refused() {
    let origin = Origin::new().route("*", cacheable("object")).start().await;
    let (fleet, addrs) = start_fleet(&origin, 2, "");
    // From 127.0.0.1, which is no member's address.
    let got = fetch(req(&fleet[0], HOST, "/x").header("x-rampart-peer", "http 0 -")).await;
    assert_eq!(got.status, 403);
    // From a member's address, with a signature that is not the key's.
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.set_local_address(Some(addrs[1].ip()));
    let from_member =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(http);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for forged in [
        format!("http {now} {}", "ab".repeat(32)),
        format!("https {now} -"),
        "http".to_owned(),
        format!("gopher {now} {}", "ab".repeat(32)),
    ] {
        let got = send(
            &from_member,
            Request::get(fleet[0].url("/x"))
                .header("host", HOST)
                .header("x-rampart-peer", forged.as_str())
                .body(empty())
                .unwrap(),
        )
        .await;
        assert_eq!(got.status, 403, "{forged}");
    }
    assert_eq!(origin.requests(), 0, "nothing refused reached the origin");
    // Signed with the key: taken. The same request line and time with one byte of the
    // signature changed, after the right one was checked (and remembered): refused.
    let sign = |target: &str| {
        let m = format!("rampart-peer/2\nfwd\nhttp\n{now}\n192.0.2.7\n80\nGET\n{HOST}\n{target}");
        let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, KEY.as_bytes());
        let tag: String = aws_lc_rs::hmac::sign(&key, m.as_bytes())
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("fwd http {now} 192.0.2.7 80 {tag}")
    };
    let marker = sign("/signed");
    let ask = |marker: String| {
        send(
            &from_member,
            Request::get(fleet[0].url("/signed"))
                .header("host", HOST)
                .header("x-rampart-peer", marker)
                .body(empty())
                .unwrap(),
        )
    };
    assert_eq!(ask(marker.clone()).await.status, 200);
    assert_eq!(ask(marker.clone()).await.status, 200);
    let last = marker.len() - 1;
    let flipped = if &marker[last..] == "0" { "1" } else { "0" };
    let forged = format!("{}{flipped}", &marker[..last]);
    assert_eq!(ask(forged).await.status, 403);
    // Right for another target only: refused.
    assert_eq!(ask(sign("/other")).await.status, 403);
    // The client and port it names are signed: others are refused.
    assert_eq!(
        ask(marker.replace("192.0.2.7", "192.0.2.8")).await.status,
        403
    );
    assert_eq!(ask(marker.replace(" 80 ", " 81 ")).await.status, 403);
    let fetched = origin.requests();
    assert!(fetched <= 1, "{fetched}");
    // The origin saw the client and port the marker named.
    for seen in origin.seen() {
        let h = |n: &str| seen.headers.get(n).map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(h("x-forwarded-for").as_deref(), Some("192.0.2.7"));
        assert_eq!(h("x-forwarded-port").as_deref(), Some("80"));
    }
    // A client's request for the peers' own paths is an ordinary request, forwarded to a
    // key's owner as such: it purges nothing there.
    for p in &fleet {
        assert_eq!(get(p, "/kept").await.status, 200);
    }
    for p in &fleet {
        for method in ["GET", "POST"] {
            fetch(req(p, HOST, "/.well-known/rampart-peer/purge?soft=0&scope=2a").method(method))
                .await;
        }
        fetch(req(p, HOST, "/.well-known/rampart-peer")).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for p in &fleet {
        let status = get(p, "/kept")
            .await
            .header("cache-status")
            .map(str::to_owned);
        assert!(
            status.as_deref().unwrap_or("").contains("hit"),
            "{status:?}"
        );
    }
    // Without the field, the same client is served as any other.
    let got = send(
        &from_member,
        Request::get(fleet[0].url("/x"))
            .header("host", HOST)
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_that_disagree_on_the_members_cross_one_hop_at_most() {
    let origin = Origin::new().route("*", cacheable("object")).start().await;
    let addrs = addresses(3);
    // A knows A and B; B also counts C, which does not run: for some keys A asks B while B
    // would ask A. A peer's request is answered where it lands.
    let a = Proxy::start(&member_config(&origin, addrs[0], &addrs[..2], ""));
    let b = Proxy::start(&member_config(&origin, addrs[1], &addrs, ""));
    let started = Instant::now();
    for k in 0..40 {
        let path = format!("/disagree/{k}");
        assert_eq!(get(&a, &path).await.status, 200);
        assert_eq!(get(&b, &path).await.status, 200);
    }
    // Each instance fetched a key once at most (A's key that B gives the absent C, or keeps).
    assert!(origin.requests() <= 80, "{}", origin.requests());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_fleet_without_this_instance_is_refused_with_the_fix() {
    let out = Proxy::try_start(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\n\
         cache_peers = [\"10.0.0.2:80\", \"10.0.0.3:80\", \"not an address\"]\n\
         [[proxy_rules]]\ndomain = \"a.example\"\nforward_ipv4 = \"127.0.0.1\"\n",
    );
    assert!(out.contains("is not an IP address and port"), "{out}");
    assert!(out.contains("cache_peers[2]"), "{out}");
    let out = Proxy::try_start(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\n\
         cache_peers = [\"10.0.0.2:80\", \"10.0.0.3:80\"]\n\
         [[proxy_rules]]\ndomain = \"a.example\"\nforward_ipv4 = \"127.0.0.1\"\n",
    );
    assert!(out.contains("cache_peer_self"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_anywhere_reaches_the_owner_and_every_copy() {
    let origin = Origin::new().route("*", cacheable("object")).start().await;
    let (fleet, _) = start_fleet(
        &origin,
        3,
        "cache_peer_local_ttl_seconds = 60\npurge_allow = [\"127.0.0.0/8\"]",
    );
    let purge = |p: &Proxy, path: &str| {
        Request::builder()
            .method("PURGE")
            .uri(p.url(path))
            .header("host", HOST)
    };
    let mut owners = Vec::new();
    for k in 0..10 {
        let path = format!("/purged/{k}");
        // Fetched once, then held by its owner (the one that did not say `detail=peer`) and
        // copied by the two others.
        let mut owner = None;
        for (i, p) in fleet.iter().enumerate() {
            let got = get(p, &path).await;
            assert_eq!(got.status, 200);
            if !got
                .header("cache-status")
                .unwrap_or("")
                .contains("detail=peer")
            {
                owner = Some(i);
            }
        }
        owners.push(owner.expect("one instance owns the key"));
        for p in &fleet {
            assert_eq!(
                get(p, &path).await.header("cache-status"),
                Some("rampart; hit"),
                "{path}: a copy everywhere"
            );
        }
        // Purged on one of them, whichever: gone from all three.
        let res = fetch(purge(&fleet[k % 3], &path)).await;
        assert_eq!(res.status, 200);
    }
    // The purges travel in the background: give them a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(origin.requests(), 10);
    for (k, &owner) in owners.iter().enumerate() {
        let path = format!("/purged/{k}");
        for (i, p) in fleet.iter().enumerate().filter(|(i, _)| *i != owner) {
            let got = get(p, &path).await;
            assert!(
                got.header("cache-status")
                    .unwrap_or("")
                    .contains("detail=peer"),
                "{path} on instance {i}: a copy outlived the purge ({:?})",
                got.header("cache-status")
            );
        }
    }
    // The owners' objects were purged too: each key fetched once again.
    assert_eq!(origin.requests(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_request_fields_are_applied_once_by_the_owner() {
    let origin = Origin::new().route("*", cacheable("object")).start().await;
    let addrs = addresses(2);
    let rule = "[proxy_rules.request_headers]\nadd = { \"X-Edge\" = \"rampart\" }\n\
                set = { \"X-Client\" = \"{client_ip}\" }\n";
    let fleet: Vec<Proxy> = addrs
        .iter()
        .map(|&a| {
            Proxy::start(&member_config_with(
                &origin,
                a,
                &addrs,
                "cache_peer_local_ttl_seconds = 0",
                rule,
            ))
        })
        .collect();
    for k in 0..10 {
        for p in &fleet {
            assert_eq!(get(p, &format!("/fields/{k}")).await.status, 200);
        }
    }
    assert_eq!(origin.requests(), 10);
    for seen in origin.seen() {
        let edge: Vec<_> = seen.headers.get_all("x-edge").iter().collect();
        assert_eq!(edge, ["rampart"], "{:?}", seen.headers);
        assert_eq!(seen.headers.get("x-client").unwrap(), "127.0.0.1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_lists_the_members_and_a_down_peer() {
    let origin = Origin::new().route("*", cacheable("object")).start().await;
    let (mut fleet, addrs) = start_fleet(&origin, 2, &format!("api_key = \"{API_KEY}\""));
    drop(fleet.remove(1));
    // Some of these keys are the gone member's: asking it fails, and it is marked down.
    for k in 0..20 {
        assert_eq!(get(&fleet[0], &format!("/status/{k}")).await.status, 200);
    }
    let got = fetch(req(&fleet[0], HOST, "/_rampart/status").header("x-api-key", API_KEY)).await;
    assert_eq!(got.status, 200);
    let status: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
    let peers = status["peers"].as_array().expect("peers listed");
    assert_eq!(peers.len(), 2, "{status}");
    let row = |a: SocketAddr| {
        peers
            .iter()
            .find(|p| p["address"] == a.to_string())
            .unwrap_or_else(|| panic!("{a} not listed: {status}"))
    };
    assert_eq!(row(addrs[0])["self"], true);
    assert_eq!(row(addrs[1])["self"], false);
    assert_eq!(row(addrs[1])["up"], false, "{status}");
}

/// One instance that finds the others through `redis` (`cache_peers_from_redis`).
fn discovering_config(origin: &OriginHandle, me: SocketAddr, redis: &str, extra: &str) -> String {
    format!(
        "listening_address = \"{}\"\nlistening_port_http = {}\nworkers = 1\n\
         logging_level = \"warn\"\nadd_logging = false\napi_key = \"{API_KEY}\"\n\
         redis_url = \"{redis}\"\ncache_peers_from_redis = true\ncache_peer_key = \"{KEY}\"\n\
         {extra}\n\
         [[proxy_rules]]\ndomain = \"{HOST}\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\n\
         forward_port_http = {}\nrule_type = \"Whitelist\"\nenable_logging = false\n\
         ignore_query_string = false\nenable_sql_injection_protection = false\n",
        me.ip(),
        me.port(),
        origin.port()
    )
}

/// The members an instance lists in `/_rampart/status`.
async fn members_seen(p: &Proxy) -> Vec<String> {
    let got = fetch(req(p, HOST, "/_rampart/status").header("x-api-key", API_KEY)).await;
    let status: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
    let mut list: Vec<String> = status["peers"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| p["address"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default();
    list.sort();
    list
}

/// Waits until every one of `proxies` lists exactly `want` as the members.
async fn until_members(proxies: &[&Proxy], want: &[SocketAddr], within: Duration) -> Duration {
    let mut want: Vec<String> = want.iter().map(ToString::to_string).collect();
    want.sort();
    let t = Instant::now();
    loop {
        let mut all = true;
        for p in proxies {
            all &= members_seen(p).await == want;
        }
        if all {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < within,
            "members not {want:?} after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Members found through a real Redis: they find each other within a renewal, share the
/// keys (each fetched once for the fleet), a member that is killed drops out of every list
/// within its lease while no request fails, and it joins again when it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_found_through_redis_come_and_go_with_their_leases() {
    let redis = support::redis::Redis::start();
    let origin = Origin::new().route("*", cacheable("object")).start().await;
    let addrs = addresses(3);
    let mut fleet: Vec<Proxy> = addrs
        .iter()
        .map(|&a| Proxy::start(&discovering_config(&origin, a, &redis.url(), "")))
        .collect();
    let all: Vec<&Proxy> = fleet.iter().collect();
    let took = until_members(&all, &addrs, Duration::from_secs(5)).await;
    eprintln!("three members found each other in {took:?}");
    for k in 0..20 {
        for p in &fleet {
            let got = get(p, &format!("/d/{k}")).await;
            assert_eq!(got.status, 200);
        }
    }
    assert_eq!(origin.requests(), 20, "each key fetched once for the fleet");
    // Killed (no goodbye): dropped within the lease, and meanwhile no request fails.
    let gone = fleet.remove(2);
    gone.signal(libc::SIGKILL);
    drop(gone);
    let rest: Vec<&Proxy> = fleet.iter().collect();
    let t = Instant::now();
    let mut k = 0;
    loop {
        for p in &fleet {
            assert_eq!(get(p, &format!("/while/{k}")).await.status, 200);
        }
        k += 1;
        let mut left = true;
        for p in &rest {
            left &= members_seen(p).await.len() == 2;
        }
        if left {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(8),
            "the killed member is still listed"
        );
    }
    let took = until_members(&rest, &addrs[..2], Duration::from_secs(1)).await + t.elapsed();
    eprintln!("a killed member left every list in {took:?}");
    // The two left own every key between them: each new key fetched once.
    let before = origin.requests();
    for k in 0..20 {
        for p in &fleet {
            assert_eq!(get(p, &format!("/two/{k}")).await.status, 200);
        }
    }
    assert_eq!(origin.requests() - before, 20);
    // Back on its address: listed again by everyone.
    fleet.push(Proxy::start(&discovering_config(
        &origin,
        addrs[2],
        &redis.url(),
        "",
    )));
    let all: Vec<&Proxy> = fleet.iter().collect();
    until_members(&all, &addrs, Duration::from_secs(5)).await;
}

#[test]
fn finding_members_through_redis_needs_redis_and_this_instances_address() {
    let out = Proxy::try_start(
        "listening_address = \"0.0.0.0\"\nlistening_port_http = 0\n\
         cache_peers_from_redis = true\ncache_peer_key = \"0123456789abcdef0123\"\n\
         [[proxy_rules]]\ndomain = \"a.example\"\nforward_ipv4 = \"127.0.0.1\"\n",
    );
    assert!(out.contains("no Redis is set"), "{out}");
    assert!(out.contains("cache_peer_self"), "{out}");
    let out = Proxy::try_start(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\n\
         redis_url = \"redis://127.0.0.1:1\"\ncache_peers = [\"127.0.0.1:80\"]\n\
         cache_peers_from_redis = true\ncache_peer_key = \"0123456789abcdef0123\"\n\
         [[proxy_rules]]\ndomain = \"a.example\"\nforward_ipv4 = \"127.0.0.1\"\n",
    );
    assert!(out.contains("both name the members"), "{out}");
}

/// The answers an instance had from the peer at `addr` (its status's `peers` row).
/// Asks `p` for `PREFIX/0` … `PREFIX/n-1` once each (each answer checked by `check`): the
/// paths a peer answered (at least one).
async fn asked_of_a_peer(p: &Proxy, prefix: &str, n: usize, check: impl Fn(&Got)) -> Vec<String> {
    let mut theirs = Vec::new();
    for k in 0..n {
        let path = format!("{prefix}/{k}");
        let got = get(p, &path).await;
        check(&got);
        if got
            .header("cache-status")
            .unwrap_or("")
            .contains("detail=peer")
        {
            theirs.push(path);
        }
    }
    assert!(!theirs.is_empty(), "no key of another member's among {n}");
    theirs
}

async fn answers_from(p: &Proxy, addr: SocketAddr) -> u64 {
    let got = fetch(req(p, HOST, "/_rampart/status").header("x-api-key", API_KEY)).await;
    let status: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
    status["peers"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["address"] == addr.to_string()))
        .and_then(|r| r["answers"].as_u64())
        .unwrap_or_else(|| panic!("{addr} not listed: {status}"))
}

/// A page the owner does not store (`no-store`) is asked of the owner once; after that the
/// instance fetches it from the origin itself, with no second hop, as long as it remembers it
/// does not store (hit-for-miss).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_that_is_never_stored_costs_no_second_hop() {
    let origin = Origin::new()
        .route(
            "*",
            Reply::text("fresh").header("cache-control", "no-store"),
        )
        .start()
        .await;
    let (fleet, addrs) = start_fleet(&origin, 2, &format!("api_key = \"{API_KEY}\""));
    let a = &fleet[0];
    let theirs = asked_of_a_peer(a, "/nostore", 20, |got| {
        assert_eq!(got.status, 200);
    })
    .await;
    let asked = answers_from(a, addrs[1]).await;
    assert_eq!(asked, theirs.len() as u64);
    let before = origin.requests();
    for _ in 0..3 {
        for path in &theirs {
            let got = get(a, path).await;
            assert_eq!(got.status, 200);
            assert_eq!(got.text(), "fresh");
        }
    }
    assert_eq!(origin.requests() - before, 3 * theirs.len());
    assert_eq!(
        answers_from(a, addrs[1]).await,
        asked,
        "asked the owner again"
    );
}

/// A client's own `Cache-Control: no-store` does not make a key pass: the next requests
/// still go to its owner, which holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_no_store_does_not_turn_the_owner_away() {
    let origin = Origin::new().route("*", cacheable("object")).start().await;
    let (fleet, addrs) = start_fleet(&origin, 2, &format!("api_key = \"{API_KEY}\""));
    let a = &fleet[0];
    // A key the other member owns, stored there.
    let mut theirs = None;
    for k in 0..20 {
        let path = format!("/owned/{k}");
        if get(a, &path)
            .await
            .header("cache-status")
            .unwrap_or("")
            .contains("detail=peer")
        {
            theirs = Some(path);
            break;
        }
    }
    let path = theirs.expect("a key of the other member's among 20");
    let got = fetch(req(a, HOST, &path).header("cache-control", "no-store")).await;
    assert_eq!(got.status, 200);
    let (asked, fetched) = (answers_from(a, addrs[1]).await, origin.requests());
    for _ in 0..3 {
        let got = get(a, &path).await;
        assert_eq!(
            got.header("cache-status"),
            Some("rampart; hit; detail=peer")
        );
    }
    assert_eq!(answers_from(a, addrs[1]).await, asked + 3);
    assert_eq!(origin.requests(), fetched);
}

/// A range miss on a key another member owns goes to the owner as the client sent it: the
/// owner fetches the whole object once, keeps it and cuts the range (the origin never sees a
/// range, and never a second request for a key); the answer has one `Via`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_is_cut_by_the_owner_from_the_object_it_holds() {
    let origin = Origin::new()
        .route("*", cacheable("0123456789abcdef"))
        .start()
        .await;
    let (fleet, addrs) = start_fleet(&origin, 2, &format!("api_key = \"{API_KEY}\""));
    for k in 0..12 {
        for p in [&fleet[0], &fleet[1], &fleet[0]] {
            let got = fetch(req(p, HOST, &format!("/r/{k}")).header("range", "bytes=2-5")).await;
            assert_eq!(got.status, 206, "{:?}", got.headers);
            assert_eq!(got.text(), "2345");
            assert_eq!(got.header("content-range"), Some("bytes 2-5/16"));
            assert_eq!(
                got.headers.get_all("via").iter().count(),
                1,
                "{:?}",
                got.headers
            );
        }
    }
    assert!(
        answers_from(&fleet[0], addrs[1]).await > 0,
        "no range went to the other member"
    );
    assert_eq!(origin.requests(), 12, "each key fetched once, whole");
    for seen in origin.seen() {
        assert!(seen.headers.get("range").is_none(), "{:?}", seen.headers);
    }
}

/// An object larger than any instance keeps is asked of its owner once: the asking instance
/// then fetches it from the origin itself (the body does not cross two hops each time), and
/// its ranges too after the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_too_large_to_keep_costs_no_second_hop() {
    let origin = Origin::new()
        .route("*", cacheable(&"b".repeat(8192)))
        .start()
        .await;
    let (fleet, addrs) = start_fleet(
        &origin,
        2,
        &format!("api_key = \"{API_KEY}\"\ncache_max_object = \"4KiB\""),
    );
    let a = &fleet[0];
    let theirs = asked_of_a_peer(a, "/big", 12, |got| {
        assert_eq!(got.body.len(), 8192);
    })
    .await;
    let asked = answers_from(a, addrs[1]).await;
    for _ in 0..2 {
        for path in &theirs {
            let got = get(a, path).await;
            assert_eq!(got.body.len(), 8192);
            assert!(
                !got.header("cache-status").unwrap_or("").contains("peer"),
                "{:?}",
                got.headers
            );
        }
    }
    assert_eq!(
        answers_from(a, addrs[1]).await,
        asked,
        "asked the owner again"
    );
    // Ranges of them: each asked of the owner once (it cannot keep the whole either), then
    // sent to the origin from here. (This origin answers a range with the whole object,
    // which goes on as it is: nothing here holds the whole to cut it from.)
    for _ in 0..3 {
        for path in &theirs {
            let got = fetch(req(a, HOST, path).header("range", "bytes=0-3")).await;
            assert_eq!(got.status, 200, "{:?}", got.headers);
            assert_eq!(got.body.len(), 8192);
        }
    }
    assert_eq!(
        answers_from(a, addrs[1]).await,
        asked + theirs.len() as u64,
        "ranges asked of the owner more than once each"
    );
}
