//! `rampart-bench soak`: the chaos soak. A real rampart (the binary given, started
//! as a user would, HTTP, HTTPS and HTTP/3 on ports the kernel chose) in front of two origins
//! (`soak-origin` processes, both in the rule: `forward_*` and `upstreams`), a WebSocket echo
//! origin and, when `redis-server` is installed, a Redis shared by rate limits, purges and the
//! cache tier. Several clients send mixed traffic for `--duration` seconds — hits and misses
//! of objects from 1 byte to 5 MiB, passes, POSTs, ranges, over HTTP/1.1 keep-alive, HTTP/2
//! cleartext, HTTP/3, a new TLS connection per request, and WebSocket echoes — and every answer
//! is compared with the bytes the origin sent ([`traffic::verify`]), while the fault schedule
//! ([`faults`]) reloads, upgrades the binary, kills origins and Redis, an origin path cuts its
//! answers mid-body, and slow readers and slowloris clients hold connections ([`attackers`]).
//!
//! The report ([`report`]; soak.md, soak.json, and rampart's stderr as rampart-stderr.log) counts requests sent, answered and failed (by cause, each failure
//! explained by a fault, by a known rampart defect, or by nothing), wrong bodies, RSS and open
//! descriptors of the serving process each second, latency percentiles per window, and the
//! faults injected. The exit status is non-zero on any wrong body, any failure no fault
//! explains (known defects included, unless `--tolerate-known-defects`), a fault that did not
//! go as planned or never happened, RSS over the bound, descriptors that kept growing, a
//! slowloris connection held past the header timeout, or a panic in rampart's stderr.

mod attackers;
mod body;
mod clients;
mod faults;
mod h3_client;
pub mod origin;
mod rampart;
mod report;
mod servers;
mod tally;
mod tls_client;
mod traffic;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use faults::{FaultEvent, FaultLog, Sample, Schedule, Targets};
use rampart::Rampart;
use servers::{certificate, start_rampart, Backends};

#[derive(clap::Args, Debug, Clone)]
pub struct SoakArgs {
    /// Seconds of traffic.
    #[arg(long, default_value_t = 60)]
    pub duration: u64,
    /// Report folder: soak.md and soak.json (default bench/results/soak-<UTC time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The rampart binary (default: `rampart` next to this tool).
    #[arg(long)]
    pub rampart: Option<PathBuf>,
    /// Request clients; each speaks one protocol, in turn HTTP/1.1 keep-alive, HTTP/2
    /// cleartext, HTTP/3 and a new TLS connection per request.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// The request clients' protocols, given out in turn: h1 (HTTP/1.1 keep-alive), h2c
    /// (HTTP/2 cleartext), h3 (HTTP/3), tls (a new TLS connection per request).
    #[arg(long, value_delimiter = ',', default_value = "h1,h2c,h3,tls")]
    pub protocols: Vec<String>,
    /// WebSocket echo clients.
    #[arg(long, default_value_t = 2)]
    pub ws_clients: usize,
    /// Clients that ask for large objects and read them slowly or not at all.
    #[arg(long, default_value_t = 4)]
    pub slow_readers: usize,
    /// How long a slow reader holds its connection (seconds).
    #[arg(long, default_value_t = 30)]
    pub slow_reader_hold: u64,
    /// Clients that send a request head one byte every 2 s.
    #[arg(long, default_value_t = 8)]
    pub slowloris: usize,
    /// Distinct cacheable objects (one in 25 is 1–5 MiB).
    #[arg(long, default_value_t = 300)]
    pub objects: u64,
    /// rampart's `cache_memory` (bytes, or with KiB/MiB/GiB).
    #[arg(long, default_value = "64MiB")]
    pub cache_memory: String,
    /// RSS bound of the serving process in MiB (default: cache_memory × 1.1 + 40 MiB + the
    /// process's own RSS before any traffic).
    #[arg(long)]
    pub max_rss_mib: Option<u64>,
    /// Seconds between reloads (SIGHUP); 0: none. Default 5.
    #[arg(long)]
    pub reload_every: Option<u64>,
    /// Seconds between binary upgrades (SIGUSR2); 0: none. Default 60, 20 for runs under 5 min.
    #[arg(long)]
    pub upgrade_every: Option<u64>,
    /// Seconds between origin kills; 0: none. Default 60, 15 for runs under 5 min.
    #[arg(long)]
    pub origin_kill_every: Option<u64>,
    /// Seconds an origin stays down. Default 5, 3 for runs under 5 min.
    #[arg(long)]
    pub origin_down: Option<u64>,
    /// Seconds between Redis kills; 0: none. Default 90, 20 for runs under 5 min.
    #[arg(long)]
    pub redis_kill_every: Option<u64>,
    /// Seconds Redis stays down. Default 5, 3 for runs under 5 min.
    #[arg(long)]
    pub redis_down: Option<u64>,
    /// Run without Redis even when redis-server is installed.
    #[arg(long)]
    pub no_redis: bool,
    /// With Redis, leave the shared cache tier (`redis_cache`) off: rate limits and purges
    /// only.
    #[arg(long)]
    pub no_redis_cache: bool,
    /// Pause of each client between two requests (milliseconds).
    #[arg(long, default_value_t = 2)]
    pub think_ms: u64,
    /// Failures that a known rampart defect causes (see `KNOWN_DEFECTS` in report.rs) are
    /// listed apart and do not fail the run. For CI while the defects wait for their fix;
    /// a soak without it holds rampart to everything its documentation promises.
    #[arg(long)]
    pub tolerate_known_defects: bool,
    /// The content seed (default: from the clock; the report names it).
    #[arg(long)]
    pub seed: Option<u64>,
}

