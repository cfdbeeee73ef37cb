//! accept: listeners, worker threads, the connection limit and graceful drain.
//!
//! Two runtime layouts (`worker_runtime`):
//! - `per-core` (default): `workers` threads, each with a single-threaded tokio runtime and its
//!   own `SO_REUSEPORT` listener per address, so the kernel spreads connections and a connection
//!   never changes thread. Each worker has its own upstream pool.
//! - `shared`: one multi-threaded runtime with `workers` threads and one listener per address.
//!
//! Sockets are bound before any thread starts, so a bind error is reported at startup. On
//! shutdown every worker stops accepting, lets in-flight requests finish (idle keep-alive
//! connections are closed at once) for at most `shutdown_timeout`, then returns.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::BytesMut;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rampart_config::{Config, RuntimeMode};
use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use tracing::Instrument as _;

use crate::body::ClientBody;
use crate::cache::Cache;
use crate::conn::PerIp;
use crate::h1;
use crate::pipeline::Pipeline;
use crate::route::Router;
use crate::txn::{ConnInfo, Scheme};
use crate::upstream::Upstream;
use crate::worker::Worker;

/// Listen backlog when `max_backlog` is unset (Linux's default `somaxconn`).
const DEFAULT_BACKLOG: i32 = 4096;

/// Bound sockets, ready to serve.
#[derive(Debug)]
pub struct Server {
    config: Arc<Config>,
    /// One entry per worker thread (a single entry for the shared runtime), each holding one
    /// listener per configured address and whether it serves HTTPS.
    sockets: Vec<Vec<(std::net::TcpListener, bool)>>,
    local_addrs: Vec<SocketAddr>,
    https_addrs: Vec<SocketAddr>,
    /// Certificates and the TLS server configuration (`None` without an HTTPS listener).
    tls: Option<rampart_tls::Tls>,
}

/// A running server: signal it to stop, then join it.
#[derive(Debug)]
pub struct Running {
    shutdown: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
}

impl Running {
    /// Starts a graceful shutdown; returns immediately.
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Waits until every worker has drained and stopped.
    pub fn join(self) {
        for t in self.threads {
            if t.join().is_err() {
                tracing::error!("a worker thread panicked");
            }
        }
    }
}

/// Whether another socket already listens on `addr`: a bind without `SO_REUSEPORT` is refused
/// then (the probe socket is closed at once).
fn listened_on_by_another(addr: SocketAddr) -> bool {
    let Ok(probe) = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
    else {
        return false;
    };
    let _ = probe.set_reuse_address(true);
    if addr.is_ipv6() {
        let _ = probe.set_only_v6(true);
    }
    matches!(probe.bind(&addr.into()), Err(e) if e.kind() == io::ErrorKind::AddrInUse)
}

