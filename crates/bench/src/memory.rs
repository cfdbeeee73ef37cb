//! `rampart-bench memory`: does `cache_memory` hold as the process's resident memory, measured
//! through real HTTP traffic?
//!
//! For each budget and workload a fresh rampart (one worker, pinned to the server CPU) stands in
//! front of the built-in origin. Keep-alive connections fetch distinct cacheable objects (every
//! request a miss that is stored), while the process's peak resident memory (the kernel's VmHWM) is read.
//! Then everything is purged through the management API, resident memory is read again, and the
//! same objects are fetched a second time (a refill: memory must not grow across refills).
//!
//! Workloads: `small` (12-byte objects, `/hello?k=N`), `large` (100 KB objects, `/blob`), `mix`
//! (both, one large request in 21). The goal: peak RSS ≤ budget × 1.10 + 40 MiB.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

use crate::procs;

#[derive(clap::Args, Debug, Clone)]
pub struct MemoryArgs {
    /// Cache budgets to measure (comma-separated, e.g. 64MiB,256MiB).
    #[arg(long, value_delimiter = ',', default_value = "64MiB,256MiB")]
    pub budgets: Vec<String>,
    /// Workloads (comma-separated): small, large, mix.
    #[arg(long, value_delimiter = ',', default_value = "small,large,mix")]
    pub workloads: Vec<String>,
    /// Distinct 12-byte objects in `small` and `mix`.
    #[arg(long, default_value_t = 1_000_000)]
    pub small: u64,
    /// Distinct large objects in `large` and `mix`.
    #[arg(long, default_value_t = 50_000)]
    pub large: u64,
    /// Bytes per large object.
    #[arg(long, default_value_t = 100_000)]
    pub large_size: u64,
    /// Concurrent keep-alive connections.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// The rampart binary (default: the rampart next to this tool, target/dist/rampart after `cargo build --profile dist`).
    #[arg(long)]
    pub rampart: Option<PathBuf>,
    /// CPU for rampart (taskset list); the origin and the client share the other.
    #[arg(long, default_value = "0")]
    pub server_cpus: String,
    #[arg(long, default_value = "1")]
    pub origin_cpus: String,
    /// Markdown report (default bench/results/memory-<UTC time>.md).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

const KEY: &str = "rampart-bench-memory-key-0123456789";
const HOST: &str = "memory.bench";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    Small,
    Large,
    Mix,
}

impl Workload {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "small" => Some(Workload::Small),
            "large" => Some(Workload::Large),
            "mix" => Some(Workload::Mix),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Workload::Small => "small",
            Workload::Large => "large",
            Workload::Mix => "mix",
        }
    }

    fn requests(self, a: &MemoryArgs) -> u64 {
        match self {
            Workload::Small => a.small,
            Workload::Large => a.large,
            Workload::Mix => a.small + a.large,
        }
    }

    fn describe(self, a: &MemoryArgs) -> String {
        match self {
            Workload::Small => format!("{} × 12 B", a.small),
            Workload::Large => format!("{} × {} B", a.large, a.large_size),
            Workload::Mix => format!("{} × 12 B + {} × {} B", a.small, a.large, a.large_size),
        }
    }

    /// The path of request `i`.
    fn path(self, i: u64, a: &MemoryArgs) -> String {
        let large = |j: u64| format!("/blob?size={}&k={j}", a.large_size);
        match self {
            Workload::Small => format!("/hello?k={i}"),
            Workload::Large => large(i),
            Workload::Mix => {
                // Spread the large objects evenly through the small ones.
                let every = (a.small + a.large) / a.large.max(1);
                if a.large > 0 && i % every == every - 1 && i / every < a.large {
                    large(i / every)
                } else {
                    format!("/hello?k={i}")
                }
            }
        }
    }
}

/// Parses `64MiB`, `1GiB`, `500MB`, `1000000`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: u64 = s[..digits].parse().ok()?;
    let unit = match s[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "kib" | "k" => 1 << 10,
        "mb" => 1_000_000,
        "mib" | "m" => 1 << 20,
        "gb" => 1_000_000_000,
        "gib" | "g" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(unit)
}

