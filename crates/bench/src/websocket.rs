//! `rampart-bench websocket`: the WebSocket goals, measured through real sockets.
//!
//! - **Idle sockets.** A fresh rampart (one worker, pinned) in front of a WebSocket echo origin
//!   (`rampart-bench ws-origin`, its own process, pinned to the other CPU). The client opens
//!   `--idle` WebSockets through rampart, each making one echo round trip, and keeps them all
//!   open; rampart's resident memory (VmRSS) is read before the first and 2 s after the last.
//!   Goal: growth ≤ 100 MiB for 10,000 sockets.
//! - **Echo CPU.** `--echo` connections each send a 32-byte text message and wait for its echo,
//!   again and again, for `--seconds`, once straight to the origin and once through rampart, in
//!   interleaved rounds. CPU time (schedstat, every thread) of the client, the origin and
//!   rampart, per round trip. Goal: the whole round trip through rampart (client + rampart +
//!   origin) costs ≤ 1.5× the direct one (client + origin).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

use crate::procs;

#[derive(clap::Args, Debug, Clone)]
pub struct WebsocketArgs {
    /// Idle WebSockets held open through rampart at once.
    #[arg(long, default_value_t = 10_000)]
    pub idle: usize,
    /// Connections in the echo test.
    #[arg(long, default_value_t = 50)]
    pub echo: usize,
    /// Seconds per echo run.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Interleaved rounds of the echo test (direct, through rampart, direct, ...).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Proxies in the echo test besides the direct path (comma-separated): rampart, haproxy,
    /// nginx; those not installed are skipped.
    #[arg(long, value_delimiter = ',', default_value = "rampart,haproxy,nginx")]
    pub proxies: Vec<String>,
    /// The rampart binary (default: the rampart next to this tool, target/dist/rampart after `cargo build --profile dist`).
    #[arg(long)]
    pub rampart: Option<PathBuf>,
    /// CPU for rampart (taskset list).
    #[arg(long, default_value = "0")]
    pub server_cpus: String,
    /// CPU for the origin and the client.
    #[arg(long, default_value = "1")]
    pub origin_cpus: String,
    /// Markdown report (default bench/results/websocket-<UTC time>.md).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `rampart-bench ws-origin`: a WebSocket echo server (tokio-tungstenite) on one thread.
pub fn origin(listen: SocketAddr) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let l = TcpListener::bind(listen).await?;
        loop {
            let (s, _) = l.accept().await?;
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(s).await else {
                    return;
                };
                while let Some(Ok(m)) = ws.next().await {
                    if (m.is_text() || m.is_binary()) && ws.send(m).await.is_err() {
                        break;
                    }
                }
            });
        }
    })
}

/// One echo run's figures.
#[derive(Debug, Clone, Copy, Default)]
struct EchoRun {
    round_trips: u64,
    client_s: f64,
    origin_s: f64,
    rampart_s: f64,
}

impl EchoRun {
    fn us(&self, s: f64) -> f64 {
        s * 1e6 / self.round_trips.max(1) as f64
    }
    fn total_us(&self) -> f64 {
        self.us(self.client_s + self.origin_s + self.rampart_s)
    }
}

