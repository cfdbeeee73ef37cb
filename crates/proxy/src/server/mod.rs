//! accept: listeners, worker threads, the connection limit and graceful drain.
//!
//! Two runtime layouts (`worker_runtime`):
//! - `per-core` (default): `workers` threads, each with a single-threaded tokio runtime and its
//!   own `SO_REUSEPORT` listener per address, so the kernel spreads connections and a connection
//!   never changes thread. Each worker has its own upstream pool.
//! - `shared`: one multi-threaded runtime with `workers` threads and one listener per address.
//!
//! Each accepted connection is served in its own task (`transport/accept.rs`).
//!
//! Sockets are bound before any thread starts, so a bind error is reported at startup. A
//! reload (`reload.rs`) swaps the configuration each worker reads and tells workers which
//! sockets to open or close. On shutdown every worker stops accepting, lets in-flight
//! requests finish (idle keep-alive connections are closed at once) for at most
//! `shutdown_timeout`, then returns.

pub mod probes;
pub mod reload;
pub mod restart;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::{io, time::Duration};

use rampart_config::{Config, RuntimeMode};
use socket2::SockRef;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

use tracing::Instrument as _;

use crate::admin::commands::{Control, Requests};
use crate::pipeline::conn_info::{ConnInfo, Scheme};
use crate::server::reload::{ListenerCmd, Live, ReloadError, Reloaded, WorkerStart};
use crate::telemetry::metrics::Counted;
use crate::transport::accept::{Accepted, Conn};
use crate::transport::in_force::Slot;
use crate::transport::limits::ConnLimit;
use crate::transport::listen::{self, Bound, Kind};

/// Bound sockets, ready to serve.
#[derive(Debug)]
pub struct Server {
    config: Config,
    /// Worker groups: one per worker thread under `per-core`, one in all under `shared`.
    groups: usize,
    bound: Vec<Bound>,
    /// Certificates and the TLS server configuration (`None` without an HTTPS listener).
    tls: Option<rampart_tls::Tls>,
    /// Redis shared with other instances (`None` without `redis_url` / `redis_cluster`).
    shared: Option<rampart_redis::Shared>,
}

/// How long a stopping process waits for its last spans to reach the collector.
const TRACE_FLUSH_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// A running server: reload it, signal it to stop, then join it.
#[derive(Debug)]
pub struct Running {
    shutdown: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
    live: Mutex<Live>,
    requests: Option<Requests>,
}

impl Running {
    /// Starts a graceful shutdown; returns immediately.
    pub fn shutdown(&self) {
        crate::telemetry::metrics::get().stop_streams();
        self.shutdown.send_replace(true);
        // While the workers drain: the disk tier's last writes, and its directory's lock for
        // the process that takes over.
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .close_disk();
    }

    /// Waits until every worker has drained and stopped.
    pub fn join(self) {
        let health = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stop_health();
        for t in self.threads.into_iter().chain(health) {
            if t.join().is_err() {
                tracing::error!("a worker thread panicked");
            }
        }
        // The spans of the last requests go out (a collector that does not answer delays the
        // exit by at most the grace).
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .flush_traces(TRACE_FLUSH_GRACE);
    }

    /// Puts `config` in service for new requests (see `reload.rs`). On an error the old
    /// configuration stays in service.
    pub fn reload(&self, config: Config) -> Result<Reloaded, ReloadError> {
        let done = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reload(config);
        crate::telemetry::metrics::get().reloaded(done.is_ok());
        done
    }

    /// For an upgrade: the listening descriptors and the value of
    /// [`crate::transport::listen::HANDOFF_ENV`] that names them for the new process.
    pub fn handoff(&self) -> crate::transport::listen::Handoff {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .handoff()
    }

    /// Reopens the access log file (SIGUSR1).
    pub fn reopen_logs(&self) -> std::io::Result<()> {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reopen_logs()
    }

    /// The addresses in service now: (plain HTTP, HTTPS).
    pub fn addrs(&self) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        (live.addrs(Kind::Http), live.addrs(Kind::Https))
    }

    /// The HTTP/3 (UDP) addresses in service now.
    pub fn h3_addrs(&self) -> Vec<SocketAddr> {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.addrs(Kind::H3)
    }

    /// The management API's reload and rule requests, for whoever owns the configuration
    /// file (once; `None` after).
    pub fn take_requests(&mut self) -> Option<Requests> {
        self.requests.take()
    }
}

