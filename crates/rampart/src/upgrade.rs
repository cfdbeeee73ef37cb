//! Upgrading the binary without dropping a connection, and telling systemd how things stand.
//!
//! SIGUSR2 starts the binary at the path this process was started from (the new version, once
//! the package manager has replaced the file) with the same arguments, and hands it the
//! listening sockets: their descriptors survive `exec` and are named in
//! `RAMPART_LISTEN_FDS`. The new process loads its configuration, takes the sockets over (the
//! same sockets: connections waiting in their queues are not lost), starts serving, tells
//! systemd it is the main process now, and sends SIGTERM to the old one, which stops accepting
//! and finishes its in-flight requests. If the new process fails to start, it exits, and the old
//! one says so and goes on serving.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;

use rampart_proxy::transport::listen::{set_inheritable, HANDOFF_ENV};
use rampart_proxy::Running;

/// Set in the new process: the old process's id, to stop once the new one serves.
const FROM_ENV: &str = "RAMPART_UPGRADE_FROM";

/// Why a SIGUSR2 started no new process (this one goes on serving).
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("an upgrade is in progress already (process {0})")]
    InProgress(u32),
    #[error(
        "the process this one took over from is still finishing its HTTP/3 connections; \
         upgrade again once it has exited (shutdown_timeout_seconds at most)"
    )]
    PredecessorDraining,
    #[error("cannot hand over socket {0}: {1}")]
    HandOver(std::os::fd::RawFd, std::io::Error),
    #[error("cannot start {}: {source}", .exe.display())]
    Start {
        exe: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot watch the new process: {0}")]
    Watch(std::io::Error),
}

/// What an upgrade needs to know about this process.
pub struct Upgrader {
    exe: PathBuf,
    args: Vec<OsString>,
    /// The new process while it has not taken over: its exit status arrives here.
    pending: Option<(u32, mpsc::Receiver<ExitStatus>)>,
}

impl Upgrader {
    /// Remembers the binary's path and the arguments now, before a package upgrade replaces
    /// the file (the path then names the new binary).
    pub fn new() -> Upgrader {
        let exe = std::env::current_exe()
            .ok()
            .map(|p| {
                // Linux names a replaced binary "PATH (deleted)".
                let s = p.to_string_lossy();
                PathBuf::from(s.strip_suffix(" (deleted)").unwrap_or(&s).to_owned())
            })
            .unwrap_or_else(|| PathBuf::from("rampart"));
        Upgrader {
            exe,
            args: std::env::args_os().skip(1).collect(),
            pending: None,
        }
    }

    /// Starts the new binary with the listening sockets; returns its process id.
    pub fn start(&mut self, running: &Running) -> Result<u32, UpgradeError> {
        self.poll();
        if let Some((pid, _)) = &self.pending {
            return Err(UpgradeError::InProgress(*pid));
        }
        if rampart_proxy::transport::h3::relay::predecessor_draining() {
            return Err(UpgradeError::PredecessorDraining);
        }
        let handoff = running.handoff();
        let (fds, spec) = (&handoff.fds, &handoff.spec);
        for &fd in fds {
            set_inheritable(fd, true).map_err(|e| UpgradeError::HandOver(fd, e))?;
        }
        let spawned = Command::new(&self.exe)
            .args(&self.args)
            .env(HANDOFF_ENV, spec)
            .env(FROM_ENV, std::process::id().to_string())
            .stdin(Stdio::null())
            .spawn();
        for &fd in fds {
            let _ = set_inheritable(fd, false);
        }
        // The new process has its copies of the HTTP/3 links' far ends; this one closes its own
        // (so a link reports the new process gone when it exits).
        drop(handoff);
        let mut child = spawned.map_err(|source| UpgradeError::Start {
            exe: self.exe.clone(),
            source,
        })?;
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("rampart-upgrade".into())
            .spawn(move || {
                if let Ok(status) = child.wait() {
                    let _ = tx.send(status);
                }
            })
            .map_err(UpgradeError::Watch)?;
        self.pending = Some((pid, rx));
        Ok(pid)
    }

    /// Reports a new process that exited before taking over; `true` when one did.
    pub fn poll(&mut self) -> bool {
        let Some((pid, rx)) = &self.pending else {
            return false;
        };
        match rx.try_recv() {
            Ok(status) => {
                eprintln!(
                    "rampart: upgrade failed: the new process {pid} exited ({status}) before taking over; this process goes on serving"
                );
                self.pending = None;
                true
            }
            Err(mpsc::TryRecvError::Disconnected) => {
                self.pending = None;
                false
            }
            Err(mpsc::TryRecvError::Empty) => false,
        }
    }

    /// The binary a SIGUSR2 starts.
    pub fn exe(&self) -> &std::path::Path {
        &self.exe
    }
}

/// In a process started by an upgrade, once it serves: becomes systemd's main process and stops
/// the old one. Otherwise tells systemd the service is ready.
pub fn ready() {
    let Some(old) = std::env::var_os(FROM_ENV) else {
        sd_notify("READY=1");
        return;
    };
    std::env::remove_var(FROM_ENV);
    sd_notify(&format!("MAINPID={}\nREADY=1", std::process::id()));
    match old.to_string_lossy().parse::<i32>() {
        Ok(pid) if pid > 1 => {
            eprintln!("rampart: upgrade: serving; stopping the previous process {pid}");
            terminate(pid);
        }
        _ => eprintln!("rampart: upgrade: {FROM_ENV} is not a process id; nothing stopped"),
    }
}

#[allow(unsafe_code)]
fn terminate(pid: i32) {
    // SAFETY: kill(2) with a process id and a signal number; no memory is involved.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
}

/// Sends `state` to systemd's notification socket (`Type=notify`), when there is one.
pub fn sd_notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let path = path.to_string_lossy().into_owned();
    let sent = match path.strip_prefix('@') {
        // An abstract socket (systemd's usual choice).
        Some(name) => {
            use std::os::linux::net::SocketAddrExt as _;
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                .and_then(|a| sock.send_to_addr(state.as_bytes(), &a))
        }
        None => sock.send_to(state.as_bytes(), &path),
    };
    if let Err(e) = sent {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}
