//! The `rampart` binary: command line, startup, signals. Wiring only; the engine is in
//! `rampart-proxy` and the configuration in `rampart-config`.

#[cfg(feature = "mimalloc")]
mod alloc;
mod control;
mod demo;
mod logging;
mod upgrade;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand};
use rampart_config::{Config, Diagnostic, Severity, Validated};
use rampart_proxy::Server;

use crate::control::{Controller, Signals, Source};
use crate::logging::Logging;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: alloc::Alloc = alloc::Alloc;

const EXAMPLES: &str = "\
Examples:
  rampart demo                                  sample origin + proxy on 127.0.0.1:8080
  rampart run --config /etc/rampart/rampart.toml
  rampart check --config rampart.toml           validate, list every problem, exit 0/1
  rampart check --strict --print                warnings fail too; print the effective config
  rampart proxy --from 127.0.0.1:8080 --to 127.0.0.1:3000

Configuration: ARC2 Proxy TOML files work unchanged; see docs/configuration.md.";

#[derive(Parser, Debug)]
#[command(name = "rampart", version = env!("RAMPART_LONG_VERSION"), about = "A fast, correct caching reverse proxy", after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve with a configuration file.
    Run {
        /// Configuration file (default: ./rampart.toml, then /etc/rampart/rampart.toml).
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Validate a configuration file and print every problem (exit 1 on errors).
    Check {
        /// Configuration file (default: ./rampart.toml, then /etc/rampart/rampart.toml).
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Warnings are errors too (for CI pipelines and ExecStartPre=).
        #[arg(long)]
        strict: bool,
        /// Print the effective configuration: every key with its value, defaults filled in,
        /// each marked as ARC2's or rampart's.
        #[arg(long)]
        print: bool,
    },
    /// Start a built-in sample origin with rampart in front of it, and print what to try.
    Demo {
        /// Where the proxy listens.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
    },
    /// One-line reverse proxy without a configuration file: every host, every path.
    Proxy {
        /// Address to listen on.
        #[arg(long)]
        from: SocketAddr,
        /// Origin to forward to (HOST:PORT).
        #[arg(long)]
        to: String,
        /// Worker threads (default: number of CPUs).
        #[arg(long)]
        workers: Option<usize>,
        /// Log every request to stdout.
        #[arg(long)]
        access_log: bool,
    },
}

