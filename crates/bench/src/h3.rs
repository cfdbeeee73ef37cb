//! `rampart-bench h3`: the HTTP/3 goals, measured through real sockets.
//!
//! The cached 12-byte page (`/hello`) over HTTPS/2 (h2load, ALPN `h2`) and over HTTP/3
//! (`rampart-bench h3-load`: quinn + h3, the same numbers of connections and streams), in
//! interleaved rounds, each server pinned to `--server-cpus` and every client and the origin to
//! `--load-cpus`. Per run: requests, errors, and the server's CPU time (schedstat, every
//! thread) per request. Medians over the rounds.
//!
//! Goals: rampart's HTTP/3 hit costs ≤ 1.5× its HTTPS/2 hit; no errors under HTTP/3 load.
//!
//! Peers: Caddy, the only one of the suite's peers whose Debian build speaks HTTP/3 (Debian's
//! HAProxy 2.6 is built without QUIC, NGINX 1.22 without `http_v3_module`; Varnish, Squid and
//! Apache have none). Caddy has no cache: it answers `/hello` with a fixed response
//! (`respond`), the cheapest answer it has, so the comparison is rampart's cache hit against
//! Caddy's floor.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use bytes::{Buf as _, Bytes};

use crate::peers::TlsFiles;
use crate::procs;

#[derive(clap::Args, Debug, Clone)]
pub struct H3Args {
    /// Connections per run (each protocol).
    #[arg(long, default_value_t = 16)]
    pub connections: u32,
    /// Concurrent requests per connection.
    #[arg(long, default_value_t = 10)]
    pub streams: u32,
    /// Seconds per run.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Interleaved rounds.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Servers (comma-separated): rampart, caddy; those not installed are skipped.
    #[arg(long, value_delimiter = ',', default_value = "rampart,caddy")]
    pub peers: Vec<String>,
    /// The rampart binary (default: the rampart next to this tool, target/dist/rampart after `cargo build --profile dist`).
    #[arg(long)]
    pub rampart: Option<PathBuf>,
    /// CPUs for the server (taskset list).
    #[arg(long, default_value = "0")]
    pub server_cpus: String,
    /// CPUs for the clients and the origin.
    #[arg(long, default_value = "1")]
    pub load_cpus: String,
    /// Markdown report (default bench/results/h3-<UTC time>.md).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `rampart-bench h3-load`: a closed-loop HTTP/3 client.
#[derive(clap::Args, Debug, Clone)]
pub struct H3LoadArgs {
    /// The server's UDP address.
    #[arg(long)]
    pub addr: SocketAddr,
    /// The name sent as SNI and `:authority`.
    #[arg(long, default_value = "localhost")]
    pub host: String,
    #[arg(long, default_value = "/hello")]
    pub path: String,
    /// The certificate to trust (PEM).
    #[arg(long)]
    pub ca: PathBuf,
    #[arg(long, default_value_t = 16)]
    pub connections: u32,
    #[arg(long, default_value_t = 10)]
    pub streams: u32,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
}

/// What one load run did.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct Counted {
    pub requests: u64,
    pub errors: u64,
    pub seconds: f64,
}

/// `h3-load`: `connections` HTTP/3 connections with `streams` requests in flight on each, for
/// `seconds`; prints one JSON line (requests answered 2xx, errors, seconds).
pub fn load(a: H3LoadArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let counted = rt.block_on(run_load(&a))?;
    println!("{}", serde_json::to_string(&counted)?);
    Ok(())
}

