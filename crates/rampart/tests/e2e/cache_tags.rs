//! Purge by tag (Varnish xkey, Fastly Surrogate-Key, Cloudflare Cache-Tag), end to end: the
//! origin tags responses, clients never see the tags, and a `PURGE` naming a tag (or the API's
//! `tag=`) purges every object carrying it, every variant, hard or soft; on the disk tier,
//! across a restart; and on other instances through a real Redis, its shared tier included.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use http::Request;
use support::redis::Redis;
use support::*;

/// `/p/N` is tagged `product-N` and `all` (Surrogate-Key), `/c/N` with Cloudflare's commas
/// (`category-N,all`), `/x/N` with xkey; `/lang` varies on Accept-Language and is tagged
/// `lang`; `/plain` has no tag.
async fn origin() -> OriginHandle {
    Origin::new()
        .route_fn("*", |s| {
            let path = s.uri.path().to_owned();
            let n = path.rsplit('/').next().unwrap_or("").to_owned();
            let r = Reply::text(&format!("body of {path}")).header("cache-control", "max-age=300");
            if path.starts_with("/p/") {
                r.header("surrogate-key", &format!("product-{n} all"))
            } else if path.starts_with("/c/") {
                r.header("cache-tag", &format!("category-{n},all"))
            } else if path.starts_with("/x/") {
                r.header("xkey", &format!("x-{n}"))
            } else if path == "/lang" {
                r.header("vary", "Accept-Language")
                    .header("surrogate-key", "lang")
            } else {
                r
            }
        })
        .start()
        .await
}

async fn state(p: &Proxy, host: &str, path: &str) -> String {
    get(p, host, path)
        .await
        .header("x-arc2-cache")
        .unwrap_or("")
        .to_owned()
}

fn purge_tag(p: &Proxy, host: &str, tags: &str) -> http::request::Builder {
    Request::builder()
        .method("PURGE")
        .uri(p.url("/"))
        .header("host", host)
        .header("x-purge-tag", tags)
}

#[tokio::test]
async fn a_tag_purge_takes_every_tagged_object_and_nothing_else() {
    let origin = origin().await;
    let proxy = Proxy::start(&config_for(
        "t.test",
        &origin,
        &format!("purge_allow = [\"127.0.0.0/8\"]\napi_key = \"{API_KEY}\""),
        "",
    ));
    for path in ["/p/1", "/p/2", "/c/1", "/x/1", "/plain"] {
        let first = get(&proxy, "t.test", path).await;
        // Clients never see the tags.
        for name in ["surrogate-key", "cache-tag", "xkey"] {
            assert_eq!(first.header(name), None, "{path}: {name}");
        }
        assert_eq!(state(&proxy, "t.test", path).await, "Hit", "{path}");
    }
    for l in ["en", "fr"] {
        fetch(req(&proxy, "t.test", "/lang").header("accept-language", l)).await;
    }
    // One product: that object only.
    let got = fetch(purge_tag(&proxy, "t.test", "product-1")).await;
    assert_eq!(got.text(), "{\"purged\":1,\"soft\":false}\n");
    assert_eq!(state(&proxy, "t.test", "/p/1").await, "Miss");
    for path in ["/p/2", "/c/1", "/x/1", "/plain"] {
        assert_eq!(state(&proxy, "t.test", path).await, "Hit", "{path}");
    }
    // Every variant of a varying resource.
    let got = fetch(purge_tag(&proxy, "t.test", "lang")).await;
    assert_eq!(got.text(), "{\"purged\":2,\"soft\":false}\n");
    for l in ["en", "fr"] {
        let r = fetch(req(&proxy, "t.test", "/lang").header("accept-language", l)).await;
        assert_eq!(r.header("x-arc2-cache"), Some("Miss"), "{l}");
    }
    // A tag on many objects, through Varnish's header; then Cloudflare's tags and the API.
    let got = fetch(
        Request::builder()
            .method("PURGE")
            .uri(proxy.url("/"))
            .header("host", "t.test")
            .header("xkey-purge", "all"),
    )
    .await;
    assert_eq!(got.text(), "{\"purged\":3,\"soft\":false}\n"); // /p/1 (again), /p/2, /c/1
    assert_eq!(state(&proxy, "t.test", "/c/1").await, "Miss");
    assert_eq!(state(&proxy, "t.test", "/x/1").await, "Hit");
    let api = fetch(
        Request::post(proxy.url("/_rampart/purge?tag=x-1&tag=category-1"))
            .header("host", "t.test")
            .header("authorization", format!("Bearer {API_KEY}")),
    )
    .await;
    assert_eq!(api.text(), "{\"purged\":2,\"soft\":false}\n");
    assert_eq!(state(&proxy, "t.test", "/x/1").await, "Miss");
    assert_eq!(state(&proxy, "t.test", "/plain").await, "Hit");
    // A tag nothing carries purges nothing.
    let none = fetch(purge_tag(&proxy, "t.test", "nothing-has-this")).await;
    assert_eq!(none.text(), "{\"purged\":0,\"soft\":false}\n");
}