fn main() -> ExitCode {
    no_transparent_huge_pages();
    ignore_file_size_signal();
    #[cfg(feature = "mimalloc")]
    {
        prompt_purge();
        rampart_proxy::transport::park::set_give_back(alloc::collect);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run { config } => cmd_run(config),
        Command::Check {
            config,
            strict,
            print,
        } => return cmd_check(config, strict, print),
        Command::Demo { listen } => cmd_demo(listen),
        Command::Proxy {
            from,
            to,
            workers,
            access_log,
        } => cmd_proxy(from, &to, workers, access_log),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rampart: {e:#}");
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The file to use: the flag, else the first default path that exists.
fn locate(config: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = config {
        return Ok(p);
    }
    for p in rampart_config::DEFAULT_PATHS {
        if Path::new(p).exists() {
            return Ok(PathBuf::from(p));
        }
    }
    bail!(
        "no configuration file: looked for {}.\n\
         Start with `rampart demo` to see rampart in action, write a rampart.toml (see docs/configuration.md)\n\
         and run `rampart run --config rampart.toml`, or proxy without a file:\n\
         `rampart proxy --from 127.0.0.1:8080 --to 127.0.0.1:3000`",
        rampart_config::DEFAULT_PATHS.join(" and ")
    )
}

fn load(path: &Path) -> anyhow::Result<(String, Validated)> {
    let src =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let v = rampart_config::validate_file(&src, cpus(), path);
    Ok((src, v))
}

/// What `run` opens for `config`, in its order (plain HTTP, HTTPS, HTTP/3 on UDP): the HTTPS
/// addresses are left out by validation when no rule has a certificate.
fn listeners(config: &Config) -> Vec<String> {
    use rampart_proxy::transport::listen::{wanted, Kind};
    wanted(config, !config.tls.listen_https.is_empty())
        .into_iter()
        .map(|(addr, kind)| match kind {
            Kind::Http => format!("HTTP {addr}"),
            Kind::Https => format!("HTTPS {addr}"),
            Kind::H3 => format!("HTTP/3 {addr} (UDP)"),
        })
        .collect()
}

pub(crate) fn print_diag(path: &Path, d: &Diagnostic) {
    let sev = match d.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Inactive => "accepted, not yet active",
        Severity::Note => "note",
    };
    let key = if d.key.is_empty() {
        String::new()
    } else {
        format!("`{}` ", d.key)
    };
    if d.line > 0 {
        eprintln!(
            "{}:{}:{}: {sev}: {key}{}",
            path.display(),
            d.line,
            d.column,
            d.message
        );
    } else {
        eprintln!("{}: {sev}: {key}{}", path.display(), d.message);
    }
    if !d.hint.is_empty() {
        eprintln!("    fix: {}", d.hint);
    }
}

fn cmd_check(config: Option<PathBuf>, strict: bool, print: bool) -> ExitCode {
    let (path, src, v) = match locate(config).and_then(|p| load(&p).map(|(s, v)| (p, s, v))) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("rampart: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let v = if strict { v.strict() } else { v };
    for d in &v.diagnostics {
        print_diag(&path, d);
    }
    let count = |s| v.diagnostics.iter().filter(|d| d.severity == s).count();
    let (e, w, i) = (
        count(Severity::Error),
        count(Severity::Warning),
        count(Severity::Inactive),
    );
    if let (Some(c), true) = (&v.config, print) {
        print!("{}", rampart_config::effective(&src, c.workers));
    }
    // With --print, stdout carries the configuration alone (it can be saved as a file).
    let say = |line: String| {
        if print {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    if let Some(c) = &v.config {
        let listeners = listeners(c);
        say(format!(
            "{}: configuration OK ({} rule(s), {} listener(s): {}; {} worker(s)); {w} warning(s), {i} key(s) accepted but not yet active",
            path.display(),
            c.rules.len(),
            listeners.len(),
            listeners.join(", "),
            c.workers
        ));
        ExitCode::SUCCESS
    } else {
        say(format!(
            "{}: {e} error(s), {w} warning(s): configuration rejected{}",
            path.display(),
            if strict {
                " (--strict: every warning counts as an error)"
            } else {
                ""
            }
        ));
        ExitCode::FAILURE
    }
}

/// Validates and prints problems; returns the config or an error naming the count.
fn config_from(path: &Path, src_name: &str, v: Validated) -> anyhow::Result<Config> {
    for d in &v.diagnostics {
        if d.severity != Severity::Inactive {
            print_diag(path, d);
        }
    }
    match v.config {
        Some(c) => Ok(c),
        None => bail!(
            "{src_name}: {} error(s); nothing started",
            v.errors().count()
        ),
    }
}

/// Binds, starts, prints the listening lines, then runs the control loop (signals, reloads)
/// until SIGINT or SIGTERM, and drains.
fn serve(
    config: Config,
    source: Source,
    logging: &Logging,
    on_ready: impl FnOnce(&[SocketAddr], &[SocketAddr]),
) -> anyhow::Result<()> {
    rampart_proxy::server::raise_fd_limit();
    let upgrader = upgrade::Upgrader::new();
    let signals = Signals::install()?;
    let workers = config.workers;
    rampart_proxy::telemetry::metrics::set_build(
        env!("CARGO_PKG_VERSION"),
        env!("RAMPART_COMMIT_ID"),
    );
    let server = Server::bind(config.clone())?;
    let addrs = server.local_addrs();
    let https = server.https_addrs();
    let h3 = server.h3_addrs();
    let mut running = server.start()?;
    // HTTPS first: a reader waiting for the http line then has both.
    // Startup and shutdown lines go to stderr: stdout carries the access log only.
    for a in &https {
        eprintln!(
            "rampart {} listening on https://{a} ({workers} worker(s))",
            env!("CARGO_PKG_VERSION")
        );
    }
    for a in &h3 {
        eprintln!(
            "rampart {} listening for HTTP/3 on udp://{a} ({workers} worker(s))",
            env!("CARGO_PKG_VERSION")
        );
    }
    for a in &addrs {
        eprintln!(
            "rampart {} listening on http://{a} ({workers} worker(s))",
            env!("CARGO_PKG_VERSION")
        );
    }
    on_ready(&addrs, &https);
    // systemd's readiness; after an upgrade, also the handover from the old process.
    upgrade::ready();
    Controller::new(&mut running, source, logging, config, upgrader).run(signals)?;
    running.shutdown();
    running.join();
    eprintln!("rampart stopped");
    Ok(())
}

fn cmd_run(config: Option<PathBuf>) -> anyhow::Result<()> {
    let path = locate(config)?;
    // The file's version before it is read: a change while rampart starts is then a change.
    let stamp = control::stamp(&path);
    let (_, v) = load(&path)?;
    let inactive: Vec<Diagnostic> = v
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Inactive)
        .cloned()
        .collect();
    let config = config_from(&path, &path.display().to_string(), v)?;
    let logging = Logging::init(&config);
    // Once, at startup: a key the file asks for that this version does not act on.
    for d in &inactive {
        tracing::warn!(
            key = d.key,
            at = format_args!("{}:{}:{}", path.display(), d.line, d.column),
            "accepted but not active: {}",
            d.message
        );
    }
    serve(config, Source::File(path, stamp), &logging, |_, _| {})
}

/// `--to`: `HOST:PORT`, optionally with `http://` or `https://`.
fn origin_arg(to: &str) -> anyhow::Result<String> {
    let usage = || {
        anyhow::anyhow!(
            "--to {to:?}: give the origin as HOST:PORT, e.g. `--to 127.0.0.1:3000` (or `--to https://HOST:PORT`)"
        )
    };
    let rest = to
        .strip_prefix("http://")
        .or_else(|| to.strip_prefix("https://"))
        .unwrap_or(to)
        .trim_end_matches('/');
    let (host, port) = rest.rsplit_once(':').ok_or_else(usage)?;
    let port_ok = port.parse::<u16>().is_ok_and(|p| p > 0);
    let host_ok = !host.is_empty()
        && !host.contains(['/', ' ', '@'])
        && (!host.contains(':') || (host.starts_with('[') && host.ends_with(']')));
    if !port_ok || !host_ok {
        return Err(usage());
    }
    Ok(to.trim_end_matches('/').to_owned())
}

fn cmd_proxy(
    from: SocketAddr,
    to: &str,
    workers: Option<usize>,
    access_log: bool,
) -> anyhow::Result<()> {
    let to = origin_arg(to)?;
    // Every key ARC2 wants in a rule is written, so the generated file draws no warning.
    let src = format!(
        "listen = [{from:?}]\nworkers = {}\nadd_logging = {access_log}\nlogging_level = \"warn\"\n\
         [[proxy_rules]]\ndomain = \"*\"\nupstreams = [{to:?}]\nenable_logging = true\n\
         max_age_seconds = 0\nrule_type = \"Whitelist\"\nignore_query_string = false\n\
         enable_sql_injection_protection = false\nenable_compression = false\n\
         enable_minification = false\nenable_webp_transformation = false\n",
        workers.unwrap_or_else(cpus),
        from = from.to_string(),
    );
    let config = generated_config("rampart proxy", rampart_config::validate(&src, cpus()))?;
    let logging = Logging::init(&config);
    serve(
        config,
        Source::Embedded("rampart proxy"),
        &logging,
        |_, _| {},
    )
}

/// A configuration rampart wrote itself (`proxy`, `demo`): its problems are reported as the
/// command's, without positions in a file the user never saw.
fn generated_config(command: &str, v: Validated) -> anyhow::Result<Config> {
    let problems: Vec<String> = v
        .diagnostics
        .iter()
        .filter(|d| d.severity != Severity::Inactive)
        .map(|d| format!("{}: {}", d.key, d.message))
        .collect();
    match v.config {
        Some(c) => {
            for p in &problems {
                eprintln!("{command}: warning: {p}");
            }
            Ok(c)
        }
        None => bail!("{command}: {}", problems.join("; ")),
    }
}

fn cmd_demo(listen: SocketAddr) -> anyhow::Result<()> {
    // The origin runs on its own thread and runtime, on a free loopback port.
    let (tx, rx) = tokio::sync::watch::channel(false);
    let std_listener =
        std::net::TcpListener::bind("127.0.0.1:0").context("cannot start the sample origin")?;
    std_listener.set_nonblocking(true)?;
    let origin = std_listener.local_addr()?;
    let origin_thread = std::thread::Builder::new()
        .name("demo-origin".into())
        .spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(async move {
                    if let Ok(l) = tokio::net::TcpListener::from_std(std_listener) {
                        demo::serve_origin(l, rx).await;
                    }
                });
            }
        })?;
    let https = SocketAddr::new(
        listen.ip(),
        if listen.port() == 0 {
            0
        } else {
            listen.port().saturating_add(363)
        },
    );
    let mut src = demo::DEMO_CONFIG
        .replace("{LISTEN}", &listen.to_string())
        .replace("{LISTEN_HTTPS}", &https.to_string())
        .replace("{ORIGIN_PORT}", &origin.port().to_string());
    if let Some(dir) = demo::root_state_dir() {
        // As root the default is the service's /var/lib/rampart: the demo keeps out of it.
        let dir = serde_json::to_string(&dir.to_string_lossy())?;
        src = format!("state_dir = {dir}\n{src}");
    }
    let config = generated_config("rampart demo", rampart_config::validate(&src, cpus()))?;
    let logging = Logging::init(&config);
    let state_dir = config.tls.state_dir.clone();
    let root = state_dir.join("ca").join("root.pem");
    let result = serve(
        config,
        Source::Embedded("rampart demo"),
        &logging,
        |addrs, https| {
            if let Some(a) = addrs.first() {
                println!(
                    "\n{}",
                    demo::instructions(*a, https.first().copied(), &state_dir, &root, origin)
                );
            }
        },
    );
    tx.send_replace(true);
    let _ = origin_thread.join();
    result.with_context(|| {
        format!(
            "demo could not start (is {listen} or {https} in use? try `rampart demo --listen 127.0.0.1:8081`)"
        )
    })
}

/// mimalloc's `purge_delay` (option 15 of its `mi_option_t`, v3).
#[cfg(feature = "mimalloc")]
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

#[cfg(feature = "mimalloc")]
#[allow(unsafe_code)]
extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    #[cfg(test)]
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
    #[cfg(test)]
    fn mi_version() -> std::ffi::c_int;
}