async fn run_load(a: &H3LoadArgs) -> anyhow::Result<Counted> {
    use rustls::pki_types::{pem::PemObject as _, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&a.ca).context("reading --ca")? {
        roots.add(c?)?;
    }
    let mut tls = rustls::ClientConfig::builder_with_protocol_versions(&[&rustls::version::TLS13])
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(tls))?;
    let mut endpoint = quinn::Endpoint::client(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let ok = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let uri: http::Uri = format!("https://{}{}", a.host, a.path).parse()?;
    let mut conns = Vec::new();
    for _ in 0..a.connections {
        conns.push(connect(&endpoint, a.addr, &a.host).await?);
    }
    let start = Instant::now();
    let deadline = start + Duration::from_secs(a.seconds);
    let mut tasks = Vec::new();
    for (_, send) in &conns {
        for _ in 0..a.streams {
            let (mut send, uri) = (send.clone(), uri.clone());
            let (ok, errors) = (ok.clone(), errors.clone());
            tasks.push(tokio::spawn(async move {
                while Instant::now() < deadline {
                    match one(&mut send, &uri).await {
                        Ok(true) => ok.fetch_add(1, Ordering::Relaxed),
                        _ => errors.fetch_add(1, Ordering::Relaxed),
                    };
                }
            }));
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    let seconds = start.elapsed().as_secs_f64();
    for (conn, _) in &conns {
        conn.close(0x100u32.into(), b"done");
    }
    endpoint.wait_idle().await;
    Ok(Counted {
        requests: ok.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
        seconds,
    })
}

/// Sends requests on one HTTP/3 connection.
pub(crate) type Sender = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// Opens an HTTP/3 connection to `addr` as `host` (SNI and certificate name) with
/// `endpoint`'s default client configuration; its driver runs on a task of its own until the
/// connection ends. Also used by the soak's HTTP/3 clients.
pub(crate) async fn connect(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    host: &str,
) -> anyhow::Result<(quinn::Connection, Sender)> {
    let conn = endpoint.connect(addr, host)?.await?;
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone())).await?;
    tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    Ok((conn, send))
}

/// One GET; `Ok(true)` when it was answered 2xx with its whole body.
async fn one(send: &mut Sender, uri: &http::Uri) -> anyhow::Result<bool> {
    let req = http::Request::get(uri.clone()).body(())?;
    let mut stream = send.send_request(req).await?;
    stream.finish().await?;
    let res = stream.recv_response().await?;
    while let Some(mut chunk) = stream.recv_data().await? {
        chunk.advance(chunk.remaining());
    }
    Ok(res.status().is_success())
}

/// One measured run.
#[derive(Debug, Clone)]
struct Run {
    peer: &'static str,
    protocol: &'static str,
    counted: Counted,
    cpu_us_per_request: f64,
}

/// A server under test: where it answers HTTPS (TCP) and HTTP/3 (UDP).
struct Target {
    name: &'static str,
    label: &'static str,
    server: procs::Server,
    port: u16,
}

pub fn run(args: H3Args) -> anyhow::Result<()> {
    procs::stop_all_on_signal();
    for tool in ["h2load", "taskset"] {
        if crate::sh(&format!("command -v {tool}")).is_empty() {
            bail!("{tool} is not installed");
        }
    }
    let me = std::env::current_exe()?;
    let rampart = args
        .rampart
        .clone()
        .unwrap_or_else(|| me.with_file_name("rampart"));
    if !rampart.exists() {
        bail!(
            "{} not found: build it with cargo build --profile dist",
            rampart.display()
        );
    }
    let dir = std::env::temp_dir().join(format!("rampart-bench-h3-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let tls = TlsFiles::create(&dir)?;
    let (mut origin, origin_addr) =
        procs::Server::origin(&args.load_cpus, &me, &dir.join("origin.log"))?;
    let mut targets = Vec::new();
    let started = start_targets(&args, &rampart, &dir, &tls, origin_addr, &mut targets);
    let result = started.and_then(|()| measure(&args, &me, &tls, &targets));
    for t in &mut targets {
        t.server.stop();
    }
    origin.stop();
    let runs = result?;
    let report = report(&args, &targets, &runs);
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("bench/results").join(format!("h3-{}.md", crate::now_utc()))
    });
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&out, &report)?;
    println!("{report}\nreport: {}", out.display());
    let _ = std::fs::remove_dir_all(&dir);
    let errors: u64 = runs
        .iter()
        .filter(|r| r.peer == "rampart")
        .map(|r| r.counted.errors)
        .sum();
    if errors > 0 {
        bail!("rampart answered {errors} requests with an error");
    }
    Ok(())
}

