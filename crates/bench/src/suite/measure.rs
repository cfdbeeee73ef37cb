//! The measuring: every (scenario, load, round) in turn, each applicable peer under it one
//! after the other (so rounds interleave across peers), a warm-up before a peer's first round,
//! the load generator pinned to its own CPUs, and per run the server CPU time, RSS and the
//! requests that reached the origin.

use std::path::Path;
use std::time::Instant;

use super::results::Run;
use super::servers::{Origin, Running, Servers};
use super::Bench;
use crate::load::{self, Load, LoadResult};
use crate::peers::Peer;
use crate::scenarios::Scenario;

/// The order of the runs and the time they should take (for progress).
pub struct Plan<'a> {
    scenarios: &'a [Scenario],
    /// (scenario, load, round) indices, in the order they run.
    steps: Vec<(usize, usize, usize)>,
    /// Peers taking part in each scenario (fixed from the start).
    takes_part: Vec<u64>,
    /// Expected seconds of measuring in all.
    total_eta: u64,
}

/// One load of one scenario in one round, as each peer in turn runs it.
struct Step<'a> {
    scenario: &'a Scenario,
    load_index: usize,
    load: &'a Load,
    round: usize,
    /// The load as the report names it.
    desc: String,
}

impl<'a> Plan<'a> {
    pub fn new(scenarios: &'a [Scenario], running: &[Running]) -> Plan<'a> {
        let steps: Vec<(usize, usize, usize)> = scenarios
            .iter()
            .enumerate()
            .flat_map(|(si, s)| {
                (0..s.loads.len()).flat_map(move |li| (0..s.rounds).map(move |r| (si, li, r)))
            })
            .collect();
        let takes_part: Vec<u64> = scenarios
            .iter()
            .map(|s| {
                running
                    .iter()
                    .filter(|r| applies(s, r.peer.as_ref()))
                    .count() as u64
            })
            .collect();
        let mut plan = Plan {
            scenarios,
            steps,
            takes_part,
            total_eta: 0,
        };
        plan.total_eta = plan
            .steps
            .iter()
            .map(|(si, li, _)| plan.eta_per_step(*si, *li))
            .sum();
        plan
    }

    /// Expected seconds of one step: the load's length for each peer, plus a second each.
    fn eta_per_step(&self, si: usize, li: usize) -> u64 {
        let s = &self.scenarios[si];
        let peers = self.takes_part[si];
        load::expected(&s.loads[li], s.seconds).as_secs() * peers + peers
    }

    /// Says how much there is to measure.
    pub fn announce(&self, peers: usize) {
        eprintln!(
            "{} scenario(s), {} peer(s); about {} min {} s of measuring",
            self.scenarios.len(),
            peers,
            self.total_eta / 60,
            self.total_eta % 60
        );
    }

    /// Runs every step on every peer it applies to; returns the runs that produced figures.
    pub fn measure(&self, bench: &Bench<'_>, servers: &mut Servers) -> anyhow::Result<Vec<Run>> {
        let args = bench.args;
        let server_cpu_count = cpu_count(&args.server_cpus);
        let mut spent = 0u64;
        let mut runs = Vec::new();
        for (i, &(si, li, round)) in self.steps.iter().enumerate() {
            let scenario = &self.scenarios[si];
            let load = &scenario.loads[li];
            let step = Step {
                scenario,
                load_index: li,
                load,
                round,
                desc: load.describe(scenario.seconds),
            };
            let left = self.total_eta.saturating_sub(spent);
            for r in servers.running.iter_mut() {
                if !applies(scenario, r.peer.as_ref()) {
                    continue;
                }
                let url = r.url(scenario);
                if scenario.fresh && !r.restart(&args.server_cpus)? {
                    continue;
                }
                if round == 0 || scenario.fresh {
                    // Warm-up: fill the cache, open pools; not measured.
                    let warm = warmup(load);
                    let _ = run_load(&warm, &url, 1, &args.load_cpus, &bench.work);
                }
                eprintln!(
                    "[{}/{}] {} · {} · {} · round {}/{} · ~{}m{:02}s left",
                    i + 1,
                    self.steps.len(),
                    scenario.name,
                    step.desc,
                    r.peer.name(),
                    round + 1,
                    scenario.rounds,
                    left / 60,
                    left % 60
                );
                let (result, taken) = Taken::measure(bench, &servers.origin, r, &step, &url);
                match result {
                    Some(res) => runs.push(taken.into_run(r, &step, res, server_cpu_count)),
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
            spent += self.eta_per_step(si, li);
        }
        Ok(runs)
    }
}

/// What the servers' side of one peer's run measured, before it becomes a [`Run`].
struct Taken {
    wall: f64,
    /// CPU seconds of the peer and of the origin.
    cpu: f64,
    origin_cpu: f64,
    rss_before: u64,
    origin_requests: u64,
}

impl Taken {
    /// Runs `step`'s load against `url` and samples the servers around it: what the load
    /// generator reported (`None`: nothing usable) and what the servers did.
    fn measure(
        bench: &Bench<'_>,
        origin: &Origin,
        r: &Running,
        step: &Step<'_>,
        url: &str,
    ) -> (Option<LoadResult>, Taken) {
        let s = step.scenario;
        let rss_before = r.server.rss();
        let before_origin = origin.count(s.path);
        let cpu0 = r.server.cpu_sample();
        let origin_cpu0 = origin.server.cpu_sample();
        let t0 = Instant::now();
        let result = run_load(
            step.load,
            url,
            s.seconds,
            &bench.args.load_cpus,
            &bench.work,
        );
        let wall = t0.elapsed().as_secs_f64();
        let cpu = r.server.cpu_sample().since(&cpu0);
        let origin_cpu = origin.server.cpu_sample().since(&origin_cpu0);
        let origin_requests = origin.count(s.path).saturating_sub(before_origin);
        let taken = Taken {
            wall,
            cpu,
            origin_cpu,
            rss_before,
            origin_requests,
        };
        (result, taken)
    }

    fn into_run(self, r: &Running, step: &Step<'_>, res: LoadResult, server_cpus: usize) -> Run {
        let served = res.requests.max(1) as f64;
        Run {
            scenario: step.scenario.name.to_owned(),
            load: step.desc.clone(),
            load_index: step.load_index,
            peer: r.peer.name().to_owned(),
            fixed_file: fixed_file(step.scenario, r.peer.as_ref()),
            round: step.round,
            server_cpu_us_per_request: self.cpu * 1e6 / served,
            server_cpu_utilisation: self.cpu / self.wall.max(1e-9),
            server_set_utilisation: (self.cpu + self.origin_cpu)
                / self.wall.max(1e-9)
                / server_cpus as f64,
            peak_rss_bytes: r.server.peak_rss(),
            rss_before_bytes: self.rss_before,
            origin_requests: self.origin_requests,
            result: res,
        }
    }
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

/// Whether peer `p` takes part in scenario `s`.
fn applies(s: &Scenario, p: &dyn Peer) -> bool {
    (!s.cached || p.caches() || fixed_file(s, p))
        // HTTP/2 over TLS is offered by every peer that terminates TLS.
        && (!s.h2 || s.tls || p.h2c())
        && (!s.tls || p.tls())
        && s.only.is_none_or(|only| only.contains(&p.name()))
        // The floor answers every request with the 12-byte page.
        && (!p.is_floor() || s.path == "/hello")
}

/// Whether `p` answers cached scenario `s` from a fixed file rather than a cache.
fn fixed_file(s: &Scenario, p: &dyn Peer) -> bool {
    s.cached && s.fixed && s.path == "/hello" && !p.caches() && p.fixed_hello()
}

/// The short, unmeasured run before a peer's first round of `load`.
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