/// How long mimalloc keeps pages it no longer uses before giving them back to the system.
#[cfg(feature = "mimalloc")]
const PURGE_DELAY_MS: std::ffi::c_long = 100;

/// Sets mimalloc's purge delay to [`PURGE_DELAY_MS`] (1 s is its v3 default), unless
/// `MIMALLOC_PURGE_DELAY` says otherwise.
///
/// It was 10 ms: cached bodies of megabytes come and go all the time (fills, evictions, the
/// shared tier's reads and writes), and held for a second after each free they added up to a
/// third of the process's RSS. Those blocks are now mappings of their own, unmapped when freed
/// (`alloc.rs`, [`alloc::DIRECT`]), so the delay only applies to the small pages requests
/// allocate and free. At 10 ms a pass gave pages back and faulted them in again (~240 page
/// faults per 1,000 passes, ~0.3 µs of CPU per pass); at 100 ms ~10. Longer would hold the
/// memory of connections that just parked: their worker then allocates nothing that would make
/// mimalloc look at freed pages, so the parker's sweep asks for the collection itself
/// ([`alloc::collect`]), and 1 s left 5.5 KB per idle connection resident two seconds later
/// (benchmarks.md, "Allocator purge delay").
#[cfg(feature = "mimalloc")]
#[allow(unsafe_code)]
fn prompt_purge() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: mimalloc's option setter, with integers; the allocator is linked in (feature
    // `mimalloc`) and reads the option each time it decides to purge.
    unsafe {
        mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
    }
}

