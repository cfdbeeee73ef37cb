//! `rampart-bench`: runs rampart side by side with NGINX, Varnish, HAProxy, Squid, Caddy and
//! Apache on this machine and writes a report (tables, charts, JSON) following
//! `shared/BENCHMARKING.md`: one origin, servers pinned to one CPU set and the load generator to
//! another, warm-up, interleaved rounds (A B C A B C ...), medians with min–max, server CPU µs
//! per request from /proc, a check that cached scenarios really hit, and a flag when the load
//! generator rather than the server was the ceiling.
//!
//! This file owns the command line and the helpers every part shares; the suite itself (the
//! default command) is in `suite/`, its scenarios in `scenarios.rs`, and each other subcommand
//! in its own module.

mod closed_loop;
mod cluster;
mod codecs;
mod disk;
mod fleet;
mod floor;
mod h3;
mod http1;
mod idle;
mod instructions;
mod load;
mod memory;
mod origin;
mod peers;
mod procs;
mod report;
mod scenarios;
mod soak;
mod stats;
mod suite;
mod tags;
mod vus;
mod websocket;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "rampart-bench",
    version,
    about = "rampart side by side with its peers",
    after_help = "\
Examples:
  rampart-bench                       full suite (~45 min), report in bench/results/<time>/
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
    /// The cache's memory budget measured as process RSS through HTTP.
    Memory(memory::MemoryArgs),
    /// ARC2's k6 load shape against one URL; prints a JSON summary (used by the suite).
    Vus(vus::VusArgs),
    /// Instructions per request (valgrind's callgrind) of one or more rampart builds: a cached
    /// hit, a pass and an h2c hit each.
    Instructions(instructions::InstructionsArgs),
    /// Compression ratio and CPU per MB of each codec and level on a corpus of HTML, CSS and
    /// JS files.
    Codecs(codecs::CodecsArgs),
    /// WebSocket: RSS of many idle WebSockets through rampart, and the CPU of
    /// an echo round trip through rampart against a direct one.
    Websocket(websocket::WebsocketArgs),
    /// HTTP/3: CPU per cached hit over HTTP/3 against HTTPS/2, rampart and
    /// Caddy side by side.
    H3(h3::H3Args),
    /// Idle connections: resident memory per idle HTTP/1.1 keep-alive
    /// connection, rampart against NGINX and HAProxy (10,000 connections by default).
    Idle(idle::IdleArgs),
    /// The disk tier: rampart's cache_disk against NGINX's proxy_cache_path
    /// (disk-hit with a working set 4× the memory tier, a 1 GiB object to 10 clients, restart
    /// warmth with a million objects); writes disk.md and disk.json.
    Disk(disk::DiskArgs),
    /// Purge by tag: the time to purge a tag on 100,000 objects, and the
    /// latency of the hits served meanwhile against rounds without a purge.
    Tags(tags::TagsArgs),
    /// Instances sharing through Redis: what Redis adds to a local hit, a shared (Redis) hit and a
    /// miss, and that hits from exempt or refused clients make no Redis round trip.
    Cluster(cluster::ClusterArgs),
    /// The chaos soak: mixed traffic through a real rampart with every answer checked
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
    /// Scenarios to run (comma-separated): cached-hello, cached-image, compressed, compressed-plain, pass, pass-hello, close, https, https-close, h2, h2-tls, vus, burst, disk (the disk tier, see `rampart-bench disk`; in a full run by default).
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
    /// The numbers of users the `vus` and `burst` scenarios run (comma-separated; default:
    /// 100, 1,000, 5,000, 10,000, 15,000 and the most the open-file limit allows).
    #[arg(long, value_delimiter = ',')]
    users: Option<Vec<u32>>,
    /// Report folder (default bench/results/<UTC time>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The rampart binary to measure (default: the rampart next to this tool, target/dist/rampart after `cargo build --profile dist`).
    #[arg(long)]
    rampart: Option<PathBuf>,
    /// A second rampart build to run beside the first (peer `rampart-baseline`, same config,
    /// same interleaved rounds): the before/after figures of a change.
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// A file of TOML added to the rampart peer's `[[proxy_rules]]` (not the baseline's): with
    /// `--baseline` naming the same build, what a configured feature costs, in the same rounds.
    #[arg(long)]
    rampart_rule: Option<PathBuf>,
    /// A file of TOML added to the rampart peer's global keys (not the baseline's), as
    /// `--rampart-rule` is to its rule: e.g. the `tracing_*` keys.
    #[arg(long)]
    rampart_global: Option<PathBuf>,
    /// CPUs for the servers (taskset list).
    #[arg(long, default_value = "0")]
    server_cpus: String,
    /// CPUs for the load generator (taskset list).
    #[arg(long, default_value = "1")]
    load_cpus: String,
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
        Some(Cmd::Idle(args)) => idle::run(args),
        Some(Cmd::Disk(args)) => disk::run(args),
        Some(Cmd::Tags(args)) => tags::run(args),
        Some(Cmd::H3Load(args)) => h3::load(args),
        Some(Cmd::WsOrigin { listen }) => websocket::origin(listen),
        Some(Cmd::Codecs(args)) => codecs::run(args),
        Some(Cmd::Soak(args)) => soak::run(args),
        Some(Cmd::SoakOrigin(args)) => soak::origin::run(args),
        Some(Cmd::Floor { listen }) => floor::run(listen),
        None => suite::run(cli.run),
    }
}

/// The trimmed stdout of `sh -c cmd` (empty when it could not run).
fn sh(cmd: &str) -> String {
    std::process::Command::new("sh")
        .args(["-c", cmd])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// Writes a subcommand's Markdown `report` to `out` (default
/// `bench/results/NAME-<UTC time>.md`) and prints it with where it went.
fn save_report(out: Option<PathBuf>, name: &str, report: &str) -> anyhow::Result<PathBuf> {
    let out = out
        .unwrap_or_else(|| PathBuf::from("bench/results").join(format!("{name}-{}.md", now_utc())));
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&out, report)?;
    println!("{report}\nreport: {}", out.display());
    Ok(out)
}

/// The time now in UTC, as report folders are named (`2024-05-01T12-00-00Z`).
fn now_utc() -> String {
    sh("date -u +%Y-%m-%dT%H-%M-%SZ")
}
