//! Purge by tag: purging a tag on 100,000 tagged objects takes under 100 ms and
//! does not stall the requests being served meanwhile.
//!
//! rampart (one worker on `--server-cpus`) stores `--objects` objects from the suite's origin,
//! all tagged `bulk` (and each with a tag of its own), beside a cached `/hello`. Rounds
//! alternate: `wrk -c32` on `/hello` for `--seconds`, with nothing else (control), or with a
//! `PURGE` of the tag half-way through (purge). The purge's time is how long its `PURGE` took,
//! answer included; the objects are stored again between rounds. Reported: the purge times and
//! counts, and the hits' p50, p99 and max latency in both kinds of round (medians over the
//! rounds), with the server's CPU per hit.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use tokio::net::TcpStream;

use crate::load::{self, Load, LoadResult};
use crate::procs;

#[derive(clap::Args, Debug, Clone)]
pub struct TagsArgs {
    /// Tagged objects stored before each purge.
    #[arg(long, default_value_t = 100_000)]
    pub objects: usize,
    /// Rounds of each kind (control, purge), interleaved.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Seconds of load per round.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// The rampart binary (default: the rampart next to this tool, target/dist/rampart after `cargo build --profile dist`).
    #[arg(long)]
    pub rampart: Option<PathBuf>,
    /// CPU for rampart (taskset list).
    #[arg(long, default_value = "0")]
    pub server_cpus: String,
    /// CPU for the origin and the load.
    #[arg(long, default_value = "1")]
    pub load_cpus: String,
    /// Markdown report (default bench/results/tags-<UTC time>.md).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One round's figures.
struct Round {
    purge: Option<(Duration, u64)>,
    hits: LoadResult,
    cpu_us_per_hit: f64,
}

pub fn run(args: TagsArgs) -> anyhow::Result<()> {
    procs::stop_all_on_signal();
    if !load::installed("wrk") {
        bail!("wrk is needed (apt-get install wrk)");
    }
    let me = std::env::current_exe()?;
    let rampart = args
        .rampart
        .clone()
        .unwrap_or_else(|| me.with_file_name("rampart"));
    let dir = std::env::temp_dir().join(format!("rampart-bench-tags-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (mut origin, origin_addr) =
        procs::Server::origin(&args.load_cpus, &me, &dir.join("origin.log"))?;
    let addr = SocketAddr::from(([127, 0, 0, 1], procs::free_port()?));
    let toml = format!(
        "listen = [\"{addr}\"]\nworkers = 1\nadd_logging = false\nlogging_level = \"warn\"\n\
         cache_memory = \"2GiB\"\npurge_allow = [\"127.0.0.1\"]\nadd_rate_limiting = false\n\
         max_connections = 4096\n\n\
         [[proxy_rules]]\ndomain = \"*\"\nmax_age_seconds = 3600\nforward_ipv4 = \"{}\"\n\
         forward_port_http = {}\nrule_type = \"Whitelist\"\nenable_logging = false\n\
         ignore_query_string = false\nenable_sql_injection_protection = false\n\
         enable_compression = false\nenable_minification = false\nenable_webp_transformation = false\n",
        origin_addr.ip(),
        origin_addr.port()
    );
    let mut server = procs::Server::rampart(&args.server_cpus, &rampart, &toml, &dir, addr)
        .context("start rampart")?;
    crate::websocket::pin_self(&args.load_cpus);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let version = crate::sh(&format!("{} --version", rampart.display()));
    let mut rounds: Vec<Round> = Vec::new();
    let url = format!("http://{addr}/hello");
    rt.block_on(get_all(addr, &["/hello".to_owned()], 1))?;
    for r in 0..args.rounds * 2 {
        let purging = r % 2 == 1;
        let t = Instant::now();
        let paths: Vec<String> = (0..args.objects)
            .map(|k| format!("/obj?k={k}&size=200&tag=t{k}"))
            .collect();
        rt.block_on(get_all(addr, &paths, 8))?;
        eprintln!(
            "round {}: {} objects stored in {:.1?}",
            r + 1,
            args.objects,
            t.elapsed()
        );
        let before = server.cpu_sample();
        let mut wrk = Load::Wrk {
            connections: 32,
            close: false,
            accept_encoding: None,
        }
        .command(&url, args.seconds, &dir);
        let wrk = wrk
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("start wrk")?;
        let purge = if purging {
            std::thread::sleep(Duration::from_millis(args.seconds * 500));
            Some(rt.block_on(purge(addr, "bulk"))?)
        } else {
            None
        };
        let out = wrk.wait_with_output()?;
        let after = server.cpu_sample();
        let text = String::from_utf8_lossy(&out.stdout);
        let hits = load::parse_wrk(&text).context("wrk's output")?;
        let cpu_us_per_hit = after.since(&before) * 1e6 / hits.requests.max(1) as f64;
        match purge {
            Some((took, n)) => eprintln!(
                "round {}: purged {n} in {took:.1?}; hits p99 {:.0} µs, max {:.0} µs",
                r + 1,
                hits.latency_p99_us,
                hits.latency_max_us
            ),
            None => eprintln!(
                "round {}: control; hits p99 {:.0} µs, max {:.0} µs",
                r + 1,
                hits.latency_p99_us,
                hits.latency_max_us
            ),
        }
        rounds.push(Round {
            purge,
            hits,
            cpu_us_per_hit,
        });
    }
    server.stop();
    origin.stop();
    let report = report(&args, &version, &rounds);
    crate::save_report(args.out.clone(), "tags", &report)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn report(args: &TagsArgs, version: &str, rounds: &[Round]) -> String {
    let med = |purging: bool, f: &dyn Fn(&Round) -> f64| {
        crate::stats::median_of(
            rounds
                .iter()
                .filter(|r| r.purge.is_some() == purging)
                .map(f),
        )
    };
    let mut s = format!(
        "# Purge by tag\n\n`rampart-bench tags`: {} ({version}), one worker on CPU {}; the origin and \
         wrk on CPU {}. {} objects tagged `bulk` stored before each round; `wrk -t1 -c32` on a \
         cached `/hello` for {} s per round; in purge rounds a `PURGE` with `X-Purge-Tag: bulk` \
         half-way through. {} rounds of each kind, interleaved; medians.\n\n",
        args.rampart
            .as_ref()
            .map_or("rampart".into(), |p| p.display().to_string()),
        args.server_cpus,
        args.load_cpus,
        args.objects,
        args.seconds,
        args.rounds
    );
    s.push_str("| purge round | objects purged | purge took |\n|---|---|---|\n");
    for (i, r) in rounds.iter().filter(|r| r.purge.is_some()).enumerate() {
        if let Some((took, n)) = r.purge {
            s.push_str(&format!(
                "| {} | {n} | {:.1} ms |\n",
                i + 1,
                took.as_secs_f64() * 1e3
            ));
        }
    }
    s.push_str(
        "\n| hits during | requests/s | p50 | p99 | max | server CPU µs/hit |\n|---|---|---|---|---|---|\n",
    );
    for (label, purging) in [("control rounds", false), ("purge rounds", true)] {
        s.push_str(&format!(
            "| {label} | {:.0} | {:.0} µs | {:.0} µs | {:.1} ms | {:.2} |\n",
            med(purging, &|r| r.hits.rps),
            med(purging, &|r| r.hits.latency_p50_us),
            med(purging, &|r| r.hits.latency_p99_us),
            med(purging, &|r| r.hits.latency_max_us) / 1e3,
            med(purging, &|r| r.cpu_us_per_hit),
        ));
    }
    s
}

/// Asks for every path (over `connections` keep-alive connections), reading each answer.
async fn get_all(addr: SocketAddr, paths: &[String], connections: usize) -> anyhow::Result<()> {
    let chunk = paths.len().div_ceil(connections.max(1)).max(1);
    let mut tasks = Vec::new();
    for part in paths.chunks(chunk) {
        let part = part.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await?;
            for p in &part {
                let req = format!("GET {p} HTTP/1.1\r\nHost: tags.bench\r\n\r\n");
                crate::idle::request(&mut s, req.as_bytes()).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// A `PURGE` of `tag`: how long it took, and how many objects it purged.
async fn purge(addr: SocketAddr, tag: &str) -> anyhow::Result<(Duration, u64)> {
    let mut s = TcpStream::connect(addr).await?;
    let req = format!("PURGE / HTTP/1.1\r\nHost: tags.bench\r\nX-Purge-Tag: {tag}\r\n\r\n");
    let t = Instant::now();
    let body = crate::idle::request(&mut s, req.as_bytes()).await?;
    let took = t.elapsed();
    // {"purged":N,"soft":false}
    let n = body
        .split(|&b| b == b':')
        .nth(1)
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.trim().parse().ok())
        .context("the purge's answer")?;
    Ok((took, n))
}
