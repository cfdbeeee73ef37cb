//! `rampart-bench`: runs rampart side by side with NGINX, Varnish, HAProxy, Squid, Caddy and
//! Apache on this machine and writes a report (tables, charts, JSON) following
//! `shared/BENCHMARKING.md`: one origin, servers pinned to one CPU set and the load generator to
//! another, warm-up, interleaved rounds (A B C A B C ...), medians with min–max, server CPU µs
//! per request from /proc, a check that cached scenarios really hit, and a flag when the load
//! generator rather than the server was the ceiling.

mod cluster;
mod codecs;
mod floor;
mod h3;
mod instructions;
mod load;
mod memory;
mod origin;
mod peers;
mod procs;
mod report;
mod soak;
mod vus;
mod websocket;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand};
use serde::Serialize;

use load::{Load, LoadResult};
use peers::Peer;

#[derive(Parser, Debug)]
#[command(
    name = "rampart-bench",
    version,
    about = "rampart side by side with its peers",
    after_help = "\
Examples:
  rampart-bench                       full suite (~15 min), report in bench/results/<time>/
  rampart-bench --quick               seconds-long smoke run of every scenario
  rampart-bench --scenarios cached-hello,pass --peers rampart,nginx --rounds 5
  rampart-bench --baseline /tmp/old/rampart --peers rampart,rampart-baseline,floor
                                      before/after a change, in the same rounds"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// The built-in origin (started by the suite itself).
    Origin {
        #[arg(long)]
        listen: SocketAddr,
    },
    /// The cache's memory budget measured as process RSS through HTTP (issue 11's goal).
    Memory(memory::MemoryArgs),
    /// ARC2's k6 load shape against one URL; prints a JSON summary (used by the suite).
    Vus(vus::VusArgs),
    /// Instructions per request (valgrind's callgrind) of one or more rampart builds: a cached
    /// hit, a pass and an h2c hit each.
    Instructions(instructions::InstructionsArgs),
    /// Compression ratio and CPU per MB of each codec and level on a corpus of HTML, CSS and
    /// JS files.
    Codecs(codecs::CodecsArgs),
    /// Issue 16's WebSocket goals: RSS of many idle WebSockets through rampart, and the CPU of
    /// an echo round trip through rampart against a direct one.
    Websocket(websocket::WebsocketArgs),
    /// Issue 16's HTTP/3 goals: CPU per cached hit over HTTP/3 against HTTPS/2, rampart and
    /// Caddy side by side.
    H3(h3::H3Args),
    /// Issue 17's cost figures: what Redis adds to a local hit, a shared (Redis) hit and a
    /// miss, and that hits from exempt or refused clients make no Redis round trip.
    Cluster(cluster::ClusterArgs),
    /// Issue 30's chaos soak: mixed traffic through a real rampart with every answer checked
    /// against the origin's bytes, while it is reloaded, upgraded, its origins and Redis are
    /// killed, and slow clients hold connections; writes soak.md and soak.json.
    Soak(soak::SoakArgs),
    /// The soak's origin (started by `soak`).
    #[command(hide = true)]
    SoakOrigin(soak::origin::OriginArgs),
    /// A closed-loop HTTP/3 client (started by `h3`); prints a JSON line.
    H3Load(h3::H3LoadArgs),
    /// The WebSocket echo origin (started by `websocket`).
    WsOrigin {
        #[arg(long)]
        listen: SocketAddr,
    },
    /// The fixed-response floor server (started by the suite itself).
    Floor {
        #[arg(long)]
        listen: SocketAddr,
    },
}