/// rampart's `client_header_timeout_seconds` in the soak (slowloris clients must be closed
/// within it).
const HEADER_TIMEOUT_S: u64 = 10;
/// rampart's `shutdown_timeout_seconds`: how long an old process drains after an upgrade.
const SHUTDOWN_TIMEOUT_S: u64 = 10;

/// `64MiB`, `512KiB`, `1GiB` or bytes.
fn parse_size(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let (num, mult) = [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        .iter()
        .find_map(|(u, m)| s.strip_suffix(u).map(|n| (n, *m)))
        .unwrap_or((s, 1));
    Ok(num.trim().parse::<u64>().context("--cache-memory")? * mult)
}

/// TLS client configurations trusting `cert`: HTTP/1.1 over TLS, and QUIC (ALPN `h3`).
fn client_tls(
    cert: &std::path::Path,
) -> anyhow::Result<(Arc<rustls::ClientConfig>, quinn::ClientConfig)> {
    use rustls::pki_types::{pem::PemObject as _, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(cert)? {
        roots.add(c?)?;
    }
    let mut h1 = rustls::ClientConfig::builder()
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
    h1.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut h3 = rustls::ClientConfig::builder_with_protocol_versions(&[&rustls::version::TLS13])
        .with_root_certificates(roots)
        .with_no_client_auth();
    h3.alpn_protocols = vec![b"h3".to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(h3))?;
    Ok((Arc::new(h1), quinn::ClientConfig::new(Arc::new(quic))))
}

pub fn run(args: SoakArgs) -> anyhow::Result<()> {
    // Every process the soak started is stopped when `soak` returns (their handles' `Drop`),
    // so the exit status is set only after that.
    if !soak(&args)? {
        // The summary on stdout says why; an error's backtrace would say nothing more.
        std::process::exit(1);
    }
    Ok(())
}

/// What this run is: the binaries, the folders, the seed, the cache's size and the fault
/// schedule, from the arguments.
struct Soak<'a> {
    args: &'a SoakArgs,
    /// This tool: the origins are its subcommands.
    me: PathBuf,
    /// The rampart under test.
    binary: PathBuf,
    started_utc: String,
    /// The report folder.
    out: PathBuf,
    /// Certificates, state, logs; removed at the end.
    scratch: PathBuf,
    seed: u64,
    cache_memory: u64,
    schedule: Schedule,
    /// Seconds per latency window of the report.
    window_s: u64,
}

impl<'a> Soak<'a> {
    /// Checks the arguments and creates the report folder and the scratch space.
    fn new(args: &'a SoakArgs) -> anyhow::Result<Soak<'a>> {
        let me = std::env::current_exe()?;
        let binary = args
            .rampart
            .clone()
            .unwrap_or_else(|| me.with_file_name("rampart"));
        if !binary.exists() {
            bail!(
                "{} not found: build it (cargo build -p rampart)",
                binary.display()
            );
        }
        let started_utc = crate::now_utc();
        let out = args
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("bench/results").join(format!("soak-{started_utc}")));
        std::fs::create_dir_all(&out)?;
        let scratch =
            std::env::temp_dir().join(format!("rampart-bench-soak-{}", std::process::id()));
        std::fs::create_dir_all(&scratch)?;
        let seed = args.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
        let cache_memory = parse_size(&args.cache_memory)?;
        if let Some(p) = args
            .protocols
            .iter()
            .find(|p| !["h1", "h2c", "h3", "tls"].contains(&p.as_str()))
        {
            bail!("--protocols: unknown {p:?} (known: h1, h2c, h3, tls)");
        }
        if args.protocols.is_empty() {
            bail!("--protocols: name at least one");
        }
        let short = args.duration < 300;
        Ok(Soak {
            args,
            me,
            binary,
            started_utc,
            out,
            scratch,
            seed,
            cache_memory,
            schedule: schedule(args, short),
            window_s: if short { 10 } else { 60 },
        })
    }

    /// The RSS bound of the serving process, from its RSS before any traffic.
    fn rss_bound(&self, baseline_rss: u64) -> u64 {
        // The bound is cache_memory × 1.1 + 40 MiB, measured on release builds whose
        // own footprint is part of those 40 MiB; the binary under test may be a debug build
        // whose code and unoptimised runtime alone take tens of MiB more. Adding the process's
        // RSS before any traffic keeps the bound about what traffic and the cache add, whichever
        // build runs (a release build's baseline is much smaller, so its bound barely loosens).
        let cache_memory = self.cache_memory;
        self.args.max_rss_mib.map_or_else(
            || cache_memory + cache_memory / 10 + (40 << 20) + baseline_rss,
            |m| m << 20,
        )
    }

    /// What every client shares: the content pool, the tally, rampart's addresses, TLS.
    fn context(
        &self,
        rampart: &Rampart,
        tls: Arc<rustls::ClientConfig>,
        quic: quinn::ClientConfig,
        start: Instant,
    ) -> traffic::Ctx {
        traffic::Ctx::new(
            body::Pool::new(self.seed),
            self.seed,
            self.args.objects,
            tally::Tally::new(start, self.window_s),
            start + Duration::from_secs(self.args.duration),
            (rampart.http, rampart.https, rampart.h3),
            tls,
            quic,
            Duration::from_millis(self.args.think_ms),
            Duration::from_secs(HEADER_TIMEOUT_S),
        )
    }
}

/// The fault schedule: the arguments, or defaults that are denser for runs under 5 min.
fn schedule(args: &SoakArgs, short: bool) -> Schedule {
    Schedule {
        reload_every_s: args.reload_every.unwrap_or(5),
        upgrade_every_s: args.upgrade_every.unwrap_or(if short { 20 } else { 60 }),
        origin_kill_every_s: args
            .origin_kill_every
            .unwrap_or(if short { 15 } else { 60 }),
        origin_down_s: args.origin_down.unwrap_or(if short { 3 } else { 5 }),
        redis_kill_every_s: args.redis_kill_every.unwrap_or(if short { 20 } else { 90 }),
        redis_down_s: args.redis_down.unwrap_or(if short { 3 } else { 5 }),
        quiet_tail_s: 8,
    }
}

/// The whole run; `Ok(false)` when it failed its verdict.
fn soak(args: &SoakArgs) -> anyhow::Result<bool> {
    let s = Soak::new(args)?;
    let mut skipped =
        vec!["full disk: rampart has no disk tier yet, so there is no disk to fill".to_owned()];
    let (cert, key) = certificate(&s.scratch)?;
    let backends = Backends::start(&s, &mut skipped)?;
    let (rampart, version) = start_rampart(&s, &backends, cert.clone(), key)?;
    // The process's own footprint before any traffic: the baseline of the RSS bound.
    std::thread::sleep(Duration::from_secs(1));
    let rampart_pid = rampart.pid();
    let baseline_rss = rampart::rss(rampart_pid.load(Ordering::Relaxed));
    let rss_bound = s.rss_bound(baseline_rss);

    let (tls, quic) = client_tls(&cert)?;
    let start = Instant::now();
    let ctx = Arc::new(s.context(&rampart, tls, quic, start));
    let Backends {
        origin_a,
        origin_b,
        ws_origin,
        redis,
        ..
    } = backends;
    // The processes stay up until the end of this function (the fault threads' targets).
    let targets = Targets {
        rampart: Arc::new(Mutex::new(rampart)),
        origins: vec![
            Arc::new(Mutex::new(origin_a)),
            Arc::new(Mutex::new(origin_b)),
        ],
        redis: redis.map(|r| Arc::new(Mutex::new(r))),
        drain: Duration::from_secs(SHUTDOWN_TIMEOUT_S),
    };
    let seen = chaos(&s, &ctx, &targets, rampart_pid, start)?;
    drop(ws_origin);

    let input = report::Input {
        started_utc: s.started_utc.clone(),
        version,
        seed: s.seed,
        args,
        schedule: s.schedule,
        skipped,
        duration_s: start.elapsed().as_secs_f64().min(args.duration as f64),
        window_s: s.window_s,
        cache_memory: s.cache_memory,
        baseline_rss,
        rss_bound,
        recorded: ctx.tally.take(),
        faults: seen.faults,
        samples: seen.samples,
        rampart_log: seen.rampart_log.clone(),
        redis: targets.redis.is_some(),
    };
    // The origins and Redis stop before their scratch folder goes.
    drop(targets);
    write_report(&s, input, &seen.rampart_log)
}

/// What the run saw besides the clients' tally.
struct Seen {
    /// The serving process each second.
    samples: Vec<Sample>,
    faults: Vec<FaultEvent>,
    /// rampart's stderr.
    rampart_log: String,
}

/// The traffic, with the fault threads and the sampler beside it, until the end of the run;
/// then rampart is stopped.
fn chaos(
    s: &Soak<'_>,
    ctx: &Arc<traffic::Ctx>,
    targets: &Targets,
    rampart_pid: Arc<AtomicU32>,
    start: Instant,
) -> anyhow::Result<Seen> {
    let stop = Arc::new(AtomicBool::new(false));
    let fault_log = Arc::new(FaultLog::new(start));
    let sampler = faults::sampler(rampart_pid, ctx.http, start, stop.clone());
    let fault_threads = faults::spawn(s.schedule, targets, &fault_log, start, ctx.end, &stop);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(traffic(s.args, ctx.clone()));
    drop(rt);
    stop.store(true, Ordering::Relaxed);
    for t in fault_threads {
        let _ = t.join();
    }
    let samples = sampler.join().unwrap_or_default();
    let rampart_log = {
        let mut r = match targets.rampart.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        r.stop();
        r.log_text()
    };
    Ok(Seen {
        samples,
        faults: fault_log.events(),
        rampart_log,
    })
}

/// Writes soak.md, soak.json and rampart's stderr, prints the summary and removes the scratch
/// space; returns whether the run passed.
fn write_report(s: &Soak<'_>, input: report::Input<'_>, log_text: &str) -> anyhow::Result<bool> {
    let (md, json, summary, passed) = report::build(input);
    std::fs::write(s.out.join("soak.md"), md)?;
    // rampart's stderr, whole (the report quotes its end).
    std::fs::write(s.out.join("rampart-stderr.log"), log_text)?;
    std::fs::write(s.out.join("soak.json"), json)?;
    println!("{summary}\nreport: {}", s.out.join("soak.md").display());
    let _ = std::fs::remove_dir_all(&s.scratch);
    Ok(passed)
}

/// Every client task, until the end of the run; then waits for requests in flight.
async fn traffic(args: &SoakArgs, ctx: Arc<traffic::Ctx>) {
    let mut tasks = Vec::new();
    for i in 0..args.clients {
        let c = ctx.clone();
        let seed = ctx.seed ^ (i as u64 + 1).wrapping_mul(0x1000_0001);
        let protocol = args.protocols[i % args.protocols.len()].as_str();
        tasks.push(match protocol {
            "h2c" => tokio::spawn(clients::hyper_client(c, true, seed)),
            "h3" => tokio::spawn(h3_client::h3_client(c, seed)),
            "tls" => tokio::spawn(tls_client::tls_client(c, seed)),
            _ => tokio::spawn(clients::hyper_client(c, false, seed)),
        });
    }
    for i in 0..args.ws_clients as u64 {
        tasks.push(tokio::spawn(clients::ws_client(
            ctx.clone(),
            ctx.seed ^ 0x5757 ^ i,
        )));
    }
    for i in 0..args.slow_readers as u64 {
        tasks.push(tokio::spawn(attackers::slow_reader(
            ctx.clone(),
            i,
            Duration::from_secs(args.slow_reader_hold),
        )));
    }
    for i in 0..args.slowloris as u64 {
        tasks.push(tokio::spawn(attackers::slowloris(ctx.clone(), i)));
    }
    tasks.push(tokio::spawn(clients::purger(
        ctx.clone(),
        ctx.seed ^ 0x9999,
    )));
    let grace = ctx.end + traffic::REQUEST_TIMEOUT + Duration::from_secs(5);
    for t in tasks {
        let left = grace.saturating_duration_since(Instant::now());
        let abort = t.abort_handle();
        if tokio::time::timeout(left, t).await.is_err() {
            abort.abort();
        }
    }
}
