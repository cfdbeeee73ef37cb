//! The disk tier's figures: rampart's `cache_disk` against NGINX's `proxy_cache_path` on
//! the same disk (`sendfile on`), each with one worker pinned to the server CPU, the origin and
//! this client on the load CPU.
//!
//! - `disk-hit`: a working set larger than rampart's memory tier (default 20,000 × 73 KB
//!   objects, 1.4 GiB, with `cache_memory = "256MiB"`), asked for in a Zipf order (s = 0.9) by
//!   keep-alive clients after every object was fetched twice. Per server, in interleaved rounds:
//!   CPU µs per request, hit ratio (from the origin's request count), p50 and p99 latency, and
//!   for rampart the share answered from disk. Then rampart alone from an empty directory on a
//!   Zipf 0.9 trace: write amplification, bytes written to disk per byte of the objects it
//!   wrote and later served from disk.
//! - `large`: a 1 GiB object (fetched twice first) to 10 concurrent clients: server CPU per GB
//!   served and the server's peak RSS.
//! - `restart`: 1,000,000 small objects written, the server stopped (SIGTERM) and started
//!   again: the time from its start until the first hit, and until its index is whole (rampart:
//!   `rampart_cache_disk_state` 2; NGINX: its cache loader's "http file cache" line, waited for
//!   at most `--loader-wait` seconds).
//!
//! The report is `disk.md` and `disk.json` in `--out`.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::procs;

const API_KEY: &str = "rampart-bench-disk-api-key-0123456789";
const HOST: &str = "disk.bench";

#[derive(clap::Args, Debug, Clone)]
pub struct DiskArgs {
    /// Parts to run (comma-separated): disk-hit, large, restart, crash.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "disk-hit,large,restart,crash"
    )]
    pub parts: Vec<String>,
    /// Servers (comma-separated): rampart, nginx.
    #[arg(long, value_delimiter = ',', default_value = "rampart,nginx")]
    pub peers: Vec<String>,
    /// The rampart binary (default: the rampart next to this tool, target/dist/rampart after `cargo build --profile dist`).
    #[arg(long)]
    pub rampart: Option<PathBuf>,
    /// Where the servers keep their caches (default: a directory under bench/ on this disk).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Objects in the disk-hit working set.
    #[arg(long, default_value_t = 20_000)]
    pub objects: usize,
    /// Bytes per disk-hit object.
    #[arg(long, default_value_t = 75_077)]
    pub object_size: usize,
    /// rampart's memory tier in disk-hit.
    #[arg(long, default_value = "256MiB")]
    pub memory: String,
    /// Zipf exponent of the disk-hit requests.
    #[arg(long, default_value_t = 0.9)]
    pub zipf: f64,
    /// Keep-alive connections of the disk-hit load.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Seconds per disk-hit round.
    #[arg(long, default_value_t = 15)]
    pub seconds: u64,
    /// Interleaved rounds (disk-hit, large).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Requests of the write-amplification trace.
    #[arg(long, default_value_t = 200_000)]
    pub trace: usize,
    /// Bytes of the large object.
    #[arg(long, default_value_t = 1 << 30)]
    pub large_size: u64,
    /// Concurrent clients of the large object.
    #[arg(long, default_value_t = 10)]
    pub large_clients: usize,
    /// Objects written before the restart.
    #[arg(long, default_value_t = 1_000_000)]
    pub restart_objects: usize,
    /// Longest wait for NGINX's cache loader after the restart, in seconds.
    #[arg(long, default_value_t = 120)]
    pub loader_wait: u64,
    /// kill -9 cycles of the crash check.
    #[arg(long, default_value_t = 100)]
    pub crash_cycles: usize,
    /// CPU for the servers (taskset list).
    #[arg(long, default_value = "0")]
    pub server_cpus: String,
    /// CPU for the origin and this client.
    #[arg(long, default_value = "1")]
    pub load_cpus: String,
    /// Report folder (default bench/results/disk-<UTC time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// A server under test, with what it needs to be asked and restarted.
struct Peer {
    name: String,
    addr: SocketAddr,
    cache: PathBuf,
    conf: PathBuf,
    server: Option<procs::Server>,
    version: String,
}