fn bind_one(
    addr: SocketAddr,
    config: &Config,
    reuse_port: bool,
) -> io::Result<std::net::TcpListener> {
    let d = &config.downstream;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    // Set on the listener so accepted sockets inherit them (buffer sizes must precede listen()).
    if let Some(n) = d.recv_buffer_size {
        socket.set_recv_buffer_size(n)?;
    }
    if let Some(n) = d.send_buffer_size {
        socket.set_send_buffer_size(n)?;
    }
    if let Some(ttl) = d.ip_ttl {
        if addr.is_ipv4() {
            socket.set_ttl_v4(ttl)?;
        } else {
            socket.set_unicast_hops_v6(ttl)?;
        }
    }
    socket.set_tcp_nodelay(d.nodelay)?;
    socket.bind(&addr.into())?;
    socket.listen(d.max_backlog.unwrap_or(DEFAULT_BACKLOG))?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

impl Server {
    /// Loads the certificates (files, local CA, stored ACME ones) and binds every listener. A
    /// port of 0 is resolved once and shared by all workers.
    pub fn bind(config: Config) -> io::Result<Server> {
        let tls = rampart_tls::start(&config).map_err(io::Error::other)?;
        let per_core = config.runtime == RuntimeMode::PerCore;
        let groups = if per_core { config.workers.max(1) } else { 1 };
        let mut sockets: Vec<Vec<(std::net::TcpListener, bool)>> =
            (0..groups).map(|_| Vec::new()).collect();
        let (mut local_addrs, mut https_addrs) = (Vec::new(), Vec::new());
        let https = if tls.is_some() {
            &config.tls.listen_https[..]
        } else {
            &[]
        };
        let all = config
            .listen_http
            .iter()
            .map(|a| (*a, false))
            .chain(https.iter().map(|a| (*a, true)));
        for (addr, is_tls) in all {
            // SO_REUSEPORT lets rampart's own workers share a port, but would also let a second
            // rampart (or anything else that sets it) join silently and take half the traffic to
            // a cache of its own: refuse a port another process already listens on.
            if per_core && addr.port() != 0 && listened_on_by_another(addr) {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "cannot listen on {addr}: another process is already listening there \
                         (another rampart?); rampart does not share a port with another instance"
                    ),
                ));
            }
            let first = bind_one(addr, &config, per_core)
                .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
            let actual = first.local_addr()?;
            if is_tls {
                https_addrs.push(actual);
            } else {
                local_addrs.push(actual);
            }
            sockets[0].push((first, is_tls));
            for group in sockets.iter_mut().skip(1) {
                group.push((bind_one(actual, &config, true)?, is_tls));
            }
        }
        Ok(Server {
            config: Arc::new(config),
            sockets,
            local_addrs,
            https_addrs,
            tls,
        })
    }

    /// The plain-HTTP addresses actually bound (ports resolved).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    /// The HTTPS addresses actually bound (empty when no rule has a certificate).
    pub fn https_addrs(&self) -> &[SocketAddr] {
        &self.https_addrs
    }

    /// Starts the workers and returns at once.
    pub fn start(self) -> io::Result<Running> {
        let (tx, rx) = watch::channel(false);
        let router = Arc::new(Router::new(&self.config));
        let cache = self.config.cache.enabled.then(|| {
            Arc::new(Cache::new(
                self.config.cache.memory,
                self.config.cache.max_object,
            ))
        });
        let screen = Arc::new(crate::screen::Screen::new(&self.config));
        let origin_tls =
            rampart_tls::origin::client_config(&self.config.upstream).map_err(io::Error::other)?;
        // Redirects to HTTPS name the port unless it is the default one.
        let https_port = self.https_addrs.first().map(|a| a.port());
        let shared = Arc::new(Shared {
            origin_tls,
            https_port,
            tls: self.tls.clone(),
            cache,
            screen,
            per_ip: self
                .config
                .downstream
                .max_connections_per_ip
                .map(PerIp::new),
            limit: Arc::new(Semaphore::new(self.config.downstream.max_connections)),
            at_limit: AtomicBool::new(false),
            config: self.config.clone(),
        });
        let mut threads = Vec::new();
        // Active health checks, on a thread of their own with their own connection pool.
        let prober = Upstream::new(&self.config.upstream, shared.origin_tls.clone());
        if let Some(t) = crate::health::start(&router, prober, rx.clone())? {
            threads.push(t);
        }
        match self.config.runtime {
            RuntimeMode::PerCore => {
                for (i, group) in self.sockets.into_iter().enumerate() {
                    let (shared, router, rx) = (shared.clone(), router.clone(), rx.clone());
                    let t = std::thread::Builder::new().name(format!("rampart-w{i}")).spawn(move || {
                        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                            Ok(rt) => rt,
                            Err(e) => return tracing::error!(error = %e, "cannot start worker runtime"),
                        };
                        rt.block_on(worker(group, shared, router, rx));
                    })?;
                    threads.push(t);
                }
            }
            RuntimeMode::Shared => {
                let workers = self.config.workers.max(1);
                let group = self.sockets.into_iter().flatten().collect();
                let t = std::thread::Builder::new()
                    .name("rampart-rt".into())
                    .spawn(move || {
                        let rt = match tokio::runtime::Builder::new_multi_thread()
                            .worker_threads(workers)
                            .thread_name("rampart-w")
                            .enable_all()
                            .build()
                        {
                            Ok(rt) => rt,
                            Err(e) => return tracing::error!(error = %e, "cannot start runtime"),
                        };
                        rt.block_on(worker(group, shared, router, rx));
                    })?;
                threads.push(t);
            }
        }
        Ok(Running {
            shutdown: tx,
            threads,
        })
    }
}

