//! The servers of one run of the suite: the built-in origin and each peer that could start
//! (its config written, copied into the report's `configs/`, its process listening), pinned to
//! the server CPUs; and how a peer is started again for a run of its own.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};

use super::Bench;
use crate::peers::{self, Peer};
use crate::procs;
use crate::scenarios::Scenario;

/// A peer present on this machine, and the rampart build it runs (rampart peers only).
pub struct Candidate {
    pub peer: Box<dyn Peer>,
    pub build: Option<PathBuf>,
}

/// The built-in origin.
pub struct Origin {
    pub server: procs::Server,
    pub addr: SocketAddr,
}

impl Origin {
    /// Requests the origin has seen for `path` so far.
    pub fn count(&self, path: &str) -> u64 {
        let out = crate::sh(&format!(
            "curl -s --max-time 5 http://{}/__stats",
            self.addr
        ));
        crate::origin::parse_stats(&out)
            .into_iter()
            .find(|(p, _)| p == path)
            .map_or(0, |(_, n)| n)
    }
}

/// A peer that started, and how to start it again.
pub struct Running {
    pub peer: Box<dyn Peer>,
    pub server: procs::Server,
    launch: peers::Launch,
    env: Vec<(String, String)>,
    log: PathBuf,
    port: u16,
    h2_port: u16,
    tls_port: u16,
}

impl Running {
    /// Where the peer serves `s`: its HTTPS, h2c or HTTP/1.1 port.
    pub fn url(&self, s: &Scenario) -> String {
        match (s.tls, s.h2) {
            (true, _) => format!("https://127.0.0.1:{}{}", self.tls_port, s.path),
            (false, true) => format!("http://127.0.0.1:{}{}", self.h2_port, s.path),
            (false, false) => format!("http://127.0.0.1:{}{}", self.port, s.path),
        }
    }

    /// A new process for the next run alone (its peak RSS is that run's); `false` when it did
    /// not listen again.
    pub fn restart(&mut self, cpus: &str) -> anyhow::Result<bool> {
        self.server.stop();
        self.server = procs::Server::start(
            cpus,
            &self.launch.program,
            &self.launch.args,
            &self.env,
            &self.log,
        )?;
        let addr: SocketAddr = format!("127.0.0.1:{}", self.port).parse()?;
        if !procs::wait_listening(addr, Duration::from_secs(20)) {
            eprintln!("    {} did not start again; run skipped", self.peer.name());
            return Ok(false);
        }
        Ok(true)
    }
}

/// The origin and the peers that started.
pub struct Servers {
    pub origin: Origin,
    pub running: Vec<Running>,
}

impl Servers {
    /// Starts the origin, then each candidate; one that cannot is noted in `skipped`. An error
    /// when none could.
    pub fn start(
        bench: &Bench<'_>,
        candidates: Vec<Candidate>,
        skipped: &mut Vec<String>,
    ) -> anyhow::Result<Servers> {
        let (server, addr) = procs::Server::origin(
            &bench.args.server_cpus,
            &bench.me,
            &bench.work.join("origin.log"),
        )?;
        let mut origin = Origin { server, addr };
        let tls_files =
            peers::TlsFiles::create(&bench.work).context("creating the benchmark certificate")?;
        let mut running = Vec::new();
        for c in candidates {
            if let Some(r) = start_peer(bench, &tls_files, addr, c, skipped)? {
                running.push(r);
            }
        }
        if running.is_empty() {
            origin.server.stop();
            bail!("no peer could be started");
        }
        Ok(Servers { origin, running })
    }

    /// Stops every server; returns the peers that took part as (name, label).
    pub fn stop(mut self) -> Vec<(String, String)> {
        let peers = self
            .running
            .iter()
            .map(|r| (r.peer.name().to_owned(), r.peer.label()))
            .collect();
        for mut r in self.running {
            r.server.stop();
        }
        self.origin.server.stop();
        peers
    }
}

/// Writes the peer's config, keeps a copy in the report and starts it; `None` (noted in
/// `skipped`) when it could not be configured or did not listen.
fn start_peer(
    bench: &Bench<'_>,
    tls: &peers::TlsFiles,
    origin: SocketAddr,
    c: Candidate,
    skipped: &mut Vec<String>,
) -> anyhow::Result<Option<Running>> {
    let (p, args) = (c.peer, bench.args);
    let dir = bench.work.join(p.name());
    std::fs::create_dir_all(&dir)?;
    let (port, h2_port, tls_port) = (
        procs::free_port()?,
        procs::free_port()?,
        procs::free_port()?,
    );
    let setup = peers::Setup {
        dir: &dir,
        port,
        h2_port,
        origin,
        workers: args.workers,
        rampart: c.build.as_deref().unwrap_or(&bench.rampart),
        tls_port,
        tls,
        rule_extra: bench.rule_extra.as_deref(),
        global_extra: bench.global_extra.as_deref(),
    };
    let launch = match p.prepare(&setup) {
        Ok(l) => l,
        Err(e) => {
            skipped.push(format!(
                "peer {}: skipped — could not write its config: {e}",
                p.name()
            ));
            return Ok(None);
        }
    };
    copy_configs(&dir, &bench.out.join("configs").join(p.name()))?;
    let env = environment(&dir, args.workers);
    let log = dir.join("stdout.log");
    let mut server =
        procs::Server::start(&args.server_cpus, &launch.program, &launch.args, &env, &log)?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    if !procs::wait_listening(addr, Duration::from_secs(20)) {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        skipped.push(format!(
            "peer {}: skipped — it did not start listening: {}",
            p.name(),
            log.lines().last().unwrap_or("")
        ));
        server.stop();
        return Ok(None);
    }
    eprintln!(
        "started {:<14} on 127.0.0.1:{port} (h2c {h2_port}) — {}",
        p.name(),
        p.label()
    );
    Ok(Some(Running {
        peer: p,
        server,
        launch,
        env,
        log,
        port,
        h2_port,
        tls_port,
    }))
}

/// A peer's environment: its home and XDG directories in its own directory (nothing of the
/// user's), and Go's worker limit.
fn environment(dir: &Path, workers: usize) -> Vec<(String, String)> {
    vec![
        ("HOME".to_owned(), dir.to_string_lossy().into_owned()),
        (
            "XDG_DATA_HOME".to_owned(),
            dir.to_string_lossy().into_owned(),
        ),
        (
            "XDG_CONFIG_HOME".to_owned(),
            dir.to_string_lossy().into_owned(),
        ),
        ("GOMAXPROCS".to_owned(), workers.to_string()),
    ]
}

/// Copies the peer's config files into the report, with those in its subdirectories (Traffic
/// Server keeps its own in `etc/`).
fn copy_configs(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)?.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let is_config = [
            ".conf",
            ".vcl",
            ".cfg",
            ".toml",
            ".config",
            ".yaml",
            "Caddyfile",
        ]
        .iter()
        .any(|x| name.ends_with(x));
        if p.is_file() && is_config && e.metadata()?.len() > 0 {
            std::fs::copy(&p, to.join(&name))?;
        } else if p.is_dir() && name == "etc" {
            copy_configs(&p, &to.join(&name))?;
        }
    }
    Ok(())
}
