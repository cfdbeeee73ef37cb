//! `rampart-bench cluster`, its second part: the cache sharded over a fleet. Three
//! rampart instances on 127.0.0.2–4 (one worker each, pinned with Redis and the origin to the
//! server CPUs) find each other through the bench's Redis (`cache_peers_from_redis`) and shard
//! the cache; the client is pinned to the load CPUs.
//!
//! | measure | how |
//! |---|---|
//! | a peer answer's cost | instance A is asked keys another member owns and holds (`hit; detail=peer`), keys A owns itself (`hit`), and a pass to the origin and to the floor server, interleaved over rounds: A's CPU and the whole fleet's per request, the far end's (the origin's or the floor's), the fleet's context switches, and the client's latency. One keep-alive exchange's cost is read at both its ends: what a pass to the floor costs A over a hit, and what it costs the floor |
//! | a cold object | 1,000 requests for one new key, spread over the three instances at once over 150 connections: the origin's requests (`/__total`) |
//! | an instance killed under load | closed-loop requests to A and B (keys of their own, a quarter new each time) while C is killed (SIGKILL, no goodbye): failed requests; then every key stored before the kill is asked once: the share fetched again is the share of keys that moved (C's, which no other member had) |

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use crate::closed_loop::{load, load_host};
use crate::procs::{self, Server};

const KEY: &str = "rampart-bench-fleet-key-0123456789";
const API_KEY: &str = "rampart-bench-fleet-api-key";
/// Keys stored before the measured runs (each at its owner).
const KEYS: usize = 3000;

/// What the fleet part is run with (the `cluster` command's arguments).
pub struct Settings {
    pub rampart: std::path::PathBuf,
    pub server_cpus: String,
    pub load_cpus: String,
    pub requests: usize,
    pub connections: usize,
    pub rounds: usize,
}

struct Member {
    server: Server,
    addr: SocketAddr,
}

/// Runs the fleet measures and returns the report's section.
pub fn run(args: &Settings, me: &Path, redis_url: &str, scratch: &Path) -> anyhow::Result<String> {
    let (mut origin, origin_addr) =
        Server::origin(&args.server_cpus, me, &scratch.join("fleet-origin.log"))?;
    // The yardstick of one keep-alive exchange's far end: a pass to it costs the floor only
    // a read and a write.
    let (mut floor, floor_addr) =
        Server::floor(&args.server_cpus, me, &scratch.join("fleet-floor.log"))?;
    let mut members = Vec::new();
    for i in 0..3u8 {
        let ip = [127, 0, 0, 2 + i];
        let addr = free_on(ip)?;
        let dir = scratch.join(format!("fleet-{i}"));
        std::fs::create_dir_all(&dir)?;
        let toml = config(addr, origin_addr, floor_addr, redis_url);
        let server = Server::rampart(&args.server_cpus, &args.rampart, &toml, &dir, addr)?;
        members.push(Member { server, addr });
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let far = [origin.pid(), floor.pid()];
    let result = rt.block_on(measure(args, &mut members, origin_addr, far));
    for m in &mut members {
        m.server.stop();
    }
    origin.stop();
    floor.stop();
    result
}

/// A free port on `ip`.
fn free_on(ip: [u8; 4]) -> anyhow::Result<SocketAddr> {
    for _ in 0..100 {
        let port = procs::free_port()?;
        let addr = SocketAddr::from((ip, port));
        if std::net::TcpListener::bind(addr).is_ok() {
            return Ok(addr);
        }
    }
    bail!("no free port on {ip:?}")
}

fn config(addr: SocketAddr, origin: SocketAddr, floor: SocketAddr, redis_url: &str) -> String {
    format!(
        r#"listen = ["{addr}"]
workers = 1
add_logging = false
logging_level = "error"
add_caching = true
cache_memory = "256MiB"
api_key = "{API_KEY}"
rate_limit_per_second = 1000000
rate_limit_burst = 1000000
redis_url = "{redis_url}"
redis_key_prefix = "fleet:"
redis_purge = false
cache_peers_from_redis = true
cache_peer_self = "{addr}"
cache_peer_key = "{KEY}"
[[proxy_rules]]
domain = "floor.test"
cache_heuristic = "none"
forward_ipv4 = "{}"
forward_port_http = {}
rule_type = "Whitelist"
enable_logging = false
enable_sql_injection_protection = false
enable_compression = false
enable_minification = false
enable_webp_transformation = false
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
        floor.ip(),
        floor.port(),
        origin.ip(),
        origin.port()
    )
}

/// One GET on a connection of its own: the status and the response as text.
async fn get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: bench.test\r\nX-Api-Key: {API_KEY}\r\nConnection: close\r\n\r\n"
    );
    let mut buf = Vec::new();
    let x = crate::vus::exchange(&mut s, req.as_bytes(), &mut buf).await?;
    Ok((x.status, String::from_utf8_lossy(&buf).into_owned()))
}