impl Server {
    /// Loads the certificates (files, local CA, stored ACME ones) and binds every listener. A
    /// port of 0 is resolved once and shared by all workers.
    pub fn bind(config: Config) -> io::Result<Server> {
        let groups = match config.runtime {
            RuntimeMode::PerCore => config.workers.max(1),
            RuntimeMode::Shared => 1,
        };
        // One metrics shard per worker thread under `per-core`; `shared` threads share one.
        crate::telemetry::metrics::init(groups);
        let shared = crate::server::reload::start_shared(&config).map_err(io::Error::other)?;
        let tls = rampart_tls::start(&config, shared.as_ref()).map_err(io::Error::other)?;
        // An upgrade: the old process's sockets, taken over as they are.
        let mut inherited = listen::inherit();
        let mut bound: Vec<Bound> = Vec::new();
        for (addr, kind) in listen::wanted(&config, tls.is_some()) {
            // HTTP/3 takes the port of the HTTPS socket of the same configured address.
            let https = bound
                .iter()
                .find(|b| b.configured == addr && b.kind == Kind::Https)
                .map(|b| b.actual);
            bound.push(listen::bind_or_inherit(
                addr,
                kind,
                &config,
                groups,
                &mut inherited,
                https,
            )?);
        }
        listen::discard(inherited);
        Ok(Server {
            config,
            groups,
            bound,
            tls,
            shared,
        })
    }

    /// The plain-HTTP addresses actually bound (ports resolved).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.addrs(Kind::Http)
    }

    /// The HTTPS addresses actually bound (empty when no rule has a certificate).
    pub fn https_addrs(&self) -> Vec<SocketAddr> {
        self.addrs(Kind::Https)
    }

    /// The HTTP/3 (UDP) addresses actually bound (empty when `http3` is off).
    pub fn h3_addrs(&self) -> Vec<SocketAddr> {
        self.addrs(Kind::H3)
    }

    fn addrs(&self, kind: Kind) -> Vec<SocketAddr> {
        self.bound
            .iter()
            .filter(|b| b.kind == kind)
            .map(|b| b.actual)
            .collect()
    }

    /// Starts the workers and returns at once.
    pub fn start(self) -> io::Result<Running> {
        let (tx, rx) = watch::channel(false);
        let (control, requests) = Control::channel();
        let runtime = self.config.runtime;
        let workers = self.config.workers.max(1);
        let (live, starts) = Live::start(
            self.config,
            self.bound,
            self.tls,
            self.shared,
            self.groups,
            control,
        )?;
        let limit = live.limit();
        let mut threads = Vec::new();
        for (i, start) in starts.into_iter().enumerate() {
            let (limit, rx) = (limit.clone(), rx.clone());
            let name = match runtime {
                RuntimeMode::PerCore => format!("rampart-w{i}"),
                RuntimeMode::Shared => "rampart-rt".to_owned(),
            };
            let t = std::thread::Builder::new().name(name).spawn(move || {
                crate::telemetry::metrics::set_shard(i);
                let rt = match runtime {
                    // One single-threaded runtime per worker thread.
                    RuntimeMode::PerCore => tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build(),
                    RuntimeMode::Shared => tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(workers)
                        .thread_name("rampart-w")
                        .enable_all()
                        .build(),
                };
                match rt {
                    Ok(rt) => rt.block_on(worker(start, limit, rx)),
                    Err(e) => tracing::error!(error = %e, "cannot start worker runtime"),
                }
            })?;
            threads.push(t);
        }
        Ok(Running {
            shutdown: tx,
            threads,
            live: Mutex::new(live),
            requests: Some(requests),
        })
    }
}