pub fn run(args: WebsocketArgs) -> anyhow::Result<()> {
    procs::stop_all_on_signal();
    let mut args = args;
    // rampart holds two descriptors per WebSocket (client and origin side) and inherits this
    // process's limit: where the hard limit is lower than that needs (20,000 on some machines),
    // fewer sockets are opened and the report scales the goal to the count.
    let limit = raise_open_files(args.idle as u64 * 2 + 1024);
    let fits = (limit.saturating_sub(512) / 2) as usize;
    if args.idle > fits {
        eprintln!(
            "open-file limit {limit}: {} idle sockets need about {} descriptors in rampart; measuring {fits}",
            args.idle,
            args.idle * 2 + 512
        );
        args.idle = fits;
    }
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
    let dir = std::env::temp_dir().join(format!("rampart-bench-ws-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let origin_addr = SocketAddr::from(([127, 0, 0, 1], procs::free_port()?));
    let mut origin = procs::Server::start(
        &args.origin_cpus,
        &me.to_string_lossy(),
        &[
            "ws-origin".into(),
            "--listen".into(),
            origin_addr.to_string(),
        ],
        &[],
        &dir.join("origin.log"),
    )?;
    if !procs::wait_listening(origin_addr, Duration::from_secs(10)) {
        bail!("the WebSocket origin did not start");
    }
    // The client runs on the origin's CPU (rampart has the other to itself).
    pin_self(&args.origin_cpus);
    let port = procs::free_port()?;
    let proxy_addr = SocketAddr::from(([127, 0, 0, 1], port));
    let toml = format!(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = {port}\nworkers = 1\n\
         add_logging = false\nlogging_level = \"error\"\nadd_rate_limiting = false\n\
         max_connections = {}\n\n\
         [[proxy_rules]]\ndomain = \"ws.bench\"\nmax_age_seconds = 0\nforward_ipv4 = \"127.0.0.1\"\n\
         forward_port_http = {}\nrule_type = \"Whitelist\"\nenable_logging = false\n\
         ignore_query_string = false\nenable_sql_injection_protection = false\n\
         enable_compression = false\nenable_minification = false\nenable_webp_transformation = false\n",
        args.idle + args.echo + 100,
        origin_addr.port()
    );
    let mut server =
        match procs::Server::rampart(&args.server_cpus, &rampart, &toml, &dir, proxy_addr) {
            Ok(s) => s,
            Err(e) => {
                origin.stop();
                return Err(e.into());
            }
        };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(async {
        let idle = idle(&args, proxy_addr, &server).await?;
        let paths = Paths {
            origin: (origin_addr, &origin),
            rampart: args
                .proxies
                .iter()
                .any(|p| p == "rampart")
                .then_some((proxy_addr, &server)),
        };
        let runs = echo_rounds(&args, &dir, &paths).await?;
        anyhow::Ok((idle, runs))
    });
    server.stop();
    origin.stop();
    let (idle, runs) = result?;
    let report = report(&args, &idle, &runs);
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("bench/results").join(format!("websocket-{}.md", crate::now_utc()))
    });
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&out, &report)?;
    println!("{report}\nreport: {}", out.display());
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The idle-sockets figures.
struct Idle {
    /// rampart's RSS after one warm-up WebSocket, and with every idle one open.
    before: u64,
    after: u64,
    opening: Duration,
    /// Sockets that echoed again after the wait.
    checked: usize,
}

/// Opens `--idle` WebSockets through rampart and reads its RSS before and after.
async fn idle(
    args: &WebsocketArgs,
    proxy: SocketAddr,
    server: &procs::Server,
) -> anyhow::Result<Idle> {
    // Warm up: rampart's first WebSocket (its splice buffers and tables exist).
    let warm = open(proxy, "ws.bench").await.context("warm-up socket")?;
    drop(warm);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = server.rss();
    let started = Instant::now();
    let mut sockets = Vec::with_capacity(args.idle);
    for i in 0..args.idle {
        sockets.push(
            open(proxy, "ws.bench")
                .await
                .with_context(|| format!("idle socket {i}"))?,
        );
    }
    let opening = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = server.rss();
    // The sockets still work after the wait.
    let mut checked = 0;
    for ws in sockets.iter_mut().step_by((args.idle / 100).max(1)) {
        round_trip(ws)
            .await
            .context("an idle socket after the wait")?;
        checked += 1;
    }
    drop(sockets);
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(Idle {
        before,
        after,
        opening,
        checked,
    })
}

