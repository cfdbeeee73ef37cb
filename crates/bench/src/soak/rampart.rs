//! The rampart under test: its two configuration files (they differ only in a path rule no
//! request uses, so a reload changes nothing a client can see), the process started in its own
//! process group, the pid of the process serving now (it changes with every binary upgrade:
//! the old process names the new one on stderr), reloads (SIGHUP, checked by the `configuration
//! reloaded` line) and upgrades (SIGUSR2, done when the old process has exited).

use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

/// What the configuration files are made from.
#[derive(Debug, Clone)]
pub struct Setup {
    pub origin_a: SocketAddr,
    pub origin_b: SocketAddr,
    pub ws_origin: SocketAddr,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub state_dir: PathBuf,
    /// `cache_memory` in bytes.
    pub cache_memory: u64,
    pub redis: Option<SocketAddr>,
    /// The shared cache tier (`redis_cache`) with Redis.
    pub redis_cache: bool,
    pub header_timeout_s: u64,
    pub shutdown_timeout_s: u64,
}

/// The host the cached and uncached traffic uses (the certificate's name).
pub const HOST: &str = "soak.test";
/// The host of the WebSocket rule.
pub const WS_HOST: &str = "ws.soak";

/// The configuration file; `variant` 0 or 1 (they differ harmlessly).
pub fn config(s: &Setup, variant: usize) -> String {
    let redis = match s.redis {
        // Every request's rate-limit decision goes through Redis (nobody is exempt, the rate
        // is out of reach), purges go through its stream, and the shared cache tier is on
        // (unless `--no-redis-cache`).
        Some(r) => format!(
            "redis_url = \"redis://{r}\"\nredis_cache = {}\nadd_rate_limiting = true\n\
             rate_limit_per_second = 1000000\nrate_limit_burst = 1000000\nrate_limit_exempt = []\n",
            s.redis_cache
        ),
        None => "add_rate_limiting = false\n".to_owned(),
    };
    let rule = |domain: &str, origin: SocketAddr, extra: &str| {
        format!(
            "[[proxy_rules]]\ndomain = \"{domain}\"\nmax_age_seconds = 3600\n\
             forward_ipv4 = \"{}\"\nforward_port_http = {}\n{extra}rule_type = \"Whitelist\"\n\
             enable_logging = false\nignore_query_string = false\n\
             enable_sql_injection_protection = false\nenable_compression = false\n\
             enable_minification = false\nenable_webp_transformation = false\n",
            origin.ip(),
            origin.port()
        )
    };
    let tls = format!(
        "upstreams = [\"{}\"]\ntls_cert_file = {:?}\ntls_key_file = {:?}\n",
        s.origin_b,
        s.cert.display().to_string(),
        s.key.display().to_string()
    );
    format!(
        "# rampart-bench soak, variant {variant}\n\
         listen = [\"127.0.0.1:0\"]\nlisten_https = [\"127.0.0.1:0\"]\nhttp3 = true\n\
         workers = 2\nadd_logging = false\nlogging_level = \"error\"\nadd_caching = true\n\
         cache_memory = {}\nstate_dir = {:?}\npurge_allow = [\"127.0.0.1\"]\nmetrics_allow = [\"127.0.0.1\"]\n\
         client_header_timeout_seconds = {}\nshutdown_timeout_seconds = {}\n{redis}\n\
         {}\n[[proxy_rules.path_rules]]\npath = \"/soak-reload-variant-{variant}\"\n\
         match_type = \"Equals\"\nrule_type = \"Blacklist\"\nmax_age_seconds = 0\n\n{}",
        s.cache_memory,
        s.state_dir.display().to_string(),
        s.header_timeout_s,
        s.shutdown_timeout_s,
        rule(HOST, s.origin_a, &tls),
        rule(WS_HOST, s.ws_origin, ""),
    )
}

/// The running rampart.
pub struct Rampart {
    config: PathBuf,
    variants: [String; 2],
    log: PathBuf,
    /// The process this tool started (the group leader; reaped at the end).
    first: Child,
    /// The process serving now.
    pid: Arc<AtomicU32>,
    next_variant: usize,
    stopped: bool,
    pub http: SocketAddr,
    pub https: SocketAddr,
    pub h3: SocketAddr,
}

/// The text after `marker` on each line of `log` that has it.
fn after_all(log: &str, marker: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.split_once(marker).map(|(_, r)| r.to_owned()))
        .collect()
}