#[tokio::test]
async fn a_soft_tag_purge_keeps_the_copies_for_stale_if_error() {
    let origin = Origin::new()
        .route(
            "/doc",
            Reply::text("doc")
                .header("cache-control", "max-age=300, stale-if-error=600")
                .header("surrogate-key", "docs"),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for(
        "s.test",
        &origin,
        "purge_allow = [\"127.0.0.0/8\"]",
        "",
    ));
    get(&proxy, "s.test", "/doc").await;
    let got = fetch(purge_tag(&proxy, "s.test", "docs").header("x-purge", "soft")).await;
    assert_eq!(got.text(), "{\"purged\":1,\"soft\":true}\n");
    // Stale now: the origin is asked; gone, the copy stands in.
    drop(origin);
    let r = get(&proxy, "s.test", "/doc").await;
    assert_eq!((r.status.as_u16(), r.text()), (200, "doc".to_owned()));
    assert_eq!(
        r.header("cache-status"),
        Some("rampart; hit; detail=stale-if-error")
    );
}

#[tokio::test]
async fn a_tag_purge_reaches_the_disk_tier_and_outlives_a_restart() {
    let origin = origin().await;
    let dir = scratch("tags-disk");
    let _ = std::fs::remove_dir_all(&dir);
    let global = format!(
        "purge_allow = [\"127.0.0.0/8\"]\nmetrics_allow = [\"127.0.0.0/8\"]\ncache_disk = {:?}\ncache_disk_min_uses = 1",
        dir.display().to_string()
    );
    let path = scratch("tags-disk.toml");
    std::fs::write(&path, config_for("d.test", &origin, &global, "")).unwrap();
    let proxy = Proxy::spawn(&["run", "--config", path.to_str().unwrap()]);
    for p in ["/p/1", "/p/2"] {
        get(&proxy, "d.test", p).await;
        get(&proxy, "d.test", p).await;
    }
    // Both written to disk (the writer is off the request path), and flushed (at most a
    // second after a write).
    let t = Instant::now();
    loop {
        let m = get(&proxy, "d.test", "/_rampart/metrics").await.text();
        let written = m
            .lines()
            .find_map(|l| l.strip_prefix("rampart_cache_disk_writes_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        if written >= 2.0 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{m}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let got = fetch(purge_tag(&proxy, "d.test", "product-1")).await;
    assert_eq!(got.status, 200);
    // The purge log is written and flushed like the records.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    drop(proxy);
    // A new process: memory is empty; the disk has both, and the purge log says /p/1 is gone.
    let proxy = Proxy::spawn(&["run", "--config", path.to_str().unwrap()]);
    // The disk's index is warmed in the background: wait until it is ready.
    let t = Instant::now();
    while !get(&proxy, "d.test", "/_rampart/metrics")
        .await
        .text()
        .contains("rampart_cache_disk_state 2")
    {
        assert!(t.elapsed() < Duration::from_secs(10), "disk tier not ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = origin.requests();
    let p2 = get(&proxy, "d.test", "/p/2").await;
    assert_eq!(
        p2.header("cache-status"),
        Some("rampart; hit; detail=disk"),
        "{}",
        proxy.output()
    );
    let p1 = get(&proxy, "d.test", "/p/1").await;
    assert_eq!(p1.header("x-arc2-cache"), Some("Miss"));
    assert_eq!(origin.requests(), before + 1);
}

#[tokio::test]
async fn a_tag_purge_reaches_every_instance_through_redis() {
    let origin = origin().await;
    let redis = Redis::start();
    let global = format!(
        "workers = 1\npurge_allow = [\"127.0.0.0/8\"]\nredis_url = \"{}\"\nredis_cache = true\nredis_timeout_ms = 100",
        redis.url()
    );
    let a = Proxy::start(&config_for("r.test", &origin, &global, ""));
    let b = Proxy::start(&config_for("r.test", &origin, &global, ""));
    for p in [&a, &b] {
        for path in ["/p/1", "/p/2"] {
            get(p, "r.test", path).await;
        }
    }
    // The shared tier holds /p/1, and the tag's set names it.
    let t = Instant::now();
    let set = format!("rampart:t:{:016x}", fnv1a(b"product-1"));
    while redis.cli(&["SCARD", &set]).trim() != "1" {
        assert!(t.elapsed() < Duration::from_secs(3), "tag set not written");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for p in [&a, &b] {
        assert_eq!(state(p, "r.test", "/p/1").await, "Hit");
    }
    let got = fetch(purge_tag(&a, "r.test", "product-1")).await;
    assert_eq!(got.text(), "{\"purged\":1,\"soft\":false}\n");
    // Gone from Redis (its mark stays), and from B within moments (allowing for a loaded
    // machine).
    assert_eq!(
        redis
            .cli(&["HEXISTS", "rampart:c:h:r.test /p/1", "o"])
            .trim(),
        "0"
    );
    assert_eq!(redis.cli(&["EXISTS", &set]).trim(), "0");
    let t = Instant::now();
    loop {
        let before = origin.requests();
        let s = state(&b, "r.test", "/p/1").await;
        if s == "Miss" {
            assert_eq!(origin.requests(), before + 1);
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(3), "not purged on B");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(state(&b, "r.test", "/p/2").await, "Hit");
    assert_eq!(state(&a, "r.test", "/p/2").await, "Hit");
}

/// The tag hash rampart uses (64-bit FNV-1a), to name the tag's set in Redis.
fn fnv1a(tag: &[u8]) -> u64 {
    tag.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