#[derive(clap::Args, Debug, Clone)]
struct RunArgs {
    /// A seconds-long smoke run of every scenario (1 round, short loads).
    #[arg(long)]
    quick: bool,
    /// Scenarios to run (comma-separated): cached-hello, cached-image, compressed, compressed-plain, pass, close, https, https-close, h2, vus, burst.
    #[arg(long, value_delimiter = ',')]
    scenarios: Option<Vec<String>>,
    /// Peers to include (comma-separated names, e.g. rampart,nginx,varnish).
    #[arg(long, value_delimiter = ',')]
    peers: Option<Vec<String>>,
    /// Worker processes/threads for every server.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Measured rounds per load (interleaved across peers).
    #[arg(long)]
    rounds: Option<usize>,
    /// Seconds per timed run.
    #[arg(long)]
    seconds: Option<u64>,
    /// Report folder (default bench/results/<UTC time>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The rampart binary to measure (default: target/release/rampart next to this tool).
    #[arg(long)]
    rampart: Option<PathBuf>,
    /// A second rampart build to run beside the first (peer `rampart-baseline`, same config,
    /// same interleaved rounds): the before/after figures of a change.
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// CPUs for the servers (taskset list).
    #[arg(long, default_value = "0")]
    server_cpus: String,
    /// CPUs for the load generator (taskset list).
    #[arg(long, default_value = "1")]
    load_cpus: String,
}

/// One scenario of the suite.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: &'static str,
    pub description: &'static str,
    pub path: &'static str,
    /// Only caching peers; the origin must stay flat during measured runs.
    pub cached: bool,
    /// Over HTTP/2 cleartext (prior knowledge); only peers offering it.
    pub h2: bool,
    /// Over TLS (HTTP/1.1, `https://127.0.0.1:PORT`); only peers terminating TLS.
    pub tls: bool,
    pub loads: Vec<Load>,
    /// Seconds per timed run for this scenario.
    pub seconds: u64,
    pub rounds: usize,
    /// Each peer is restarted before each run (peak RSS then belongs to that run alone).
    pub fresh: bool,
    /// Only these peers take part (None: every applicable peer).
    pub only: Option<&'static [&'static str]>,
}

/// One measured run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub scenario: String,
    pub load: String,
    pub load_index: usize,
    pub peer: String,
    pub round: usize,
    pub result: LoadResult,
    pub server_cpu_us_per_request: f64,
    /// Server CPU time / wall time during the run (1.0 = one core fully busy).
    pub server_cpu_utilisation: f64,
    /// How busy the server CPU set was (peer + origin) during the run, 0–1: well below 1 means
    /// the load generator, not the servers, was the ceiling.
    pub server_set_utilisation: f64,
    pub peak_rss_bytes: u64,
    /// Resident memory of the tree just before the run (after the warm-up).
    #[serde(default)]
    pub rss_before_bytes: u64,
    /// Requests the origin saw for the scenario's path during the run.
    pub origin_requests: u64,
}

/// Everything the report needs.
#[derive(Debug, Serialize)]
pub struct Results {
    pub started: String,
    pub machine: String,
    pub method: String,
    pub workers: usize,
    pub server_cpus: String,
    pub load_cpus: String,
    pub quick: bool,
    pub peers: Vec<(String, String)>,
    pub skipped: Vec<String>,
    pub scenarios: Vec<Scenario>,
    pub runs: Vec<Run>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Cmd::Origin { listen }) => origin::run(listen),
        Some(Cmd::Memory(args)) => memory::run(args),
        Some(Cmd::Vus(args)) => vus::run(args),
        Some(Cmd::Instructions(args)) => instructions::run(args),
        Some(Cmd::Websocket(args)) => websocket::run(args),
        Some(Cmd::H3(args)) => h3::run(args),
        Some(Cmd::Cluster(args)) => cluster::run(args),
        Some(Cmd::H3Load(args)) => h3::load(args),
        Some(Cmd::WsOrigin { listen }) => websocket::origin(listen),
        Some(Cmd::Codecs(args)) => codecs::run(args),
        Some(Cmd::Soak(args)) => soak::run(args),
        Some(Cmd::SoakOrigin(args)) => soak::origin::run(args),
        Some(Cmd::Floor { listen }) => floor::run(listen),
        None => run(cli.run),
    }
}