fn start_targets(
    args: &H3Args,
    rampart: &Path,
    dir: &Path,
    tls: &TlsFiles,
    origin: SocketAddr,
    targets: &mut Vec<Target>,
) -> anyhow::Result<()> {
    if args.peers.iter().any(|p| p == "rampart") {
        let port = procs::free_port()?;
        let toml = format!(
            "listening_address = \"127.0.0.1\"\nlistening_port_http = {}\nlistening_port_https = {port}\n\
             http3 = true\nworkers = 1\nadd_logging = false\nlogging_level = \"error\"\n\
             add_rate_limiting = false\n\n\
             [[proxy_rules]]\ndomain = \"*\"\nmax_age_seconds = 3600\nforward_ipv4 = \"127.0.0.1\"\n\
             forward_port_http = {}\nrule_type = \"Whitelist\"\nenable_logging = false\n\
             ignore_query_string = false\nenable_sql_injection_protection = false\n\
             enable_compression = false\nenable_minification = false\nenable_webp_transformation = false\n\
             tls_cert_file = {:?}\ntls_key_file = {:?}\n",
            procs::free_port()?,
            origin.port(),
            tls.cert.display().to_string(),
            tls.key.display().to_string(),
        );
        let rdir = dir.join("rampart");
        std::fs::create_dir_all(&rdir)?;
        let server = procs::Server::rampart(
            &args.server_cpus,
            rampart,
            &toml,
            &rdir,
            SocketAddr::from(([127, 0, 0, 1], port)),
        )?;
        targets.push(Target {
            name: "rampart",
            label: "rampart, cache hit",
            server,
            port,
        });
    }
    if args.peers.iter().any(|p| p == "caddy") {
        if crate::sh("command -v caddy").is_empty() {
            eprintln!("caddy is not installed (apt-get install caddy); skipped");
        } else {
            targets.push(start_caddy(args, dir, tls)?);
        }
    }
    Ok(())
}

/// Caddy 2.6 with HTTP/1.1, HTTP/2 and HTTP/3 on one HTTPS site that answers with a fixed
/// 12-byte body; its own storage and config directories (see `peers::Caddy`).
fn start_caddy(args: &H3Args, dir: &Path, tls: &TlsFiles) -> anyhow::Result<Target> {
    let cdir = dir.join("caddy");
    std::fs::create_dir_all(&cdir)?;
    let port = procs::free_port()?;
    let d = cdir.display().to_string();
    let caddyfile = format!(
        "{{\n\tadmin off\n\tauto_https off\n\tstorage file_system {{\n\t\troot {d}/caddy-data\n\t}}\n\
         \tservers {{\n\t\tprotocols h1 h2 h3\n\t}}\n}}\n\n\
         https://localhost:{port} {{\n\tbind 127.0.0.1\n\ttls {} {}\n\
         \theader Cache-Control \"max-age=3600\"\n\trespond /hello \"Hello World!\"\n}}\n",
        tls.cert.display(),
        tls.key.display()
    );
    let config = cdir.join("Caddyfile");
    std::fs::write(&config, caddyfile)?;
    let env = cdir.join("caddy.env");
    std::fs::write(
        &env,
        format!("HOME={d}\nXDG_CONFIG_HOME={d}/caddy-config\nXDG_DATA_HOME={d}/caddy-data\n"),
    )?;
    let server = procs::Server::start(
        &args.server_cpus,
        "caddy",
        &[
            "run".into(),
            "--config".into(),
            config.display().to_string(),
            "--adapter".into(),
            "caddyfile".into(),
            "--envfile".into(),
            env.display().to_string(),
        ],
        &[
            ("HOME".into(), d.clone()),
            ("GOMAXPROCS".into(), "1".into()),
        ],
        &cdir.join("caddy.log"),
    )?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    if !procs::wait_listening(addr, Duration::from_secs(10)) {
        bail!(
            "caddy did not start (see {})",
            cdir.join("caddy.log").display()
        );
    }
    Ok(Target {
        name: "caddy",
        label: "Caddy, fixed response (no cache)",
        server,
        port,
    })
}

/// Warm-up, then `rounds` rounds of (each target × HTTPS/2, HTTP/3).
fn measure(
    args: &H3Args,
    me: &Path,
    tls: &TlsFiles,
    targets: &[Target],
) -> anyhow::Result<Vec<Run>> {
    let mut runs = Vec::new();
    for round in 0..=args.rounds {
        for t in targets {
            for protocol in ["h2", "h3"] {
                // Round 0 warms up (the cache, the TLS session caches) and is not kept.
                let seconds = if round == 0 { 2 } else { args.seconds };
                let before = t.server.cpu_sample();
                let counted = match protocol {
                    "h2" => h2load(args, t.port, seconds)?,
                    _ => h3_load(args, me, tls, t.port, seconds)?,
                };
                let cpu = t.server.cpu_sample().since(&before);
                if round == 0 {
                    continue;
                }
                let run = Run {
                    peer: t.name,
                    protocol,
                    counted,
                    cpu_us_per_request: cpu * 1e6 / counted.requests.max(1) as f64,
                };
                eprintln!(
                    "round {round} {} {protocol}: {:.0} req/s, {:.2} µs CPU/request, {} errors",
                    t.name,
                    counted.requests as f64 / counted.seconds,
                    run.cpu_us_per_request,
                    counted.errors
                );
                runs.push(run);
            }
        }
    }
    Ok(runs)
}

