//! Server processes: started pinned (`taskset`) in their own process group, measured through
//! `/proc` (CPU time and peak memory of the whole process tree), and stopped with the group.

use std::collections::HashMap;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Process groups of every server started, so an interrupted run can stop them all.
static GROUPS: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

fn kill_group(pgid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
}

/// On SIGINT/SIGTERM: stop every server started so far, then exit (no peer is left running).
pub fn stop_all_on_signal() {
    std::thread::spawn(|| {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async {
            let Ok(mut term) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            else {
                return;
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        });
        let groups = GROUPS.lock().map(|g| g.clone()).unwrap_or_default();
        eprintln!("interrupted: stopping {} server(s)", groups.len());
        for g in &groups {
            kill_group(*g, "-TERM");
        }
        std::thread::sleep(Duration::from_secs(2));
        for g in &groups {
            kill_group(*g, "-KILL");
        }
        std::process::exit(130);
    });
}

/// CPU time per thread at one moment.
#[derive(Debug, Clone, Default)]
pub struct CpuSample {
    threads: HashMap<u32, u64>,
}

impl CpuSample {
    /// Seconds of CPU used between `earlier` and this sample. Threads that ended in between
    /// (an NGINX cache loader, a recycled Apache child) drop out instead of making the
    /// difference negative.
    pub fn since(&self, earlier: &CpuSample) -> f64 {
        self.threads
            .iter()
            .map(|(tid, ns)| ns.saturating_sub(earlier.threads.get(tid).copied().unwrap_or(0)))
            .sum::<u64>() as f64
            / 1e9
    }
}

/// A running server (with all its children).
pub struct Server {
    child: Child,
}

impl Server {
    /// Starts `program args` pinned to `cpus`, in a new process group, output to `log`.
    pub fn start(
        cpus: &str,
        program: &str,
        args: &[String],
        env: &[(String, String)],
        log: &Path,
    ) -> io::Result<Server> {
        let out = std::fs::File::create(log)?;
        let err = out.try_clone()?;
        let mut cmd = Command::new("taskset");
        cmd.arg("-c").arg(cpus).arg(program).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = cmd.spawn()?;
        if let Ok(mut g) = GROUPS.lock() {
            g.push(child.id());
        }
        Ok(Server { child })
    }

    /// Starts this tool's built-in origin (`me origin`) on a free loopback port pinned to
    /// `cpus`, and waits until it listens.
    pub fn origin(cpus: &str, me: &Path, log: &Path) -> io::Result<(Server, std::net::SocketAddr)> {
        Server::built_in("origin", cpus, me, log)
    }

    /// Starts this tool's fixed-response floor server (`me floor`), as [`Server::origin`].
    pub fn floor(cpus: &str, me: &Path, log: &Path) -> io::Result<(Server, std::net::SocketAddr)> {
        Server::built_in("floor", cpus, me, log)
    }

    fn built_in(
        command: &str,
        cpus: &str,
        me: &Path,
        log: &Path,
    ) -> io::Result<(Server, std::net::SocketAddr)> {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let args = [command.into(), "--listen".into(), addr.to_string()];
        let server = Server::start(cpus, &me.to_string_lossy(), &args, &[], log)?;
        if !wait_listening(addr, Duration::from_secs(10)) {
            return Err(io::Error::other(format!("the {command} did not start")));
        }
        Ok((server, addr))
    }

