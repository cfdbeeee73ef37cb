//! The disk tier's figures measured under load: hits from disk with a working set larger than
//! memory, write amplification, and one large object to many clients.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::json;

use super::client::{fetch_all, object_path, quantile, zipf_load, Conn, Zipf};
use super::{Ctx, Peer};

pub(super) fn disk_hit(ctx: &Ctx) -> anyhow::Result<(serde_json::Value, String)> {
    let a = &ctx.args;
    let paths: Arc<Vec<String>> = Arc::new(
        (0..a.objects)
            .map(|i| object_path(i, a.object_size))
            .collect(),
    );
    let mut peers = Vec::new();
    for name in &a.peers {
        let peer = ctx.start(name, "disk-hit", &a.memory, 2)?;
        eprintln!("disk-hit: {name}: fetching {} objects twice", a.objects);
        // Twice: rampart writes an object at its second use (cache_disk_min_uses = 2).
        for _ in 0..2 {
            ctx.rt.block_on(fetch_all(peer.addr, paths.clone(), 16))?;
        }
        ctx.wait_written(&peer, a.objects as f64 * 0.99, Duration::from_secs(120));
        peers.push(peer);
    }
    let zipf = Arc::new(Zipf::new(a.objects, a.zipf));
    // Warm-up: one short run each.
    for p in &peers {
        ctx.rt.block_on(zipf_load(
            p.addr,
            zipf.clone(),
            a.object_size,
            a.connections,
            Some(2),
            None,
        ))?;
    }
    let mut rows: Vec<Vec<serde_json::Value>> = vec![Vec::new(); peers.len()];
    for round in 0..a.rounds {
        for (i, p) in peers.iter().enumerate() {
            let server = p.server.as_ref().context("running")?;
            let origin_before = ctx.origin_requests()?;
            let cpu0 = server.cpu_sample();
            let t0 = Instant::now();
            let t = ctx.rt.block_on(zipf_load(
                p.addr,
                zipf.clone(),
                a.object_size,
                a.connections,
                Some(a.seconds),
                None,
            ))?;
            let wall = t0.elapsed().as_secs_f64();
            let cpu = server.cpu_sample().since(&cpu0);
            let fetched = ctx.origin_requests()?.saturating_sub(origin_before);
            let row = json!({
                "round": round + 1,
                "requests": t.requests,
                "requests_per_second": t.requests as f64 / wall,
                "cpu_us_per_request": cpu * 1e6 / t.requests.max(1) as f64,
                "hit_ratio": 1.0 - fetched as f64 / t.requests.max(1) as f64,
                "from_disk": t.disk as f64 / t.requests.max(1) as f64,
                "p50_ms": quantile(&t.latencies_us, 0.5),
                "p99_ms": quantile(&t.latencies_us, 0.99),
                "p99_from_disk_ms": quantile(&t.disk_latencies_us, 0.99),
            });
            eprintln!("disk-hit: round {} {}: {row}", round + 1, p.name);
            rows[i].push(row);
        }
    }
    Ok(disk_hit_report(ctx, &mut peers, &rows))
}

/// disk-hit's table (medians of the rounds) and figures; stops the peers.
fn disk_hit_report(
    ctx: &Ctx,
    peers: &mut [Peer],
    rows: &[Vec<serde_json::Value>],
) -> (serde_json::Value, String) {
    let a = &ctx.args;
    let mut md = format!(
        "## disk-hit\n\n{} objects of {} bytes ({:.2} GiB), Zipf s = {}, {} keep-alive connections, {} rounds of {} s; rampart `cache_memory = \"{}\"`, `cache_disk_min_uses = 2`; NGINX `proxy_cache_path … use_temp_path=off`, `sendfile on`. Every object was fetched twice before the rounds. Hit ratio = 1 − origin requests ÷ requests.\n\n\
         | server | CPU µs/request | requests/s | hit ratio | from disk | p50 ms | p99 ms |\n|---|---|---|---|---|---|---|\n",
        a.objects,
        a.object_size,
        (a.objects * a.object_size) as f64 / (1u64 << 30) as f64,
        a.zipf,
        a.connections,
        a.rounds,
        a.seconds,
        a.memory
    );
    let mut out = serde_json::Map::new();
    for (i, p) in peers.iter_mut().enumerate() {
        let col = |k: &str| crate::stats::median_of(rows[i].iter().filter_map(|r| r[k].as_f64()));
        md.push_str(&format!(
            "| {} | {:.1} | {:.0} | {:.4} | {} | {:.2} | {:.2} |\n",
            p.name,
            col("cpu_us_per_request"),
            col("requests_per_second"),
            col("hit_ratio"),
            if p.name == "rampart" {
                format!("{:.3}", col("from_disk"))
            } else {
                "–".to_owned()
            },
            col("p50_ms"),
            col("p99_ms"),
        ));
        out.insert(
            p.name.clone(),
            json!({ "version": p.version, "rounds": rows[i], "median_cpu_us_per_request": col("cpu_us_per_request"), "median_p99_ms": col("p99_ms"), "median_hit_ratio": col("hit_ratio") }),
        );
        ctx.stop(p);
    }
    md.push('\n');
    (serde_json::Value::Object(out), md)
}