/// The origin and rampart, as the echo test reaches them.
struct Paths<'a> {
    origin: (SocketAddr, &'a procs::Server),
    rampart: Option<(SocketAddr, &'a procs::Server)>,
}

/// The echo test's interleaved rounds: direct, rampart, then the other proxies (started here,
/// stopped before returning).
async fn echo_rounds(
    args: &WebsocketArgs,
    dir: &std::path::Path,
    paths: &Paths<'_>,
) -> anyhow::Result<Vec<(String, Vec<EchoRun>)>> {
    let (origin_addr, origin) = paths.origin;
    let mut proxies: Vec<(String, SocketAddr, Option<procs::Server>)> = Vec::new();
    if let Some((addr, _)) = paths.rampart {
        proxies.push(("rampart".into(), addr, None));
    }
    for name in args.proxies.iter().filter(|p| p.as_str() != "rampart") {
        match start_peer(name, args, dir, origin_addr) {
            Ok(Some((server, addr))) => proxies.push((name.clone(), addr, Some(server))),
            Ok(None) => eprintln!("{name}: not installed, skipped"),
            Err(e) => eprintln!("{name}: did not start ({e:#}), skipped"),
        }
    }
    let mut runs: Vec<(String, Vec<EchoRun>)> = vec![("direct".into(), Vec::new())];
    runs.extend(proxies.iter().map(|(n, _, _)| (n.clone(), Vec::new())));
    let mut measured = Ok(());
    'rounds: for _ in 0..args.rounds {
        for (i, (name, results)) in runs.iter_mut().enumerate() {
            let (addr, host, proxy) = match i.checked_sub(1).map(|j| &proxies[j]) {
                None => (origin_addr, "origin", None),
                Some((_, addr, Some(server))) => (*addr, "ws.bench", Some(server)),
                Some((_, addr, None)) => (*addr, "ws.bench", paths.rampart.map(|(_, s)| s)),
            };
            match echo(args, addr, host, origin, proxy).await {
                Ok(run) => results.push(run),
                Err(e) => {
                    measured = Err(e.context(format!("echo through {name}")));
                    break 'rounds;
                }
            }
        }
    }
    for (_, _, server) in &mut proxies {
        if let Some(s) = server {
            s.stop();
        }
    }
    measured.map(|()| runs)
}

type Ws = tokio_tungstenite::WebSocketStream<TcpStream>;

/// A WebSocket to `addr` with Host `host`, after one echo round trip.
async fn open(addr: SocketAddr, host: &str) -> anyhow::Result<Ws> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{host}/echo"), tcp).await?;
    round_trip(&mut ws).await?;
    Ok(ws)
}

async fn round_trip(ws: &mut Ws) -> anyhow::Result<()> {
    const MSG: &str = "0123456789abcdef0123456789abcdef";
    ws.send(Message::text(MSG)).await?;
    match ws.next().await {
        Some(Ok(Message::Text(t))) if t.as_str() == MSG => Ok(()),
        other => bail!("no echo: {other:?}"),
    }
}