    /// Starts `rampart run` with the configuration `toml` (written to `dir/rampart.toml`, its
    /// output to `dir/rampart.log`) pinned to `cpus`, and waits until it listens on `addr`.
    pub fn rampart(
        cpus: &str,
        binary: &Path,
        toml: &str,
        dir: &Path,
        addr: std::net::SocketAddr,
    ) -> io::Result<Server> {
        let config = dir.join("rampart.toml");
        std::fs::write(&config, toml)?;
        let log = dir.join("rampart.log");
        let mut server = Server::start(
            cpus,
            &binary.to_string_lossy(),
            &[
                "run".into(),
                "--config".into(),
                config.to_string_lossy().into_owned(),
            ],
            &[],
            &log,
        )?;
        if !wait_listening(addr, Duration::from_secs(10)) {
            server.stop();
            return Err(io::Error::other(format!(
                "rampart did not start (see {})",
                log.display()
            )));
        }
        Ok(server)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// On-CPU time (user + system) of every thread of the tree now, from
    /// `/proc/PID/task/TID/schedstat` (nanoseconds; tick-based utime+stime would round short
    /// runs to zero). Compare two samples with [`CpuSample::since`].
    pub fn cpu_sample(&self) -> CpuSample {
        cpu_sample_of(self.pid())
    }

    /// Sum of resident memory (VmRSS) of the tree now, in bytes.
    pub fn rss(&self) -> u64 {
        tree(self.pid())
            .iter()
            .map(|p| status_kib(*p, "VmRSS:") * 1024)
            .sum()
    }

    /// Sum of peak resident memory (VmHWM) of the tree, in bytes.
    pub fn peak_rss(&self) -> u64 {
        tree(self.pid())
            .iter()
            .map(|p| status_kib(*p, "VmHWM:") * 1024)
            .sum()
    }

    /// Stops the process group: SIGTERM, then SIGKILL after a grace period.
    pub fn stop(&mut self) {
        let pgid = self.pid();
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{pgid}")])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !self.alive() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pgid}")])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

/// On-CPU time of every thread of `root` and its descendants now (see [`Server::cpu_sample`]).
pub fn cpu_sample_of(root: u32) -> CpuSample {
    cpu_sample_of_pids(&tree(root))
}

/// On-CPU time of every thread of the processes `pids` (not their children) now.
pub fn cpu_sample_of_pids(pids: &[u32]) -> CpuSample {
    let mut threads = HashMap::new();
    for &pid in pids {
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for t in tasks.flatten() {
                let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                    continue;
                };
                let ns = std::fs::read_to_string(t.path().join("schedstat"))
                    .ok()
                    .and_then(|s| {
                        s.split_whitespace()
                            .next()
                            .and_then(|v| v.parse::<u64>().ok())
                    })
                    .unwrap_or_else(|| (cpu_ticks(tid) as f64 / clock_ticks() * 1e9) as u64);
                threads.insert(tid, ns);
            }
        }
    }
    CpuSample { threads }
}

fn clock_ticks() -> f64 {
    // Linux's USER_HZ is 100 on every mainstream architecture; `getconf CLK_TCK` confirms.
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// Fields after the `(comm)` of /proc/PID/stat (comm may contain spaces).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

fn cpu_ticks(pid: u32) -> u64 {
    // After comm: state(0) ppid(1) ... utime(11) stime(12).
    stat_fields(pid).map_or(0, |f| {
        f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
    })
}

pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// `root` and all its descendants.
pub fn tree(root: u32) -> Vec<u32> {
    let mut parent = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                if let Some(ppid) =
                    stat_fields(pid).and_then(|f| f.get(1).and_then(|v| v.parse::<u32>().ok()))
                {
                    parent.insert(pid, ppid);
                }
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent.iter().filter(|(_, pp)| **pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// Polls until a TCP connection to `addr` succeeds.
pub fn wait_listening(addr: std::net::SocketAddr, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A free loopback port (bound and released; the suite starts everything right after).
pub fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_tree_and_cpu() {
        let me = std::process::id();
        assert!(tree(me).contains(&me));
        assert!(status_kib(me, "VmHWM:") > 0);
        // A child that burns CPU for a moment: its tree's CPU time must grow.
        let mut a = Server {
            child: Command::new("sh")
                .args([
                    "-c",
                    "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; sleep 1",
                ])
                .spawn()
                .expect("sh runs"),
        };
        let s1 = a.cpu_sample();
        std::thread::sleep(Duration::from_millis(300));
        let s2 = a.cpu_sample();
        assert!(s2.since(&s1) > 0.01, "measured {}", s2.since(&s1));
        a.stop();
    }
}
