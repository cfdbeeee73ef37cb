//! `rampart-bench cluster`: what sharing through Redis costs a request. A real
//! `redis-server` on loopback, the suite's origin, and rampart instances pinned to the server
//! CPUs: `plain` (no Redis), `shared-a` and `shared-b` (one Redis: shared rate limits, purges
//! and the shared cache tier), `refusing` (the same, with a limit of 1 request a second).
//!
//! Each case sends the same number of requests over keep-alive connections from a client
//! pinned to the load CPUs, and measures the client's latency, rampart's CPU time per
//! request and Redis's (from /proc), and the Redis commands per request (`INFO stats`):
//!
//! | case | instance | what each request does |
//! |---|---|---|
//! | local hit, exempt client | plain, shared-b | a hit from 127.0.0.2 (in `rate_limit_exempt`) |
//! | local hit, rate-limited client | plain, shared-b | a hit from 127.0.0.1: the shared limit's round trip |
//! | shared hit | shared-b | a key `shared-a` fetched: a local miss answered from Redis |
//! | miss | plain, shared-b | a new key: the origin (and, shared, Redis's look-up, lock and write) |
//! | refused client | refusing | a client over its limit: refused locally, no round trip |
//!
//! Rounds are interleaved (every case once per round); the report gives medians over rounds.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde::Serialize;

use crate::closed_loop::load;
use crate::procs::{self, Server};

#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    /// The rampart binary.
    #[arg(long, default_value = "target/dist/rampart")]
    pub rampart: PathBuf,
    /// The redis-server binary.
    #[arg(long, default_value = "redis-server")]
    pub redis_server: String,
    /// Requests per case and round.
    #[arg(long, default_value_t = 20_000)]
    pub requests: usize,
    /// Keep-alive connections the client spreads them over.
    #[arg(long, default_value_t = 8)]
    pub connections: usize,
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// CPUs for rampart, Redis and the origin (taskset list).
    #[arg(long, default_value = "0")]
    pub server_cpus: String,
    /// CPUs for the client.
    #[arg(long, default_value = "1")]
    pub load_cpus: String,
    /// Where the report goes.
    #[arg(long, default_value = "bench/results/cluster")]
    pub out: PathBuf,
    /// What to measure: `redis` (what sharing through Redis costs a request), `fleet` (the
    /// cache sharded over three instances), or `all`.
    #[arg(long, default_value = "all")]
    pub part: String,
}

/// One measured case in one round.
#[derive(Debug, Clone, Serialize)]
struct Sample {
    case: &'static str,
    instance: &'static str,
    round: usize,
    requests: usize,
    errors: usize,
    /// Responses whose `Cache-Status` was what the case expects.
    expected: usize,
    seconds: f64,
    p50_us: f64,
    p99_us: f64,
    rampart_cpu_us: f64,
    redis_cpu_us: f64,
    redis_commands: f64,
}

struct Instance {
    name: &'static str,
    server: Server,
    addr: SocketAddr,
}