fn sh(cmd: &str) -> String {
    std::process::Command::new("sh")
        .args(["-c", cmd])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn fd_limit() -> u64 {
    sh("ulimit -Hn").parse().unwrap_or(1024)
}

fn scenarios(quick: bool, seconds: Option<u64>, rounds: Option<usize>) -> Vec<Scenario> {
    let s = seconds.unwrap_or(if quick { 1 } else { 3 });
    let r = rounds.unwrap_or(if quick { 1 } else { 3 });
    let wrk = |c: u32| Load::Wrk {
        connections: c,
        close: false,
        accept_encoding: None,
    };
    // ARC2's steps, as far as this machine's open-file limit allows: a cached hit costs a proxy
    // one file per connection; 1,000 are kept for everything else.
    let steps = vus_steps(fd_limit());
    let users = |ramp_seconds: u64| -> Vec<Load> {
        if quick {
            vec![Load::Vus {
                users: 20,
                ramp_seconds: ramp_seconds.min(1),
            }]
        } else {
            steps
                .iter()
                .map(|&users| Load::Vus {
                    users,
                    ramp_seconds,
                })
                .collect()
        }
    };
    // The seeds compared rampart with NGINX; the floor places both.
    const VUS_PEERS: &[&str] = &["rampart", "rampart-baseline", "nginx", "floor"];
    let vus_seconds = seconds.unwrap_or(if quick { 2 } else { 30 });
    vec![
        Scenario {
            name: "cached-hello",
            description: "12-byte cached response, keep-alive, closed loop (wrk) at several connection counts",
            path: "/hello",
            cached: true,
            h2: false,
            tls: false,
            loads: if quick { vec![wrk(16)] } else { vec![wrk(16), wrk(64), wrk(256)] },
            seconds: s,
            rounds: r,
            fresh: false,
            only: None,
        },
        Scenario {
            name: "cached-image",
            description: "the 73 KiB JPEG, cached: ab -c 10 (new connection per request, as in the Squid/Apache comparison) and a wrk closed loop at 64 connections",
            path: "/image.jpg",
            cached: true,
            h2: false,
            tls: false,
            loads: vec![
                Load::Ab {
                    concurrency: 10,
                    requests: if quick { 100 } else { 5_000 },
                },
                wrk(64),
            ],
            seconds: s,
            rounds: r,
            fresh: false,
            only: None,
        },
        Scenario {
            name: "compressed",
            description: "a cached ~40 KB HTML page asked for as a browser does (Accept-Encoding: gzip, br), wrk at 64 connections: rampart sends the Brotli copy it stored, NGINX (gzip on) gzips each hit",
            path: "/page.html",
            cached: true,
            h2: false,
            tls: false,
            loads: vec![Load::Wrk {
                connections: 64,
                close: false,
                accept_encoding: Some("gzip, br"),
            }],
            seconds: s,
            rounds: r,
            fresh: false,
            only: Some(&["rampart", "rampart-baseline", "nginx"]),
        },
        Scenario {
            name: "compressed-plain",
            description: "the yardstick for `compressed`: a cached uncompressed body of the size of the page's Brotli copy, wrk at 64 connections",
            path: "/page-sized",
            cached: true,
            h2: false,
            tls: false,
            loads: vec![wrk(64)],
            seconds: s,
            rounds: r,
            fresh: false,
            only: Some(&["rampart", "rampart-baseline", "nginx"]),
        },
        Scenario {
            name: "pass",
            description: "no caching: every request goes to the origin (a ~2 KB rendered template, Cache-Control: no-store), keep-alive, wrk at 64 connections",
            path: "/template",
            cached: false,
            h2: false,
            tls: false,
            loads: vec![wrk(64)],
            seconds: s,
            rounds: r,
            fresh: false,
            only: None,
        },
        Scenario {
            name: "close",
            description: "a new connection per request (Connection: close), 32 connections, the cached 12-byte page: the keep-alive lesson (compare with cached-hello)",
            path: "/hello",
            cached: true,
            h2: false,
            tls: false,
            loads: vec![Load::Wrk {
                connections: 32,
                close: true,
                accept_encoding: None,
            }],
            seconds: s,
            rounds: r,
            fresh: false,
            only: None,
        },
        Scenario {
            name: "https",
            description: "the 12-byte cached page over TLS 1.3 (ECDSA P-256 certificate, keep-alive), wrk at 64 connections",
            path: "/hello",
            cached: true,
            h2: false,
            tls: true,
            loads: vec![wrk(64)],
            seconds: s,
            rounds: r,
            fresh: false,
            only: None,
        },
        Scenario {
            name: "https-close",
            description: "a new TLS 1.3 connection (full handshake, ECDSA P-256, X25519) per request, 32 connections, the cached 12-byte page: handshakes per second",
            path: "/hello",
            cached: true,
            h2: false,
            tls: true,
            loads: vec![Load::Wrk {
                connections: 32,
                close: true,
                accept_encoding: None,
            }],
            seconds: s,
            rounds: r,
            fresh: false,
            only: None,
        },
        Scenario {
            name: "h2",
            description: "cached 12-byte hits over HTTP/2 cleartext, h2load with 16 clients × 10 streams",
            path: "/hello",
            cached: true,
            h2: true,
            tls: false,
            loads: vec![Load::H2load {
                clients: 16,
                streams: 10,
                requests: if quick { 2_000 } else { 200_000 },
            }],
            seconds: s,
            rounds: r,
            fresh: false,
            only: None,
        },
        Scenario {
            name: "vus",
            description: "ARC2's published benchmark as its k6 script ran it: N virtual users, each on a keep-alive connection sending GET then sleeping 1 s; users start over a 5 s ramp, then hold for the run; cached 12 bytes; each peer restarted before each run",
            path: "/hello",
            cached: true,
            h2: false,
            tls: false,
            loads: users(5),
            seconds: vus_seconds,
            rounds: rounds.unwrap_or(1),
            fresh: true,
            only: Some(VUS_PEERS),
        },
        Scenario {
            name: "burst",
            description: "as vus, but all N users connect at once (no ramp): the arrival storm real traffic also brings",
            path: "/hello",
            cached: true,
            h2: false,
            tls: false,
            loads: users(0),
            seconds: vus_seconds,
            rounds: rounds.unwrap_or(1),
            fresh: true,
            only: Some(VUS_PEERS),
        },
    ]
}

/// 100, 1,000, 5,000, 10,000, 15,000, then the highest thousand the open-file limit allows.
fn vus_steps(fd_limit: u64) -> Vec<u32> {
    let max = (fd_limit.saturating_sub(1_000) / 1_000 * 1_000).min(20_000) as u32;
    let mut steps: Vec<u32> = [100u32, 1_000, 5_000, 10_000, 15_000]
        .into_iter()
        .filter(|n| *n <= max)
        .collect();
    if steps.last().is_some_and(|l| *l < max) {
        steps.push(max);
    }
    steps
}

fn now_utc() -> String {
    sh("date -u +%Y-%m-%dT%H-%M-%SZ")
}

fn origin_counts(origin: SocketAddr) -> Vec<(String, u64)> {
    let out = sh(&format!("curl -s --max-time 5 http://{origin}/__stats"));
    origin::parse_stats(&out)
}

fn origin_count(origin: SocketAddr, path: &str) -> u64 {
    origin_counts(origin)
        .into_iter()
        .find(|(p, _)| p == path)
        .map_or(0, |(_, n)| n)
}

struct Running {
    peer: Box<dyn Peer>,
    server: procs::Server,
    launch: peers::Launch,
    env: Vec<(String, String)>,
    log: PathBuf,
    port: u16,
    h2_port: u16,
    tls_port: u16,
}

fn copy_configs(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)?.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let is_config = [".conf", ".vcl", ".cfg", ".toml", "Caddyfile"]
            .iter()
            .any(|x| name.ends_with(x));
        if p.is_file() && is_config {
            std::fs::copy(&p, to.join(&name))?;
        }
    }
    Ok(())
}