/// Turns transparent huge pages off for this process. The allocator asks for them
/// (`MADV_HUGEPAGE`), and the first touch of each 2 MiB page makes the kernel zero all of it on
/// the worker thread: while thousands of connections arrive at once that stalled the worker for
/// milliseconds at a time (65 % of its time in `clear_page_erms`) and left most of each page
/// resident for a few KiB of use. Redis and most databases ask for the same.
#[allow(unsafe_code)]
fn no_transparent_huge_pages() {
    // SAFETY: prctl with integer arguments only; an error (old kernel) leaves THP as it was.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// A file-size limit (`ulimit -f`, `LimitFSIZE=`) makes a write past it fail with `EFBIG`
/// instead of killing the process (SIGXFSZ's default): the disk tier counts it as a write
/// error and goes on from memory and the origin. NGINX ignores it too.
#[allow(unsafe_code)]
fn ignore_file_size_signal() {
    // SAFETY: sets one signal's disposition to "ignore"; no handler runs.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

#[cfg(all(test, feature = "mimalloc"))]
mod allocator_tests {
    use super::*;

    /// Option 15 is `purge_delay` in mimalloc v3 (and v2): a new major version of the vendored
    /// library must be checked before this number is trusted.
    #[test]
    #[allow(unsafe_code)]
    fn the_purge_delay_option_is_the_one_set() {
        // SAFETY: mimalloc's version and option getters, with integers.
        let version = unsafe { mi_version() };
        assert!((20_000..40_000).contains(&version), "mimalloc {version}");
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // Before it is set: option 15 holds v3's default purge delay, which no other
            // option near it has (a shifted enum would read something else).
            // SAFETY: as above.
            assert_eq!(unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) }, 1000);
        }
        prompt_purge();
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // SAFETY: as above.
            assert_eq!(
                unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) },
                PURGE_DELAY_MS
            );
        }
    }
}