/// One measured budget × workload.
#[derive(Debug)]
struct Row {
    budget: u64,
    workload: Workload,
    fill: Phase,
    rss_after_purge: u64,
    refill: Phase,
}

#[derive(Debug, Default, Clone, Copy)]
struct Phase {
    requests: u64,
    failed: u64,
    seconds: f64,
    peak_rss: u64,
    entries: u64,
    weight: u64,
}

fn rss(pid: u32) -> u64 {
    procs::status_kib(pid, "VmRSS:") * 1024
}

pub fn run(args: MemoryArgs) -> anyhow::Result<()> {
    procs::stop_all_on_signal();
    let workloads: Vec<Workload> = args
        .workloads
        .iter()
        .map(|w| Workload::parse(w).with_context(|| format!("unknown workload {w}")))
        .collect::<anyhow::Result<_>>()?;
    let budgets: Vec<u64> = args
        .budgets
        .iter()
        .map(|b| parse_size(b).with_context(|| format!("not a size: {b}")))
        .collect::<anyhow::Result<_>>()?;
    let me = std::env::current_exe()?;
    let rampart = args
        .rampart
        .clone()
        .unwrap_or_else(|| me.with_file_name("rampart"));
    if !rampart.exists() {
        bail!(
            "{} not found: build it with cargo build --profile dist",
            rampart.display()
        );
    }
    let dir = std::env::temp_dir().join(format!("rampart-bench-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (mut origin, origin_addr) =
        procs::Server::origin(&args.origin_cpus, &me, &dir.join("origin.log"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    for &budget in &budgets {
        for &w in &workloads {
            let row = rt.block_on(measure(&args, &rampart, &dir, origin_addr, budget, w))?;
            print_row(&row);
            rows.push(row);
        }
    }
    origin.stop();
    let report = report(&args, &rows);
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("bench/results").join(format!("memory-{}.md", crate::now_utc()))
    });
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&out, &report)?;
    println!("\n{report}\nreport: {}", out.display());
    let _ = std::fs::remove_dir_all(&dir);
    if rows.iter().any(|r| !within_goal(r)) {
        bail!("peak RSS over the goal (budget × 1.10 + 40 MiB) in at least one run");
    }
    Ok(())
}

fn goal(budget: u64) -> u64 {
    budget + budget / 10 + (40 << 20)
}

fn within_goal(r: &Row) -> bool {
    r.fill.peak_rss.max(r.refill.peak_rss) <= goal(r.budget)
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1 << 20) as f64)
}

fn print_row(r: &Row) {
    eprintln!(
        "budget {} MiB, {}: fill peak {} MiB ({} entries, weight {} MiB, {:.0} req/s, {} failed), after purge {} MiB, refill peak {} MiB, goal {} MiB",
        mib(r.budget),
        r.workload.name(),
        mib(r.fill.peak_rss),
        r.fill.entries,
        mib(r.fill.weight),
        r.fill.requests as f64 / r.fill.seconds.max(1e-9),
        r.fill.failed + r.refill.failed,
        mib(r.rss_after_purge),
        mib(r.refill.peak_rss),
        mib(goal(r.budget)),
    );
}

fn report(args: &MemoryArgs, rows: &[Row]) -> String {
    let mut s = String::from(
        "| budget | workload | entries | weight MiB | peak RSS MiB (fill) | RSS after purge | peak RSS MiB (refill) | goal MiB | within |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} MiB | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            mib(r.budget),
            r.workload.describe(args),
            r.fill.entries,
            mib(r.fill.weight),
            mib(r.fill.peak_rss),
            mib(r.rss_after_purge),
            mib(r.refill.peak_rss),
            mib(goal(r.budget)),
            if within_goal(r) { "yes" } else { "**no**" },
        ));
    }
    s.push_str(&format!(
        "\nMethod: `rampart-bench memory` — a fresh rampart per row (1 worker, taskset CPU {}), the built-in origin and the client on CPU {}; {} keep-alive connections fetch every object once (all misses, all stored), peak RSS is the kernel's VmHWM of the rampart process (so the refill column is the peak over the whole run); then `POST /_rampart/purge?scope=domain`, RSS read 2 s later, and the same objects fetched again.\n",
        args.server_cpus, args.origin_cpus, args.connections
    ));
    s
}