/// The median of `v` (the upper one of an even count; 0 when empty), sorting `v` in place.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

/// [`median`] of the values of an iterator.
fn median_of(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().collect();
    median(&mut v)
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    procs::stop_all_on_signal();
    let started = now_utc();
    let root = std::env::current_dir()?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| root.join("bench/results").join(&started));
    std::fs::create_dir_all(&out)?;
    let work = std::env::temp_dir().join(format!("rampart-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let me = std::env::current_exe()?;
    let rampart = args
        .rampart
        .clone()
        .unwrap_or_else(|| me.with_file_name("rampart"));
    let mut skipped = Vec::new();

    let all_scenarios = scenarios(args.quick, args.seconds, args.rounds);
    let chosen: Vec<Scenario> = all_scenarios
        .into_iter()
        .filter(|s| {
            args.scenarios
                .as_ref()
                .is_none_or(|l| l.iter().any(|n| n == s.name))
        })
        .collect();
    if chosen.is_empty() {
        bail!(
            "no scenario selected; known: cached-hello, cached-image, compressed, compressed-plain, pass, close, https, https-close, h2, vus, burst"
        );
    }

    // Tools.
    let mut scenarios_run = Vec::new();
    for s in chosen {
        if s.loads.is_empty() {
            skipped.push(format!("scenario {}: skipped — {}", s.name, s.description));
            continue;
        }
        let missing: Vec<&str> = s
            .loads
            .iter()
            .filter(|l| !l.builtin())
            .map(Load::tool)
            .filter(|t| !load::installed(t))
            .collect();
        if let Some(t) = missing.first() {
            let hint = match *t {
                "wrk" => "apt-get install wrk",
                "ab" => "apt-get install apache2-utils",
                "h2load" => "apt-get install nghttp2-client",
                _ => "see docs/benchmarks.md",
            };
            skipped.push(format!(
                "scenario {}: skipped — {t} is not installed ({hint})",
                s.name
            ));
            continue;
        }
        scenarios_run.push(s);
    }

    // Peers.
    let mut candidates = Vec::new();
    let mut all = peers::all();
    if args.baseline.is_some() {
        all.insert(1, Box::new(peers::Rampart { baseline: true }));
    }
    for p in all {
        if args
            .peers
            .as_ref()
            .is_some_and(|l| !l.iter().any(|n| n == p.name()))
        {
            continue;
        }
        // The rampart peers run a given build; the others what is installed.
        let build = match p.name() {
            "rampart" => Some(rampart.clone()),
            "rampart-baseline" => args.baseline.clone(),
            _ => None,
        };
        let present = match &build {
            Some(b) => b.exists(),
            None if p.is_floor() => true,
            None => load::installed(p.binary()) || Path::new("/usr/sbin").join(p.binary()).exists(),
        };
        if present {
            candidates.push((p, build));
        } else if let Some(b) = build {
            bail!(
                "{}: no rampart build at {} (build it: cargo build --release)",
                p.name(),
                b.display()
            );
        } else {
            skipped.push(format!(
                "peer {}: skipped — {} is not installed ({})",
                p.name(),
                p.binary(),
                p.install_hint()
            ));
        }
    }

    // Origin.
    let (mut origin, origin_addr) =
        procs::Server::origin(&args.server_cpus, &me, &work.join("origin.log"))?;

    let tls_files = peers::TlsFiles::create(&work).context("creating the benchmark certificate")?;
    let mut running = Vec::new();
    for (p, build) in candidates {
        let dir = work.join(p.name());
        std::fs::create_dir_all(&dir)?;
        let (port, h2_port, tls_port) = (
            procs::free_port()?,
            procs::free_port()?,
            procs::free_port()?,
        );
        let setup = peers::Setup {
            dir: &dir,
            port,
            h2_port,
            origin: origin_addr,
            workers: args.workers,
            rampart: build.as_deref().unwrap_or(&rampart),
            tls_port,
            tls: &tls_files,
        };
        let launch = match p.prepare(&setup) {
            Ok(l) => l,
            Err(e) => {
                skipped.push(format!(
                    "peer {}: skipped — could not write its config: {e}",
                    p.name()
                ));
                continue;
            }
        };
        copy_configs(&dir, &out.join("configs").join(p.name()))?;
        let env = vec![
            ("HOME".to_owned(), dir.to_string_lossy().into_owned()),
            (
                "XDG_DATA_HOME".to_owned(),
                dir.to_string_lossy().into_owned(),
            ),
            (
                "XDG_CONFIG_HOME".to_owned(),
                dir.to_string_lossy().into_owned(),
            ),
            ("GOMAXPROCS".to_owned(), args.workers.to_string()),
        ];
        let mut server = procs::Server::start(
            &args.server_cpus,
            &launch.program,
            &launch.args,
            &env,
            &dir.join("stdout.log"),
        )?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        if !procs::wait_listening(addr, Duration::from_secs(20)) {
            let log = std::fs::read_to_string(dir.join("stdout.log")).unwrap_or_default();
            skipped.push(format!(
                "peer {}: skipped — it did not start listening: {}",
                p.name(),
                log.lines().last().unwrap_or("")
            ));
            server.stop();
            continue;
        }
        eprintln!(
            "started {:<14} on 127.0.0.1:{port} (h2c {h2_port}) — {}",
            p.name(),
            p.label()
        );
        running.push(Running {
            peer: p,
            server,
            launch,
            env,
            log: dir.join("stdout.log"),
            port,
            h2_port,
            tls_port,
        });
    }
    if running.is_empty() {
        origin.stop();
        bail!("no peer could be started");
    }

    // Plan (for progress).
    let plan: Vec<(usize, usize, usize)> = scenarios_run
        .iter()
        .enumerate()
        .flat_map(|(si, s)| {
            (0..s.loads.len()).flat_map(move |li| (0..s.rounds).map(move |r| (si, li, r)))
        })
        .collect();
    // Peers taking part in each scenario (fixed from here on).
    let takes_part: Vec<u64> = scenarios_run
        .iter()
        .map(|s| {
            running
                .iter()
                .filter(|r| applies(s, r.peer.as_ref()))
                .count() as u64
        })
        .collect();
    let eta_per_step = |si: usize, li: usize| {
        let s: &Scenario = &scenarios_run[si];
        let peers = takes_part[si];
        load::expected(&s.loads[li], s.seconds).as_secs() * peers + peers
    };
    let total_eta: u64 = plan.iter().map(|(si, li, _)| eta_per_step(*si, *li)).sum();
    eprintln!(
        "{} scenario(s), {} peer(s); about {} min {} s of measuring",
        scenarios_run.len(),
        running.len(),
        total_eta / 60,
        total_eta % 60
    );

    let server_cpu_count = cpu_count(&args.server_cpus);
    let started_at = Instant::now();
    let mut spent = 0u64;
    let mut runs = Vec::new();
    for (step, &(si, li, round)) in plan.iter().enumerate() {
        let s = &scenarios_run[si];
        let load = &s.loads[li];
        let desc = load.describe(s.seconds);
        let left = total_eta.saturating_sub(spent);
        for r in running.iter_mut() {
            if !applies(s, r.peer.as_ref()) {
                continue;
            }
            let url = match (s.tls, s.h2) {
                (true, _) => format!("https://127.0.0.1:{}{}", r.tls_port, s.path),
                (false, true) => format!("http://127.0.0.1:{}{}", r.h2_port, s.path),
                (false, false) => format!("http://127.0.0.1:{}{}", r.port, s.path),
            };
            if s.fresh {
                // A new process for this run alone (its peak RSS is this run's).
                r.server.stop();
                r.server = procs::Server::start(
                    &args.server_cpus,
                    &r.launch.program,
                    &r.launch.args,
                    &r.env,
                    &r.log,
                )?;
                let addr: SocketAddr = format!("127.0.0.1:{}", r.port).parse()?;
                if !procs::wait_listening(addr, Duration::from_secs(20)) {
                    eprintln!("    {} did not start again; run skipped", r.peer.name());
                    continue;
                }
            }
            if round == 0 || s.fresh {
                // Warm-up: fill the cache, open pools; not measured.
                let warm = warmup(load);
                let _ = run_load(&warm, &url, 1, &args.load_cpus, &work);
            }
            eprintln!(
                "[{}/{}] {} · {} · {} · round {}/{} · ~{}m{:02}s left",
                step + 1,
                plan.len(),
                s.name,
                desc,
                r.peer.name(),
                round + 1,
                s.rounds,
                left / 60,
                left % 60
            );
            let rss_before = r.server.rss();
            let before_origin = origin_count(origin_addr, s.path);
            let cpu0 = r.server.cpu_sample();
            let origin_cpu0 = origin.cpu_sample();
            let t0 = Instant::now();
            let result = run_load(load, &url, s.seconds, &args.load_cpus, &work);
            let wall = t0.elapsed().as_secs_f64();
            let cpu = r.server.cpu_sample().since(&cpu0);
            let origin_cpu = origin.cpu_sample().since(&origin_cpu0);
            let origin_requests = origin_count(origin_addr, s.path).saturating_sub(before_origin);
            match result {
                Some(res) => {
                    let served = res.requests.max(1) as f64;
                    runs.push(Run {
                        scenario: s.name.to_owned(),
                        load: desc.clone(),
                        load_index: li,
                        peer: r.peer.name().to_owned(),
                        round,
                        server_cpu_us_per_request: cpu * 1e6 / served,
                        server_cpu_utilisation: cpu / wall.max(1e-9),
                        server_set_utilisation: (cpu + origin_cpu)
                            / wall.max(1e-9)
                            / server_cpu_count as f64,
                        peak_rss_bytes: r.server.peak_rss(),
                        rss_before_bytes: rss_before,
                        origin_requests,
                        result: res,
                    });
                }
                None => eprintln!(
                    "    {} produced no parsable output for {}",
                    load.tool(),
                    r.peer.name()
                ),
            }
            if !r.server.alive() {
                eprintln!("    {} exited during the run", r.peer.name());
            }
        }
        spent += eta_per_step(si, li);
    }
    let elapsed = started_at.elapsed();

    let peers_list: Vec<(String, String)> = running
        .iter()
        .map(|r| (r.peer.name().to_owned(), r.peer.label()))
        .collect();
    for mut r in running {
        r.server.stop();
    }
    origin.stop();

    let results = Results {
        started,
        machine: format!(
            "{} · {} CPUs · {} · kernel {}",
            sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").trim(),
            sh("nproc"),
            sh("free -g | awk '/Mem:/ {print $2\" GiB RAM\"}'"),
            sh("uname -r")
        ),
        method: format!(
            "servers (every peer and the origin) pinned to CPU {}, load generator to CPU {}; {} worker(s) each; warm-up run before the first round; rounds interleaved across peers; medians with min–max; server CPU µs/request = on-CPU time of every thread of the peer's process tree (/proc/PID/task/*/schedstat, user+system) ÷ requests served; measured in {:.0} s",
            args.server_cpus,
            args.load_cpus,
            args.workers,
            elapsed.as_secs_f64()
        ),
        workers: args.workers,
        server_cpus: args.server_cpus.clone(),
        load_cpus: args.load_cpus.clone(),
        quick: args.quick,
        peers: peers_list,
        skipped,
        scenarios: scenarios_run,
        runs,
    };
    report::write(&out, &results).context("writing the report")?;
    let _ = std::fs::remove_dir_all(&work);
    println!("{}", report::summary(&results));
    println!("report: {}", out.join("report.md").display());
    Ok(())
}

/// Number of CPUs in a taskset list such as `0`, `0-3` or `0,2`.
fn cpu_count(list: &str) -> usize {
    list.split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => {
                b.trim()
                    .parse::<usize>()
                    .unwrap_or(0)
                    .saturating_sub(a.trim().parse().unwrap_or(0))
                    + 1
            }
            None => 1,
        })
        .sum::<usize>()
        .max(1)
}