/// `--echo` connections doing round trips for `--seconds`; CPU of each party per round trip.
async fn echo(
    args: &WebsocketArgs,
    addr: SocketAddr,
    host: &str,
    origin: &procs::Server,
    rampart: Option<&procs::Server>,
) -> anyhow::Result<EchoRun> {
    let mut sockets = Vec::with_capacity(args.echo);
    for _ in 0..args.echo {
        sockets.push(open(addr, host).await?);
    }
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (c0, o0, r0) = (
        procs::cpu_sample_of_pids(&[std::process::id()]),
        origin.cpu_sample(),
        rampart.map(procs::Server::cpu_sample),
    );
    let mut tasks = Vec::new();
    for mut ws in sockets {
        let (count, stop) = (count.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if round_trip(&mut ws).await.is_err() {
                    return false;
                }
                count.fetch_add(1, Ordering::Relaxed);
            }
            true
        }));
    }
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut failed = 0;
    for t in tasks {
        if !t.await.unwrap_or(false) {
            failed += 1;
        }
    }
    let run = EchoRun {
        round_trips: count.load(Ordering::Relaxed),
        client_s: procs::cpu_sample_of_pids(&[std::process::id()]).since(&c0),
        origin_s: origin.cpu_sample().since(&o0),
        rampart_s: match (rampart, r0) {
            (Some(r), Some(r0)) => r.cpu_sample().since(&r0),
            _ => 0.0,
        },
    };
    if failed > 0 {
        bail!("{failed} echo connection(s) failed");
    }
    Ok(run)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn report(args: &WebsocketArgs, idle: &Idle, runs: &[(String, Vec<EchoRun>)]) -> String {
    let Idle {
        before,
        after,
        opening,
        checked,
    } = *idle;
    let growth = after.saturating_sub(before);
    let mut s = format!(
        "### Idle WebSockets\n\n| sockets | rampart RSS before | after | growth | per socket | goal | within |\n|---|---|---|---|---|---|---|\n\
         | {} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} KiB | ≤ 100 MiB for 10,000 | {} |\n\n\
         Opened in {:.1} s; {checked} of them (one in {}) echoed again after the wait.\n\n",
        args.idle,
        mib(before),
        mib(after),
        mib(growth),
        growth as f64 / 1024.0 / args.idle.max(1) as f64,
        if growth <= (100u64 << 20) * args.idle as u64 / 10_000 {
            "yes"
        } else {
            "**no**"
        },
        opening.as_secs_f64(),
        (args.idle / 100).max(1),
    );
    let med =
        |runs: &[EchoRun], f: &dyn Fn(&EchoRun) -> f64| crate::stats::median_of(runs.iter().map(f));
    let direct: &[EchoRun] = runs.first().map_or(&[], |(_, r)| r.as_slice());
    let d_total = med(direct, &|r| r.total_us());
    let d_origin = med(direct, &|r| r.us(r.origin_s));
    s.push_str(&format!(
        "### Echo round trips (CPU µs per round trip, medians of {} rounds)\n\n\
         | path | round trips/s | client | origin | proxy | total | total / direct | proxy / origin direct |\n\
         |---|---|---|---|---|---|---|---|\n",
        args.rounds
    ));
    for (name, rs) in runs {
        let total = med(rs, &|r| r.total_us());
        let proxy = med(rs, &|r| r.us(r.rampart_s));
        s.push_str(&format!(
            "| {} | {:.0} | {:.1} | {:.1} | {} | {:.1} | {:.2}× | {} |\n",
            if name == "direct" {
                "direct (client ↔ origin)".to_owned()
            } else {
                format!("through {name}")
            },
            med(rs, &|r| r.round_trips as f64 / args.seconds as f64),
            med(rs, &|r| r.us(r.client_s)),
            med(rs, &|r| r.us(r.origin_s)),
            if name == "direct" {
                "–".to_owned()
            } else {
                format!("{proxy:.1}")
            },
            total,
            total / d_total.max(1e-9),
            if name == "direct" {
                "–".to_owned()
            } else {
                format!("{:.2}×", proxy / d_origin.max(1e-9))
            },
        ));
    }
    s.push_str("\nGoal: total through rampart ≤ 1.5× direct.\n\n");
    s.push_str(&format!(
        "Method: `rampart-bench websocket` — rampart release build, 1 worker, taskset CPU {}; the WebSocket echo origin (tokio-tungstenite, one thread) and the client (tokio-tungstenite, one thread) on CPU {}. RSS is VmRSS of the rampart process. Echo: {} connections, 32-byte text messages, each sent after the previous echo arrived, {} s per run, the paths interleaved in each round (direct, rampart, HAProxy with one thread, NGINX with one worker, each pinned like rampart); CPU from /proc schedstat of every thread of each process.\n",
        args.server_cpus, args.origin_cpus, args.echo, args.seconds
    ));
    s
}

/// Pins this process to `cpus` (a taskset list such as `1` or `0-1`).
#[allow(unsafe_code)]
pub(crate) fn pin_self(cpus: &str) {
    let list: Vec<usize> = cpus
        .split(',')
        .flat_map(|part| match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse().unwrap_or(0), b.parse().unwrap_or(0));
                (a..=b).collect::<Vec<_>>()
            }
            None => part.parse().into_iter().collect(),
        })
        .collect();
    // SAFETY: a zeroed cpu_set_t filled with CPU_SET, passed with its size to this process.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in list {
            libc::CPU_SET(c, &mut set);
        }
        let _ = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Raises the open-file limit to at least `want` (the hard limit too where allowed), so