/// One worker: an accept loop per listener, opened and closed as the worker is told (startup,
/// reloads); all share the worker's `Current` in its slot.
async fn worker(start: WorkerStart, limit: Arc<ConnLimit>, mut shutdown: watch::Receiver<bool>) {
    let WorkerStart { slot, mut cmds } = start;
    // Every connection task holds a sender; the drain ends when all of them are gone.
    let (open_tx, mut open_rx) = mpsc::channel::<()>(1);
    // ((address, kind), close, task): an upgrade can hand one worker two sockets of the same
    // address; HTTPS and HTTP/3 share an address (TCP and UDP).
    type Loop = (
        (SocketAddr, Kind),
        oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    );
    let mut loops: Vec<Loop> = Vec::new();
    loop {
        let cmd = tokio::select! {
            c = cmds.recv() => c,
            _ = shutdown.changed() => None,
        };
        match cmd {
            Some(ListenerCmd::Open(socket, Kind::H3, configured)) => {
                let udp = std::net::UdpSocket::from(socket);
                let Ok(addr) = udp.local_addr() else {
                    continue;
                };
                let (close, closed) = oneshot::channel();
                let task = tokio::spawn(crate::transport::h3::accept_loop(
                    udp,
                    configured,
                    slot.clone(),
                    limit.clone(),
                    open_tx.clone(),
                    closed,
                    shutdown.clone(),
                ));
                loops.push(((addr, Kind::H3), close, task));
            }
            Some(ListenerCmd::Open(socket, kind, configured)) => {
                let tls = kind == Kind::Https;
                let listener = match TcpListener::from_std(socket.into()) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot register listener");
                        continue;
                    }
                };
                let Ok(addr) = listener.local_addr() else {
                    continue;
                };
                let (close, closed) = oneshot::channel();
                let task = tokio::spawn(accept_loop(
                    listener,
                    (tls, configured),
                    slot.clone(),
                    limit.clone(),
                    open_tx.clone(),
                    closed,
                    shutdown.clone(),
                ));
                loops.push(((addr, kind), close, task));
            }
            Some(ListenerCmd::Close(addr, kind)) => {
                let (gone, kept) = loops.into_iter().partition(|(a, _, _)| *a == (addr, kind));
                loops = kept;
                for (_, close, task) in gone {
                    let _ = close.send(());
                    let _ = task.await;
                }
            }
            None => break,
        }
    }
    for (_, close, task) in loops {
        drop(close);
        let _ = task.await;
    }
    drop(open_tx);
    let drain = slot.load().conn.shutdown_timeout;
    if tokio::time::timeout(drain, open_rx.recv()).await.is_err() {
        tracing::warn!(?drain, "drain time over; closing remaining connections");
    }
}

/// Accepts on one listener (`kind`: HTTPS or not, and the address as configured) until the
/// worker closes it or stops.
async fn accept_loop(
    listener: TcpListener,
    kind: (bool, SocketAddr),
    slot: Arc<Slot>,
    limit: Arc<ConnLimit>,
    open: mpsc::Sender<()>,
    mut closed: oneshot::Receiver<()>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (tls, configured) = kind;
    let scheme = if tls { Scheme::Https } else { Scheme::Http };
    // Every connection a listener bound to one address accepts has that address: asking the
    // kernel (`getsockname`) is needed only for a wildcard one.
    let bound = listener
        .local_addr()
        .ok()
        .filter(|a| !a.ip().is_unspecified());
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            _ = &mut closed => break,
            x = listener.accept() => x,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::error!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Then a connection slot: at the limit, this connection waits for one, and the next
        // ones wait in the backlog. (Taking the slot before accepting would hold one per
        // idle listener, which HTTP/3, with no backlog to wait in, would find missing.)
        let permit = tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            _ = &mut closed => break,
            p = limit.acquire() => p,
        };
        // The configuration in force when the connection arrives sets its limits.
        let current = slot.load_full();
        let settings = &current.conn;
        let Some(admitted) = admit(settings, &stream, peer, kind) else {
            continue;
        };
        let local = match bound {
            Some(a) => a,
            None => stream.local_addr().unwrap_or(configured),
        };
        let accepted = Accepted {
            conn: Conn {
                slot: slot.clone(),
                info: Arc::new(ConnInfo::new(peer, local, scheme)),
                h2: settings.h2,
                limits: settings.limits,
                peer,
            },
            acceptor: admitted.acceptor,
            shared_alpn: settings.shared_alpn.clone().filter(|_| tls),
            proxy_header: admitted.proxied,
            per_ip: settings.per_ip.clone().filter(|_| admitted.proxied),
        };
        drop(current);
        // Counts the connection, its bytes and its end.
        let stream = Counted::new(stream, crate::telemetry::metrics::get().accepted(tls));
        // `logging_level = "debug"`: every line of the connection's requests carries these fields.
        let span = tracing::debug_span!("conn", %peer, scheme = scheme.as_str());
        let (open, mut stop) = (open.clone(), shutdown.clone());
        let per_ip = admitted.per_ip;
        // The connection's first requests (PROXY header, TLS, the protocol) in one allocation,
        // freed when they are done: the task, which lives as long as the connection, holds a
        // pointer to it, then what `keep` needs.
        let first = Box::pin(async move {
            let (per_ip_behind, parked) = accepted.serve(stream, &mut stop).await;
            let held = crate::transport::park::Held {
                permit,
                per_ip,
                per_ip_behind,
                open,
            };
            let conn = parked?;
            Some(Box::new(crate::transport::park::Kept { conn, held, stop }))
        });
        tokio::spawn(serve(first).instrument(span));
    }
}

