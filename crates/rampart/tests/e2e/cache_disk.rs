//! The disk tier (`cache_disk`), end to end with the real binary and a real directory: objects
//! come back after a restart and after `kill -9` in the middle of writes (every body compared
//! with the origin's), purges reach the disk and outlive a restart, a rule keeps its responses
//! off it, and the metrics show it.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use http::Request;
use support::*;

const API_KEY: &str = "disk-test-key-0123456789";

/// The origin's body for a path: its own bytes, of a length that depends on it (1–40 KB).
fn body_for(path: &str) -> String {
    let n: usize = path.bytes().map(usize::from).sum::<usize>() * 37 % 40_000 + 1000;
    let mut s = format!("{path}:");
    while s.len() < n {
        s.push_str(path);
        s.push('|');
    }
    s.truncate(n);
    s
}

async fn origin() -> OriginHandle {
    Origin::new()
        .route_fn("*", |s| {
            Reply::text(&body_for(s.uri.path())).header("cache-control", "max-age=600")
        })
        .start()
        .await
}

fn config(origin: &OriginHandle, dir: &Path, extra_global: &str, extra_rule: &str) -> String {
    let size = if extra_global.contains("cache_disk_size") {
        ""
    } else {
        "cache_disk_size = \"64MiB\"\n"
    };
    config_for(
        "disk.example",
        origin,
        &format!(
            "cache_disk = {:?}\n{size}api_key = \"{API_KEY}\"\n{extra_global}",
            dir.display().to_string()
        ),
        extra_rule,
    )
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

async fn metrics(proxy: &Proxy) -> String {
    let got = fetch(
        req(proxy, "anything", "/_rampart/metrics")
            .header("authorization", format!("Bearer {API_KEY}")),
    )
    .await;
    assert_eq!(got.status, 200);
    got.text()
}

/// Waits until the disk tier has written `n` records (objects).
async fn written(proxy: &Proxy, n: f64) {
    let start = Instant::now();
    loop {
        let m = metrics(proxy).await;
        let w = value(&m, "rampart_cache_disk_writes_total").unwrap_or(0.0);
        if w >= n {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{w} of {n} written\n{m}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the disk tier's index is warm.
async fn ready(proxy: &Proxy) {
    let start = Instant::now();
    loop {
        let m = metrics(proxy).await;
        if value(&m, "rampart_cache_disk_state") == Some(2.0) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{m}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn stop(mut proxy: Proxy) {
    proxy.signal(libc::SIGTERM);
    assert_eq!(proxy.wait_exit(Duration::from_secs(20)), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_hits_again_after_a_restart() {
    let origin = origin().await;
    let dir = scratch("disk-restart");
    // Written at the first use; a memory cache too small to hold them all.
    let cfg = config(
        &origin,
        &dir,
        "cache_disk_min_uses = 1\ncache_memory = \"512KiB\"",
        "",
    );
    let proxy = Proxy::start(&cfg);
    let paths: Vec<String> = (0..60).map(|i| format!("/r/{i}")).collect();
    for p in &paths {
        let got = get(&proxy, "disk.example", p).await;
        assert_eq!(got.status, 200);
        assert_eq!(got.text(), body_for(p));
    }
    written(&proxy, 60.0).await;
    // Evicted from the small memory cache, some come back from disk in this same process.
    let first = get(&proxy, "disk.example", "/r/0").await;
    assert_eq!(first.text(), body_for("/r/0"));
    assert_eq!(
        first.header("cache-status"),
        Some("rampart; hit; detail=disk")
    );
    assert_eq!(origin.requests(), 60);
    stop(proxy).await;

    let proxy = Proxy::start(&cfg);
    // The index warms in the background (a request before it is warm may miss).
    ready(&proxy).await;
    let mut disk_hits = 0;
    for p in &paths {
        let got = get(&proxy, "disk.example", p).await;
        assert_eq!(got.status, 200);
        assert_eq!(got.text(), body_for(p), "{p}");
        let disk = got.header("cache-status") == Some("rampart; hit; detail=disk");
        if !disk {
            eprintln!("{p}: {:?}", got.header("cache-status"));
        }
        disk_hits += usize::from(disk);
    }
    assert_eq!(
        disk_hits, 60,
        "every object written is a hit after the restart"
    );
    assert_eq!(origin.requests(), 60, "none went to the origin again");
    let m = metrics(&proxy).await;
    assert_eq!(value(&m, "rampart_cache_disk_state"), Some(2.0), "{m}");
    // The status endpoint shows the tier.
    let status = fetch(
        req(&proxy, "anything", "/_rampart/status")
            .header("authorization", format!("Bearer {API_KEY}")),
    )
    .await;
    let v: serde_json::Value = serde_json::from_slice(&status.body).unwrap();
    let disk = &v["cache"]["disk"];
    assert_eq!(disk["state"], "ready", "{v}");
    assert!(disk["objects"].as_u64().unwrap() >= 60, "{v}");
    assert!(disk["used_bytes"].as_u64().unwrap() > 0, "{v}");
    assert!(disk["warmup_seconds"].as_f64().is_some(), "{v}");
    assert!(value(&m, "rampart_cache_disk_hits_total").unwrap() >= 60.0);
    assert!(value(&m, "rampart_cache_disk_used_bytes").unwrap() <= (64 << 20) as f64);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_writing_never_serves_a_torn_object() {
    let origin = origin().await;
    let dir = scratch("disk-kill");
    let cfg = config(&origin, &dir, "cache_disk_min_uses = 1", "");
    let paths: Vec<String> = (0..400).map(|i| format!("/k/{i}")).collect();
    let mut served_from_disk = 0;
    for cycle in 0..5u64 {
        let mut proxy = Proxy::start(&cfg);
        // Every body this process serves, from wherever, is the origin's.
        let client = client();
        let mut tasks = Vec::new();
        for (i, p) in paths.iter().enumerate() {
            if i % 5 != (cycle % 5) as usize && i % 3 != 0 {
                continue;
            }
            let url = proxy.url(p);
            let p = p.clone();
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let req = Request::get(url)
                    .header("host", "disk.example")
                    .body(empty())
                    .unwrap();
                let Ok(res) = client.request(req).await else {
                    return (p, None);
                };
                let status = res.status();
                let body = http_body_util::BodyExt::collect(res.into_body())
                    .await
                    .ok()
                    .map(|b| b.to_bytes());
                (p, body.map(|b| (status, b)))
            }));
        }
        // Killed while the requests, and the writes behind them, are going on.
        tokio::time::sleep(Duration::from_millis(30 + cycle * 17)).await;
        proxy.child.kill().unwrap();
        proxy.child.wait().unwrap();
        for t in tasks {
            let (p, res) = t.await.unwrap();
            // Cut by the kill: no response, or a body cut short (the client sees the error), is
            // what a kill does; a response read whole is the origin's.
            if let Some((status, body)) = res {
                assert_eq!(status, 200, "cycle {cycle} {p}");
                assert_eq!(body, body_for(&p).as_bytes(), "cycle {cycle} {p}");
            }
        }
        // After the restart: every request succeeds, every body is the origin's.
        let proxy2 = Proxy::start(&cfg);
        ready(&proxy2).await;
        // Every path on the last cycle, a seventh of them before.
        let step = if cycle == 4 { 1 } else { 7 };
        for p in paths.iter().step_by(step) {
            let got = get(&proxy2, "disk.example", p).await;
            assert_eq!(got.status, 200, "cycle {cycle} {p}");
            assert_eq!(got.text(), body_for(p), "cycle {cycle} {p}");
            served_from_disk +=
                usize::from(got.header("cache-status") == Some("rampart; hit; detail=disk"));
        }
        drop(proxy2);
    }
    assert!(served_from_disk > 0, "some answers came from disk");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purges_reach_the_disk_and_outlive_a_restart() {
    let origin = origin().await;
    let dir = scratch("disk-purge");
    let cfg = config(&origin, &dir, "cache_disk_min_uses = 1", "");
    let proxy = Proxy::start(&cfg);
    let paths = [
        "/blog/1",
        "/blog/2",
        "/shop/blog-sale",
        "/about",
        "/soft",
        "/promo/summer-sale",
    ];
    for p in paths {
        get(&proxy, "disk.example", p).await;
    }
    written(&proxy, 6.0).await;
    let api = |proxy: &Proxy, q: &str| {
        Request::post(proxy.url(&format!("/_rampart/purge?{q}")))
            .header("authorization", format!("Bearer {API_KEY}"))
    };
    let res = fetch(api(
        &proxy,
        "scope=prefix&host=disk.example&path=%2Fblog%2F",
    ))
    .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let res = fetch(api(&proxy, "scope=exact&host=disk.example&path=%2Fabout")).await;
    assert_eq!(res.status, 200, "{}", res.text());
    let res = fetch(api(
        &proxy,
        "scope=exact&host=disk.example&path=%2Fsoft&soft=true",
    ))
    .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let res = fetch(api(&proxy, "scope=contains&host=disk.example&path=summer")).await;
    assert_eq!(res.status, 200, "{}", res.text());
    stop(proxy).await;
    let before = origin.requests();

    // A new process: nothing in memory, everything asked of the disk.
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    let kept = get(&proxy, "disk.example", "/shop/blog-sale").await;
    assert_eq!(
        kept.header("cache-status"),
        Some("rampart; hit; detail=disk")
    );
    for p in ["/blog/1", "/blog/2", "/about", "/promo/summer-sale"] {
        let got = get(&proxy, "disk.example", p).await;
        assert_eq!(got.status, 200);
        assert_eq!(got.header("x-arc2-cache"), Some("Miss"), "{p} was purged");
        assert_eq!(got.text(), body_for(p));
    }
    // Soft: kept, but stale, so it goes to the origin (which answers anew).
    let soft = get(&proxy, "disk.example", "/soft").await;
    assert_ne!(
        soft.header("cache-status"),
        Some("rampart; hit; detail=disk")
    );
    assert_eq!(soft.text(), body_for("/soft"));
    assert_eq!(origin.requests(), before + 5);

    // A domain purge from this process reaches what the disk holds from the last one.
    let res = fetch(api(&proxy, "scope=domain&host=disk.example")).await;
    assert_eq!(res.status, 200);
    let got = get(&proxy, "disk.example", "/shop/blog-sale").await;
    assert_eq!(got.header("x-arc2-cache"), Some("Miss"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `PURGE` counts what it removed on every tier: an object held only on disk (after a
/// restart) answered `{"purged":0}` although it was purged. A prefix purge reaches the disk as
/// a ban, and the answer says so instead of counting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_counts_what_it_removed_on_disk() {
    let origin = origin().await;
    let dir = scratch("disk-purge-count");
    let cfg = config(&origin, &dir, "cache_disk_min_uses = 1", "");
    let proxy = Proxy::start(&cfg);
    for p in ["/only-on-disk", "/both", "/a/1", "/a/2"] {
        get(&proxy, "disk.example", p).await;
    }
    written(&proxy, 4.0).await;
    let purge = |proxy: &Proxy, path: &str| {
        req(proxy, "disk.example", path)
            .method("PURGE")
            .header("authorization", format!("Bearer {API_KEY}"))
    };
    // In memory and on disk: one object, purged from both tiers.
    let res = fetch(purge(&proxy, "/both")).await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(
        res.text(),
        "{\"purged\":1,\"soft\":false,\"memory\":1,\"disk\":1}\n"
    );
    stop(proxy).await;

    // A new process: nothing in memory.
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    let purge = |path: &str| purge(&proxy, path);
    let res = fetch(purge("/only-on-disk")).await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(
        res.text(),
        "{\"purged\":1,\"soft\":false,\"memory\":0,\"disk\":1}\n"
    );
    let res = fetch(purge("/never-stored")).await;
    assert_eq!(
        res.text(),
        "{\"purged\":0,\"soft\":false,\"memory\":0,\"disk\":0}\n"
    );
    let res = fetch(purge("/a/").header("x-purge-scope", "prefix")).await;
    assert_eq!(
        res.text(),
        "{\"purged\":0,\"soft\":false,\"memory\":0,\"disk_ban\":true}\n"
    );
    let before = origin.requests();
    for p in ["/only-on-disk", "/both", "/a/1", "/a/2"] {
        let got = get(&proxy, "disk.example", p).await;
        assert_eq!(got.header("x-arc2-cache"), Some("Miss"), "{p} was purged");
    }
    assert_eq!(origin.requests(), before + 4);
    stop(proxy).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_can_keep_its_responses_off_the_disk_and_one_hit_wonders_stay_off() {
    let origin = origin().await;
    let dir = scratch("disk-rules");
    let cfg = config(&origin, &dir, "", "")
        + &format!(
            "[[proxy_rules]]\ndomain = \"private.example\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\ncache_disk = false\n",
            origin.port()
        );
    let proxy = Proxy::start(&cfg);
    // The default admission: written at the second use, not the first.
    get(&proxy, "disk.example", "/once").await;
    for _ in 0..2 {
        get(&proxy, "disk.example", "/twice").await;
    }
    for _ in 0..3 {
        get(&proxy, "private.example", "/secret").await;
    }
    written(&proxy, 1.0).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let m = metrics(&proxy).await;
    assert_eq!(
        value(&m, "rampart_cache_disk_writes_total"),
        Some(1.0),
        "{m}"
    );
    assert!(
        value(&m, "rampart_cache_disk_not_admitted_total").unwrap() >= 2.0,
        "{m}"
    );
    stop(proxy).await;
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    let hit = |h: Option<&str>| h == Some("rampart; hit; detail=disk");
    assert!(hit(get(&proxy, "disk.example", "/twice")
        .await
        .header("cache-status")));
    assert!(!hit(get(&proxy, "disk.example", "/once")
        .await
        .header("cache-status")));
    assert!(!hit(get(&proxy, "private.example", "/secret")
        .await
        .header("cache-status")));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_reports_a_directory_that_cannot_hold_the_cache() {
    let file = scratch("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let toml = format!(
        "cache_disk = {:?}\ncache_disk_size = \"1MiB\"\n[[proxy_rules]]\ndomain = \"a.example\"\nforward_ipv4 = \"127.0.0.1\"\nmax_age_seconds = 60\n",
        file.display().to_string()
    );
    let path = scratch("check.toml");
    std::fs::write(&path, toml).unwrap();
    let out = std::process::Command::new(rampart_bin())
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("1:14") && text.contains("not a directory"),
        "{text}"
    );
    assert!(
        text.contains("2:19") && text.contains("cache_disk_size"),
        "{text}"
    );
}

/// A body whose every byte depends on its offset (so a range or a chunk out of place shows).
fn patterned(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4093) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_objects_stream_from_disk_with_bounded_memory_and_ranges_read_from_disk() {
    const LEN: usize = 48 << 20;
    let body = patterned(LEN);
    let origin = Origin::new()
        .route(
            "/big",
            Reply::typed(&body, "application/octet-stream").header("cache-control", "max-age=600"),
        )
        .start()
        .await;
    let dir = scratch("disk-large");
    let cfg = config(
        &origin,
        &dir,
        "cache_disk_min_uses = 1\ncache_memory = \"16MiB\"\ncache_max_object = \"256MiB\"\ncache_disk_size = \"1GiB\"",
        "",
    );
    let proxy = Proxy::start(&cfg);
    // The miss streams to the client while it is written.
    let first = get(&proxy, "disk.example", "/big").await;
    assert_eq!(first.status, 200);
    assert!(first.body == body, "the miss's body");
    written(&proxy, 1.0).await;
    let hit = get(&proxy, "disk.example", "/big").await;
    assert_eq!(
        hit.header("cache-status"),
        Some("rampart; hit; detail=disk")
    );
    assert!(hit.body == body, "the disk hit's body");
    assert_eq!(origin.requests(), 1);
    // Ranges read only what they cover.
    let m = metrics(&proxy).await;
    let read_before = value(&m, "rampart_cache_disk_read_bytes_total").unwrap();
    for (range, from, to) in [
        ("bytes=10000000-10000099", 10_000_000, 10_000_100),
        ("bytes=-100", LEN - 100, LEN),
        ("bytes=0-0", 0, 1),
    ] {
        let got = fetch(req(&proxy, "disk.example", "/big").header("range", range)).await;
        assert_eq!(got.status, 206, "{range}");
        assert_eq!(&got.body[..], &body[from..to], "{range}");
    }
    let m = metrics(&proxy).await;
    let read = value(&m, "rampart_cache_disk_read_bytes_total").unwrap() - read_before;
    assert!(read < (4 << 20) as f64, "three ranges read {read} bytes");
    let head = fetch(req(&proxy, "disk.example", "/big").method("HEAD")).await;
    assert_eq!(
        head.header("content-length"),
        Some(LEN.to_string().as_str())
    );

    // Ten clients that read slowly: each holds a chunk in rampart at most.
    let before = proxy.rss_kib();
    let mut slow = Vec::new();
    for _ in 0..10 {
        let mut s = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        s.write_all(b"GET /big HTTP/1.1\r\nhost: disk.example\r\n\r\n")
            .await
            .unwrap();
        let mut buf = vec![0; 65536];
        let _ = s.read(&mut buf).await.unwrap();
        slow.push(s);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let grown = proxy.rss_kib().saturating_sub(before);
    eprintln!("RSS grew {grown} KiB for 10 slow readers (from {before} KiB)");
    assert!(
        grown < 32 << 10,
        "RSS grew {grown} KiB for 10 slow readers of a 48 MiB object"
    );
    drop(slow);

    // And after a restart.
    stop(proxy).await;
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    let again = get(&proxy, "disk.example", "/big").await;
    assert_eq!(
        again.header("cache-status"),
        Some("rampart; hit; detail=disk")
    );
    assert!(again.body == body);
    assert_eq!(origin.requests(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A small filesystem of its own for the disk tier (a tmpfs), unmounted when dropped; `None`
/// where this machine does not let the tests mount one.
struct SmallFs(std::path::PathBuf);

impl SmallFs {
    fn mount(dir: &Path, size: &str) -> Option<SmallFs> {
        std::fs::create_dir_all(dir).unwrap();
        if std::env::var_os("RAMPART_TEST_NO_MOUNT").is_some() {
            return None;
        }
        let ok = std::process::Command::new("mount")
            // mode=0700: a tmpfs's root is 1777 otherwise, which the tier refuses.
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallFs(dir.to_path_buf()))
    }

    /// Leaves the filesystem no room for a new file (its inodes taken by empty files in a
    /// folder of `dir`), while files already there can still grow: nothing new can be made.
    /// (A read-only mount would not do: a tier keeps writing through the directory it opened
    /// under a read-only bind mount laid over it, and a filesystem with files open for writing
    /// cannot be remounted read-only.)
    fn no_new_files(&self, dir: &Path) {
        let fill = dir.join("inodes");
        std::fs::create_dir_all(&fill).unwrap();
        let mut n = 0u64;
        while std::fs::File::create(fill.join(n.to_string())).is_ok() {
            n += 1;
            assert!(n < 1_000_000, "the filesystem's inodes are not limited");
        }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        // The read-only bind mount, if any, then the tmpfs.
        while std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success())
        {}
    }
}

/// Fetches every path and checks each answer is the origin's.
async fn all_right(proxy: &Proxy, paths: &[String]) -> usize {
    let mut from_disk = 0;
    for p in paths {
        let got = get(proxy, "disk.example", p).await;
        assert_eq!(got.status, 200, "{p}");
        assert_eq!(got.text(), body_for(p), "{p}");
        from_disk += usize::from(got.header("cache-status") == Some("rampart; hit; detail=disk"));
    }
    from_disk
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_never_fails_a_request() {
    let origin = origin().await;
    let dir = scratch("disk-full");
    let fs = SmallFs::mount(&dir, "3m");
    let cfg = config(
        &origin,
        &dir,
        "cache_disk_min_uses = 1\ncache_memory = \"1MiB\"\ncache_disk_size = \"256MiB\"",
        "",
    );
    let proxy = Proxy::start(&cfg);
    if fs.is_none() {
        // No mount here: a file-size limit on the process stands in for the full disk.
        eprintln!("tmpfs cannot be mounted here: limiting rampart's file size instead");
        let ok = std::process::Command::new("prlimit")
            .args(["--pid", &proxy.pid().to_string(), "--fsize=1500000"])
            .status()
            .unwrap();
        assert!(ok.success());
    }
    // ~5.5 MB of objects for 3 MiB of disk.
    let paths: Vec<String> = (0..400).map(|i| format!("/f/{i}")).collect();
    all_right(&proxy, &paths).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let m = metrics(&proxy).await;
    assert!(
        value(&m, "rampart_cache_disk_errors_total").unwrap() >= 1.0,
        "{m}"
    );
    assert!(
        value(&m, "rampart_cache_disk_writes_total").unwrap() >= 10.0,
        "{m}"
    );
    // Logged once, however many writes failed.
    let out = proxy.output();
    // Each kind of fault is logged once (a full disk can also stop a summary or a new segment).
    let full =
        out.matches("the disk is full").count() + out.matches("could not be written").count();
    assert_eq!(full, 1, "{out}");
    assert!(out.matches("disk cache:").count() <= 3, "{out}");
    // Everything still answers right; what was written is served from disk.
    let from_disk = all_right(&proxy, &paths).await;
    assert!(from_disk > 0);
    stop(proxy).await;
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    assert!(
        all_right(&proxy, &paths).await > 0,
        "what was written survives"
    );

    drop(proxy);
    drop(fs);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_where_nothing_new_can_be_made_stops_the_writes_not_the_reads() {
    let origin = origin().await;
    let dir = scratch("disk-ro");
    let Some(fs) = SmallFs::mount(&dir, "64m,nr_inodes=2000") else {
        // Root can write wherever the permission bits say no; only a filesystem of the
        // test's own shows it.
        eprintln!("tmpfs cannot be mounted here: the no-new-files case is not run");
        return;
    };
    let cfg = config(
        &origin,
        &dir,
        "cache_disk_min_uses = 1\ncache_memory = \"256KiB\"\ncache_disk_size = \"16MiB\"",
        "",
    );
    let proxy = Proxy::start(&cfg);
    let first: Vec<String> = (0..100).map(|i| format!("/w/{i}")).collect();
    all_right(&proxy, &first).await;
    written(&proxy, 100.0).await;
    fs.no_new_files(&dir);
    // Enough new objects to need new segments, which cannot be made now.
    let more: Vec<String> = (0..200).map(|i| format!("/ro/{i}")).collect();
    all_right(&proxy, &more).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = proxy.output();
    // Each kind of fault is logged once, however often it happens.
    assert_eq!(
        out.matches("a segment could not be created").count(),
        1,
        "{out}"
    );
    assert!(out.matches("disk cache:").count() <= 2, "{out}");
    let m = metrics(&proxy).await;
    assert!(
        value(&m, "rampart_cache_disk_errors_total").unwrap() >= 1.0,
        "{m}"
    );
    // What is on disk is still read.
    assert!(all_right(&proxy, &first).await > 0, "still read from disk");
    drop(proxy);
    drop(fs);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_truncated_or_removed_behind_rampart_are_misses_not_errors() {
    let origin = origin().await;
    let dir = scratch("disk-behind");
    let cfg = config(
        &origin,
        &dir,
        "cache_disk_min_uses = 1\ncache_memory = \"256KiB\"\ncache_disk_size = \"16MiB\"",
        "",
    );
    let proxy = Proxy::start(&cfg);
    let paths: Vec<String> = (0..150).map(|i| format!("/b/{i}")).collect();
    all_right(&proxy, &paths).await;
    written(&proxy, 150.0).await;
    // Every segment cut to a third, or removed.
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "seg") {
            n += 1;
            if n % 2 == 0 {
                std::fs::remove_file(&p).unwrap();
            } else {
                let len = std::fs::metadata(&p).unwrap().len();
                let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                f.set_len(len / 3).unwrap();
            }
        }
    }
    assert!(n > 1);
    all_right(&proxy, &paths).await;
    let m = metrics(&proxy).await;
    assert!(
        value(&m, "rampart_cache_disk_errors_total").unwrap() >= 1.0,
        "{m}"
    );
    stop(proxy).await;
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    all_right(&proxy, &paths).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_memory_has_no_room_for_go_to_disk_straight_from_the_origin() {
    let origin = origin().await;
    let dir = scratch("disk-noroom");
    // Far too little memory for 16 bodies of up to 40 KB being collected at once.
    // Written at the second use, as by default.
    let cfg = config(&origin, &dir, "cache_memory = \"64KiB\"", "");
    let proxy = Proxy::start(&cfg);
    let paths: Vec<String> = (0..160).map(|i| format!("/n/{i}")).collect();
    let client = client();
    let twice: Vec<String> = paths.iter().chain(&paths).cloned().collect();
    for batch in twice.chunks(16) {
        let mut tasks = Vec::new();
        for p in batch {
            let (client, url, p) = (client.clone(), proxy.url(p), p.clone());
            tasks.push(tokio::spawn(async move {
                let got = send(
                    &client,
                    Request::get(url)
                        .header("host", "disk.example")
                        .body(empty())
                        .unwrap(),
                )
                .await;
                assert_eq!(got.text(), body_for(&p));
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    }
    written(&proxy, 160.0).await;
    stop(proxy).await;
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    assert_eq!(all_right(&proxy, &paths).await, 160, "all from disk");
    assert_eq!(origin.requests(), 320);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variants_come_back_from_disk_each_to_its_own_clients() {
    let origin = Origin::new()
        .route_fn("/v", |s| {
            let lang = s
                .headers
                .get("accept-language")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none")
                .to_owned();
            Reply::text(&format!("page in {lang}"))
                .header("cache-control", "max-age=600")
                .header("vary", "Accept-Language")
        })
        .start()
        .await;
    let dir = scratch("disk-vary");
    let cfg = config(&origin, &dir, "cache_disk_min_uses = 1", "");
    let proxy = Proxy::start(&cfg);
    let ask = |proxy: &Proxy, lang: &str| {
        fetch(req(proxy, "disk.example", "/v").header("accept-language", lang.to_owned()))
    };
    for lang in ["en", "fr"] {
        assert_eq!(ask(&proxy, lang).await.text(), format!("page in {lang}"));
    }
    // A marker and two variants.
    written(&proxy, 3.0).await;
    stop(proxy).await;
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    for lang in ["fr", "en"] {
        let got = ask(&proxy, lang).await;
        assert_eq!(got.text(), format!("page in {lang}"));
        assert_eq!(
            got.header("cache-status"),
            Some("rampart; hit; detail=disk"),
            "{lang}"
        );
        assert_eq!(got.header("vary"), Some("Accept-Language"));
    }
    let de = ask(&proxy, "de").await;
    assert_eq!(de.text(), "page in de");
    assert_eq!(de.header("x-arc2-cache"), Some("Miss"));
    assert_eq!(origin.requests(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_304_refreshes_what_the_disk_holds() {
    let origin = Origin::new()
        .route_fn("/r", |s| {
            if s.headers
                .get("if-none-match")
                .is_some_and(|v| v == "\"v1\"")
            {
                Reply::text("")
                    .status(304)
                    .header("etag", "\"v1\"")
                    .header("cache-control", "max-age=600")
                    .header("x-version", "refreshed")
            } else {
                Reply::text("the body")
                    .header("etag", "\"v1\"")
                    .header("cache-control", "max-age=1")
                    .header("x-version", "first")
            }
        })
        .start()
        .await;
    let dir = scratch("disk-304");
    let cfg = config(&origin, &dir, "cache_disk_min_uses = 1", "");
    let proxy = Proxy::start(&cfg);
    assert_eq!(get(&proxy, "disk.example", "/r").await.text(), "the body");
    written(&proxy, 1.0).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Stale: revalidated; the 304's fields and lifetime go to disk too.
    let got = get(&proxy, "disk.example", "/r").await;
    assert_eq!(got.text(), "the body");
    assert_eq!(got.header("x-version"), Some("refreshed"));
    written(&proxy, 2.0).await;
    stop(proxy).await;
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    let got = get(&proxy, "disk.example", "/r").await;
    assert_eq!(got.text(), "the body");
    assert_eq!(
        got.header("cache-status"),
        Some("rampart; hit; detail=disk")
    );
    assert_eq!(got.header("x-version"), Some("refreshed"));
    assert_eq!(origin.requests(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `check` and the start accepted a cache directory anyone could
/// write (mode 1777), in which links planted by another user were followed. Both refuse it,
/// at its line and column, and the fix `check` prints works when pasted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_start_refuse_a_cache_directory_others_can_write() {
    use std::os::unix::fs::PermissionsExt;
    let origin = origin().await;
    let dir = scratch("disk-open");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let cfg = config(&origin, &dir, "", "");
    let path = scratch("open.toml");
    std::fs::write(&path, &cfg).unwrap();
    let check = || {
        let out = std::process::Command::new(rampart_bin())
            .args(["check", "--config", path.to_str().unwrap()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, text) = check();
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(":14: error: `cache_disk`")
            && text.contains("can be written by other users (mode 1777)")
            && text.contains("chmod 700"),
        "{text}"
    );
    let refused = Proxy::try_start(&cfg);
    assert!(
        refused.contains("can be written by other users"),
        "{refused}"
    );
    // The fix as printed, pasted into a shell.
    let fix = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("fix: "))
        .unwrap_or_else(|| panic!("a fix line: {text}"));
    let ok = std::process::Command::new("sh")
        .args(["-c", fix])
        .status()
        .unwrap();
    assert!(ok.success(), "{fix}");
    let (code, text) = check();
    assert_eq!(code, Some(0), "{text}");
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    stop(proxy).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// a link named like a segment was cut to 0 bytes by the warm-up, and
/// one named like a large object's temporary file had the next large body written through
/// it. With links planted under every name the tier uses, before the start and while it
/// runs, the files they point at never change, and the tier works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_planted_in_the_cache_directory_are_never_followed() {
    let body = patterned(3 << 20);
    let origin = Origin::new()
        .route(
            "/big",
            Reply::typed(&body, "application/octet-stream").header("cache-control", "max-age=600"),
        )
        .route_fn("*", |s| {
            Reply::text(&body_for(s.uri.path())).header("cache-control", "max-age=600")
        })
        .start()
        .await;
    let dir = scratch("disk-links");
    std::fs::create_dir_all(&dir).unwrap();
    let victim = scratch("victim-authorized_keys");
    let secret = b"ssh-ed25519 AAAAC3Nza-the-real-key root@host\n".repeat(4);
    std::fs::write(&victim, &secret).unwrap();
    let plant = |name: String| {
        let _ = std::os::unix::fs::symlink(&victim, dir.join(name));
    };
    plant("00000001.seg".into());
    plant("00000001.idx".into());
    plant("purges.log".into());
    for id in 2..40u32 {
        plant(format!("{id:08x}.big.tmp"));
        plant(format!("{id:08x}.idx.tmp"));
    }
    let cfg = config(
        &origin,
        &dir,
        "cache_disk_min_uses = 1\ncache_max_object = \"16MiB\"",
        "",
    );
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    assert_eq!(std::fs::read(&victim).unwrap(), secret, "after the start");
    // Planted while it runs, too.
    plant("purges.log.tmp".into());
    for p in ["/a", "/b", "/c"] {
        assert_eq!(get(&proxy, "disk.example", p).await.text(), body_for(p));
    }
    let big = get(&proxy, "disk.example", "/big").await;
    assert!(big.body == body);
    written(&proxy, 4.0).await;
    let purged = fetch(
        Request::post(proxy.url("/_rampart/purge?scope=prefix&host=disk.example&path=%2Fc"))
            .header("authorization", format!("Bearer {API_KEY}")),
    )
    .await;
    assert_eq!(purged.status, 200, "{}", purged.text());
    stop(proxy).await;
    assert_eq!(std::fs::read(&victim).unwrap(), secret, "after the writes");
    // And what it wrote comes back (the links are still there, still skipped).
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    let again = get(&proxy, "disk.example", "/big").await;
    assert_eq!(
        again.header("cache-status"),
        Some("rampart; hit; detail=disk")
    );
    assert!(again.body == body);
    stop(proxy).await;
    assert_eq!(std::fs::read(&victim).unwrap(), secret, "after a restart");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A GET over a raw connection, read until the server closes it: the status line's code,
/// the declared length, and the body bytes that came.
async fn raw_get(proxy: &Proxy, path: &str) -> (u16, usize, usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nhost: disk.example\r\nconnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut all = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut all)).await;
    let end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&all[..end]).to_ascii_lowercase();
    let status = head[9..12].parse().unwrap();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    (status, len, all.len() - end - 4)
}

/// one flipped byte in a large object's file gave a 200 with the full
/// length, cut where the bad chunk starts, on every request, forever. Bad in its first chunk:
/// a miss, answered whole from the origin. Bad further on: that one response is cut (its head
/// was out), the object is dropped, and the next request fetches it again. Counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_large_object_on_disk_is_dropped_and_fetched_again() {
    let body = patterned(3 << 20);
    let origin = Origin::new()
        .route_fn("*", {
            let body = body.clone();
            move |_| {
                Reply::typed(&body, "application/octet-stream")
                    .header("cache-control", "max-age=600")
            }
        })
        .start()
        .await;
    let dir = scratch("disk-corrupt");
    // 64 MiB: a 3 MiB body is a large object (a file of its own).
    let cfg = config(
        &origin,
        &dir,
        "cache_disk_min_uses = 1\ncache_max_object = \"16MiB\"",
        "",
    );
    let proxy = Proxy::start(&cfg);
    for p in ["/first", "/later"] {
        assert!(get(&proxy, "disk.example", p).await.body == body);
    }
    written(&proxy, 2.0).await;
    stop(proxy).await;
    // Which file is which: the first written has the lower id.
    let mut bigs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "big"))
        .collect();
    bigs.sort();
    assert_eq!(bigs.len(), 2, "{bigs:?}");
    let flip = |path: &Path, at: u64| {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0x01], at).unwrap();
    };
    flip(&bigs[0], 1000);
    flip(&bigs[1], (1 << 20) + 17);

    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    let before = origin.requests();
    // Bad from its first chunk: a miss, the whole body from the origin.
    let first = get(&proxy, "disk.example", "/first").await;
    assert_eq!(first.status, 200);
    assert_eq!(first.header("x-arc2-cache"), Some("Miss"));
    assert!(first.body == body, "the origin's body, whole");
    assert_eq!(origin.requests(), before + 1);
    // Bad further on: this response is cut short of its length…
    let (status, len, got) = raw_get(&proxy, "/later").await;
    assert_eq!((status, len), (200, 3 << 20));
    assert!(got < len, "cut where the bad chunk starts: {got} of {len}");
    // …and the next is fetched again, whole.
    let again = get(&proxy, "disk.example", "/later").await;
    assert_eq!(again.header("x-arc2-cache"), Some("Miss"));
    assert!(again.body == body);
    assert_eq!(origin.requests(), before + 2);
    let m = metrics(&proxy).await;
    assert_eq!(
        value(&m, "rampart_cache_disk_corrupt_total"),
        Some(2.0),
        "{m}"
    );
    stop(proxy).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Fills the filesystem `dir` is on with one file: nothing more can be written there.
fn fill(dir: &Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = vec![0x5au8; 64 << 10];
    loop {
        if f.write_all(&block).is_err() {
            break;
        }
    }
    // Down to the last bytes.
    while f.write_all(&[0x5a]).is_ok() {}
    path
}

/// on a full disk a purge answered `{"purged":20}` while its purge log
/// write failed and was never tried again: after a restart the purged objects were disk hits.
/// Now the tier makes room (cached objects give way to a purge), writes the log, and only then
/// answers; where no room can be made, the answer is a 503 that says the purge would not outlive
/// a restart yet, and the write is tried again once there is room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_on_a_full_disk_is_written_before_it_is_acknowledged() {
    let origin = origin().await;
    let root = scratch("disk-purge-full");
    let Some(fs) = SmallFs::mount(&root, "4m") else {
        eprintln!("tmpfs cannot be mounted here: the full-disk purge case is not run");
        return;
    };
    let dir = root.join("cache");
    let cfg = config(
        &origin,
        &dir,
        "cache_disk_min_uses = 1\ncache_disk_size = \"256MiB\"",
        "",
    );
    let api = |proxy: &Proxy, q: &str| {
        Request::post(proxy.url(&format!("/_rampart/purge?{q}")))
            .header("authorization", format!("Bearer {API_KEY}"))
    };

    // Room can be made: the purge reclaims what the disk holds, and is in the log.
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    let paths: Vec<String> = (0..20).map(|i| format!("/p/{i}")).collect();
    for p in &paths {
        get(&proxy, "disk.example", p).await;
    }
    written(&proxy, 20.0).await;
    let filler = fill(&root);
    let res = fetch(api(&proxy, "scope=prefix&host=disk.example&path=%2Fp%2F")).await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(
        res.text(),
        "{\"purged\":20,\"soft\":false,\"memory\":20,\"disk_ban\":true}\n"
    );
    assert!(
        proxy
            .output()
            .contains("the purge log could not be written (tried again)"),
        "the disk was full when the purge came: {}",
        proxy.output()
    );
    proxy.signal(libc::SIGKILL);
    let mut proxy = proxy;
    let _ = proxy.wait_exit(Duration::from_secs(10));
    std::fs::remove_file(&filler).unwrap();
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    let before = origin.requests();
    for p in &paths {
        let got = get(&proxy, "disk.example", p).await;
        assert_eq!(got.header("x-arc2-cache"), Some("Miss"), "{p} was purged");
    }
    assert_eq!(origin.requests(), before + 20);
    stop(proxy).await;

    // No room can be made (the tier holds nothing to give up): a 503 that says so, then,
    // once there is room again, the write goes through and purges answer 200.
    let _ = std::fs::remove_dir_all(&dir);
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    let filler = fill(&root);
    let res = fetch(api(&proxy, "scope=prefix&host=disk.example&path=%2Fq%2F")).await;
    assert_eq!(res.status, 503, "{}", res.text());
    assert!(
        res.text().contains("\"durable\":false") && res.text().contains("purge log"),
        "{}",
        res.text()
    );
    std::fs::remove_file(&filler).unwrap();
    let start = Instant::now();
    loop {
        let res = fetch(api(&proxy, "scope=prefix&host=disk.example&path=%2Fq%2F")).await;
        if res.status == 200 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "{}", res.text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop(proxy).await;
    drop(fs);
    let _ = std::fs::remove_dir_all(&root);
}

/// The operator's `stale_if_error_seconds` is kept with the object on disk: after a restart
/// the disk's stale copy stands in when the origin fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stale_window_outlives_a_restart_on_disk() {
    let failing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let f = failing.clone();
    let origin = Origin::new()
        .route_fn("*", move |s| {
            if f.load(std::sync::atomic::Ordering::SeqCst) {
                Reply::text("broken").status(503)
            } else {
                Reply::text(&body_for(s.uri.path()))
                    .header("cache-control", "max-age=1")
                    .header("age", "2")
            }
        })
        .start()
        .await;
    let dir = scratch("disk-stale-window");
    let cfg = config(
        &origin,
        &dir,
        "cache_disk_min_uses = 1\ncache_grace_seconds = 0\nstale_if_error_seconds = 600",
        "",
    );
    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    get(&proxy, "disk.example", "/kept").await;
    written(&proxy, 1.0).await;
    stop(proxy).await;

    let proxy = Proxy::start(&cfg);
    ready(&proxy).await;
    failing.store(true, std::sync::atomic::Ordering::SeqCst);
    let got = get(&proxy, "disk.example", "/kept").await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.text(), body_for("/kept"));
    assert_eq!(
        got.header("cache-status"),
        Some("rampart; hit; detail=stale-if-error")
    );
    stop(proxy).await;
    let _ = std::fs::remove_dir_all(&dir);
}