/// rampart alone, from an empty directory, on a Zipf trace: bytes written to disk per byte of
/// the objects it wrote that were later served from disk.
pub(super) fn write_amplification(ctx: &Ctx) -> anyhow::Result<(serde_json::Value, String)> {
    let a = &ctx.args;
    if !a.peers.iter().any(|p| p == "rampart") {
        return Ok((json!(null), String::new()));
    }
    let mut p = ctx.start("rampart", "wa", &a.memory, 2)?;
    let zipf = Arc::new(Zipf::new(a.objects, a.zipf));
    let t = ctx.rt.block_on(zipf_load(
        p.addr,
        zipf,
        a.object_size,
        a.connections,
        None,
        Some(a.trace as u64),
    ))?;
    std::thread::sleep(Duration::from_secs(1));
    let written = ctx
        .metric(&p, "rampart_cache_disk_written_bytes_total")
        .unwrap_or(0.0);
    let reused = ctx
        .metric(&p, "rampart_cache_disk_reused_bytes_total")
        .unwrap_or(0.0);
    let writes = ctx
        .metric(&p, "rampart_cache_disk_writes_total")
        .unwrap_or(0.0);
    ctx.stop(&mut p);
    let wa = written / reused.max(1.0);
    let read_later = (t.from_disk.len() * a.object_size) as f64;
    let md = format!(
        "### Write amplification\n\nrampart from an empty directory, {} requests in a Zipf (s = {}) order over {} objects of {} bytes (`cache_disk_min_uses = 2`): {} records written ({:.1} MiB, heads and summaries included), of which {:.1} MiB were used again after they were written (`rampart_cache_disk_reused_bytes_total`: each record once, whether the use was served from memory or from disk): **{:.2} bytes written per byte stored that was later read**. {} distinct objects ({:.1} MiB) were served from disk at least once.\n\n",
        t.requests,
        a.zipf,
        a.objects,
        a.object_size,
        writes,
        written / 1048576.0,
        reused / 1048576.0,
        wa,
        t.from_disk.len(),
        read_later / 1048576.0,
    );
    Ok((
        json!({ "requests": t.requests, "written_bytes": written, "reused_bytes": reused, "records": writes, "objects_read_from_disk": t.from_disk.len(), "write_amplification": wa }),
        md,
    ))
}

pub(super) fn large(ctx: &Ctx) -> anyhow::Result<(serde_json::Value, String)> {
    let a = &ctx.args;
    let path = format!("/large?size={}", a.large_size);
    let mut peers = Vec::new();
    for name in &a.peers {
        let peer = ctx.start(name, "large", "64MiB", 2)?;
        eprintln!(
            "large: {name}: fetching the {} byte object twice",
            a.large_size
        );
        for _ in 0..2 {
            let r = ctx.rt.block_on(async {
                let mut c = Conn::open(peer.addr).await?;
                c.get(&path, false).await
            })?;
            if r.status != 200 || r.len != a.large_size {
                bail!("{name}: {} with {} bytes", r.status, r.len);
            }
        }
        ctx.wait_written(&peer, 1.0, Duration::from_secs(120));
        peers.push(peer);
    }
    let mut rows: Vec<Vec<serde_json::Value>> = vec![Vec::new(); peers.len()];
    for round in 0..a.rounds {
        for (i, p) in peers.iter().enumerate() {
            let server = p.server.as_ref().context("running")?;
            let cpu0 = server.cpu_sample();
            let t0 = Instant::now();
            let (bytes, hits) = ctx.rt.block_on(async {
                let mut tasks = Vec::new();
                for _ in 0..a.large_clients {
                    let path = path.clone();
                    let addr = p.addr;
                    tasks.push(tokio::spawn(async move {
                        let mut c = Conn::open(addr).await?;
                        c.get(&path, false).await
                    }));
                }
                let (mut bytes, mut hits) = (0u64, 0usize);
                for t in tasks {
                    let r = t.await??;
                    bytes += r.len;
                    hits += usize::from(r.hit);
                }
                anyhow::Ok((bytes, hits))
            })?;
            let wall = t0.elapsed().as_secs_f64();
            let cpu = server.cpu_sample().since(&cpu0);
            let gb = bytes as f64 / 1e9;
            let row = json!({
                "round": round + 1,
                "bytes": bytes,
                "hits": hits,
                "cpu_seconds_per_gb": cpu / gb,
                "gb_per_second": gb / wall,
                "peak_rss_mib": server.peak_rss() as f64 / 1048576.0,
            });
            eprintln!("large: round {} {}: {row}", round + 1, p.name);
            rows[i].push(row);
        }
    }
    let mut md = format!(
        "## large\n\nOne object of {} bytes, fetched twice first (so both servers have it on disk), then {} concurrent clients each read it whole, {} rounds. CPU per GB = server CPU seconds ÷ GB sent; peak RSS = VmHWM of the server's process tree since it started.\n\n\
         | server | CPU s per GB | GB/s | peak RSS MiB | hits |\n|---|---|---|---|---|\n",
        a.large_size, a.large_clients, a.rounds
    );
    let mut out = serde_json::Map::new();
    for (i, p) in peers.iter_mut().enumerate() {
        let col = |k: &str| crate::stats::median_of(rows[i].iter().filter_map(|r| r[k].as_f64()));
        md.push_str(&format!(
            "| {} | {:.3} | {:.2} | {:.1} | {:.0}/{} |\n",
            p.name,
            col("cpu_seconds_per_gb"),
            col("gb_per_second"),
            col("peak_rss_mib"),
            col("hits"),
            a.large_clients
        ));
        out.insert(
            p.name.clone(),
            json!({ "version": p.version, "rounds": rows[i], "median_cpu_seconds_per_gb": col("cpu_seconds_per_gb"), "median_peak_rss_mib": col("peak_rss_mib") }),
        );
        ctx.stop(p);
    }
    md.push('\n');
    Ok((serde_json::Value::Object(out), md))
}
