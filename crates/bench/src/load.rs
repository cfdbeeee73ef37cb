//! Load generators: wrk, ab and h2load, driven as processes and their output parsed, and
//! the suite's own `vus` generator (`vus.rs`, run as `rampart-bench vus` in its own process).

use std::process::Command;
use std::time::Duration;

use serde::Serialize;

/// What one load run measured (client side).
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadResult {
    pub requests: u64,
    pub seconds: f64,
    pub rps: f64,
    pub bytes_per_sec: f64,
    pub latency_mean_us: f64,
    pub latency_p50_us: f64,
    /// Reported by the `vus` generator only (0 elsewhere).
    #[serde(default)]
    pub latency_p90_us: f64,
    #[serde(default)]
    pub latency_p95_us: f64,
    pub latency_p99_us: f64,
    pub latency_max_us: f64,
    /// Non-2xx/3xx responses, socket errors, timeouts, failed requests.
    pub errors: u64,
}

/// A load to apply.
#[derive(Debug, Clone, Serialize)]
pub enum Load {
    /// wrk closed loop: `connections` keep-alive connections for `seconds`, with
    /// `Accept-Encoding: accept_encoding` when set.
    Wrk {
        connections: u32,
        close: bool,
        accept_encoding: Option<&'static str>,
    },
    /// ab: `concurrency`, `requests` in total.
    Ab { concurrency: u32, requests: u32 },
    /// h2load, HTTP/2 prior knowledge: clients × streams.
    H2load {
        clients: u32,
        streams: u32,
        requests: u32,
    },
    /// ARC2's k6 shape (`rampart-bench vus`): `users` keep-alive connections each sending a
    /// request then sleeping 1 s, started over `ramp_seconds` (0: all at once), then held for
    /// the scenario's seconds.
    Vus { users: u32, ramp_seconds: u64 },
}

impl Load {
    pub fn tool(&self) -> &'static str {
        match self {
            Load::Wrk { .. } => "wrk",
            Load::Ab { .. } => "ab",
            Load::H2load { .. } => "h2load",
            Load::Vus { .. } => "rampart-bench vus",
        }
    }

    /// Built into this binary: nothing to install.
    pub fn builtin(&self) -> bool {
        matches!(self, Load::Vus { .. })
    }

    pub fn describe(&self, seconds: u64) -> String {
        match self {
            Load::Wrk {
                connections,
                close,
                accept_encoding,
            } => format!(
                "wrk -t1 -c{connections} -d{seconds}s{}{}",
                if *close {
                    " -H 'Connection: close'"
                } else {
                    ""
                },
                accept_encoding.map_or(String::new(), |ae| format!(" -H 'Accept-Encoding: {ae}'"))
            ),
            Load::Ab {
                concurrency,
                requests,
            } => format!("ab -c {concurrency} -n {requests}"),
            Load::H2load {
                clients,
                streams,
                requests,
            } => format!("h2load -c {clients} -m {streams} -n {requests}"),
            Load::Vus {
                users,
                ramp_seconds: 0,
            } => format!("{users} users at once, {seconds} s, 1 req/s each"),
            Load::Vus {
                users,
                ramp_seconds,
            } => format!("{users} users, {ramp_seconds} s ramp + {seconds} s, 1 req/s each"),
        }
    }

    /// The command (to be pinned by the caller).
    pub fn command(&self, url: &str, seconds: u64, scratch: &std::path::Path) -> Command {
        let mut c;
        match self {
            Load::Wrk {
                connections,
                close,
                accept_encoding,
            } => {
                c = Command::new("wrk");
                c.args([
                    "-t1",
                    &format!("-c{connections}"),
                    &format!("-d{seconds}s"),
                    "--latency",
                    "--timeout",
                    "5s",
                ]);
                if *close {
                    c.args(["-H", "Connection: close"]);
                }
                if let Some(ae) = accept_encoding {
                    c.args(["-H", &format!("Accept-Encoding: {ae}")]);
                }
                c.arg(url);
            }
            Load::Ab {
                concurrency,
                requests,
            } => {
                c = Command::new("ab");
                let csv = scratch.join("ab-percentiles.csv");
                c.args([
                    "-q",
                    "-c",
                    &concurrency.to_string(),
                    "-n",
                    &requests.to_string(),
                    "-s",
                    "10",
                    "-e",
                ]);
                c.arg(csv);
                c.arg(url);
            }
            Load::H2load {
                clients,
                streams,
                requests,
            } => {
                c = Command::new("h2load");
                c.args([
                    "-c",
                    &clients.to_string(),
                    "-m",
                    &streams.to_string(),
                    "-n",
                    &requests.to_string(),
                    "-t",
                    "1",
                    url,
                ]);
            }
            Load::Vus {
                users,
                ramp_seconds,
            } => {
                c = Command::new(
                    std::env::current_exe().unwrap_or_else(|_| "rampart-bench".into()),
                );
                c.args([
                    "vus",
                    "--url",
                    url,
                    "--users",
                    &users.to_string(),
                    "--ramp-seconds",
                    &ramp_seconds.to_string(),
                    "--hold-seconds",
                    &seconds.to_string(),
                ]);
            }
        }
        c
    }

    /// Parses the tool's output.
    pub fn parse(&self, stdout: &str, scratch: &std::path::Path) -> Option<LoadResult> {
        match self {
            Load::Wrk { .. } => parse_wrk(stdout),
            Load::Ab { .. } => {
                let csv =
                    std::fs::read_to_string(scratch.join("ab-percentiles.csv")).unwrap_or_default();
                parse_ab(stdout, &csv)
            }
            Load::H2load { .. } => parse_h2load(stdout),
            Load::Vus { .. } => parse_vus(stdout),
        }
    }
}

