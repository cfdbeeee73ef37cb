//! The fault schedule and what it acts on: the two origins (`soak-origin` processes, killed
//! with SIGKILL and started again on the same port), Redis (`redis-server`, the same), and the
//! rampart under test (reloads, upgrades). Each kind of fault runs on its own thread with its
//! own interval, from one interval after the start to a few seconds before the end (so the run
//! ends with everything back up); every fault is logged with when it started and ended, which
//! is what explains the failures it causes. A sampler thread reads the serving process's RSS
//! and open descriptors every second, and the cache's own account of its memory from
//! `/_rampart/metrics`.

use std::io::BufRead as _;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde::Serialize;

use super::rampart::{self, Rampart};

/// One fault injected.
#[derive(Debug, Clone, Serialize)]
pub struct FaultEvent {
    /// `reload`, `upgrade`, `origin-kill`, `redis-kill`.
    pub kind: &'static str,
    /// Seconds since the start: when it began and when everything was back.
    pub start_s: f64,
    pub end_s: f64,
    pub detail: String,
    /// Whether it went as planned (a refused reload, an upgrade whose new process did not
    /// take over, an origin that did not come back: `false`).
    pub ok: bool,
}

/// The faults so far.
#[derive(Debug)]
pub struct FaultLog {
    start: Instant,
    events: Mutex<Vec<FaultEvent>>,
}

impl FaultLog {
    pub fn new(start: Instant) -> FaultLog {
        FaultLog {
            start,
            events: Mutex::new(Vec::new()),
        }
    }

    fn add(&self, kind: &'static str, from: Instant, result: anyhow::Result<String>) {
        let (ok, detail) = match result {
            Ok(d) => (true, d),
            Err(e) => (false, format!("{e:#}")),
        };
        let ev = FaultEvent {
            kind,
            start_s: from.saturating_duration_since(self.start).as_secs_f64(),
            end_s: self.start.elapsed().as_secs_f64(),
            detail,
            ok,
        };
        eprintln!(
            "soak: {:>6.1} s  {kind:<12} {}{}",
            ev.start_s,
            if ok { "" } else { "FAILED: " },
            ev.detail
        );
        if let Ok(mut e) = self.events.lock() {
            e.push(ev);
        }
    }

    pub fn events(&self) -> Vec<FaultEvent> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

/// A `soak-origin` process.
pub struct OriginProc {
    pub name: &'static str,
    pub addr: SocketAddr,
    me: PathBuf,
    seed: u64,
    log: PathBuf,
    child: Option<Child>,
}

impl OriginProc {
    /// Starts it on `listen` (port 0: the kernel chooses, and the address is read back).
    pub fn start(
        me: &Path,
        seed: u64,
        name: &'static str,
        listen: SocketAddr,
        log: &Path,
    ) -> anyhow::Result<OriginProc> {
        let mut o = OriginProc {
            name,
            addr: listen,
            me: me.to_owned(),
            seed,
            log: log.to_owned(),
            child: None,
        };
        o.spawn()?;
        Ok(o)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut child = Command::new(&self.me)
            .args(["soak-origin", "--listen", &self.addr.to_string()])
            .args(["--seed", &self.seed.to_string(), "--name", self.name])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .process_group(0)
            .spawn()?;
        let Some(out) = child.stdout.take() else {
            bail!("no stdout");
        };
        // The first line names the address; read it on a thread so a stuck child cannot
        // stall the run.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(15)).unwrap_or_default();
        match line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
        {
            Some(a) => {
                self.addr = a;
                self.child = Some(child);
                Ok(())
            }
            None => {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "origin {} did not start on {} ({line:?})",
                    self.name,
                    self.addr
                )
            }
        }
    }
}

impl Restartable for OriginProc {
    fn spawn(&mut self) -> anyhow::Result<()> {
        OriginProc::spawn(self)
    }

    fn child(&mut self) -> &mut Option<Child> {
        &mut self.child
    }
}

/// A process the schedule kills and starts again (an origin, Redis).
pub trait Restartable {
    /// Starts it on its port.
    fn spawn(&mut self) -> anyhow::Result<()>;

    /// The running process, if any.
    fn child(&mut self) -> &mut Option<Child>;