/// A connection's task: its first requests (`first`: [`Accepted::serve`]), then, for a
/// plaintext HTTP/1.1 connection that went idle, the next ones each time they come
/// (`transport/idle.rs`).
async fn serve<F>(first: std::pin::Pin<Box<F>>)
where
    F: std::future::Future<Output = Option<Box<crate::transport::park::Kept>>>,
{
    if let Some(kept) = first.await {
        crate::transport::idle::keep(kept).await
    }
}

/// How a connection the listener accepted is let in under the settings in force.
struct Admitted {
    /// It starts with a PROXY header.
    proxied: bool,
    /// Its place in the per-address table (not for a proxied one: its client is known later).
    per_ip: Option<crate::transport::limits::PerIpSlot>,
    /// The TLS handshake to run first (HTTPS listeners).
    acceptor: Option<tokio_rustls::TlsAcceptor>,
}

/// Lets a connection in, or `None` to close it: a PROXY listener's untrusted peer, the
/// per-address limit reached, or an HTTPS listener a reload is closing. Sets TCP keep-alive.
fn admit(
    settings: &crate::transport::in_force::ConnSettings,
    stream: &tokio::net::TcpStream,
    peer: SocketAddr,
    (tls, configured): (bool, SocketAddr),
) -> Option<Admitted> {
    if let Some(ka) = &settings.keepalive {
        if let Err(e) = SockRef::from(&stream).set_tcp_keepalive(ka) {
            tracing::debug!(error = %e, "cannot set TCP keep-alive");
        }
    }
    // A listener that reads PROXY headers takes them from `proxy_protocol_from` only:
    // anyone else could claim any client address.
    let proxied = settings.proxy_protocol.expects(configured, tls);
    if proxied && !settings.proxy_protocol.trusts(peer.ip()) {
        let untrusted = crate::telemetry::metrics::PpRefusal::Untrusted;
        crate::telemetry::metrics::get().proxy_protocol_refused(untrusted);
        tracing::debug!(%peer, "PROXY protocol listener: peer not in proxy_protocol_from; connection closed");
        return None;
    }
    // Behind a balancer every connection comes from its address: the per-address limit
    // counts the client its PROXY header names instead (in the connection's task).
    let per_ip = match (&settings.per_ip, proxied) {
        (Some(table), false) => match table.acquire(peer.ip().to_canonical()) {
            Some(slot) => Some(slot),
            None => {
                crate::telemetry::metrics::get().refused_per_ip();
                tracing::debug!(%peer, "per-address connection limit reached; connection closed");
                return None;
            }
        },
        _ => None,
    };
    let acceptor = match (tls, &settings.tls) {
        (false, _) => None,
        (true, Some(t)) => Some(tokio_rustls::TlsAcceptor::from(t.clone())),
        // A reload turned HTTPS off; this listener is being closed.
        (true, None) => return None,
    };
    Some(Admitted {
        proxied,
        per_ip,
        acceptor,
    })
}

/// Raises the open-files soft limit to the hard limit, as a busy proxy needs (like NGINX's
/// `worker_rlimit_nofile`). Also used by the end-to-end tests, which open thousands of
/// connections.
#[allow(unsafe_code)]
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read/write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
