//! Idle connections: what one idle HTTP/1.1 keep-alive connection costs a server
//! in resident memory, rampart against NGINX and HAProxy.
//!
//! Each server proxies to the suite's origin with one worker. After one warm-up connection,
//! `--connections` keep-alive connections each send one request and read the whole answer,
//! then stay open and silent. The server's resident memory (VmRSS of its whole process tree)
//! is read before the first and [`SETTLE`] after the last; the growth divided by the count is the
//! cost of one idle connection. Up to a hundred of them, evenly spread, then send a second
//! request, to show the connections were still served. Kernel socket memory is not in RSS for any of them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::procs;

/// How long the connections stay silent before the server's memory is read: past rampart's
/// default `client_idle_park_seconds` (5 s), its next once-a-second sweep, and the allocator's
/// purge delay. The same for every server.
const SETTLE: Duration = Duration::from_secs(8);

#[derive(clap::Args, Debug, Clone)]
pub struct IdleArgs {
    /// Idle keep-alive connections held open at once.
    #[arg(long, default_value_t = 10_000)]
    pub connections: usize,
    /// Servers to measure (comma-separated): rampart, nginx, haproxy.
    #[arg(long, value_delimiter = ',', default_value = "rampart,nginx,haproxy")]
    pub peers: Vec<String>,
    /// The rampart binary (default: the rampart next to this tool, target/dist/rampart after `cargo build --profile dist`).
    #[arg(long)]
    pub rampart: Option<PathBuf>,
    /// CPU for the server (taskset list).
    #[arg(long, default_value = "0")]
    pub server_cpus: String,
    /// CPU for the origin and this client.
    #[arg(long, default_value = "1")]
    pub load_cpus: String,
    /// Markdown report (default bench/results/idle-<UTC time>.md).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One server's figures.
struct Measured {
    peer: String,
    version: String,
    before: u64,
    after: u64,
    held: usize,
    /// Of the connections asked again after the wait, how many answered.
    answered: (usize, usize),
}

const REQUEST: &[u8] = b"GET /hello HTTP/1.1\r\nHost: idle.bench\r\n\r\n";

pub fn run(args: IdleArgs) -> anyhow::Result<()> {
    procs::stop_all_on_signal();
    let limit = crate::websocket::raise_open_files(args.connections as u64 + 2048);
    let connections = args
        .connections
        .min(limit.saturating_sub(1024) as usize)
        .max(1);
    if connections < args.connections {
        eprintln!("open-file limit {limit}: measuring {connections} connections");
    }
    let me = std::env::current_exe()?;
    let rampart = args
        .rampart
        .clone()
        .unwrap_or_else(|| me.with_file_name("rampart"));
    let dir = std::env::temp_dir().join(format!("rampart-bench-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (mut origin, origin_addr) =
        procs::Server::origin(&args.load_cpus, &me, &dir.join("origin.log"))?;
    crate::websocket::pin_self(&args.load_cpus);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut results = Vec::new();
    for peer in &args.peers {
        // HAProxy reserves two descriptors per connection it may hold (client and server
        // side) and refuses to start past the open-file limit: it holds what fits.
        let connections = match peer.as_str() {
            "haproxy" => connections.min((limit.saturating_sub(256) / 2) as usize),
            _ => connections,
        };
        let Some((mut server, addr, version)) =
            start(peer, &args, &rampart, &dir, origin_addr, connections)?
        else {
            eprintln!("{peer}: not installed, skipped");
            continue;
        };
        let measured = rt.block_on(hold(peer, addr, &server, connections));
        server.stop();
        let mut m = measured.with_context(|| format!("{peer}: idle connections"))?;
        m.version = version;
        eprintln!(
            "{peer}: {:.0} bytes per idle connection ({} held)",
            per_connection(&m),
            m.held
        );
        results.push(m);
    }
    origin.stop();
    let report = report(&args, connections, &results);
    crate::save_report(args.out.clone(), "idle", &report)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn per_connection(m: &Measured) -> f64 {
    m.after.saturating_sub(m.before) as f64 / m.held.max(1) as f64
}

/// Opens the connections, one request each, and reads the server's RSS around them.
async fn hold(
    peer: &str,
    addr: SocketAddr,
    server: &procs::Server,
    connections: usize,
) -> anyhow::Result<Measured> {
    let warm = open(addr).await.context("warm-up connection")?;
    drop(warm);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = server.rss();
    let started = Instant::now();
    let mut held = Vec::with_capacity(connections);
    for i in 0..connections {
        held.push(
            open(addr)
                .await
                .with_context(|| format!("connection {i}"))?,
        );
    }
    tokio::time::sleep(SETTLE).await;
    let after = server.rss();
    let took = started.elapsed();
    let mut answered = (0, 0);
    for s in held.iter_mut().step_by((connections / 100).max(1)) {
        answered.1 += 1;
        if exchange(s).await.is_ok() {
            answered.0 += 1;
        }
    }
    eprintln!("{peer}: {connections} connections opened and held in {took:.1?}");
    Ok(Measured {
        peer: peer.to_owned(),
        version: String::new(),
        before,
        after,
        held: held.len(),
        answered,
    })
}

/// A new connection that has had one complete exchange.
async fn open(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    let mut s = TcpStream::connect(addr).await?;
    exchange(&mut s).await?;
    Ok(s)
}

/// One request, and its answer read to the end (`Content-Length` framed, 200).
async fn exchange(s: &mut TcpStream) -> anyhow::Result<()> {
    request(s, REQUEST).await.map(drop)
}

/// Sends `req` (one HTTP/1.1 request) on `s` and reads its answer to the end: a 200 framed by
/// `Content-Length`. The body.
pub(crate) async fn request(s: &mut TcpStream, req: &[u8]) -> anyhow::Result<Vec<u8>> {
    s.write_all(req).await?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 8192];
    let deadline = Duration::from_secs(10);
    loop {
        let n = tokio::time::timeout(deadline, s.read(&mut chunk)).await??;
        if n == 0 {
            bail!("closed before the answer was complete");
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(head) = crate::http1::head(&buf) else {
            continue;
        };
        if head.status != 200 {
            bail!("answer: status {}", head.status);
        }
        let crate::http1::Framing::Length(length) = head.framing else {
            bail!("no Content-Length");
        };
        let end = head.end;
        if buf.len() >= end + length {
            return Ok(buf[end..end + length].to_vec());
        }
    }
}

/// Starts `peer` as a one-worker reverse proxy to `origin`; `None` when it is not installed.
fn start(
    peer: &str,
    args: &IdleArgs,
    rampart: &std::path::Path,
    dir: &std::path::Path,
    origin: SocketAddr,
    connections: usize,
) -> anyhow::Result<Option<(procs::Server, SocketAddr, String)>> {
    let port = procs::free_port()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // Room for the warm-up and the origin side; HAProxy's descriptors are counted twice.
    let max = connections + if peer == "haproxy" { 8 } else { 1024 };
    let d = dir.join(peer);
    std::fs::create_dir_all(&d)?;
    let p = d.to_string_lossy().into_owned();
    let (program, cmd_args) = match peer {
        "rampart" => {
            let toml = format!(
                "listen = [\"{addr}\"]\nworkers = 1\nadd_logging = false\nlogging_level = \"error\"\n\
                 max_connections = {max}\nclient_keepalive_timeout_seconds = 300\n\
                 client_header_timeout_seconds = 300\n\n\
                 [[proxy_rules]]\ndomain = \"*\"\nmax_age_seconds = 3600\nforward_ipv4 = \"{}\"\n\
                 forward_port_http = {}\nrule_type = \"Whitelist\"\nenable_logging = false\n\
                 ignore_query_string = false\nenable_sql_injection_protection = false\n\
                 enable_compression = false\nenable_minification = false\nenable_webp_transformation = false\n",
                origin.ip(),
                origin.port()
            );
            let server = procs::Server::rampart(&args.server_cpus, rampart, &toml, &d, addr)?;
            let version = crate::sh(&format!("{} --version", rampart.display()));
            return Ok(Some((server, addr, version)));
        }
        "nginx" => nginx(&d, &p, max, origin, addr)?,
        "haproxy" => haproxy(&d, max, origin, addr)?,
        other => bail!("unknown peer {other} (known: rampart, nginx, haproxy)"),
    };
    let path = ["/usr/sbin", "/usr/bin"]
        .iter()
        .map(|d| format!("{d}/{program}"))
        .find(|f| std::path::Path::new(f).exists());
    let Some(path) = path else { return Ok(None) };
    let mut server = procs::Server::start(
        &args.server_cpus,
        &path,
        &cmd_args,
        &[],
        &d.join(format!("{peer}.log")),
    )?;
    if !procs::wait_listening(addr, Duration::from_secs(10)) {
        server.stop();
        bail!("{peer} is not listening (see {}/{peer}.log)", d.display());
    }
    let version = match peer {
        "nginx" => crate::sh(&format!("{path} -v 2>&1")),
        _ => crate::sh(&format!("{path} -v 2>&1 | head -1")),
    };
    Ok(Some((server, addr, version)))
}

/// NGINX's configuration for the idle test, written in `d` (`p`: the same, as text): the
/// program and its arguments.
fn nginx(
    d: &std::path::Path,
    p: &str,
    max: usize,
    origin: SocketAddr,
    addr: SocketAddr,
) -> anyhow::Result<(&'static str, Vec<String>)> {
    let conf = d.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "worker_processes 1;\ndaemon off;\nmaster_process on;\npid {p}/nginx.pid;\n\
             lock_file {p}/nginx.lock;\nerror_log {p}/error.log error;\n\
             worker_rlimit_nofile {};\nevents {{ worker_connections {max}; }}\nhttp {{\n  \
             access_log off;\n  keepalive_timeout 300s;\n  keepalive_requests 100000;\n  \
             client_body_temp_path {p}/cb;\n  proxy_temp_path {p}/pt;\n  \
             fastcgi_temp_path {p}/ft;\n  uwsgi_temp_path {p}/ut;\n  scgi_temp_path {p}/st;\n  \
             upstream o {{ server {origin}; keepalive 16; }}\n  server {{\n    \
             listen {addr};\n    location / {{\n      proxy_pass http://o;\n      \
             proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n    }}\n  }}\n}}\n",
            max * 2
        ),
    )?;
    Ok((
        "nginx",
        vec![
            "-c".to_owned(),
            conf.to_string_lossy().into_owned(),
            "-p".to_owned(),
            p.to_owned(),
            "-e".to_owned(),
            "stderr".to_owned(),
        ],
    ))
}

/// HAProxy's configuration for the idle test, written in `d`: the program and its arguments.
fn haproxy(
    d: &std::path::Path,
    max: usize,
    origin: SocketAddr,
    addr: SocketAddr,
) -> anyhow::Result<(&'static str, Vec<String>)> {
    let cfg = d.join("haproxy.cfg");
    std::fs::write(
        &cfg,
        format!(
            "global\n    nbthread 1\n    maxconn {max}\n    ulimit-n {}\n\n\
             defaults\n    mode http\n    maxconn {max}\n    timeout connect 5s\n    timeout client 300s\n    \
             timeout server 60s\n    timeout http-keep-alive 300s\n    http-reuse always\n\n\
             frontend fe\n    bind {addr}\n    default_backend be\n\n\
             backend be\n    server o {origin}\n",
            limit_fds()
        ),
    )?;
    Ok((
        "haproxy",
        vec![
            "-db".to_owned(),
            "-f".to_owned(),
            cfg.to_string_lossy().into_owned(),
        ],
    ))
}

/// This process's open-file limit, which the servers inherit (HAProxy is told it: by default it
/// asks for two descriptors per `maxconn`, more than some machines' hard limit allows).
#[allow(unsafe_code)]
fn limit_fds() -> u64 {
    // SAFETY: getrlimit into a valid struct.
    unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return 1024;
        }
        l.rlim_cur
    }
}