async fn measure(
    args: &MemoryArgs,
    rampart: &Path,
    dir: &Path,
    origin: SocketAddr,
    budget: u64,
    w: Workload,
) -> anyhow::Result<Row> {
    let port = procs::free_port()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let toml = format!(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = {port}\nworkers = 1\n\
         add_logging = false\nlogging_level = \"error\"\nadd_rate_limiting = false\n\
         cache_memory = \"{budget}\"\napi_key = \"{KEY}\"\n\n\
         [[proxy_rules]]\ndomain = \"{HOST}\"\nmax_age_seconds = 3600\nforward_ipv4 = \"{}\"\n\
         forward_port_http = {}\nrule_type = \"Whitelist\"\nenable_logging = false\n\
         ignore_query_string = false\nenable_sql_injection_protection = false\n",
        origin.ip(),
        origin.port()
    );
    let mut server = procs::Server::rampart(&args.server_cpus, rampart, &toml, dir, addr)?;
    let pid = server.pid();
    let fill = phase(args, addr, pid, w).await?;
    admin(
        addr,
        "POST",
        &format!("/_rampart/purge?host={HOST}&scope=domain"),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after_purge = rss(pid);
    let refill = phase(args, addr, pid, w).await?;
    server.stop();
    Ok(Row {
        budget,
        workload: w,
        fill,
        rss_after_purge,
        refill,
    })
}

/// Fetches every object of the workload once; returns the phase's figures.
async fn phase(
    args: &MemoryArgs,
    addr: SocketAddr,
    pid: u32,
    w: Workload,
) -> anyhow::Result<Phase> {
    let total = w.requests(args);
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let args = Arc::new(args.clone());
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let (next, failed, args) = (next.clone(), failed.clone(), args.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = None;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                if conn.is_none() {
                    conn = connect(addr).await.ok();
                }
                let Some(sender) = conn.as_mut() else {
                    failed.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let req = http::Request::get(w.path(i, &args))
                    .header("host", HOST)
                    .body(Empty::<Bytes>::new());
                let ok = match req {
                    Ok(req) => match sender.send_request(req).await {
                        Ok(res) => {
                            let status = res.status();
                            res.into_body().collect().await.is_ok() && status == 200
                        }
                        Err(_) => false,
                    },
                    Err(_) => false,
                };
                if !ok {
                    failed.fetch_add(1, Ordering::Relaxed);
                    conn = None;
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let seconds = started.elapsed().as_secs_f64();
    // The kernel's high-water mark: every page that was ever resident, between any samples.
    // After a refill it is the peak of the process's whole life, so growth across refills shows.
    let peak_rss = procs::status_kib(pid, "VmHWM:") * 1024;
    let status = admin(addr, "GET", "/_rampart/status").await?;
    let field = |name: &str| -> u64 {
        let pat = format!("\"{name}\":");
        status
            .find(&pat)
            .map(|at| &status[at + pat.len()..])
            .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok(Phase {
        requests: total,
        failed: failed.load(Ordering::Relaxed),
        seconds,
        peak_rss,
        entries: field("entries"),
        weight: field("weight_bytes"),
    })
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn connect(addr: SocketAddr) -> anyhow::Result<Sender> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn admin(addr: SocketAddr, method: &str, path: &str) -> anyhow::Result<String> {
    let mut sender = connect(addr).await?;
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", HOST)
        .header("x-api-key", KEY)
        .body(Empty::<Bytes>::new())?;
    let res = sender.send_request(req).await?;
    let body = res.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8_lossy(&body).into_owned())
}
