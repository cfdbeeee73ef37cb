//! The default command, the whole suite: it chooses the scenarios whose load tools are installed
//! and the peers present on this machine, starts them beside the origin ([`servers`]), measures
//! every load in interleaved rounds ([`measure`]) and writes the report from the [`results`].

mod measure;
pub mod results;
mod servers;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use crate::load::{self, Load};
use crate::peers::{self, Peer};
use crate::scenarios::{self, Scenario};
use crate::{procs, report, RunArgs};

use results::Results;

use measure::Plan;
use servers::{Candidate, Servers};

/// Where one run of the suite keeps its files, and the rampart build it measures.
struct Bench<'a> {
    args: &'a RunArgs,
    /// The report folder.
    out: PathBuf,
    /// Scratch space (the peers' directories, the load tools' files), removed at the end.
    work: PathBuf,
    /// This binary, which is also the origin and the floor.
    me: PathBuf,
    /// The rampart build under test.
    rampart: PathBuf,
    /// `--rampart-rule`: TOML added to the rampart peer's rule.
    rule_extra: Option<String>,
    global_extra: Option<String>,
}

impl<'a> Bench<'a> {
    /// Creates the report folder (default `bench/results/<started>`) and the scratch space.
    fn new(args: &'a RunArgs, started: &str) -> anyhow::Result<Bench<'a>> {
        let root = std::env::current_dir()?;
        let out = args
            .out
            .clone()
            .unwrap_or_else(|| root.join("bench/results").join(started));
        std::fs::create_dir_all(&out)?;
        let work = std::env::temp_dir().join(format!("rampart-bench-{}", std::process::id()));
        std::fs::create_dir_all(&work)?;
        let me = std::env::current_exe()?;
        let rampart = args
            .rampart
            .clone()
            .unwrap_or_else(|| me.with_file_name("rampart"));
        let rule_extra = match &args.rampart_rule {
            Some(p) => Some(
                std::fs::read_to_string(p)
                    .map_err(|e| anyhow::anyhow!("--rampart-rule {}: {e}", p.display()))?,
            ),
            None => None,
        };
        let global_extra = match &args.rampart_global {
            Some(p) => Some(
                std::fs::read_to_string(p)
                    .map_err(|e| anyhow::anyhow!("--rampart-global {}: {e}", p.display()))?,
            ),
            None => None,
        };
        Ok(Bench {
            args,
            out,
            work,
            me,
            rampart,
            rule_extra,
            global_extra,
        })
    }
}

/// Runs the suite and writes its report (`report.md`, `results.json`, charts, configs).
pub fn run(mut args: RunArgs) -> anyhow::Result<()> {
    procs::stop_all_on_signal();
    // The disk tier's scenarios (`rampart-bench disk`) run after the others: in a full run, or
    // when `--scenarios` names `disk`.
    let disk = match &mut args.scenarios {
        None => !args.quick,
        Some(list) => {
            let named = list.iter().any(|s| s == "disk");
            list.retain(|s| s != "disk");
            named
        }
    };
    let started = crate::now_utc();
    let bench = Bench::new(&args, &started)?;
    if disk && args.scenarios.as_ref().is_some_and(Vec::is_empty) {
        return run_disk(&bench);
    }
    let mut skipped = Vec::new();
    let scenarios = choose_scenarios(&args, &mut skipped)?;
    let candidates = choose_peers(&bench, &mut skipped)?;
    let mut servers = Servers::start(&bench, candidates, &mut skipped)?;

    let plan = Plan::new(&scenarios, &servers.running);
    plan.announce(servers.running.len());
    let started_at = Instant::now();
    let runs = plan.measure(&bench, &mut servers)?;
    let elapsed = started_at.elapsed();
    let peers = servers.stop();

    let results = Results {
        started,
        machine: machine(),
        method: method(&args, elapsed),
        workers: args.workers,
        server_cpus: args.server_cpus.clone(),
        load_cpus: args.load_cpus.clone(),
        quick: args.quick,
        peers,
        skipped,
        scenarios,
        runs,
    };
    report::write(&bench.out, &results).context("writing the report")?;
    let _ = std::fs::remove_dir_all(&bench.work);
    println!("{}", report::summary(&results));
    println!("report: {}", bench.out.join("report.md").display());
    if disk {
        run_disk(&bench)?;
    }
    Ok(())
}

/// The disk tier's scenarios with their defaults, writing `disk.md` beside the report.
fn run_disk(bench: &Bench<'_>) -> anyhow::Result<()> {
    use clap::Parser as _;
    #[derive(clap::Parser)]
    struct Defaults {
        #[command(flatten)]
        disk: crate::disk::DiskArgs,
    }
    let mut d = Defaults::parse_from(["disk"]).disk;
    d.out = Some(bench.out.clone());
    d.rampart = Some(bench.rampart.clone());
    d.server_cpus = bench.args.server_cpus.clone();
    d.load_cpus = bench.args.load_cpus.clone();
    crate::disk::run(d)
}

/// The scenarios `--scenarios` names (all by default), less those whose load tool is not
/// installed (noted in `skipped`).
fn choose_scenarios(args: &RunArgs, skipped: &mut Vec<String>) -> anyhow::Result<Vec<Scenario>> {
    let chosen: Vec<Scenario> =
        scenarios::all(args.quick, args.seconds, args.rounds, args.users.as_deref())
            .into_iter()
            .filter(|s| {
                args.scenarios
                    .as_ref()
                    .is_none_or(|l| l.iter().any(|n| n == s.name))
            })
            .collect();
    if chosen.is_empty() {
        bail!("no scenario selected; known: {}", scenarios::NAMES);
    }
    let mut runnable = Vec::new();
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
        runnable.push(s);
    }
    Ok(runnable)
}

