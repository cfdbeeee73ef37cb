//! `rampart-bench instructions BUILD...`: user-space instructions per request under valgrind's
//! callgrind, which repeat to a few instructions between runs where CPU time moves by several
//! percent. A check for a change to the hit or pass path, beside the suite's CPU µs.
//!
//! Each build runs with one worker and the suite's own rampart config (`peers::Rampart`) in
//! front of the suite's origin, under callgrind. Per request kind: warm-up requests, counters
//! zeroed, the measured requests (h2load, 16 connections), counters dumped and read.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use crate::load;
use crate::peers::{self, Peer as _};
use crate::procs;

#[derive(clap::Args, Debug)]
pub struct InstructionsArgs {
    /// rampart builds to measure, in order (e.g. target/release/rampart /tmp/before/rampart).
    #[arg(required = true)]
    builds: Vec<PathBuf>,
    /// Measured requests per request kind.
    #[arg(long, default_value_t = 20_000)]
    requests: u64,
    /// Requests before the counters are zeroed (connections, pools and the cache warm).
    #[arg(long, default_value_t = 2_000)]
    warmup: u64,
    /// Keep the callgrind files in this folder (for callgrind_annotate).
    #[arg(long)]
    keep: Option<PathBuf>,
    /// A file of TOML added to the rule of every build measured: what a configured feature
    /// costs (measure once without, once with).
    #[arg(long)]
    rule: Option<PathBuf>,
    /// A file of TOML added to the global keys of every build measured (e.g. `tracing_*`).
    #[arg(long)]
    global: Option<PathBuf>,
}

/// How a request kind is sent.
#[derive(Clone, Copy)]
enum Client {
    /// h2load over HTTP/1.1 keep-alive, 16 connections.
    H1,
    /// h2load over h2c, 16 connections.
    H2,
    /// `ab`, 16 at a time, a new connection for each request (HTTP/1.0 without keep-alive).
    Close,
}

/// What is measured: a cached hit over HTTP/1.1 keep-alive, a pass (the origin's `no-store`
/// template over a pooled connection), a cached hit over h2c, a cached hit on a new connection.
const KINDS: [(&str, &str, Client); 4] = [
    ("hit", "/hello", Client::H1),
    ("pass", "/template", Client::H1),
    ("h2-hit", "/hello", Client::H2),
    ("close", "/hello", Client::Close),
];