/// The `vus` generator's JSON line.
pub fn parse_vus(out: &str) -> Option<LoadResult> {
    let v: crate::vus::VusReport = serde_json::from_str(out.trim()).ok()?;
    Some(LoadResult {
        requests: v.requests,
        seconds: v.seconds,
        rps: v.requests as f64 / v.seconds.max(1e-9),
        bytes_per_sec: v.bytes as f64 / v.seconds.max(1e-9),
        latency_mean_us: v.mean_us,
        latency_p50_us: v.p50_us,
        latency_p90_us: v.p90_us,
        latency_p95_us: v.p95_us,
        latency_p99_us: v.p99_us,
        latency_max_us: v.max_us,
        errors: v.errors,
    })
}

/// `51.00us`, `3.48ms`, `1.2s`, `2m` → microseconds.
pub fn duration_us(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().ok()?;
    Some(match unit {
        "us" => n,
        "ms" => n * 1e3,
        "s" => n * 1e6,
        "m" => n * 60e6,
        "ns" => n / 1e3,
        _ => return None,
    })
}

/// `9.87MB` → bytes.
pub fn size_bytes(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().ok()?;
    Some(
        n * match unit {
            "" | "B" => 1.0,
            "KB" => 1024.0,
            "MB" => 1024.0 * 1024.0,
            "GB" => 1024.0 * 1024.0 * 1024.0,
            _ => return None,
        },
    )
}

pub fn parse_wrk(out: &str) -> Option<LoadResult> {
    let mut r = LoadResult::default();
    for line in out.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["Latency", avg, _sd, max, ..] => {
                r.latency_mean_us = duration_us(avg)?;
                r.latency_max_us = duration_us(max)?;
            }
            ["50%", v] => r.latency_p50_us = duration_us(v)?,
            ["99%", v] => r.latency_p99_us = duration_us(v)?,
            [n, "requests", "in", secs, ..] => {
                r.requests = n.parse().ok()?;
                r.seconds = duration_us(secs.trim_end_matches(','))? / 1e6;
            }
            ["Requests/sec:", v] => r.rps = v.parse().ok()?,
            ["Transfer/sec:", v] => r.bytes_per_sec = size_bytes(v)?,
            ["Non-2xx", "or", "3xx", "responses:", n] => r.errors += n.parse::<u64>().ok()?,
            ["Socket", "errors:", rest @ ..] => {
                r.errors += rest
                    .iter()
                    .filter_map(|t| t.trim_end_matches(',').parse::<u64>().ok())
                    .sum::<u64>();
            }
            _ => {}
        }
    }
    (r.requests > 0 || r.rps > 0.0).then_some(r)
}

pub fn parse_ab(out: &str, csv: &str) -> Option<LoadResult> {
    let mut r = LoadResult::default();
    let mut failed = 0;
    for line in out.lines() {
        let (k, v) = match line.split_once(':') {
            Some(kv) => kv,
            None => continue,
        };
        let first = v.split_whitespace().next().unwrap_or("");
        match k.trim() {
            "Complete requests" => r.requests = first.parse().ok()?,
            "Failed requests" => failed = first.parse().ok()?,
            "Non-2xx responses" => r.errors += first.parse::<u64>().ok()?,
            "Time taken for tests" => r.seconds = first.parse().ok()?,
            "Requests per second" => r.rps = first.parse().ok()?,
            "Transfer rate" => r.bytes_per_sec = first.parse::<f64>().ok()? * 1024.0,
            "Time per request" if v.contains("(mean)") && !v.contains("across") => {
                r.latency_mean_us = first.parse::<f64>().ok()? * 1e3
            }
            _ => {}
        }
    }
    r.errors += failed;
    // -e CSV: "Percentage served,Time in ms" then "0,1.2" ... "100,5.3".
    for line in csv.lines().skip(1) {
        if let Some((p, ms)) = line.split_once(',') {
            let ms: f64 = ms.trim().parse().unwrap_or(0.0);
            match p.trim() {
                "50" => r.latency_p50_us = ms * 1e3,
                "99" => r.latency_p99_us = ms * 1e3,
                "100" => r.latency_max_us = ms * 1e3,
                _ => {}
            }
        }
    }
    (r.requests > 0).then_some(r)
}