/// The peers `--peers` names (all by default, `rampart-baseline` with `--baseline`) that are
/// present here; a missing rampart build is an error, a missing program is noted in `skipped`.
fn choose_peers(bench: &Bench<'_>, skipped: &mut Vec<String>) -> anyhow::Result<Vec<Candidate>> {
    let args = bench.args;
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
            "rampart" => Some(bench.rampart.clone()),
            "rampart-baseline" => args.baseline.clone(),
            _ => None,
        };
        let present = match &build {
            Some(b) => b.exists(),
            None if p.is_floor() => true,
            None => load::installed(p.binary()) || Path::new("/usr/sbin").join(p.binary()).exists(),
        };
        if present {
            candidates.push(Candidate { peer: p, build });
        } else if let Some(b) = build {
            bail!(
                "{}: no rampart build at {} (build it: cargo build --profile dist)",
                p.name(),
                b.display()
            );
        } else {
            skipped.push(missing(p.as_ref()));
        }
    }
    Ok(candidates)
}

/// What the report says of a peer whose program is not installed.
fn missing(p: &dyn Peer) -> String {
    format!(
        "peer {}: skipped — {} is not installed ({})",
        p.name(),
        p.binary(),
        p.install_hint()
    )
}

/// This machine in one line: CPU model, CPUs, memory, kernel.
fn machine() -> String {
    let sh = crate::sh;
    format!(
        "{} · {} CPUs · {} · kernel {}",
        sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").trim(),
        sh("nproc"),
        sh("free -g | awk '/Mem:/ {print $2\" GiB RAM\"}'"),
        sh("uname -r")
    )
}

/// How the figures were taken, as the report states it.
fn method(args: &RunArgs, elapsed: Duration) -> String {
    format!(
        "servers (every peer and the origin) pinned to CPU {}, load generator to CPU {}; {} worker(s) each; warm-up run before the first round; rounds interleaved across peers; medians with min–max; server CPU µs/request = on-CPU time of every thread of the peer's process tree (/proc/PID/task/*/schedstat, user+system) ÷ requests served; measured in {:.0} s",
        args.server_cpus,
        args.load_cpus,
        args.workers,
        elapsed.as_secs_f64()
    )
}