pub fn run(args: InstructionsArgs) -> anyhow::Result<()> {
    procs::stop_all_on_signal();
    for tool in ["valgrind", "callgrind_control", "h2load", "ab"] {
        if !load::installed(tool) {
            bail!(
                "{tool} is not installed (apt-get install valgrind nghttp2-client apache2-utils)"
            );
        }
    }
    let work = std::env::temp_dir().join(format!("rampart-instructions-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let me = std::env::current_exe()?;
    let (mut origin, origin_addr) = procs::Server::origin("0", &me, &work.join("origin.log"))?;
    let tls = peers::TlsFiles::create(&work)?;
    let mut result = Ok(());
    for (i, build) in args.builds.iter().enumerate() {
        let dir = work.join(format!("build-{i}"));
        std::fs::create_dir_all(&dir)?;
        result = measure(&args, build, &dir, origin_addr, &tls);
        if let (Some(keep), Ok(())) = (&args.keep, &result) {
            copy_dumps(&dir, &keep.join(format!("build-{i}")))?;
        }
        if result.is_err() {
            break;
        }
    }
    origin.stop();
    let _ = std::fs::remove_dir_all(&work);
    result
}

/// One build: every request kind, one line each.
fn measure(
    args: &InstructionsArgs,
    build: &Path,
    dir: &Path,
    origin: std::net::SocketAddr,
    tls: &peers::TlsFiles,
) -> anyhow::Result<()> {
    if !build.exists() {
        bail!("no rampart build at {}", build.display());
    }
    let rule = match &args.rule {
        Some(p) => {
            Some(std::fs::read_to_string(p).with_context(|| format!("--rule {}", p.display()))?)
        }
        None => None,
    };
    let global = match &args.global {
        Some(p) => {
            Some(std::fs::read_to_string(p).with_context(|| format!("--global {}", p.display()))?)
        }
        None => None,
    };
    let (port, h2_port, tls_port) = (
        procs::free_port()?,
        procs::free_port()?,
        procs::free_port()?,
    );
    let setup = peers::Setup {
        dir,
        port,
        h2_port,
        origin,
        workers: 1,
        rampart: build,
        tls_port,
        tls,
        rule_extra: rule.as_deref(),
        global_extra: global.as_deref(),
    };
    let launch = peers::Rampart { baseline: false }.prepare(&setup)?;
    let out = dir.join("callgrind.out");
    let mut valgrind_args = vec![
        "--tool=callgrind".to_owned(),
        format!("--callgrind-out-file={}", out.display()),
        launch.program,
    ];
    valgrind_args.extend(launch.args);
    let mut server =
        procs::Server::start("0-1", "valgrind", &valgrind_args, &[], &dir.join("log"))?;
    let result = (|| {
        // Under valgrind rampart starts tens of times slower.
        if !procs::wait_listening(([127, 0, 0, 1], port).into(), Duration::from_secs(120)) {
            bail!("{} did not start under valgrind", build.display());
        }
        for (n, (kind, path, client)) in KINDS.iter().enumerate() {
            let url = format!(
                "http://127.0.0.1:{}{path}",
                if matches!(client, Client::H2) {
                    h2_port
                } else {
                    port
                }
            );
            send(&url, *client, args.warmup)?;
            callgrind_control(&["-z"], server.pid())?;
            send(&url, *client, args.requests)?;
            callgrind_control(&["-d", kind], server.pid())?;
            let dump = PathBuf::from(format!("{}.{}", out.display(), n + 1));
            let total = wait_for_total(&dump)?;
            println!(
                "{:<40} {kind:<7} {:>8} instructions per request ({} requests, all 2xx)",
                build.display(),
                total / args.requests,
                args.requests
            );
        }
        Ok(())
    })();
    server.stop();
    result
}

/// `n` requests, 16 at a time; every one must be answered 2xx.
fn send(url: &str, client: Client, n: u64) -> anyhow::Result<()> {
    let h2 = match client {
        Client::H1 => false,
        Client::H2 => true,
        Client::Close => return ab(url, n),
    };
    let mut cmd = Command::new("h2load");
    if !h2 {
        cmd.arg("--h1");
    }
    let out = cmd
        .args(["-n", &n.to_string(), "-c", "16", url])
        .output()
        .context("running h2load")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let ok = status_2xx(&text);
    if ok != Some(n) {
        bail!("h2load {url}: {ok:?} of {n} requests answered 2xx:\n{text}");
    }
    Ok(())
}

/// `n` requests by `ab`, each on a new connection; every one must be answered 2xx.
fn ab(url: &str, n: u64) -> anyhow::Result<()> {
    let out = Command::new("ab")
        .args(["-q", "-n", &n.to_string(), "-c", "16", url])
        .output()
        .context("running ab")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find_map(|l| l.trim().strip_prefix(name))?;
        line.trim().parse().ok()
    };
    let complete = field("Complete requests:");
    let failed = field("Failed requests:");
    // `ab` prints the line only when some were not 2xx.
    let non_2xx = field("Non-2xx responses:").unwrap_or(0);
    if complete != Some(n) || failed != Some(0) || non_2xx != 0 {
        bail!(
            "ab {url}: {complete:?} complete, {failed:?} failed, {non_2xx} not 2xx of {n}:\n{text}"
        );
    }
    Ok(())
}

/// The 2xx count of h2load's `status codes:` line.
fn status_2xx(h2load_out: &str) -> Option<u64> {
    let line = h2load_out
        .lines()
        .find_map(|l| l.trim().strip_prefix("status codes:"))?;
    let (n, _) = line.split_once(" 2xx")?;
    n.trim().parse().ok()
}

fn callgrind_control(args: &[&str], pid: u32) -> anyhow::Result<()> {
    let out = Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .output()?;
    if !out.status.success() {
        bail!(
            "callgrind_control {args:?} {pid} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Waits for callgrind to write the dump, and reads its total instruction count.
fn wait_for_total(dump: &Path) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Some(total) = std::fs::read_to_string(dump)
            .ok()
            .and_then(|s| total_instructions(&s))
        {
            return Ok(total);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("callgrind wrote no dump at {}", dump.display())
}

/// The `totals:` line callgrind writes last in a dump (the file is complete once it is there).
fn total_instructions(dump: &str) -> Option<u64> {
    dump.lines()
        .find_map(|l| l.strip_prefix("totals:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn copy_dumps(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with("callgrind.out") {
            std::fs::copy(&path, to.join(&*name))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_h2load_and_callgrind_output() {
        let h2load = "requests: 200 total, 200 started, 200 done, 200 succeeded, 0 failed\n\
                      status codes: 200 2xx, 0 3xx, 0 4xx, 0 5xx\n";
        assert_eq!(status_2xx(h2load), Some(200));
        assert_eq!(
            status_2xx("status codes: 0 2xx, 0 3xx, 0 4xx, 200 5xx"),
            Some(0)
        );
        assert_eq!(status_2xx("no such line"), None);
        let dump = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 123\n\
                    fn=(1) main\n16 123\ntotals: 123456\n";
        assert_eq!(total_instructions(dump), Some(123_456));
        assert_eq!(total_instructions("events: Ir\nsummary: 5\n"), None);
    }
}
