//! accept: listeners, worker threads, the connection limit and graceful drain.
//!
//! Two runtime layouts (`worker_runtime`):
//! - `per-core` (default): `workers` threads, each with a single-threaded tokio runtime and its
//!   own `SO_REUSEPORT` listener per address, so the kernel spreads connections and a connection
//!   never changes thread. Each worker has its own upstream pool.
//! - `shared`: one multi-threaded runtime with `workers` threads and one listener per address.
//!
//! Sockets are bound before any thread starts, so a bind error is reported at startup. A
//! reload (`live.rs`) swaps the configuration each worker reads and tells workers which
//! sockets to open or close. On shutdown every worker stops accepting, lets in-flight
//! requests finish (idle keep-alive connections are closed at once) for at most
//! `shutdown_timeout`, then returns.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::{io, time::Duration};

use bytes::BytesMut;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rampart_config::{Config, RuntimeMode};
use socket2::SockRef;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

use tracing::Instrument as _;

use crate::body::ClientBody;
use crate::conn::ConnLimit;
use crate::control::{Control, Requests};
use crate::h1;
use crate::listen::{self, Bound};
use crate::live::{ListenerCmd, Live, Reloaded, Slot, WorkerStart};
use crate::metrics::Counted;
use crate::txn::{ConnInfo, Scheme};