/// How many members `addr` lists.
async fn members_listed(addr: SocketAddr) -> usize {
    match get(addr, "/_rampart/status").await {
        Ok((200, text)) => text.matches("\"address\"").count(),
        _ => 0,
    }
}

async fn until_members(addrs: &[SocketAddr], n: usize, within: Duration) -> anyhow::Result<f64> {
    let t = Instant::now();
    loop {
        let mut all = true;
        for a in addrs {
            all &= members_listed(*a).await == n;
        }
        if all {
            return Ok(t.elapsed().as_secs_f64());
        }
        if t.elapsed() > within {
            bail!("the members did not list {n} members within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The origin's requests so far.
async fn origin_total(origin: SocketAddr) -> anyhow::Result<u64> {
    let (_, text) = get(origin, "/__total").await?;
    let body = text.rsplit("\r\n\r\n").next().unwrap_or("");
    body.trim()
        .parse()
        .with_context(|| format!("origin /__total: {body:?}"))
}

fn cache_status(response: &str) -> &str {
    response
        .lines()
        .find_map(|l| {
            l.strip_prefix("cache-status: ")
                .or_else(|| l.strip_prefix("Cache-Status: "))
        })
        .unwrap_or("")
        .trim()
}

/// One measured case of one round.
struct Run {
    a_cpu: f64,
    fleet_cpu: f64,
    /// The origin's and the floor's CPU per request (a pass's far end).
    far_cpu: f64,
    /// Context switches of the fleet's processes per request.
    switches: f64,
    p50: f64,
    p99: f64,
    expected: usize,
    requests: usize,
}

/// Where the measured requests come from: a connection each of eight clients, so a peer's
/// signature is rarely one made for the same client within the second (the signature memo
/// gets no help from a load that is one client).
const CLIENTS: [[u8; 4]; 8] = [
    [127, 0, 1, 1],
    [127, 0, 1, 2],
    [127, 0, 1, 3],
    [127, 0, 1, 4],
    [127, 0, 1, 5],
    [127, 0, 1, 6],
    [127, 0, 1, 7],
    [127, 0, 1, 8],
];

/// `far`: the origin's and the floor's processes (the far end of a pass).
async fn measure(
    args: &Settings,
    members: &mut [Member],
    origin: SocketAddr,
    far: [u32; 2],
) -> anyhow::Result<String> {
    let addrs: Vec<SocketAddr> = members.iter().map(|m| m.addr).collect();
    let found = until_members(&addrs, 3, Duration::from_secs(10)).await?;
    let a = addrs[0];
    // Which keys A owns, and which another member does (each fetched once, stored at its owner).
    let (mut own, mut foreign) = (Vec::new(), Vec::new());
    for k in 0..KEYS {
        let path = format!("/hello?f={k}");
        let (status, text) = get(a, &path).await?;
        if status != 200 {
            bail!("warming {path}: {status}");
        }
        match cache_status(&text) {
            s if s.contains("detail=peer") => foreign.push(path),
            _ => own.push(path),
        }
    }
    let owned_share = own.len() as f64 / KEYS as f64;
    // A peer answer against a local hit, interleaved.
    let (mut local, mut peer, mut pass, mut to_floor) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let pass_paths = vec!["/hello-pass".to_owned()];
    let floor_paths = vec!["/hello".to_owned()];
    // Their first answers (not stored) tell A to fetch them itself from then on.
    for host in ["bench.test", "floor.test"] {
        let path = if host == "floor.test" {
            "/hello"
        } else {
            "/hello-pass"
        };
        load_host(a, host, &CLIENTS, 1, 2, move |_| path.to_owned(), "-").await?;
    }
    for round in 0..args.rounds {
        for (host, list, expect, into) in [
            ("bench.test", &own, "rampart; hit", &mut local),
            (
                "bench.test",
                &foreign,
                "rampart; hit; detail=peer",
                &mut peer,
            ),
            // A's cost of an exchange with an origin over keep-alive: what asking a peer
            // adds to a request's own handling; with the floor as the origin, what the far
            // end of the exchange costs at least.
            ("bench.test", &pass_paths, "rampart; fwd=miss", &mut pass),
            (
                "floor.test",
                &floor_paths,
                "rampart; fwd=bypass",
                &mut to_floor,
            ),
        ] {
            let before: Vec<_> = members.iter().map(|m| m.server.cpu_sample()).collect();
            let far_before = crate::procs::cpu_sample_of_pids(&far);
            let switched_before = switches(members);
            let paths = std::rc::Rc::new(list.clone());
            let got = load_host(
                a,
                host,
                &CLIENTS,
                args.connections,
                args.requests,
                move |i| paths[i % paths.len()].clone(),
                expect,
            )
            .await?;
            let used: Vec<f64> = members
                .iter()
                .zip(&before)
                .map(|(m, b)| m.server.cpu_sample().since(b))
                .collect();
            let far_used = crate::procs::cpu_sample_of_pids(&far).since(&far_before);
            let n = got.requests.max(1) as f64;
            let run = Run {
                a_cpu: used[0] * 1e6 / n,
                fleet_cpu: used.iter().sum::<f64>() * 1e6 / n,
                far_cpu: far_used * 1e6 / n,
                switches: (switches(members) - switched_before) as f64 / n,
                p50: got.p50_us,
                p99: got.p99_us,
                expected: got.expected,
                requests: got.requests,
            };
            eprintln!(
                "fleet round {round}: {expect:<28} A {:>5.1} µs/req  fleet {:>5.1} µs/req  p50 {:>6.1} µs  ({} of {} as expected)",
                run.a_cpu, run.fleet_cpu, run.p50, run.expected, run.requests
            );
            into.push(run);
        }
    }
    // A cold object asked of every member at once.
    let mut cold = Vec::new();
    for c in 0..5 {
        let before = origin_total(origin).await?;
        let path = std::rc::Rc::new(format!("/hello?cold={c}"));
        let ask = |m: SocketAddr| {
            let path = path.clone();
            load(m, [127, 0, 0, 1], 50, 334, move |_| (*path).clone(), "-")
        };
        let (r0, r1, r2) = tokio::join!(ask(addrs[0]), ask(addrs[1]), ask(addrs[2]));
        let failed = r0?.errors + r1?.errors + r2?.errors;
        cold.push((origin_total(origin).await? - before, failed));
    }
    // Killed under load: C goes while A and B are asked; then the keys stored before.
    let gone = members[2].server.pid();
    let kill_after = Duration::from_secs(2);
    let killer = async {
        tokio::time::sleep(kill_after).await;
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{gone}")])
            .status();
    };
    let requests = args.requests.max(40_000);
    let ask = |m: SocketAddr| {
        load(
            m,
            [127, 0, 0, 1],
            args.connections,
            requests,
            move |i| {
                if i % 4 == 0 {
                    format!("/hello?during={i}")
                } else {
                    // Not the keys measured afterwards: asked while their owner is down, they
                    // would be fetched and kept by whoever was asked.
                    format!("/hello?l={}", i % KEYS)
                }
            },
            // No Cache-Status is this: every answer of 400 or more counts as an error.
            "-",
        )
    };
    // Watched while the load runs: when both lists drop the killed member.
    let watch = async {
        tokio::time::sleep(kill_after).await;
        let t = Instant::now();
        until_members(&addrs[..2], 2, Duration::from_secs(15))
            .await
            .map(|_| t.elapsed().as_secs_f64())
    };
    let (_, ra, rb, left) = tokio::join!(killer, ask(addrs[0]), ask(addrs[1]), watch);
    let (ra, rb) = (ra?, rb?);
    // Every request is answered or broke (an answer with an error status is both read and
    // an error).
    let sent = ra.requests + rb.requests + ra.broken + rb.broken;
    let failed = ra.errors + rb.errors;
    let left = left?;
    let before = origin_total(origin).await?;
    let mut swept_failed = 0;
    for k in 0..KEYS {
        let path = format!("/hello?f={k}");
        let (status, _) = get(a, &path).await?;
        if status != 200 {
            swept_failed += 1;
        }
    }
    if swept_failed > 0 {
        bail!("{swept_failed} of the keys stored before the kill failed afterwards");
    }
    let moved = (origin_total(origin).await? - before) as f64 / KEYS as f64;
    Ok(report(
        args,
        found,
        owned_share,
        &local,
        &peer,
        &pass,
        &to_floor,
        &cold,
        (sent, failed, left, moved),
    ))
}

/// Context switches (voluntary and not) of every thread of the members so far.
fn switches(members: &[Member]) -> u64 {
    let mut n = 0;
    for m in members {
        for pid in crate::procs::tree(m.server.pid()) {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for task in tasks.flatten() {
                let status =
                    std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
                n += status
                    .lines()
                    .filter(|l| l.contains("ctxt_switches:"))
                    .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                    .sum::<u64>();
            }
        }
    }
    n
}

fn median(v: impl Iterator<Item = f64>) -> f64 {
    crate::stats::median_of(v)
}

#[allow(clippy::too_many_arguments)]
fn report(
    args: &Settings,
    found: f64,
    owned_share: f64,
    local: &[Run],
    peer: &[Run],
    pass: &[Run],
    to_floor: &[Run],
    cold: &[(u64, usize)],
    (sent, failed, left, moved): (usize, usize, f64, f64),
) -> String {
    let row = |name: &str, runs: &[Run]| {
        let expected: usize = runs.iter().map(|r| r.expected).sum();
        let total: usize = runs.iter().map(|r| r.requests).sum();
        format!(
            "| {name} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.2} | {expected}/{total} |\n",
            median(runs.iter().map(|r| r.p50)),
            median(runs.iter().map(|r| r.p99)),
            median(runs.iter().map(|r| r.a_cpu)),
            median(runs.iter().map(|r| r.fleet_cpu)),
            median(runs.iter().map(|r| r.far_cpu)),
            median(runs.iter().map(|r| r.switches)),
        )
    };
    let hit = median(local.iter().map(|r| r.fleet_cpu));
    let by_peer = median(peer.iter().map(|r| r.fleet_cpu));
    let hit_p50 = median(local.iter().map(|r| r.p50));
    let peer_p50 = median(peer.iter().map(|r| r.p50));
    let cold_fetches: Vec<String> = cold.iter().map(|(n, _)| n.to_string()).collect();
    let cold_failed: usize = cold.iter().map(|(_, f)| f).sum();
    let mut out = format!(
        "## fleet: the cache sharded over three instances\n\n\
Three instances (1 worker each) on 127.0.0.2–4 find each other through Redis (`cache_peers_from_redis`; all three listed each other after {found:.1} s); rampart, Redis and the origin on CPU {}, the client on CPU {}. {KEYS} keys were stored first, each at its owner (instance A owns {:.1} % of them). {} requests per case and round over {} keep-alive connections to A, from eight client addresses in turn (127.0.1.1–8: the peers' signatures are rarely remembered ones), {} interleaved rounds, medians; CPU from /proc (schedstat).\n\n\
| case (asked of A) | p50 µs | p99 µs | A's CPU µs/req | the fleet's CPU µs/req | the far end's CPU µs/req | the fleet's context switches/req | as expected |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
        args.server_cpus,
        args.load_cpus,
        owned_share * 100.0,
        args.requests,
        args.connections,
        args.rounds,
    );
    out.push_str(&row("local hit (A owns the key)", local));
    out.push_str(&row("peer hit (another member owns and holds it)", peer));
    out.push_str(&row(
        "pass (`/hello-pass`, never stored; the far end: the origin)",
        pass,
    ));
    out.push_str(&row(
        "pass to the floor (`floor.test`, never stored; the far end: the floor server)",
        to_floor,
    ));
    // One keep-alive exchange has two ends: the asking side's (what a pass costs A over a
    // hit) and the answering side's, at least what the floor spends on it (one read, one
    // write, and being woken for them).
    let pass_cpu = median(to_floor.iter().map(|r| r.a_cpu));
    let near = (pass_cpu - hit).max(0.0);
    let far = median(to_floor.iter().map(|r| r.far_cpu));
    let goal = 2.0 * hit + near + far;
    let near_only = 2.0 * hit + near;
    let verdict = |goal: f64| {
        let r = by_peer / goal;
        if by_peer <= goal {
            format!("met ({r:.2}× it)")
        } else {
            format!("not met ({r:.2}× it)")
        }
    };
    out.push_str(&format!(
        "\nA peer answer costs the fleet {by_peer:.1} µs of CPU, {:.2}× a local hit ({hit:.1} µs). The goal is two local hits and one keep-alive exchange. Counting the exchange at both its ends (A's: a pass to the floor less a hit, {near:.1} µs; the answering side's: the floor's CPU per pass, {far:.1} µs), it is {goal:.1} µs: **{}**. Counting A's end only, it is {near_only:.1} µs: {}. Its latency is {peer_p50:.0} µs against {hit_p50:.0} µs (every process shares one CPU here, so the owner's turn waits for the scheduler).\n\n",
        by_peer / hit.max(1e-9),
        verdict(goal),
        verdict(near_only),
    ));
    out.push_str(&format!(
        "**A cold object** asked 1,000 times at once, over 150 connections to the three members: origin requests per object {} ({} failed answers).\n\n",
        cold_fetches.join(", "),
        cold_failed
    ));
    out.push_str(&format!(
        "**A member killed under load** (SIGKILL, 2 s into closed-loop requests to the two others over {} connections each, over keys of their own, a quarter of them new): {sent} requests, **{failed} failed**; the killed member left both lists {left:.1} s after the kill (watched during the load). Of the {KEYS} keys stored before, {:.1} % were fetched again afterwards (the keys that moved; goal ≤ 1/3 + 5 % = 38.3 %).\n",
        args.connections,
        moved * 100.0
    ));
    out
}