/// State shared by all workers.
#[derive(Debug)]
struct Shared {
    config: Arc<Config>,
    /// Certificates and the TLS server configuration.
    tls: Option<rampart_tls::Tls>,
    /// The client configuration for origins over TLS.
    origin_tls: Arc<rustls::ClientConfig>,
    /// The first HTTPS listener's port (for redirects).
    https_port: Option<u16>,
    /// The response cache, shared by all workers (`None` when `add_caching = false`).
    cache: Option<Arc<Cache>>,
    /// Screening state shared by all workers (rate limiters).
    screen: Arc<crate::screen::Screen>,
    /// Open connections per client address (`max_connections_per_ip`).
    per_ip: Option<Arc<PerIp>>,
    /// One permit per open client connection.
    limit: Arc<Semaphore>,
    /// Set while the limit is reached, so the log line is written once per episode.
    at_limit: AtomicBool,
}

/// One worker: an accept loop per listener, sharing this worker's pipeline and pool.
async fn worker(
    group: Vec<(std::net::TcpListener, bool)>,
    shared: Arc<Shared>,
    router: Arc<Router>,
    shutdown: watch::Receiver<bool>,
) {
    let upstream = Upstream::new(&shared.config.upstream, shared.origin_tls.clone());
    let pipeline = Arc::new(Pipeline::new(Worker::new(
        router,
        upstream,
        shared.cache.clone(),
        shared.screen.clone(),
        &shared.config,
        shared.tls.as_ref().map(|t| t.store.clone()),
        shared.https_port,
    )));
    let acceptor = shared
        .tls
        .as_ref()
        .map(|t| tokio_rustls::TlsAcceptor::from(t.server.clone()));
    let d = &shared.config.downstream;
    // HTTP/1.1 is rampart's own server (h1/); HTTP/2 is hyper's.
    // HTTP/2 flood limits (RFC 9113 §10.5): streams, header list size (also bounds
    // CONTINUATION sequences), and the reset budgets behind the rapid-reset defence
    // (CVE-2023-44487): a client that resets more streams than this is sent GOAWAY.
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(d.h2_max_concurrent_streams)
        .max_header_list_size(d.h2_max_header_list_bytes)
        .max_pending_accept_reset_streams(Some(50))
        .max_local_error_reset_streams(Some(256));
    let builder = Arc::new(builder);
    let mut loops = Vec::new();
    for (std_listener, is_tls) in group {
        let listener = match TcpListener::from_std(std_listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "cannot register listener");
                continue;
            }
        };
        let tls = if is_tls { acceptor.clone() } else { None };
        loops.push(tokio::spawn(accept_loop(
            listener,
            tls,
            shared.clone(),
            pipeline.clone(),
            builder.clone(),
            shutdown.clone(),
        )));
    }
    for l in loops {
        let _ = l.await;
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
    pipeline: Arc<Pipeline>,
    builder: Arc<hyper::server::conn::http2::Builder<TokioExecutor>>,
    mut shutdown: watch::Receiver<bool>,
) {
    // Every connection task holds a sender; the drain ends when all of them are gone.
    let (open_tx, mut open_rx) = tokio::sync::mpsc::channel::<()>(1);
    let keepalive = shared
        .config
        .downstream
        .tcp_keepalive
        .map(|t| TcpKeepalive::new().with_time(t));
    let d = &shared.config.downstream;
    let limits = h1::Limits {
        max_head: d.max_head_bytes,
        max_headers: d.max_headers,
        header_read_timeout: d.header_read_timeout,
        keepalive_timeout: d.keepalive_timeout,
        body_idle_timeout: d.body_idle_timeout,
    };
    let scheme = if tls.is_some() {
        Scheme::Https
    } else {
        Scheme::Http
    };
    loop {
        // Take a connection slot first: at the limit, new connections wait in the backlog.
        let Some(permit) = connection_slot(&shared, &mut shutdown).await else {
            break;
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::error!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        if let Some(ka) = &keepalive {
            if let Err(e) = SockRef::from(&stream).set_tcp_keepalive(ka) {
                tracing::debug!(error = %e, "cannot set TCP keep-alive");
            }
        }
        let ip = peer.ip().to_canonical();
        let slot = match &shared.per_ip {
            Some(table) => match table.acquire(ip) {
                Some(slot) => Some(slot),
                None => {
                    tracing::debug!(%peer, "per-address connection limit reached; connection closed");
                    continue;
                }
            },
            None => None,
        };
        let conn = Conn {
            pipeline: pipeline.clone(),
            info: Arc::new(ConnInfo::new(ip, scheme)),
            builder: builder.clone(),
            limits,
            peer,
        };
        // `logging_level = "debug"`: every line of the connection's requests carries these fields.
        let span = tracing::debug_span!("conn", %peer, scheme = scheme.as_str());
        let (tls, open, mut stop) = (tls.clone(), open_tx.clone(), shutdown.clone());
        let task = async move {
            // Each protocol's state in its own allocation: the task itself stays small, and an
            // idle HTTP/1.1 connection holds only what h1::serve needs between requests.
            match tls {
                None => Box::pin(conn.serve(stream, &mut stop)).await,
                Some(acceptor) => Box::pin(conn.serve_tls(acceptor, stream, &mut stop)).await,
            }
            drop((permit, slot, open));
        };
        tokio::spawn(task.instrument(span));
    }
    drop(listener);
    drop(open_tx);
    let drain = shared.config.shutdown_timeout;
    if tokio::time::timeout(drain, open_rx.recv()).await.is_err() {
        tracing::warn!(?drain, "drain time over; closing remaining connections");
    }
}

/// A connection slot under `max_connections`; at the limit, waits (new connections stay in the
/// listen backlog) and says so once. `None` when shutdown starts.
async fn connection_slot(
    shared: &Shared,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let permit = match shared.limit.clone().try_acquire_owned() {
        Ok(p) => p,
        Err(_) => {
            if !shared.at_limit.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    max_connections = shared.config.downstream.max_connections,
                    "connection limit reached: new connections wait in the listen backlog until others close"
                );
            }
            tokio::select! {
                p = shared.limit.clone().acquire_owned() => p.ok()?,
                _ = shutdown.changed() => return None,
            }
        }
    };
    if shared.at_limit.swap(false, Ordering::Relaxed) {
        tracing::warn!("below the connection limit again");
    }
    Some(permit)
}