/// rampart (which inherits it) can hold two sockets per WebSocket; returns the limit in force.
#[allow(unsafe_code)]
pub(crate) fn raise_open_files(want: u64) -> u64 {
    // SAFETY: plain getrlimit/setrlimit on this process with a valid struct.
    unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return 1024;
        }
        let raised = libc::rlimit {
            rlim_cur: want.max(l.rlim_cur),
            rlim_max: want.max(l.rlim_max),
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
            return raised.rlim_cur;
        }
        l.rlim_cur = l.rlim_max;
        let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        l.rlim_cur
    }
}

/// Starts `name` (haproxy, nginx) as a WebSocket-capable reverse proxy to `origin`, pinned
/// like rampart; `None` when it is not installed.
fn start_peer(
    name: &str,
    args: &WebsocketArgs,
    dir: &std::path::Path,
    origin: SocketAddr,
) -> anyhow::Result<Option<(procs::Server, SocketAddr)>> {
    let port = procs::free_port()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let (program, cmd_args) = match name {
        // HTTP mode passes the Upgrade through and tunnels after 101 (`timeout tunnel`).
        "haproxy" => {
            let cfg = dir.join("haproxy.cfg");
            std::fs::write(
                &cfg,
                format!(
                    "global\n    nbthread 1\n    maxconn 5000\n\ndefaults\n    mode http\n    \
                     timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n    \
                     timeout tunnel 300s\n\nfrontend fe\n    bind 127.0.0.1:{port}\n    \
                     default_backend be\n\nbackend be\n    server o {origin}\n"
                ),
            )?;
            (
                "haproxy",
                vec![
                    "-db".to_owned(),
                    "-f".to_owned(),
                    cfg.to_string_lossy().into_owned(),
                ],
            )
        }
        // The documented WebSocket proxying: HTTP/1.1 to the origin, Upgrade and Connection set.
        "nginx" => {
            let d = dir.join("nginx");
            std::fs::create_dir_all(&d)?;
            let conf = d.join("nginx.conf");
            let p = d.to_string_lossy();
            std::fs::write(
                &conf,
                format!(
                    "worker_processes 1;\ndaemon off;\nmaster_process on;\npid {p}/nginx.pid;\n\
                     lock_file {p}/nginx.lock;\nerror_log {p}/error.log error;\n\
                     events {{ worker_connections 10000; }}\nhttp {{\n  access_log off;\n  \
                     client_body_temp_path {p}/cb;\n  proxy_temp_path {p}/pt;\n  fastcgi_temp_path {p}/ft;\n  \
                     uwsgi_temp_path {p}/ut;\n  scgi_temp_path {p}/st;\n  server {{\n    \
                     listen 127.0.0.1:{port};\n    location / {{\n      proxy_pass http://{origin};\n      \
                     proxy_http_version 1.1;\n      proxy_set_header Upgrade $http_upgrade;\n      \
                     proxy_set_header Connection \"upgrade\";\n      proxy_read_timeout 300s;\n    }}\n  }}\n}}\n"
                ),
            )?;
            let c = conf.to_string_lossy().into_owned();
            (
                "nginx",
                vec![
                    "-c".to_owned(),
                    c,
                    "-p".to_owned(),
                    p.into_owned(),
                    "-e".to_owned(),
                    "stderr".to_owned(),
                ],
            )
        }
        other => bail!("unknown proxy {other} (known: rampart, haproxy, nginx)"),
    };
    let installed = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "command -v {program} || test -x /usr/sbin/{program}"
        ))
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        return Ok(None);
    }
    let path = if std::path::Path::new(&format!("/usr/sbin/{program}")).exists() {
        format!("/usr/sbin/{program}")
    } else {
        program.to_owned()
    };
    let mut server = procs::Server::start(
        &args.server_cpus,
        &path,
        &cmd_args,
        &[],
        &dir.join(format!("{name}.log")),
    )?;
    if !procs::wait_listening(addr, Duration::from_secs(10)) {
        server.stop();
        bail!(
            "not listening (see {})",
            dir.join(format!("{name}.log")).display()
        );
    }
    Ok(Some((server, addr)))
}