/// Bound sockets, ready to serve.
#[derive(Debug)]
pub struct Server {
    config: Config,
    /// Worker groups: one per worker thread under `per-core`, one in all under `shared`.
    groups: usize,
    bound: Vec<Bound>,
    /// Certificates and the TLS server configuration (`None` without an HTTPS listener).
    tls: Option<rampart_tls::Tls>,
}

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
        crate::metrics::get().stop_streams();
        self.shutdown.send_replace(true);
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
    }

    /// Puts `config` in service for new requests (see `live.rs`). On an error the old
    /// configuration stays in service.
    pub fn reload(&self, config: Config) -> Result<Reloaded, String> {
        let done = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reload(config);
        crate::metrics::get().reloaded(done.is_ok());
        done
    }

    /// For an upgrade: the listening descriptors and the value of
    /// [`crate::listen::HANDOFF_ENV`] that names them for the new process.
    pub fn handoff(&self) -> (Vec<std::os::fd::RawFd>, String) {
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
        self.live.lock().unwrap_or_else(|p| p.into_inner()).addrs()
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
        crate::metrics::init(groups);
        let tls = rampart_tls::start(&config).map_err(io::Error::other)?;
        // An upgrade: the old process's sockets, taken over as they are.
        let mut inherited = listen::inherit();
        let bound = listen::wanted(&config, tls.is_some())
            .into_iter()
            .map(|(addr, is_tls)| {
                listen::bind_or_inherit(addr, is_tls, &config, groups, &mut inherited)
            })
            .collect::<io::Result<Vec<_>>>()?;
        if !inherited.is_empty() {
            tracing::warn!(
                sockets = inherited.len(),
                "inherited listening sockets for addresses this configuration no longer has: closed"
            );
        }
        Ok(Server {
            config,
            groups,
            bound,
            tls,
        })
    }

    /// The plain-HTTP addresses actually bound (ports resolved).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.bound
            .iter()
            .filter(|b| !b.tls)
            .map(|b| b.actual)
            .collect()
    }

    /// The HTTPS addresses actually bound (empty when no rule has a certificate).
    pub fn https_addrs(&self) -> Vec<SocketAddr> {
        self.bound
            .iter()
            .filter(|b| b.tls)
            .map(|b| b.actual)
            .collect()
    }

    /// Starts the workers and returns at once.
    pub fn start(self) -> io::Result<Running> {
        let (tx, rx) = watch::channel(false);
        let (control, requests) = Control::channel();
        let runtime = self.config.runtime;
        let workers = self.config.workers.max(1);
        let (live, starts) = Live::start(self.config, self.bound, self.tls, self.groups, control)?;
        let limit = live.limit();
        let mut threads = Vec::new();
        for (i, start) in starts.into_iter().enumerate() {
            let (limit, rx) = (limit.clone(), rx.clone());
            let name = match runtime {
                RuntimeMode::PerCore => format!("rampart-w{i}"),
                RuntimeMode::Shared => "rampart-rt".to_owned(),
            };
            let t = std::thread::Builder::new().name(name).spawn(move || {
                crate::metrics::set_shard(i);
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
    // (address, close, task): an upgrade can hand one worker two sockets of the same address.
    let mut loops: Vec<(SocketAddr, oneshot::Sender<()>, tokio::task::JoinHandle<()>)> = Vec::new();
    loop {
        let cmd = tokio::select! {
            c = cmds.recv() => c,
            _ = shutdown.changed() => None,
        };
        match cmd {
            Some(ListenerCmd::Open(std_listener, tls)) => {
                let listener = match TcpListener::from_std(std_listener) {
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
                    tls,
                    slot.clone(),
                    limit.clone(),
                    open_tx.clone(),
                    closed,
                    shutdown.clone(),
                ));
                loops.push((addr, close, task));
            }
            Some(ListenerCmd::Close(addr)) => {
                let (gone, kept) = loops.into_iter().partition(|(a, _, _)| *a == addr);
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

async fn accept_loop(
    listener: TcpListener,
    tls: bool,
    slot: Arc<Slot>,
    limit: Arc<ConnLimit>,
    open: mpsc::Sender<()>,
    mut closed: oneshot::Receiver<()>,
    mut shutdown: watch::Receiver<bool>,
) {
    let scheme = if tls { Scheme::Https } else { Scheme::Http };
    loop {
        // Take a connection slot first: at the limit, new connections wait in the backlog.
        let next = async {
            let permit = limit.acquire().await;
            (permit, listener.accept().await)
        };
        let (permit, accepted) = tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            _ = &mut closed => break,
            x = next => x,
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
        // The configuration in force when the connection arrives sets its limits.
        let current = slot.load_full();
        let settings = &current.conn;
        if let Some(ka) = &settings.keepalive {
            if let Err(e) = SockRef::from(&stream).set_tcp_keepalive(ka) {
                tracing::debug!(error = %e, "cannot set TCP keep-alive");
            }
        }
        let ip = peer.ip().to_canonical();
        let per_ip = match &settings.per_ip {
            Some(table) => match table.acquire(ip) {
                Some(slot) => Some(slot),
                None => {
                    crate::metrics::get().refused_per_ip();
                    tracing::debug!(%peer, "per-address connection limit reached; connection closed");
                    continue;
                }
            },
            None => None,
        };
        let acceptor = match (tls, &settings.tls) {
            (false, _) => None,
            (true, Some(t)) => Some(tokio_rustls::TlsAcceptor::from(t.clone())),
            // A reload turned HTTPS off; this listener is being closed.
            (true, None) => continue,
        };
        let conn = Conn {
            slot: slot.clone(),
            info: Arc::new(ConnInfo::new(ip, scheme)),
            h2: settings.h2.clone(),
            limits: settings.limits,
            peer,
        };
        drop(current);
        // Counts the connection, its bytes and its end.
        let stream = Counted::new(stream, crate::metrics::get().accepted(tls));
        // `logging_level = "debug"`: every line of the connection's requests carries these fields.
        let span = tracing::debug_span!("conn", %peer, scheme = scheme.as_str());
        let (open, mut stop) = (open.clone(), shutdown.clone());
        let task = async move {
            // Each protocol's state in its own allocation: the task itself stays small, and an
            // idle HTTP/1.1 connection holds only what h1::serve needs between requests.
            match acceptor {
                None => Box::pin(conn.serve(stream, &mut stop)).await,
                Some(acceptor) => Box::pin(conn.serve_tls(acceptor, stream, &mut stop)).await,
            }
            drop((permit, per_ip, open));
        };
        tokio::spawn(task.instrument(span));
    }
}

/// A client's TCP connection, its bytes counted for the metrics.
type ClientStream = Counted<tokio::net::TcpStream, crate::metrics::ConnStats>;

/// What a connection task needs.
struct Conn {
    /// Where each request finds the configuration in force.
    slot: Arc<Slot>,
    info: Arc<ConnInfo>,
    h2: Arc<hyper::server::conn::http2::Builder<TokioExecutor>>,
    limits: h1::Limits,
    peer: SocketAddr,
}

impl Conn {
    /// The TLS handshake (within the request-head timeout), then HTTP/2 or HTTP/1.1 by ALPN; a
    /// TLS-ALPN-01 validation ends with the handshake.
    async fn serve_tls(
        self,
        acceptor: tokio_rustls::TlsAcceptor,
        stream: ClientStream,
        stop: &mut watch::Receiver<bool>,
    ) {
        let peer = self.peer;
        let handshake = tokio::select! {
            r = tokio::time::timeout(self.limits.header_read_timeout, acceptor.accept(stream)) => r,
            _ = stop.changed() => return,
        };
        let metrics = crate::metrics::get();
        match handshake {
            Ok(Ok(tls)) => {
                metrics.handshake(Some(true));
                let alpn = tls.get_ref().1.alpn_protocol();
                if alpn == Some(rampart_tls::store::ACME_TLS_ALPN) {
                    // A TLS-ALPN-01 validation: the handshake was the answer.
                    tracing::debug!(%peer, "ACME tls-alpn-01 validation handshake");
                } else if alpn == Some(b"h2") {
                    self.serve_h2(tls, stop).await;
                } else {
                    self.serve(tls, stop).await;
                }
            }
            Ok(Err(e)) => {
                metrics.handshake(Some(false));
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
            }
            Err(_) => {
                metrics.handshake(None);
                tracing::debug!(%peer, "TLS handshake timed out");
            }
        }
    }

    /// Reads the first bytes: the HTTP/2 preface goes to hyper's HTTP/2 server, anything else
    /// to rampart's HTTP/1.1 server. A connection that sends nothing within the request-head
    /// timeout is closed (it would hold a connection slot).
    async fn serve<I>(self, mut io: I, stop: &mut watch::Receiver<bool>)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let mut first = BytesMut::new();
        let deadline = tokio::time::Instant::now() + self.limits.header_read_timeout;
        loop {
            let read = tokio::select! {
                r = tokio::time::timeout_at(deadline, h1::read_some(&mut io)) => r,
                _ = stop.changed() => return,
            };
            match read {
                Ok(Ok(b)) if !b.is_empty() => first.extend_from_slice(&b),
                _ => return,
            }
            let n = first.len().min(h1::H2_PREFACE.len());
            if first[..n] != h1::H2_PREFACE[..n] {
                break;
            }
            if n == h1::H2_PREFACE.len() {
                return Box::pin(self.serve_h2(h1::Rewind::new(first.freeze(), io), stop)).await;
            }
        }
        let (slot, info) = (self.slot, self.info);
        let serving = h1::serve(
            io,
            first,
            self.limits,
            move |req| {
                let (pipeline, info) = (slot.load().pipeline.clone(), info.clone());
                // Boxed: the connection's own state stays small between requests.
                Box::pin(async move { pipeline.handle(&info, req).await })
            },
            stop,
        );
        serving.await;
    }

    /// Serves HTTP/2 with hyper until the connection ends, the worker drains, or no request
    /// starts for a whole keep-alive period.
    async fn serve_h2<I>(self, io: I, stop: &mut watch::Receiver<bool>)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let started = Arc::new(AtomicU64::new(0));
        let svc = {
            let (started, slot, info) = (started.clone(), self.slot, self.info);
            service_fn(move |req: http::Request<hyper::body::Incoming>| {
                started.fetch_add(1, Ordering::Relaxed);
                let (pipeline, info) = (slot.load().pipeline.clone(), info.clone());
                async move { Ok::<_, Infallible>(pipeline.handle(&info, req.map(ClientBody::H2)).await) }
            })
        };
        let conn = self.h2.serve_connection(TokioIo::new(io), svc);
        tokio::pin!(conn);
        // Idle timeout: a connection that started no request for a whole period is shut down
        // gracefully. In-flight requests still complete, and a client trickling a header block
        // (which never becomes a request) cannot keep the connection open.
        let keepalive_timeout = self.limits.keepalive_timeout;
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + keepalive_timeout,
            keepalive_timeout,
        );
        let (mut seen, mut closing) = (0, false);
        let peer = self.peer;
        loop {
            tokio::select! {
                biased;
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    break;
                }
                _ = stop.changed(), if !closing => {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                _ = tick.tick() => {
                    let now = started.load(Ordering::Relaxed);
                    if now == seen && !closing {
                        tracing::debug!(%peer, "idle connection closed");
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                    seen = now;
                }
            }
        }
    }
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