/// What a connection task needs.
struct Conn {
    pipeline: Arc<Pipeline>,
    info: Arc<ConnInfo>,
    builder: Arc<hyper::server::conn::http2::Builder<TokioExecutor>>,
    limits: h1::Limits,
    peer: SocketAddr,
}

impl Conn {
    /// The TLS handshake (within the request-head timeout), then HTTP/2 or HTTP/1.1 by ALPN; a
    /// TLS-ALPN-01 validation ends with the handshake.
    async fn serve_tls(
        self,
        acceptor: tokio_rustls::TlsAcceptor,
        stream: tokio::net::TcpStream,
        stop: &mut watch::Receiver<bool>,
    ) {
        let peer = self.peer;
        let handshake = tokio::select! {
            r = tokio::time::timeout(self.limits.header_read_timeout, acceptor.accept(stream)) => r,
            _ = stop.changed() => return,
        };
        match handshake {
            Ok(Ok(tls)) => {
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
            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
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
        let (pipeline, info) = (self.pipeline, self.info);
        let serving = h1::serve(
            io,
            first,
            self.limits,
            move |req| {
                let (pipeline, info) = (pipeline.clone(), info.clone());
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
            let (started, pipeline, info) = (started.clone(), self.pipeline, self.info);
            service_fn(move |req: http::Request<hyper::body::Incoming>| {
                started.fetch_add(1, Ordering::Relaxed);
                let (pipeline, info) = (pipeline.clone(), info.clone());
                async move { Ok::<_, Infallible>(pipeline.handle(&info, req.map(ClientBody::H2)).await) }
            })
        };
        let conn = self.builder.serve_connection(TokioIo::new(io), svc);
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