/// The shared setting of one run.
struct Ctx {
    args: DiskArgs,
    rampart: PathBuf,
    root: PathBuf,
    origin: SocketAddr,
    rt: tokio::runtime::Runtime,
}

pub fn run(args: DiskArgs) -> anyhow::Result<()> {
    procs::stop_all_on_signal();
    crate::websocket::raise_open_files(4096);
    let me = std::env::current_exe()?;
    let rampart = args
        .rampart
        .clone()
        .unwrap_or_else(|| me.with_file_name("rampart"));
    let started = crate::now_utc();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("bench/results").join(format!("disk-{started}")));
    std::fs::create_dir_all(&out)?;
    let root = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("bench/disk-work").join(std::process::id().to_string()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root)?;
    let root = std::fs::canonicalize(&root)?;
    let (mut origin, origin_addr) =
        procs::Server::origin(&args.load_cpus, &me, &root.join("origin.log"))?;
    crate::websocket::pin_self(&args.load_cpus);
    let ctx = Ctx {
        rt: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
        args: args.clone(),
        rampart,
        root: root.clone(),
        origin: origin_addr,
    };
    let mut report = json!({
        "started": started,
        "machine": crate::sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"),
        "filesystem": crate::sh(&format!("df -hT {} | tail -1", root.display())),
        "method": format!(
            "servers pinned to CPU {}, the origin and the client to CPU {}; one worker each; \
             server CPU = on-CPU time of its process tree (/proc/PID/task/*/schedstat) over the \
             measured window; rounds interleaved across servers; medians",
            args.server_cpus, args.load_cpus
        ),
    });
    let mut md = format!(
        "# Disk tier: rampart `cache_disk` and NGINX `proxy_cache_path`\n\n{}\n\nCache directories on: `{}`\n\n",
        report["method"].as_str().unwrap_or(""),
        report["filesystem"].as_str().unwrap_or("")
    );
    let res = (|| -> anyhow::Result<()> {
        for part in &args.parts {
            match part.as_str() {
                "disk-hit" => {
                    let (j, m) = disk_hit(&ctx)?;
                    report["disk_hit"] = j;
                    md.push_str(&m);
                    let (j, m) = write_amplification(&ctx)?;
                    report["write_amplification"] = j;
                    md.push_str(&m);
                }
                "large" => {
                    let (j, m) = large(&ctx)?;
                    report["large"] = j;
                    md.push_str(&m);
                }
                "restart" => {
                    let (j, m) = restart(&ctx)?;
                    report["restart"] = j;
                    md.push_str(&m);
                }
                "crash" => {
                    let (j, m) = crash(&ctx)?;
                    report["crash"] = j;
                    md.push_str(&m);
                }
                other => bail!("unknown part {other} (known: disk-hit, large, restart, crash)"),
            }
        }
        Ok(())
    })();
    origin.stop();
    let _ = std::fs::remove_dir_all(&root);
    res?;
    std::fs::write(
        out.join("disk.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    std::fs::write(out.join("disk.md"), &md)?;
    println!("{md}\nreport: {}", out.join("disk.md").display());
    Ok(())
}

impl Ctx {
    /// Starts `name` with a fresh cache directory (`memory` for rampart's memory tier,
    /// `min_uses` its admission).
    fn start(&self, name: &str, part: &str, memory: &str, min_uses: u32) -> anyhow::Result<Peer> {
        let dir = self.root.join(part).join(name);
        let _ = std::fs::remove_dir_all(&dir);
        let cache = dir.join("cache");
        std::fs::create_dir_all(&cache)?;
        let addr = SocketAddr::from(([127, 0, 0, 1], procs::free_port()?));
        let conf = match name {
            "rampart" => {
                let toml = format!(
                    "listen = [\"{addr}\"]\nworkers = 1\nadd_logging = false\nlogging_level = \"warn\"\n\
                     api_key = \"{API_KEY}\"\ncache_memory = \"{memory}\"\ncache_max_object = \"2GiB\"\n\
                     cache_disk = \"{}\"\ncache_disk_size = \"12GiB\"\ncache_disk_min_uses = {min_uses}\n\
                     max_connections = 4096\n\n\
                     [[proxy_rules]]\ndomain = \"*\"\nmax_age_seconds = 3600\nforward_ipv4 = \"{}\"\n\
                     forward_port_http = {}\nrule_type = \"Whitelist\"\nenable_logging = false\n\
                     ignore_query_string = false\nenable_sql_injection_protection = false\n\
                     enable_compression = false\nenable_minification = false\nenable_webp_transformation = false\n",
                    cache.display(),
                    self.origin.ip(),
                    self.origin.port()
                );
                let f = dir.join("rampart.toml");
                std::fs::write(&f, toml)?;
                f
            }
            "nginx" => {
                let p = dir.display();
                let f = dir.join("nginx.conf");
                std::fs::write(
                    &f,
                    format!(
                        "worker_processes 1;\ndaemon off;\nmaster_process on;\npid {p}/nginx.pid;\n\
                         lock_file {p}/nginx.lock;\nerror_log {p}/error.log notice;\n\
                         worker_rlimit_nofile 8192;\nevents {{ worker_connections 4096; }}\nhttp {{\n  \
                         access_log off;\n  sendfile on;\n  keepalive_requests 1000000;\n  \
                         client_body_temp_path {p}/cb;\n  proxy_temp_path {p}/pt;\n  \
                         fastcgi_temp_path {p}/ft;\n  uwsgi_temp_path {p}/ut;\n  scgi_temp_path {p}/st;\n  \
                         proxy_cache_path {} levels=1:2 keys_zone=disk:256m max_size=12g inactive=7d use_temp_path=off;\n  \
                         upstream o {{ server {}; keepalive 16; }}\n  server {{\n    \
                         listen {addr};\n    location / {{\n      proxy_pass http://o;\n      \
                         proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n      \
                         proxy_cache disk;\n      proxy_cache_valid 200 1h;\n      \
                         proxy_cache_min_uses {min_uses};\n      proxy_max_temp_file_size 4096m;\n      \
                         add_header X-Cache-Status $upstream_cache_status;\n    }}\n  }}\n}}\n",
                        cache.display(),
                        self.origin
                    ),
                )?;
                f
            }
            other => bail!("unknown peer {other} (known: rampart, nginx)"),
        };
        let mut peer = Peer {
            name: name.to_owned(),
            addr,
            cache,
            conf,
            server: None,
            version: String::new(),
        };
        self.launch(&mut peer)?;
        Ok(peer)
    }

    /// Starts (again) `peer`'s server with its configuration and cache directory.
    fn launch(&self, peer: &mut Peer) -> anyhow::Result<()> {
        let dir = peer.conf.parent().context("configuration directory")?;
        let server = match peer.name.as_str() {
            "rampart" => {
                peer.version = crate::sh(&format!("{} --version", self.rampart.display()));
                procs::Server::start(
                    &self.args.server_cpus,
                    &self.rampart.to_string_lossy(),
                    &[
                        "run".to_owned(),
                        "--config".to_owned(),
                        peer.conf.to_string_lossy().into_owned(),
                    ],
                    &[],
                    &dir.join("rampart.log"),
                )?
            }
            _ => {
                let path = ["/usr/sbin/nginx", "/usr/bin/nginx"]
                    .into_iter()
                    .find(|p| Path::new(p).exists())
                    .context("nginx is not installed (apt-get install nginx)")?;
                peer.version = crate::sh(&format!("{path} -v 2>&1"));
                procs::Server::start(
                    &self.args.server_cpus,
                    path,
                    &[
                        "-c".to_owned(),
                        peer.conf.to_string_lossy().into_owned(),
                        "-p".to_owned(),
                        dir.to_string_lossy().into_owned(),
                        "-e".to_owned(),
                        dir.join("error.log").to_string_lossy().into_owned(),
                    ],
                    &[],
                    &dir.join("nginx.log"),
                )?
            }
        };
        peer.server = Some(server);
        if !procs::wait_listening(peer.addr, Duration::from_secs(20)) {
            bail!("{} is not listening (see {})", peer.name, dir.display());
        }
        Ok(())
    }

    /// Stops `peer`'s server gracefully (SIGTERM: rampart writes out its queue).
    fn stop(&self, peer: &mut Peer) {
        if let Some(mut s) = peer.server.take() {
            s.stop();
        }
    }

    /// The origin's count of requests so far.
    fn origin_requests(&self) -> anyhow::Result<u64> {
        let body = self.rt.block_on(async {
            let mut c = Conn::open(self.origin).await?;
            let r = c.get("/__total", true).await?;
            anyhow::Ok(r.body)
        })?;
        String::from_utf8_lossy(&body)
            .trim()
            .parse()
            .context("the origin's /__total")
    }

    /// One of rampart's metrics (`None` for NGINX, or when absent).
    fn metric(&self, peer: &Peer, series: &str) -> Option<f64> {
        if peer.name != "rampart" {
            return None;
        }
        let body = self
            .rt
            .block_on(async {
                let mut c = Conn::open(peer.addr).await?;
                let r = c
                    .request(&format!(
                        "GET /_rampart/metrics HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {API_KEY}\r\n\r\n"
                    ), true)
                    .await?;
                anyhow::Ok(r.body)
            })
            .ok()?;
        String::from_utf8_lossy(&body).lines().find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
    }

    /// Waits until rampart has written `n` records (up to `limit`).
    fn wait_written(&self, peer: &Peer, n: f64, limit: Duration) {
        let start = Instant::now();
        while peer.name == "rampart" && start.elapsed() < limit {
            if self
                .metric(peer, "rampart_cache_disk_writes_total")
                .is_some_and(|w| w >= n)
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The client: raw HTTP/1.1 keep-alive, bodies read and dropped.

struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

struct Resp {
    status: u16,
    len: u64,
    /// A cache hit (rampart's `Cache-Status: …hit`, NGINX's `X-Cache-Status: HIT`).
    hit: bool,
    /// rampart's `detail=disk`.
    disk: bool,
    body: Vec<u8>,
}

impl Conn {
    async fn open(addr: SocketAddr) -> anyhow::Result<Conn> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(Conn {
            s,
            buf: Vec::with_capacity(64 << 10),
        })
    }

    async fn get(&mut self, path: &str, keep: bool) -> anyhow::Result<Resp> {
        let req = format!("GET {path} HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
        self.request(&req, keep).await
    }

    /// Sends `req` and reads the answer (`Content-Length` framed); keeps the body if `keep`.
    async fn request(&mut self, req: &str, keep: bool) -> anyhow::Result<Resp> {
        self.s.write_all(req.as_bytes()).await?;
        self.buf.clear();
        let mut chunk = vec![0u8; 256 << 10];
        let head = loop {
            let n = self.s.read(&mut chunk).await?;
            if n == 0 {
                bail!("closed before the answer's head");
            }
            self.buf.extend_from_slice(&chunk[..n]);
            if let Some(h) = crate::http1::head(&self.buf) {
                break h;
            }
        };
        let status = head.status;
        let crate::http1::Framing::Length(len) = head.framing else {
            bail!("no Content-Length");
        };
        let len = len as u64;
        let cs = head
            .field("cache-status")
            .unwrap_or_default()
            .to_ascii_lowercase();
        let xs = head
            .field("x-cache-status")
            .unwrap_or_default()
            .to_ascii_lowercase();
        let hit = cs.contains("; hit") || xs == "hit";
        let disk = cs.contains("detail=disk");
        let end = head.end;
        let mut got = (self.buf.len() - end) as u64;
        let mut body = if keep {
            self.buf[end..].to_vec()
        } else {
            Vec::new()
        };
        while got < len {
            let n = self.s.read(&mut chunk).await?;
            if n == 0 {
                bail!("closed after {got} of {len} bytes");
            }
            got += n as u64;
            if keep {
                body.extend_from_slice(&chunk[..n]);
            }
        }
        Ok(Resp {
            status,
            len,
            hit,
            disk,
            body,
        })
    }
}

/// Zipf-distributed ranks 0..n (exponent `s`), by inverse CDF.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n);
        let mut sum = 0.0;
        for k in 1..=n {
            sum += 1.0 / (k as f64).powf(s);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Zipf { cdf }
    }

    fn sample(&self, rng: &mut u64) -> usize {
        // xorshift64*
        *rng ^= *rng >> 12;
        *rng ^= *rng << 25;
        *rng ^= *rng >> 27;
        let u = (rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

fn object_path(i: usize, size: usize) -> String {
    format!("/blob?size={size}&k={i}")
}

/// Fetches `paths` over `conns` keep-alive connections (each path once, in order).
async fn fetch_all(addr: SocketAddr, paths: Arc<Vec<String>>, conns: usize) -> anyhow::Result<()> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (paths, next) = (paths.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::open(addr).await?;
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(p) = paths.get(i) else {
                    return anyhow::Ok(());
                };
                let r = c.get(p, false).await?;
                if r.status != 200 {
                    bail!("{p}: {}", r.status);
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// What one Zipf run measured on the client side.
#[derive(Default)]
struct Tally {
    requests: u64,
    hits: u64,
    disk: u64,
    latencies_us: Vec<u32>,
    /// Of the answers rampart served from disk.
    disk_latencies_us: Vec<u32>,
    /// Object ranks answered from disk at least once.
    from_disk: HashSet<usize>,
}

/// `conns` closed-loop clients asking Zipf-ranked objects for `secs` seconds (or `count`
/// requests in all).
async fn zipf_load(
    addr: SocketAddr,
    zipf: Arc<Zipf>,
    size: usize,
    conns: usize,
    secs: Option<u64>,
    count: Option<u64>,
) -> anyhow::Result<Tally> {
    let deadline = secs.map(|s| Instant::now() + Duration::from_secs(s));
    let left = Arc::new(std::sync::atomic::AtomicU64::new(count.unwrap_or(u64::MAX)));
    let mut tasks = Vec::new();
    for c in 0..conns {
        let (zipf, left) = (zipf.clone(), left.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(addr).await?;
            let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ ((c as u64 + 1) * 0x1000_0001);
            let mut t = Tally::default();
            loop {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                if left
                    .fetch_update(
                        std::sync::atomic::Ordering::Relaxed,
                        std::sync::atomic::Ordering::Relaxed,
                        |n| n.checked_sub(1),
                    )
                    .is_err()
                {
                    break;
                }
                let rank = zipf.sample(&mut rng);
                let start = Instant::now();
                let r = conn.get(&object_path(rank, size), false).await?;
                let took = start.elapsed().as_micros().min(u32::MAX as u128) as u32;
                t.latencies_us.push(took);
                if r.disk {
                    t.disk_latencies_us.push(took);
                }
                if r.status != 200 || r.len != size as u64 {
                    bail!("object {rank}: {} with {} bytes", r.status, r.len);
                }
                t.requests += 1;
                t.hits += u64::from(r.hit);
                if r.disk {
                    t.disk += 1;
                    t.from_disk.insert(rank);
                }
            }
            anyhow::Ok(t)
        }));
    }
    let mut all = Tally::default();
    for task in tasks {
        let t = task.await??;
        all.requests += t.requests;
        all.hits += t.hits;
        all.disk += t.disk;
        all.latencies_us.extend(t.latencies_us);
        all.disk_latencies_us.extend(t.disk_latencies_us);
        all.from_disk.extend(t.from_disk);
    }
    all.latencies_us.sort_unstable();
    all.disk_latencies_us.sort_unstable();
    Ok(all)
}

/// The `q` quantile (0–1, nearest rank) of latencies in µs, in ms.
fn quantile(sorted: &[u32], q: f64) -> f64 {
    f64::from(crate::stats::percentile(sorted, q * 100.0)) / 1000.0
}

// ---------------------------------------------------------------------------------------------

fn disk_hit(ctx: &Ctx) -> anyhow::Result<(serde_json::Value, String)> {
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
    Ok((serde_json::Value::Object(out), md))
}

/// rampart alone, from an empty directory, on a Zipf trace: bytes written to disk per byte of
/// the objects it wrote that were later served from disk.
fn write_amplification(ctx: &Ctx) -> anyhow::Result<(serde_json::Value, String)> {
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

fn large(ctx: &Ctx) -> anyhow::Result<(serde_json::Value, String)> {
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

fn restart(ctx: &Ctx) -> anyhow::Result<(serde_json::Value, String)> {
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
fn crash_size(k: u64) -> usize {
    1000 + (k as usize * 7919) % 59_000
}

/// rampart alone, `--crash-cycles` times: load with writes going on, `kill -9` at a random
/// moment, start again, and ask for a random set of objects: every answer must be a 200 whose
/// body is the origin's, byte for byte (bodies read whole before the kill are checked too).
fn crash(ctx: &Ctx) -> anyhow::Result<(serde_json::Value, String)> {
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
        let (ok, bad) = ctx.rt.block_on(async {
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
        });
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