fn h2load(args: &H3Args, port: u16, seconds: u64) -> anyhow::Result<Counted> {
    let out = std::process::Command::new("taskset")
        .args(["-c", &args.load_cpus, "h2load"])
        .args(["-c", &args.connections.to_string()])
        .args(["-m", &args.streams.to_string()])
        .args(["-t", "1", "-D", &seconds.to_string()])
        .arg(format!("https://localhost:{port}/hello"))
        .output()
        .context("running h2load")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let r = crate::load::parse_h2load(&text)
        .with_context(|| format!("h2load output not understood:\n{text}"))?;
    Ok(Counted {
        requests: r.requests,
        errors: r.errors,
        seconds: r.seconds,
    })
}

fn h3_load(
    args: &H3Args,
    me: &Path,
    tls: &TlsFiles,
    port: u16,
    seconds: u64,
) -> anyhow::Result<Counted> {
    let out = std::process::Command::new("taskset")
        .args(["-c", &args.load_cpus])
        .arg(me)
        .args(["h3-load", "--addr", &format!("127.0.0.1:{port}")])
        .args(["--ca", &tls.cert.display().to_string()])
        .args(["--connections", &args.connections.to_string()])
        .args(["--streams", &args.streams.to_string()])
        .args(["--seconds", &seconds.to_string()])
        .output()
        .context("running h3-load")?;
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).with_context(|| {
        format!(
            "h3-load failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })
}

fn report(args: &H3Args, targets: &[Target], runs: &[Run]) -> String {
    let mut out = format!(
        "# HTTP/3 (rampart-bench h3)\n\n\
         The cached 12-byte `/hello`, {} connections × {} streams, {} s per run, {} interleaved \
         rounds after a warm-up round; servers on CPU {}, clients and origin on CPU {}. HTTPS/2: \
         h2load over TLS 1.3 (ALPN h2); HTTP/3: `rampart-bench h3-load` (quinn + h3). Server CPU \
         from schedstat, every thread. Medians.\n\n\
         | server | protocol | req/s | server CPU µs/request | errors |\n|---|---|---:|---:|---:|\n",
        args.connections, args.streams, args.seconds, args.rounds, args.server_cpus, args.load_cpus
    );
    let pick = |peer: &str, protocol: &str| -> Option<(f64, f64, u64)> {
        let rs: Vec<&Run> = runs
            .iter()
            .filter(|r| r.peer == peer && r.protocol == protocol)
            .collect();
        if rs.is_empty() {
            return None;
        }
        let rps = crate::stats::median_of(
            rs.iter()
                .map(|r| r.counted.requests as f64 / r.counted.seconds),
        );
        let cpu = crate::stats::median_of(rs.iter().map(|r| r.cpu_us_per_request));
        Some((rps, cpu, rs.iter().map(|r| r.counted.errors).sum()))
    };
    for t in targets {
        for (protocol, label) in [("h2", "HTTPS/2"), ("h3", "HTTP/3")] {
            if let Some((rps, cpu, errors)) = pick(t.name, protocol) {
                out.push_str(&format!(
                    "| {} | {label} | {rps:.0} | {cpu:.2} | {errors} |\n",
                    t.label
                ));
            }
        }
    }
    out.push('\n');
    if let (Some((_, h2, _)), Some((_, h3, errors))) =
        (pick("rampart", "h2"), pick("rampart", "h3"))
    {
        let ratio = h3 / h2;
        out.push_str(&format!(
            "rampart: an HTTP/3 hit costs {ratio:.2}× an HTTPS/2 hit (goal ≤ 1.5×: {}); {errors} \
             errors under HTTP/3 load (goal 0: {}).\n",
            if ratio <= 1.5 { "met" } else { "not met" },
            if errors == 0 { "met" } else { "not met" }
        ));
        if let Some((_, caddy, _)) = pick("caddy", "h3") {
            out.push_str(&format!(
                "Over HTTP/3, rampart's cache hit costs {:.2}× Caddy's fixed response.\n",
                h3 / caddy
            ));
        }
    }
    out.push_str(
        "\nDebian's HAProxy 2.6 is built without QUIC and NGINX 1.22 without its HTTP/3 module; \
         Varnish, Squid and Apache have no HTTP/3: Caddy is the only peer here that serves it.\n",
    );
    out
}
