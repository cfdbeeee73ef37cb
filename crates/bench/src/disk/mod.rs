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

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::json;

use crate::procs;

use client::Conn;
use figures::{disk_hit, large, write_amplification};
use restarts::{crash, restart};

mod client;
mod figures;
mod restarts;

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
