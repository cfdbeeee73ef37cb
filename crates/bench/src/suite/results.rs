//! What a run of the suite produced: each measured run, everything the report needs, and the
//! medians (with min–max) of one peer's rounds of one load.

use serde::Serialize;

use crate::load::LoadResult;
use crate::scenarios::Scenario;
use crate::stats::median;

/// One measured run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub scenario: String,
    pub load: String,
    pub load_index: usize,
    pub peer: String,
    /// The peer has no cache and answered the cached scenario's `/hello` from a fixed file.
    pub fixed_file: bool,
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
        fixed_file: rs.iter().any(|r| r.fixed_file),
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
    /// Answered from a fixed file, not a cache (a peer without one in a cached scenario).
    pub fixed_file: bool,
    pub rounds: usize,
}