pub fn run(args: ClusterArgs) -> anyhow::Result<()> {
    let scratch =
        std::env::temp_dir().join(format!("rampart-bench-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    std::fs::create_dir_all(&args.out)?;
    let me = std::env::current_exe()?;
    let (mut origin, origin_addr) =
        Server::origin(&args.server_cpus, &me, &scratch.join("origin.log"))?;
    let redis_port = procs::free_port()?;
    let mut redis = Server::start(
        &args.server_cpus,
        &args.redis_server,
        &[
            "--port".into(),
            redis_port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            "no".into(),
        ],
        &[],
        &scratch.join("redis.log"),
    )
    .context("redis-server (apt install redis-server)")?;
    let redis_addr = SocketAddr::from(([127, 0, 0, 1], redis_port));
    if !procs::wait_listening(redis_addr, Duration::from_secs(10)) {
        bail!("redis-server did not start");
    }
    let redis_url = format!("redis://{redis_addr}");
    if !["all", "redis", "fleet"].contains(&args.part.as_str()) {
        redis.stop();
        origin.stop();
        bail!("--part {:?}: all, redis or fleet", args.part);
    }
    crate::websocket::pin_self(&args.load_cpus);
    let mut report = String::new();
    if args.part == "all" || args.part == "redis" {
        report.push_str(&redis_part(
            &args,
            &scratch,
            origin_addr,
            &redis_url,
            redis_port,
            &redis,
        )?);
    }
    if args.part == "all" || args.part == "fleet" {
        if !report.is_empty() {
            report.push('\n');
        }
        let fleet = crate::fleet::Settings {
            rampart: args.rampart.clone(),
            server_cpus: args.server_cpus.clone(),
            load_cpus: args.load_cpus.clone(),
            requests: args.requests,
            connections: args.connections,
            rounds: args.rounds,
        };
        report.push_str(&crate::fleet::run(&fleet, &me, &redis_url, &scratch)?);
    }
    redis.stop();
    origin.stop();
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::write(args.out.join("cluster.md"), &report)?;
    println!("{report}");
    Ok(())
}

/// The first part: what sharing through Redis costs a request (see the module's notes).
fn redis_part(
    args: &ClusterArgs,
    scratch: &std::path::Path,
    origin_addr: SocketAddr,
    redis_url: &str,
    redis_port: u16,
    redis: &Server,
) -> anyhow::Result<String> {
    let mut instances = Vec::new();
    for (name, redis, limit) in [
        ("plain", false, 1_000_000),
        ("shared-a", true, 1_000_000),
        ("shared-b", true, 1_000_000),
        ("refusing", true, 1),
    ] {
        let port = procs::free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let dir = scratch.join(name);
        std::fs::create_dir_all(&dir)?;
        let redis_keys = if redis {
            format!("redis_url = \"{redis_url}\"\nredis_cache = true\n")
        } else {
            String::new()
        };
        let toml = format!(
            r#"listen = ["127.0.0.1:{port}"]
workers = 1
add_logging = false
logging_level = "error"
add_caching = true
cache_memory = "512MiB"
rate_limit_per_second = {limit}
rate_limit_burst = {limit}
rate_limit_exempt = ["127.0.0.2/32"]
{redis_keys}
[[proxy_rules]]
domain = "*"
max_age_seconds = 3600
forward_ipv4 = "{}"
forward_port_http = {}
rule_type = "Whitelist"
enable_logging = false
ignore_query_string = false
enable_sql_injection_protection = false
enable_compression = false
enable_minification = false
enable_webp_transformation = false
"#,
            origin_addr.ip(),
            origin_addr.port()
        );
        let server = Server::rampart(&args.server_cpus, &args.rampart, &toml, &dir, addr)?;
        instances.push(Instance { name, server, addr });
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(measure(args, &instances, redis_port, redis));
    for i in &mut instances {
        i.server.stop();
    }
    let samples = result?;
    std::fs::write(
        args.out.join("cluster.json"),
        serde_json::to_string_pretty(&samples)?,
    )?;
    Ok(report(args, &samples))
}

/// A case: its name, the instance, the client's source address, the path of request `i` in
/// round `r`, and the `Cache-Status` it expects.
struct Case {
    name: &'static str,
    instance: &'static str,
    from: [u8; 4],
    path: fn(usize, usize) -> String,
    expect: &'static str,
}

const EXEMPT: [u8; 4] = [127, 0, 0, 2];
const LIMITED: [u8; 4] = [127, 0, 0, 1];

fn cases() -> Vec<Case> {
    let hello = |_: usize, _: usize| "/hello".to_owned();
    vec![
        Case {
            name: "local hit, exempt client",
            instance: "plain",
            from: EXEMPT,
            path: hello,
            expect: "rampart; hit",
        },
        Case {
            name: "local hit, exempt client",
            instance: "shared-b",
            from: EXEMPT,
            path: hello,
            expect: "rampart; hit",
        },
        Case {
            name: "local hit, rate-limited client",
            instance: "plain",
            from: LIMITED,
            path: hello,
            expect: "rampart; hit",
        },
        Case {
            name: "local hit, rate-limited client",
            instance: "shared-b",
            from: LIMITED,
            path: hello,
            expect: "rampart; hit",
        },
        Case {
            name: "shared hit (Redis)",
            instance: "shared-b",
            from: EXEMPT,
            path: |r, i| format!("/hello?l2={r}-{i}"),
            expect: "rampart; hit; detail=shared",
        },
        Case {
            name: "miss",
            instance: "plain",
            from: EXEMPT,
            path: |r, i| format!("/hello?plain-miss={r}-{i}"),
            expect: "rampart; fwd=miss; stored",
        },
        Case {
            name: "miss",
            instance: "shared-b",
            from: EXEMPT,
            path: |r, i| format!("/hello?shared-miss={r}-{i}"),
            expect: "rampart; fwd=miss; stored",
        },
        Case {
            name: "refused client",
            instance: "refusing",
            from: LIMITED,
            path: hello,
            expect: "",
        },
    ]
}

async fn measure(
    args: &ClusterArgs,
    instances: &[Instance],
    redis_port: u16,
    redis: &Server,
) -> anyhow::Result<Vec<Sample>> {
    let find = |name: &str| instances.iter().find(|i| i.name == name).map(|i| i.addr);
    let (Some(a), Some(refusing)) = (find("shared-a"), find("refusing")) else {
        bail!("instances missing");
    };
    // Warm: the hit path on every instance, and every round's shared keys through shared-a.
    for i in instances {
        load(i.addr, EXEMPT, 1, 2, |_| "/hello".to_owned(), "").await?;
    }
    // The refusing instance's one admitted request goes now.
    load(refusing, LIMITED, 1, 1, |_| "/hello".to_owned(), "").await?;
    for r in 0..args.rounds {
        let s = load(
            a,
            EXEMPT,
            args.connections,
            args.requests,
            move |i| format!("/hello?l2={r}-{i}"),
            "",
        )
        .await?;
        if s.errors > 0 {
            bail!("warming shared-a: {} errors", s.errors);
        }
    }
    // The writes are in the background: wait until Redis holds them all.
    let want = (args.rounds * args.requests) as u64;
    let t = Instant::now();
    while redis_info(redis_port, "db0:keys=").unwrap_or(0) < want {
        if t.elapsed() > Duration::from_secs(30) {
            bail!("the shared keys did not all reach Redis");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut samples = Vec::new();
    for round in 0..args.rounds {
        for case in cases() {
            let Some(instance) = instances.iter().find(|i| i.name == case.instance) else {
                continue;
            };
            let (cpu0, redis0, cmds0) = (
                instance.server.cpu_sample(),
                redis.cpu_sample(),
                redis_info(redis_port, "total_commands_processed:").unwrap_or(0),
            );
            let path = case.path;
            let got = load(
                instance.addr,
                case.from,
                args.connections,
                args.requests,
                move |i| path(round, i),
                case.expect,
            )
            .await?;
            let (cpu1, redis1, cmds1) = (
                instance.server.cpu_sample(),
                redis.cpu_sample(),
                redis_info(redis_port, "total_commands_processed:").unwrap_or(0),
            );
            let n = got.requests.max(1) as f64;
            samples.push(Sample {
                case: case.name,
                instance: case.instance,
                round,
                requests: got.requests,
                errors: got.errors,
                expected: got.expected,
                seconds: got.seconds,
                p50_us: got.p50_us,
                p99_us: got.p99_us,
                rampart_cpu_us: cpu1.since(&cpu0) * 1e6 / n,
                redis_cpu_us: redis1.since(&redis0) * 1e6 / n,
                // The INFO calls themselves are two commands.
                redis_commands: cmds1.saturating_sub(cmds0).saturating_sub(1) as f64 / n,
            });
            eprintln!(
                "round {round}: {:<32} {:<9} p50 {:>7.1} µs  rampart {:>5.1} µs/req  redis {:>5.1} µs/req  {:.3} cmd/req  ({} of {} as expected)",
                case.name,
                case.instance,
                got.p50_us,
                samples.last().map_or(0.0, |s| s.rampart_cpu_us),
                samples.last().map_or(0.0, |s| s.redis_cpu_us),
                samples.last().map_or(0.0, |s| s.redis_commands),
                got.expected,
                got.requests
            );
        }
    }
    Ok(samples)
}

/// A number from Redis's `INFO`: the digits after `field` (e.g. `total_commands_processed:`).
fn redis_info(port: u16, field: &str) -> Option<u64> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "INFO"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let at = text.find(field)? + field.len();
    text[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The table: medians over rounds per (case, instance).
fn report(args: &ClusterArgs, samples: &[Sample]) -> String {
    let mut out = format!(
        "## cluster: what Redis adds to a request\n\n{} requests per case and round over {} keep-alive connections, {} interleaved rounds, medians; rampart (1 worker), Redis and the origin on CPU {}, the client on CPU {}. Server CPU from /proc (schedstat) per request.\n\n| case | instance | p50 µs | p99 µs | rampart CPU µs/req | Redis CPU µs/req | Redis commands/req | as expected |\n|---|---|---:|---:|---:|---:|---:|---:|\n",
        args.requests, args.connections, args.rounds, args.server_cpus, args.load_cpus
    );
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for s in samples {
        if seen.contains(&(s.case, s.instance)) {
            continue;
        }
        seen.push((s.case, s.instance));
        let of: Vec<&Sample> = samples
            .iter()
            .filter(|x| x.case == s.case && x.instance == s.instance)
            .collect();
        let m = |f: fn(&Sample) -> f64| crate::stats::median_of(of.iter().map(|x| f(x)));
        let expected: usize = of.iter().map(|x| x.expected).sum();
        let total: usize = of.iter().map(|x| x.requests).sum();
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {:.1} | {:.1} | {:.3} | {expected}/{total} |\n",
            s.case,
            s.instance,
            m(|x| x.p50_us),
            m(|x| x.p99_us),
            m(|x| x.rampart_cpu_us),
            m(|x| x.redis_cpu_us),
            m(|x| x.redis_commands),
        ));
    }
    out
}