    /// SIGKILL: every connection it had is reset by the kernel.
    fn kill(&mut self) {
        if let Some(mut c) = self.child().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port (retried for 10 s: the port may be briefly taken).
    fn restart(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }
}

impl Drop for OriginProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A `redis-server` on loopback, without persistence.
pub struct RedisProc {
    pub addr: SocketAddr,
    log: PathBuf,
    child: Option<Child>,
}

impl RedisProc {
    pub fn start(log: &Path) -> anyhow::Result<RedisProc> {
        let port = crate::procs::free_port()?;
        let mut r = RedisProc {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            log: log.to_owned(),
            child: None,
        };
        r.spawn()?;
        Ok(r)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.addr.port().to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .args(["--save", "", "--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .context("redis-server")?;
        self.child = Some(child);
        if !crate::procs::wait_listening(self.addr, Duration::from_secs(10)) {
            self.kill();
            bail!("redis-server did not listen on {}", self.addr);
        }
        Ok(())
    }
}

impl Restartable for RedisProc {
    fn spawn(&mut self) -> anyhow::Result<()> {
        RedisProc::spawn(self)
    }

    fn child(&mut self) -> &mut Option<Child> {
        &mut self.child
    }
}

impl Drop for RedisProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// When each kind of fault happens (seconds; 0 turns a kind off) and for how long.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Schedule {
    pub reload_every_s: u64,
    pub upgrade_every_s: u64,
    pub origin_kill_every_s: u64,
    pub origin_down_s: u64,
    pub redis_kill_every_s: u64,
    pub redis_down_s: u64,
    /// No fault starts in the last this many seconds.
    pub quiet_tail_s: u64,
}

/// What the fault threads act on.
pub struct Targets {
    pub rampart: Arc<Mutex<Rampart>>,
    pub origins: Vec<Arc<Mutex<OriginProc>>>,
    pub redis: Option<Arc<Mutex<RedisProc>>>,
    /// How long an old process may drain after an upgrade.
    pub drain: Duration,
}

/// Sleeps until `at` unless `stop` is set first; `false` when stopped.
fn sleep_until(at: Instant, stop: &AtomicBool) -> bool {
    while Instant::now() < at {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50).min(at - Instant::now()));
    }
    !stop.load(Ordering::Relaxed)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// A fault, run at its `k`th time (1, 2, …).
type Fault = Box<dyn FnMut(u64) + Send>;

/// The fault threads: each runs its fault at `start + k × every` for k = 1, 2, … while that is
/// before `last`, and ends early when `stop` is set.
struct Threads {
    start: Instant,
    last: Instant,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Threads {
    /// Starts a thread running `fault` every `every_s` seconds; none when `every_s` is 0.
    fn every(&mut self, every_s: u64, mut fault: Fault) {
        if every_s == 0 {
            return;
        }
        let (start, last, stop) = (self.start, self.last, self.stop.clone());
        self.threads.push(std::thread::spawn(move || {
            for k in 1.. {
                let at = start + Duration::from_secs(every_s * k);
                if at >= last || !sleep_until(at, &stop) {
                    break;
                }
                fault(k);
            }
        }));
    }
}

/// Starts one thread per kind of fault; they end by themselves before `end`.
pub fn spawn(
    schedule: Schedule,
    targets: &Targets,
    log: &Arc<FaultLog>,
    start: Instant,
    end: Instant,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    let last = end
        .checked_sub(Duration::from_secs(schedule.quiet_tail_s))
        .unwrap_or(start);
    let mut threads = Threads {
        start,
        last,
        stop: stop.clone(),
        threads: Vec::new(),
    };
    threads.every(schedule.reload_every_s, reload(targets, log));
    threads.every(schedule.upgrade_every_s, upgrade(targets, log));
    let origin_down = Duration::from_secs(schedule.origin_down_s);
    threads.every(
        schedule.origin_kill_every_s,
        origin_kill(targets, log, origin_down, stop),
    );
    if let Some(redis) = &targets.redis {
        let redis_down = Duration::from_secs(schedule.redis_down_s);
        threads.every(
            schedule.redis_kill_every_s,
            redis_kill(redis, log, redis_down, stop),
        );
    }
    threads.threads
}

/// SIGHUP to rampart.
fn reload(targets: &Targets, log: &Arc<FaultLog>) -> Fault {
    let (r, log) = (targets.rampart.clone(), log.clone());
    Box::new(move |_| {
        let mut g = lock(&r);
        let t = Instant::now();
        let res = g.reload();
        drop(g);
        log.add("reload", t, res);
    })
}

/// SIGUSR2 to rampart; as planned when the old process exits within its drain time.
fn upgrade(targets: &Targets, log: &Arc<FaultLog>) -> Fault {
    let (r, log, drain) = (targets.rampart.clone(), log.clone(), targets.drain);
    Box::new(move |_| {
        // Reloads wait while the new process takes over, not while the old one drains.
        let mut g = lock(&r);
        let t = Instant::now();
        let res = g.upgrade();
        drop(g);
        let within = drain + Duration::from_secs(10);
        let res = res.and_then(|(old, new)| {
            if rampart::wait_exit(old, within) {
                Ok(format!("process {old} → {new}"))
            } else {
                Err(anyhow::anyhow!(
                    "process {new} serves, but the old process {old} did not exit within {} s",
                    within.as_secs()
                ))
            }
        });
        log.add("upgrade", t, res);
    })
}

/// SIGKILL to an origin, started again after `down`.
fn origin_kill(
    targets: &Targets,
    log: &Arc<FaultLog>,
    down: Duration,
    stop: &Arc<AtomicBool>,
) -> Fault {
    let (origins, log, stop) = (targets.origins.clone(), log.clone(), stop.clone());
    Box::new(move |k| {
        // The first origin (the one the rule prefers) on odd rounds, the other on even.
        let Some(o) = origins.get(((k + 1) % 2) as usize).or(origins.first()) else {
            return;
        };
        let t = Instant::now();
        let (name, addr) = {
            let mut g = lock(o);
            g.kill();
            (g.name, g.addr)
        };
        sleep_until(t + down, &stop);
        let res = lock(o)
            .restart()
            .map(|()| {
                format!(
                    "origin {name} ({addr}) killed (SIGKILL), back after {} s",
                    down.as_secs()
                )
            })
            .with_context(|| format!("origin {name} ({addr}) did not come back"));
        log.add("origin-kill", t, res);
    })
}

/// SIGKILL to Redis, started again after `down`.
fn redis_kill(
    redis: &Arc<Mutex<RedisProc>>,
    log: &Arc<FaultLog>,
    down: Duration,
    stop: &Arc<AtomicBool>,
) -> Fault {
    let (redis, log, stop) = (redis.clone(), log.clone(), stop.clone());
    Box::new(move |_| {
        let t = Instant::now();
        let addr = {
            let mut g = lock(&redis);
            g.kill();
            g.addr
        };
        sleep_until(t + down, &stop);
        let res = lock(&redis)
            .restart()
            .map(|()| {
                format!(
                    "redis-server ({addr}) killed (SIGKILL), back after {} s",
                    down.as_secs()
                )
            })
            .context("redis-server did not come back");
        log.add("redis-kill", t, res);
    })
}

/// One sample of the serving process.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub pid: u32,
    pub rss_bytes: u64,
    pub fds: usize,
    /// What the cache says it holds (`/_rampart/metrics`: stored responses, room reserved by
    /// bodies on their way in, bodies pinned outside entries), when it answered.
    pub cache_bytes: Option<u64>,
}

/// The cache's own account of its memory from `/_rampart/metrics` (`metrics_allow` has
/// loopback): the stored responses' size, the room reserved by bodies on their way in, and
/// the bodies pinned outside entries; `None` when it did not answer within 500 ms.
fn cache_bytes(http: SocketAddr) -> Option<u64> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect_timeout(&http, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(b"GET /_rampart/metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let gauge = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let size = gauge("rampart_cache_size_bytes")?;
    let more = gauge("rampart_cache_reserved_bytes").unwrap_or(0.0)
        + gauge("rampart_cache_pinned_bytes").unwrap_or(0.0);
    Some((size + more) as u64)
}

/// Samples the serving process every second until `stop`.
pub fn sampler(
    pid: Arc<AtomicU32>,
    http: SocketAddr,
    start: Instant,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Sample>> {
    std::thread::spawn(move || {
        let mut samples = Vec::new();
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let p = pid.load(Ordering::Relaxed);
            if let Some(fds) = rampart::fds(p) {
                samples.push(Sample {
                    t_s: start.elapsed().as_secs_f64(),
                    pid: p,
                    rss_bytes: rampart::rss(p),
                    fds,
                    cache_bytes: cache_bytes(http),
                });
            }
            next += Duration::from_secs(1);
            sleep_until(next, &stop);
        }
        samples
    })
}
