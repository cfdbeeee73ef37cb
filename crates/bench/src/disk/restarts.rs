//! The disk tier across restarts: warmth after a clean restart with many objects, and what
//! survives a `kill -9` mid-write.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::json;

use super::client::{fetch_all, object_path, Conn};
use super::Ctx;

pub(super) fn restart(ctx: &Ctx) -> anyhow::Result<(serde_json::Value, String)> {
    let a = &ctx.args;
    let n = a.restart_objects;
    let paths: Arc<Vec<String>> = Arc::new((0..n).map(|i| object_path(i, 100)).collect());
    let mut out = serde_json::Map::new();
    let mut md = format!(
        "## restart\n\n{n} objects of 100 bytes written (each fetched once; `cache_disk_min_uses = 1` and NGINX's default `proxy_cache_min_uses 1`), the server stopped with SIGTERM and started again. First hit: from the start of the new process until the first request for a stored object (one of 100 spread over the set, asked in turn without pause) is a hit. Index whole: rampart's `rampart_cache_disk_state` reaching 2 (its own `rampart_cache_disk_warmup_seconds` in brackets); NGINX's cache loader logging `http file cache: …` at its defaults, waited for at most {} s.\n\n\
         | server | objects on disk | disk used | first hit | index whole |\n|---|---|---|---|---|\n",
        a.loader_wait
    );
    for name in &a.peers {
        let mut p = ctx.start(name, "restart", "64MiB", 1)?;
        eprintln!("restart: {name}: writing {n} objects");
        ctx.rt.block_on(fetch_all(p.addr, paths.clone(), 32))?;
        ctx.wait_written(&p, n as f64, Duration::from_secs(300));
        ctx.stop(&mut p);
        let used = crate::sh(&format!("du -sh {} | cut -f1", p.cache.display()));
        let files = crate::sh(&format!("find {} -type f | wc -l", p.cache.display()));
        let log = p.conf.with_file_name("error.log");
        let _ = std::fs::remove_file(&log);
        let started = Instant::now();
        ctx.launch(&mut p)?;
        let sample: Vec<String> = (0..100)
            .map(|i| paths[i * (n / 100).max(1) % n].clone())
            .collect();
        let first = ctx.rt.block_on(async {
            let mut c = Conn::open(p.addr).await?;
            let mut i = 0;
            loop {
                let r = c.get(&sample[i % sample.len()], false).await?;
                if r.hit {
                    return anyhow::Ok(Some(started.elapsed()));
                }
                i += 1;
                if started.elapsed() > Duration::from_secs(30) {
                    return Ok(None);
                }
            }
        })?;
        let whole = loop {
            let done = match name.as_str() {
                "rampart" => ctx.metric(&p, "rampart_cache_disk_state") == Some(2.0),
                _ => std::fs::read_to_string(&log).is_ok_and(|l| l.contains("http file cache:")),
            };
            if done {
                break Some(started.elapsed());
            }
            if started.elapsed() > Duration::from_secs(a.loader_wait) {
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let own = ctx.metric(&p, "rampart_cache_disk_warmup_seconds");
        ctx.stop(&mut p);
        let ms = |d: Option<Duration>| {
            d.map_or(format!("not within {} s", a.loader_wait), |d| {
                format!("{:.0} ms", d.as_secs_f64() * 1000.0)
            })
        };
        md.push_str(&format!(
            "| {name} | {files} files | {used} | {} | {}{} |\n",
            ms(first),
            ms(whole),
            own.map_or(String::new(), |s| format!(" ({:.0} ms)", s * 1000.0))
        ));
        out.insert(
            name.clone(),
            json!({
                "version": p.version,
                "objects": n,
                "files": files,
                "disk_used": used,
                "first_hit_ms": first.map(|d| d.as_secs_f64() * 1000.0),
                "index_whole_ms": whole.map(|d| d.as_secs_f64() * 1000.0),
                "own_warmup_seconds": own,
            }),
        );
        let _ = std::fs::remove_dir_all(p.cache.parent().unwrap_or(&p.cache));
    }
    md.push('\n');
    Ok((serde_json::Value::Object(out), md))
}

/// The size of crash-check object `k`: 1 to 60 KB.
pub(super) fn crash_size(k: u64) -> usize {
    1000 + (k as usize * 7919) % 59_000
}

/// rampart alone, `--crash-cycles` times: load with writes going on, `kill -9` at a random
/// moment, start again, and ask for a random set of objects: every answer must be a 200 whose
/// body is the origin's, byte for byte (bodies read whole before the kill are checked too).
pub(super) fn crash(ctx: &Ctx) -> anyhow::Result<(serde_json::Value, String)> {
    let a = &ctx.args;
    let mut p = ctx.start("rampart", "crash", "8MiB", 1)?;
    let (mut checked, mut corrupt, mut failed, mut from_disk, mut before_kill) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = |m: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % m
    };
    for cycle in 0..a.crash_cycles {
        // Load while writes go on, then kill -9 at a random moment.
        let kill_after = Duration::from_millis(30 + next(300));
        let seeds: Vec<u64> = (0..16).map(|_| next(u64::MAX)).collect();
        let addr = p.addr;
        let pid = p.server.as_ref().map(|s| s.pid()).context("running")?;
        let (ok, bad) = ctx
            .rt
            .block_on(load_then_kill(addr, seeds, kill_after, pid));
        before_kill += ok;
        corrupt += bad;
        ctx.stop(&mut p);
        ctx.launch(&mut p)?;
        // After the restart: every request succeeds, every body is the origin's.
        let sample: Vec<u64> = (0..200).map(|_| next(3000)).collect();
        let (c2, b2, f2, d2) = ctx.rt.block_on(async {
            let (mut c_, mut b_, mut f_, mut d_) = (0u64, 0u64, 0u64, 0u64);
            let mut conn = Conn::open(addr).await?;
            for k in sample {
                let path = format!("/obj?k={k}&size={}", crash_size(k));
                match conn.get(&path, true).await {
                    Ok(r) if r.status == 200 => {
                        c_ += 1;
                        b_ += u64::from(r.body != crate::origin::obj_body(k, crash_size(k)));
                        d_ += u64::from(r.disk);
                    }
                    _ => {
                        f_ += 1;
                        conn = Conn::open(addr).await?;
                    }
                }
            }
            anyhow::Ok((c_, b_, f_, d_))
        })?;
        checked += c2;
        corrupt += b2;
        failed += f2;
        from_disk += d2;
        if cycle % 10 == 9 {
            eprintln!(
                "crash: {} cycles: {checked} checked after restarts ({from_disk} from disk), {corrupt} corrupt, {failed} failed",
                cycle + 1
            );
        }
    }
    let errors = ctx.metric(&p, "rampart_cache_disk_errors_total");
    ctx.stop(&mut p);
    let md = format!(
        "## crash\n\nrampart alone (`cache_disk_min_uses = 1`, `cache_memory = \"8MiB\"`), {} cycles: 16 clients ask for objects of 1–60 KB that differ byte by byte (3,000 of them), writes go on, `kill -9` after 30–330 ms, rampart starts again on the same directory and 200 random objects are asked for. Every body read whole is compared with the origin's.\n\n\
         | cycles | bodies read before the kills | checked after the restarts | of which from disk | corrupt or truncated | failed requests after a restart |\n|---|---|---|---|---|---|\n\
         | {} | {before_kill} | {checked} | {from_disk} | **{corrupt}** | **{failed}** |\n\n\
         The disk tier counted {} faults in the last run (a record torn by a kill is one, found at the start that follows and cut off).\n\n",
        a.crash_cycles,
        a.crash_cycles,
        errors.map_or("?".to_owned(), |e| format!("{e:.0}")),
    );
    Ok((
        json!({ "cycles": a.crash_cycles, "bodies_before_kills": before_kill, "checked_after_restarts": checked, "from_disk": from_disk, "corrupt": corrupt, "failed_after_restart": failed }),
        md,
    ))
}

/// 16 clients read objects (each body checked against the origin's) until `kill -9` stops the
/// server after `kill_after`: the bodies read whole and right, and the wrong ones.
async fn load_then_kill(
    addr: std::net::SocketAddr,
    seeds: Vec<u64>,
    kill_after: Duration,
    pid: u32,
) -> (u64, u64) {
    let mut tasks = Vec::new();
    for seed in seeds {
        tasks.push(tokio::spawn(async move {
            let Ok(mut c) = Conn::open(addr).await else {
                return (0u64, 0u64);
            };
            let (mut ok, mut bad) = (0, 0);
            let mut s = seed | 1;
            loop {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let k = s % 3000;
                let path = format!("/obj?k={k}&size={}", crash_size(k));
                match c.get(&path, true).await {
                    Ok(r) if r.status == 200 => {
                        if r.body == crate::origin::obj_body(k, crash_size(k)) {
                            ok += 1;
                        } else {
                            bad += 1;
                        }
                    }
                    _ => return (ok, bad),
                }
            }
        }));
    }
    tokio::time::sleep(kill_after).await;
    let _ = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status();
    let (mut ok, mut bad) = (0, 0);
    for t in tasks {
        if let Ok((o, b)) = t.await {
            ok += o;
            bad += b;
        }
    }
    (ok, bad)
}