pub fn parse_h2load(out: &str) -> Option<LoadResult> {
    let mut r = LoadResult::default();
    for line in out.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("finished in ") {
            // finished in 12.34ms, 8103.73 req/s, 1.23MB/s
            let parts: Vec<&str> = rest.split(',').map(str::trim).collect();
            r.seconds = duration_us(parts.first()?)? / 1e6;
            r.rps = parts.get(1)?.split_whitespace().next()?.parse().ok()?;
            r.bytes_per_sec = size_bytes(parts.get(2)?.trim_end_matches("/s"))?;
        } else if let Some(rest) = line.strip_prefix("requests: ") {
            for item in rest.split(',') {
                let w: Vec<&str> = item.split_whitespace().collect();
                match w.as_slice() {
                    [n, "succeeded"] => r.requests = n.parse().ok()?,
                    [n, "failed"] | [n, "timeout"] => r.errors += n.parse::<u64>().ok()?,
                    _ => {}
                }
            }
        } else if let Some(rest) = line.strip_prefix("time for request:") {
            let w: Vec<&str> = rest.split_whitespace().collect();
            r.latency_max_us = duration_us(w.get(1)?)?;
            r.latency_mean_us = duration_us(w.get(2)?)?;
        }
    }
    (r.requests > 0).then_some(r)
}

/// Whether a tool is installed.
pub fn installed(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool} >/dev/null 2>&1")])
        .status()
        .is_ok_and(|s| s.success())
}

/// The wall time a load will take (for progress estimates).
pub fn expected(load: &Load, seconds: u64) -> Duration {
    match load {
        Load::Ab { .. } | Load::H2load { .. } => Duration::from_secs(seconds.min(10)),
        Load::Vus { ramp_seconds, .. } => Duration::from_secs(seconds + ramp_seconds + 1),
        _ => Duration::from_secs(seconds),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRK: &str = "Running 1s test @ http://127.0.0.1:18971/
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   205.58us  599.25us   5.59ms   93.52%
    Req/Sec    50.15k     8.62k   59.89k    45.45%
  Latency Distribution
     50%   51.00us
     75%   62.00us
     90%  229.00us
     99%    3.48ms
  54786 requests in 1.10s, 9.87MB read
  Non-2xx or 3xx responses: 3
  Socket errors: connect 0, read 2, write 0, timeout 1
Requests/sec:  49805.64
Transfer/sec:      8.98MB
";

    #[test]
    fn wrk_output() {
        let r = parse_wrk(WRK).expect("parsed");
        assert_eq!(r.requests, 54786);
        assert!((r.seconds - 1.10).abs() < 1e-9);
        assert!((r.rps - 49805.64).abs() < 1e-6);
        assert!((r.latency_p50_us - 51.0).abs() < 1e-9);
        assert!((r.latency_p99_us - 3480.0).abs() < 1e-9);
        assert!((r.latency_max_us - 5590.0).abs() < 1e-9);
        assert!((r.latency_mean_us - 205.58).abs() < 1e-9);
        assert_eq!(r.errors, 6);
        assert!((r.bytes_per_sec - 8.98 * 1024.0 * 1024.0).abs() < 1.0);
    }

    #[test]
    fn ab_output() {
        let out = "Complete requests:      200\nFailed requests:        1\nTime taken for tests:   0.019 seconds\n\
                   Requests per second:    10804.97 [#/sec] (mean)\nTime per request:       0.185 [ms] (mean)\n\
                   Time per request:       0.093 [ms] (mean, across all concurrent requests)\n\
                   Transfer rate:          1941.52 [Kbytes/sec] received\n";
        let csv = "Percentage served,Time in ms\n0,0.1\n50,0.2\n99,1.5\n100,2.25\n";
        let r = parse_ab(out, csv).expect("parsed");
        assert_eq!((r.requests, r.errors), (200, 1));
        assert!((r.latency_mean_us - 185.0).abs() < 1e-6);
        assert!((r.latency_p99_us - 1500.0).abs() < 1e-6);
        assert!((r.latency_max_us - 2250.0).abs() < 1e-6);
    }

    #[test]
    fn h2load_output() {
        let out = "finished in 12.34ms, 8103.73 req/s, 1.23MB/s\n\
                   requests: 100 total, 100 started, 100 done, 99 succeeded, 1 failed, 0 errored, 0 timeout\n\
                   time for request:      107us      2.05ms       450us       203us    80.00%\n";
        let r = parse_h2load(out).expect("parsed");
        assert_eq!((r.requests, r.errors), (99, 1));
        assert!((r.rps - 8103.73).abs() < 1e-6);
        assert!((r.latency_max_us - 2050.0).abs() < 1e-6);
        assert!((r.latency_mean_us - 450.0).abs() < 1e-6);
    }
}