fn applies(s: &Scenario, p: &dyn Peer) -> bool {
    (!s.cached || p.caches())
        && (!s.h2 || p.h2c())
        && (!s.tls || p.tls())
        && s.only.is_none_or(|only| only.contains(&p.name()))
        // The floor answers every request with the 12-byte page.
        && (!p.is_floor() || s.path == "/hello")
}

fn warmup(load: &Load) -> Load {
    match load {
        Load::Ab { concurrency, .. } => Load::Ab {
            concurrency: *concurrency,
            requests: 200,
        },
        Load::H2load {
            clients, streams, ..
        } => Load::H2load {
            clients: *clients,
            streams: *streams,
            requests: 1_000,
        },
        Load::Vus { .. } => Load::Wrk {
            connections: 8,
            close: false,
            accept_encoding: None,
        },
        Load::Wrk {
            connections,
            close,
            accept_encoding,
        } => Load::Wrk {
            connections: *connections,
            close: *close,
            accept_encoding: *accept_encoding,
        },
    }
}

/// Runs one load pinned to the load CPUs; `None` if the tool failed or printed nothing usable.
fn run_load(
    load: &Load,
    url: &str,
    seconds: u64,
    cpus: &str,
    scratch: &Path,
) -> Option<LoadResult> {
    let inner = load.command(url, seconds, scratch);
    let mut cmd = std::process::Command::new("taskset");
    cmd.arg("-c")
        .arg(cpus)
        .arg(inner.get_program())
        .args(inner.get_args());
    let out = cmd.output().ok()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let parsed = load.parse(&stdout, scratch);
    if parsed.is_none() {
        eprintln!(
            "    {}: {}",
            load.tool(),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    parsed
}

/// Medians per (scenario, load, peer).
pub fn summarise(runs: &[Run], scenario: &str, load_index: usize, peer: &str) -> Option<Summary> {
    let rs: Vec<&Run> = runs
        .iter()
        .filter(|r| r.scenario == scenario && r.load_index == load_index && r.peer == peer)
        .collect();
    if rs.is_empty() {
        return None;
    }
    let col = |f: &dyn Fn(&Run) -> f64| -> (f64, f64, f64) {
        let mut v: Vec<f64> = rs.iter().map(|r| f(r)).collect();
        let m = median(&mut v);
        (m, v[0], v[v.len() - 1])
    };
    Some(Summary {
        rps: col(&|r| r.result.rps),
        cpu_us: col(&|r| r.server_cpu_us_per_request),
        p50_us: col(&|r| r.result.latency_p50_us).0,
        p90_us: col(&|r| r.result.latency_p90_us).0,
        p95_us: col(&|r| r.result.latency_p95_us).0,
        p99_us: col(&|r| r.result.latency_p99_us).0,
        mean_us: col(&|r| r.result.latency_mean_us).0,
        max_us: col(&|r| r.result.latency_max_us).0,
        bytes_per_sec: col(&|r| r.result.bytes_per_sec).0,
        errors: rs.iter().map(|r| r.result.errors).sum(),
        requests: rs.iter().map(|r| r.result.requests).sum(),
        origin_requests: rs.iter().map(|r| r.origin_requests).sum(),
        utilisation: col(&|r| r.server_set_utilisation).0,
        peak_rss: rs.iter().map(|r| r.peak_rss_bytes).max().unwrap_or(0),
        rss_growth: rs
            .iter()
            .map(|r| r.peak_rss_bytes.saturating_sub(r.rss_before_bytes))
            .max()
            .unwrap_or(0),
        rounds: rs.len(),
    })
}

/// Medians (and min–max) of one peer's runs of one load.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub rps: (f64, f64, f64),
    pub cpu_us: (f64, f64, f64),
    pub p50_us: f64,
    pub p90_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
    pub max_us: f64,
    pub bytes_per_sec: f64,
    pub errors: u64,
    pub requests: u64,
    pub origin_requests: u64,
    pub utilisation: f64,
    pub peak_rss: u64,
    /// Peak RSS minus RSS before the run (largest over rounds): what the load added.
    pub rss_growth: u64,
    pub rounds: usize,
}