fn addr_after(log: &str, marker: &str) -> Option<SocketAddr> {
    after_all(log, marker)
        .first()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Sends `signal` (e.g. `-HUP`) to `pid`.
pub fn signal(pid: u32, signal: &str) -> bool {
    Command::new("kill")
        .args([signal, &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether `pid` is a live process (not gone, not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

impl Rampart {
    /// Writes both files, starts `binary run --config FILE` and waits for its three listeners.
    pub fn start(binary: &Path, dir: &Path, setup: &Setup) -> anyhow::Result<Rampart> {
        let config = dir.join("rampart.toml");
        let variants = [self::config(setup, 0), self::config(setup, 1)];
        std::fs::write(&config, &variants[0])?;
        let log = dir.join("rampart.log");
        let out = std::fs::File::create(&log)?;
        let first = Command::new(binary)
            .arg("run")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(out)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let pid = Arc::new(AtomicU32::new(first.id()));
        let mut r = Rampart {
            config,
            variants,
            log,
            first,
            pid,
            next_variant: 1,
            stopped: false,
            http: SocketAddr::from(([127, 0, 0, 1], 0)),
            https: SocketAddr::from(([127, 0, 0, 1], 0)),
            h3: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = r.log_text();
            if let (Some(http), Some(https), Some(h3)) = (
                addr_after(&text, "listening on http://"),
                addr_after(&text, "listening on https://"),
                addr_after(&text, "listening for HTTP/3 on udp://"),
            ) {
                (r.http, r.https, r.h3) = (http, https, h3);
                return Ok(r);
            }
            if !alive(r.first.id()) || Instant::now() > deadline {
                let _ = r.first.kill();
                let _ = r.first.wait();
                bail!("rampart did not start:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process serving now (shared with the samplers).
    pub fn pid(&self) -> Arc<AtomicU32> {
        self.pid.clone()
    }

    /// Puts the other file in place (written beside it and renamed over it, so the file is
    /// never seen half-written, also by a new process of an upgrade) and sends SIGHUP; done
    /// when rampart says it reloaded. `Err` says what went wrong.
    pub fn reload(&mut self) -> anyhow::Result<String> {
        let text = self.log_text();
        let before = after_all(&text, "configuration reloaded").len();
        let refused = after_all(&text, "reload (SIGHUP) refused").len();
        let v = self.next_variant;
        let tmp = self.config.with_extension("toml.new");
        std::fs::write(&tmp, &self.variants[v])
            .and_then(|()| std::fs::rename(&tmp, &self.config))
            .context("writing the file")?;
        self.next_variant = 1 - v;
        let pid = self.pid.load(Ordering::Relaxed);
        if !signal(pid, "-HUP") {
            bail!("kill -HUP {pid} failed");
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let text = self.log_text();
            if after_all(&text, "configuration reloaded").len() > before {
                return Ok(format!("variant {v}, pid {pid}"));
            }
            if after_all(&text, "reload (SIGHUP) refused").len() > refused {
                bail!("refused: {}", last_lines(&text, 5));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("no `configuration reloaded` line within 10 s (pid {pid})")
    }

    /// SIGUSR2: the new process's pid is read from the old one's `as process PID` line; done
    /// when the new one says it serves (the current pid moves to it). `Ok` gives both pids;
    /// the old one is still draining ([`wait_exit`]).
    pub fn upgrade(&mut self) -> anyhow::Result<(u32, u32)> {
        let marker = "as process ";
        let text = self.log_text();
        let (started0, serving0) = (
            after_all(&text, marker).len(),
            after_all(&text, "upgrade: serving").len(),
        );
        let old = self.pid.load(Ordering::Relaxed);
        if !signal(old, "-USR2") {
            bail!("kill -USR2 {old} failed");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let new: u32 = loop {
            let text = self.log_text();
            let started = after_all(&text, marker);
            if let Some(pid) = started.get(started0).and_then(|r| {
                r.split(|c: char| !c.is_ascii_digit())
                    .next()
                    .and_then(|p| p.parse().ok())
            }) {
                break pid;
            }
            if Instant::now() > deadline {
                bail!("no new process named within 30 s: {}", last_lines(&text, 5));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        loop {
            let text = self.log_text();
            if after_all(&text, "upgrade: serving").len() > serving0 {
                break;
            }
            if text.contains("upgrade failed") && !alive(new) {
                bail!("the new process failed: {}", last_lines(&text, 5));
            }
            if Instant::now() > deadline {
                bail!(
                    "process {new} did not take over within 30 s: {}",
                    last_lines(&text, 5)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.pid.store(new, Ordering::Relaxed);
        Ok((old, new))
    }

    /// SIGTERM to the serving process, then the whole group is killed. Once.
    pub fn stop(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        let pid = self.pid.load(Ordering::Relaxed);
        signal(pid, "-TERM");
        let deadline = Instant::now() + Duration::from_secs(15);
        while alive(pid) && Instant::now() < deadline {
            let _ = self.first.try_wait();
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.first.id())])
            .stderr(Stdio::null())
            .status();
        if alive(pid) {
            signal(pid, "-KILL");
        }
        let _ = self.first.kill();
        let _ = self.first.wait();
    }
}

impl Drop for Rampart {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits until the old process of an upgrade has exited (a zombie counts as exited: the
/// first process is reaped by [`Rampart::stop`]); `false` when it is still there after
/// `within`.
pub fn wait_exit(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// The last `n` lines of `text`, on one line.
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// VmRSS of `pid` in bytes (0 when it is gone).
pub fn rss(pid: u32) -> u64 {
    crate::procs::status_kib(pid, "VmRSS:") * 1024
}

/// Open file descriptors of `pid` (`None` when it is gone).
pub fn fds(pid: u32) -> Option<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|d| d.count())
}