fn report(args: &IdleArgs, connections: usize, results: &[Measured]) -> String {
    let mut out = format!(
        "# Idle keep-alive connections — {}\n\n\
         Method: `rampart-bench idle --connections {}`: each server runs one worker on CPU {} and \
         proxies to the suite's origin; the origin and the client share CPU {}. After one warm-up \
         connection, {connections} keep-alive connections each send `GET /hello` and read the \
         whole answer, then stay open and silent. RSS is the VmRSS of the server's process tree, \
         read before the first connection and {} s after the last; per connection = growth ÷ \
         connections. Up to a hundred of them (evenly spread) then send a second request.\n\n\
         | server | version | connections | RSS before | RSS with the connections open | growth | per idle connection | answered afterwards |\n\
         |---|---|---|---|---|---|---|---|\n",
        crate::now_utc(),
        args.connections,
        args.server_cpus,
        args.load_cpus,
        SETTLE.as_secs(),
    );
    for m in results {
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} MiB | {:.1} MiB | {:.1} MiB | **{:.0} bytes** | {}/{} |\n",
            m.peer,
            m.version.lines().next().unwrap_or("").trim(),
            m.held,
            m.before as f64 / 1048576.0,
            m.after as f64 / 1048576.0,
            m.after.saturating_sub(m.before) as f64 / 1048576.0,
            per_connection(m),
            m.answered.0,
            m.answered.1,
        ));
    }
    out
}
