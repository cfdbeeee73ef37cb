//! The configuration in force, and its replacement by a reload.
//!
//! Everything a request reads from the configuration hangs off one [`Current`] per worker: its
//! pipeline (routing, rules, screening, origins, admin settings) and the settings a new
//! connection takes (limits, TLS acceptor). A reload builds new ones and swaps them in whole,
//! so a request sees either the old configuration or the new one, never a mix: requests
//! already running keep the `Current` they started with, the next request on any connection
//! gets the new one.
//!
//! What a reload keeps: the cache (with everything in it), the connection pools to origins
//! (unless origin settings changed), the rate limiters whose rates did not change, the health
//! verdicts of origins still listed, every listening socket whose address did not change, and
//! the certificate manager when no TLS setting changed (its certificate files are checked at
//! once). A new address is bound before an old one is closed. Settings that only a restart can
//! change (`workers`, `worker_runtime`, the cache's size) are reported and left as they were.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use arc_swap::ArcSwap;

use rampart_config::Config;
use rampart_otel::Tracer;
use rampart_redis::Shared;
use rampart_tls::Tls;
use tokio::sync::{mpsc, watch};

use crate::admin::commands::Control;
use crate::caching::Cache;
use crate::origin::client::OriginClient;
use crate::origin::fleet::{Discovery, Roster};
use crate::pipeline::worker_state::{Parts, Worker};
use crate::pipeline::Pipeline;
use crate::policy::route::Router;
use crate::policy::screening::Screen;
use crate::server::restart::{restart_needed, same_tls};
use crate::telemetry::access_log::AccessLog;
use crate::transport::in_force::{ConnSettings, Current, Slot};
use crate::transport::limits::{ConnLimit, PerIp};
use crate::transport::listen::{self, Bound, Kind};

/// Listener changes sent to a worker.
#[derive(Debug)]
pub enum ListenerCmd {
    /// Start accepting on this socket (a listening TCP socket, or a UDP one for HTTP/3),
    /// configured as this address.
    Open(socket2::Socket, Kind, SocketAddr),
    /// Stop accepting on the socket of this kind bound to this address and close it; its
    /// connections go on.
    Close(SocketAddr, Kind),
}

/// A listening address in service.
#[derive(Debug, Clone)]
struct Listening {
    configured: SocketAddr,
    actual: SocketAddr,
    kind: Kind,
    /// Its sockets' descriptors (held open by the workers), for an upgrade's handoff.
    fds: Vec<std::os::fd::RawFd>,
}

impl Listening {
    fn of(b: &Bound) -> Listening {
        Listening {
            configured: b.configured,
            actual: b.actual,
            kind: b.kind,
            fds: b.fds(),
        }
    }
}

/// What a reload did.
#[derive(Debug, Default)]
pub struct Reloaded {
    /// Changed keys that only a restart applies.
    pub restart_needed: Vec<&'static str>,
    pub opened: Vec<SocketAddr>,
    pub closed: Vec<SocketAddr>,
    /// Whether the certificate manager was restarted (TLS settings or certificate sources
    /// changed).
    pub tls_restarted: bool,
}

/// What a reload made ready before anything changed.
struct Prepared {
    same_tls: bool,
    tls: Option<Tls>,
    /// New origin trust roots (`None`: origin settings unchanged, pools kept).
    origin_tls: Option<Arc<rustls::ClientConfig>>,
    /// A new access log (`None`: unchanged).
    access: Option<Arc<AccessLog>>,
    /// A new tracer (`None`: the tracing settings did not change; `Some(None)`: tracing is
    /// now off).
    tracer: Option<Option<Arc<Tracer>>>,
    wanted: Vec<(SocketAddr, Kind)>,
    /// Newly bound addresses.
    fresh: Vec<Bound>,
    /// New Redis state (`None`: the Redis settings did not change; `Some(None)`: Redis is no
    /// longer used).
    shared: Option<Option<Shared>>,
}

/// The state a reload replaces, and what it keeps.
#[derive(Debug)]
pub struct Live {
    config: Arc<Config>,
    groups: usize,
    slots: Vec<Arc<Slot>>,
    cmds: Vec<mpsc::UnboundedSender<ListenerCmd>>,
    listening: Vec<Listening>,
    router: Arc<Router>,
    screen: Arc<Screen>,
    tls: Option<Tls>,
    origin_tls: Arc<rustls::ClientConfig>,
    /// One connection pool per worker.
    origin_clients: Vec<OriginClient>,
    /// Each worker's view of the fleet (`cache_peers`): its connections to the peers and
    /// their health as it found it.
    fleets: Vec<Arc<crate::origin::fleet::Fleet>>,
    /// The members found through Redis (`cache_peers_from_redis`), and this instance's
    /// announcement.
    discovery: Option<Discovery>,
    per_ip: Option<Arc<PerIp>>,
    limit: Arc<ConnLimit>,
    cache: Option<Arc<Cache>>,
    /// What this instance shares with others through Redis.
    shared: Option<Shared>,
    control: Control,
    /// Where access-log lines go (reopened on SIGUSR1).
    access: Arc<AccessLog>,
    /// OpenTelemetry traces and their exporter (`None`: off).
    tracer: Option<Arc<Tracer>>,
    /// The health-check thread of this configuration, and how to stop it.
    health: Option<(watch::Sender<bool>, JoinHandle<()>)>,
}

/// Why a configuration could not be put in service (at startup, or by a reload, which then
/// leaves the configuration in service as it was).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("redis: {0}")]
    Redis(#[from] rampart_redis::SharedError),
    /// Certificates, or the trust roots for origins.
    #[error(transparent)]
    Tls(#[from] rampart_tls::TlsError),
    #[error(transparent)]
    AccessLog(std::io::Error),
    #[error("tracing: {0}")]
    Tracing(std::io::Error),
    #[error(transparent)]
    Listen(std::io::Error),
}

/// Starts sharing through Redis when `config` names it. Fails only on addresses Redis's client
/// cannot use; an unreachable Redis is no error (instances decide locally until it answers).
pub fn start_shared(config: &Config) -> Result<Option<Shared>, ReloadError> {
    let Some(redis) = &config.redis else {
        return Ok(None);
    };
    Ok(Some(Shared::start(redis)?))
}

/// Starts the trace exporter when `config` has a `tracing_endpoint`, counting on from `old`'s
/// counters (a reload that changes the tracing keys).
fn start_tracer(config: &Config, old: Option<&Tracer>) -> Result<Option<Arc<Tracer>>, ReloadError> {
    let Some(t) = &config.tracing else {
        return Ok(None);
    };
    let stats = old.map(|o| o.exporter().stats().clone());
    let tracer = Tracer::start(t, stats).map_err(ReloadError::Tracing)?;
    Ok(Some(Arc::new(tracer)))
}

/// Purges made in `cache` go to the other instances through `shared`, and theirs come here.
fn share(cache: &Arc<Cache>, shared: &Shared) {
    cache.share(Some(shared));
    shared.follow_purges(cache.remote_purges());
}

/// The cache: memory, and the disk tier when `cache_disk` names a directory (opened now, warmed
/// in the background).
fn open_cache(c: &rampart_config::CacheConfig) -> std::io::Result<Cache> {
    let cache = Cache::new(c.memory, c.max_object);
    let Some(d) = &c.disk else {
        return Ok(cache);
    };
    let options = rampart_cache::disk::DiskOptions {
        dir: d.path.clone(),
        size: d.size,
        min_uses: d.min_uses,
        max_object: d.max_object,
    };
    let disk = rampart_cache::disk::DiskStore::open(options).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cache_disk {:?}: {e}", d.path.display().to_string()),
        )
    })?;
    Ok(cache.with_disk(disk))
}

/// What a worker thread starts with.
#[derive(Debug)]
pub struct WorkerStart {
    pub slot: Arc<Slot>,
    pub cmds: mpsc::UnboundedReceiver<ListenerCmd>,
}

impl Live {
    /// The first configuration: builds every worker's `Current` and queues the bound sockets
    /// for the workers to open.
    pub fn start(
        config: Config,
        bound: Vec<Bound>,
        tls: Option<Tls>,
        shared: Option<Shared>,
        groups: usize,
        control: Control,
    ) -> std::io::Result<(Live, Vec<WorkerStart>)> {
        let config = Arc::new(config);
        let origin_tls =
            rampart_tls::origin::client_config(&config.upstream).map_err(std::io::Error::other)?;
        let cache = match config.cache.enabled {
            true => Some(Arc::new(open_cache(&config.cache)?)),
            false => None,
        };
        if let (Some(c), Some(s)) = (&cache, &shared) {
            share(c, s);
        }
        let discovery = Discovery::start(config.fleet.as_ref(), shared.as_ref(), None);
        let roster = discovery.as_ref().map(|d| &d.roster);
        if let Some(c) = &cache {
            c.share_with_peers(peer_purges(&config, roster.cloned(), &origin_tls)?);
        }
        let router = Arc::new(Router::new(&config));
        let fleets = fleets_of(&config, roster, groups, &origin_tls);
        let origin_clients = (0..groups)
            .map(|_| OriginClient::new(&config.upstream, origin_tls.clone()))
            .collect();
        let listening: Vec<Listening> = bound.iter().map(Listening::of).collect();
        let access = Arc::new(AccessLog::open(&config.access_log)?);
        let tracer = start_tracer(&config, None).map_err(|e| match e {
            ReloadError::Tracing(e) => e,
            other => std::io::Error::other(other.to_string()),
        })?;
        let mut live = Live {
            access,
            tracer,
            screen: Arc::new(Screen::new(&config, shared.as_ref())),
            shared,
            per_ip: config.downstream.max_connections_per_ip.map(PerIp::new),
            limit: ConnLimit::new(config.downstream.max_connections),
            groups,
            slots: Vec::new(),
            cmds: Vec::new(),
            listening,
            router,
            tls,
            origin_tls,
            origin_clients,
            fleets,
            discovery,
            cache,
            control,
            health: None,
            config,
        };
        let mut starts = Vec::new();
        for i in 0..groups {
            let (tx, rx) = mpsc::unbounded_channel();
            live.slots
                .push(Arc::new(ArcSwap::from_pointee(live.current(i))));
            live.cmds.push(tx);
            starts.push(WorkerStart {
                slot: live.slots[i].clone(),
                cmds: rx,
            });
        }
        live.publish();
        live.open(bound);
        live.health = live.start_health()?;
        Ok((live, starts))
    }

    /// The connection limit, shared by all workers.
    pub fn limit(&self) -> Arc<ConnLimit> {
        self.limit.clone()
    }

    /// The addresses in service of one kind.
    pub fn addrs(&self, kind: Kind) -> Vec<SocketAddr> {
        self.listening
            .iter()
            .filter(|l| l.kind == kind)
            .map(|l| l.actual)
            .collect()
    }

    /// Reopens the access log file (SIGUSR1, after logrotate moved it).
    pub fn reopen_logs(&self) -> std::io::Result<()> {
        self.access.reopen()
    }

    /// Writes out the disk tier's queue and lets its directory go (shutdown: a new binary
    /// taking over waits for it).
    pub fn close_disk(&self) {
        if let Some(c) = &self.cache {
            c.close_disk();
        }
    }

    /// Sends the spans still queued (shutdown), waiting at most `within`.
    pub fn flush_traces(&self, within: std::time::Duration) {
        if let Some(t) = &self.tracer {
            t.exporter().shutdown(within);
        }
    }

    /// Stops the health checks (shutdown) and returns their thread to join.
    pub fn stop_health(&mut self) -> Option<JoinHandle<()>> {
        let (stop, thread) = self.health.take()?;
        stop.send_replace(true);
        Some(thread)
    }

    /// Applies `config`. Everything that can fail (binding new addresses, loading new
    /// certificates, origin trust roots, the access log file) is done first, in [`Live::prepare`]:
    /// on an error nothing has changed and the old configuration stays in service.
    pub fn reload(&mut self, config: Config) -> Result<Reloaded, ReloadError> {
        let restart_needed = restart_needed(&self.config, &config);
        let prepared = self.prepare(&config)?;
        let mut report = self.commit(config, prepared);
        report.restart_needed = restart_needed;
        Ok(report)
    }

    /// The fallible half of a reload: what `config` needs that the configuration in service
    /// does not have. A certificate manager started here is stopped again on an error.
    fn prepare(&self, config: &Config) -> Result<Prepared, ReloadError> {
        // New Redis settings: a new connection, and the certificate manager starts again with it.
        let shared = (config.redis != self.config.redis)
            .then(|| start_shared(config))
            .transpose()?;
        let same_tls = same_tls(&self.config, config) && shared.is_none();
        let tls = if same_tls {
            self.tls.clone()
        } else {
            let with = shared.as_ref().unwrap_or(&self.shared).as_ref();
            rampart_tls::start(config, with)?
        };
        let rest = || -> Result<_, ReloadError> {
            let origin_tls = (config.upstream != self.config.upstream)
                .then(|| rampart_tls::origin::client_config(&config.upstream))
                .transpose()?;
            let access = (self.access.config() != &config.access_log)
                .then(|| AccessLog::open(&config.access_log).map(Arc::new))
                .transpose()
                .map_err(ReloadError::AccessLog)?;
            let tracer = (self.config.tracing != config.tracing)
                .then(|| start_tracer(config, self.tracer.as_deref()))
                .transpose()?;
            let wanted = listen::wanted(config, tls.is_some());
            let mut fresh: Vec<Bound> = Vec::new();
            for &(addr, kind) in &wanted {
                let same = |configured: SocketAddr, k: Kind| configured == addr && k == kind;
                if self.listening.iter().any(|l| same(l.configured, l.kind)) {
                    continue;
                }
                // HTTP/3 takes the port of the HTTPS socket of the same configured address.
                let https = self
                    .listening
                    .iter()
                    .map(|l| (l.configured, l.kind, l.actual))
                    .chain(fresh.iter().map(|b| (b.configured, b.kind, b.actual)))
                    .find(|&(c, k, _)| c == addr && k == Kind::Https)
                    .map(|(_, _, actual)| actual);
                let bound = listen::bind(addr, kind, config, self.groups, https)
                    .map_err(ReloadError::Listen)?;
                fresh.push(bound);
            }
            Ok((origin_tls, access, tracer, wanted, fresh))
        };
        match rest() {
            Ok((origin_tls, access, tracer, wanted, fresh)) => Ok(Prepared {
                same_tls,
                tls,
                origin_tls,
                access,
                tracer,
                wanted,
                fresh,
                shared,
            }),
            Err(e) => {
                if let (false, Some(t)) = (same_tls, &tls) {
                    t.stop();
                }
                Err(e)
            }
        }
    }

    /// The half of a reload that cannot fail: the new configuration goes into service.
    fn commit(&mut self, config: Config, p: Prepared) -> Reloaded {
        let config = Arc::new(config);
        if let Some(access) = p.access {
            self.access = access;
        }
        // The old exporter sends what it has queued and ends once the workers let it go.
        if let Some(tracer) = p.tracer {
            self.tracer = tracer;
        }
        if let Some(origin_tls) = p.origin_tls {
            self.origin_clients = (0..self.groups)
                .map(|_| OriginClient::new(&config.upstream, origin_tls.clone()))
                .collect();
            self.origin_tls = origin_tls;
        }
        if let Some(shared) = p.shared {
            self.shared = shared;
            if let Some(c) = &self.cache {
                match &self.shared {
                    Some(s) => share(c, s),
                    None => c.share(None),
                }
            }
        }
        self.discovery = Discovery::start(
            config.fleet.as_ref(),
            self.shared.as_ref(),
            self.discovery.take(),
        );
        let roster = self.discovery.as_ref().map(|d| &d.roster);
        if let Some(c) = &self.cache {
            // The old sender's thread ends once it is replaced.
            match peer_purges(&config, roster.cloned(), &self.origin_tls) {
                Ok(p) => c.share_with_peers(p),
                Err(e) => {
                    tracing::error!(error = %e, "cannot start sending purges to the peers");
                    c.share_with_peers(None);
                }
            }
        }
        self.fleets = fleets_of(&config, roster, self.groups, &self.origin_tls);
        self.router = Arc::new(Router::reloaded(&config, &self.router));
        self.screen = Arc::new(Screen::reloaded(
            &config,
            &self.screen,
            self.shared.as_ref(),
        ));
        self.per_ip = match (config.downstream.max_connections_per_ip, &self.per_ip) {
            (Some(n), Some(table)) => {
                table.set_max(n);
                Some(table.clone())
            }
            (Some(n), None) => Some(PerIp::new(n)),
            (None, _) => None,
        };
        self.limit.resize(config.downstream.max_connections);
        let old_tls = std::mem::replace(&mut self.tls, p.tls);
        self.config = config;
        let (gone, kept): (Vec<Listening>, Vec<Listening>) =
            self.listening.iter().cloned().partition(|l| {
                !p.wanted
                    .iter()
                    .any(|&(addr, kind)| l.configured == addr && l.kind == kind)
            });
        self.listening = kept;
        self.listening.extend(p.fresh.iter().map(Listening::of));
        for i in 0..self.groups {
            self.slots[i].store(Arc::new(self.current(i)));
        }
        self.publish();
        // New addresses are accepting before old ones close.
        let report = Reloaded {
            opened: p.fresh.iter().map(|b| b.actual).collect(),
            closed: gone.iter().map(|l| l.actual).collect(),
            tls_restarted: !p.same_tls,
            restart_needed: Vec::new(),
        };
        self.open(p.fresh);
        for l in &gone {
            for cmds in &self.cmds {
                let _ = cmds.send(ListenerCmd::Close(l.actual, l.kind));
            }
        }
        // The old health checks end on their own once told; nothing waits for them.
        drop(self.stop_health());
        self.health = self.start_health().unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot start the health checks of the new configuration");
            None
        });
        match (p.same_tls, &self.tls) {
            (true, Some(t)) => t.refresh(),
            (false, _) => {
                if let Some(t) = old_tls {
                    t.stop();
                }
            }
            (true, None) => {}
        }
        report
    }

    /// Hands each worker its socket of every bound address (socket `i` to worker `i % n`).
    fn open(&self, bound: Vec<Bound>) {
        for b in bound {
            for (i, socket) in b.sockets.into_iter().enumerate() {
                if let Some(cmds) = self.cmds.get(i % self.cmds.len().max(1)) {
                    let _ = cmds.send(ListenerCmd::Open(socket, b.kind, b.configured));
                }
            }
        }
    }

    /// For an upgrade: the listening descriptors, the [`crate::transport::listen::HANDOFF_ENV`] value
    /// that names them, and a link beside each HTTP/3 socket (`quic::relay`).
    pub fn handoff(&self) -> crate::transport::listen::Handoff {
        use std::os::fd::AsRawFd as _;
        let mut out = crate::transport::listen::Handoff::default();
        let mut spec = Vec::new();
        for l in &self.listening {
            for &fd in &l.fds {
                out.fds.push(fd);
                let kind = l.kind.as_str();
                let mut entry = format!("{fd},{},{},{kind}", l.configured, l.actual);
                if l.kind == Kind::H3 {
                    if let Some(link) = crate::transport::h3::relay::offer(fd) {
                        let generation = crate::transport::h3::relay::generation();
                        entry.push_str(&format!(",{},{generation}", link.as_raw_fd()));
                        out.fds.push(link.as_raw_fd());
                        out.links.push(link);
                    }
                }
                spec.push(entry);
            }
        }
        out.spec = spec.join(";");
        out
    }

    fn start_health(&self) -> std::io::Result<Option<(watch::Sender<bool>, JoinHandle<()>)>> {
        let (stop, stopped) = watch::channel(false);
        let prober = OriginClient::new(&self.config.upstream, self.origin_tls.clone());
        Ok(crate::server::probes::start(&self.router, prober, stopped)?.map(|t| (stop, t)))
    }

    /// What the dashboard reads of the configuration in force.
    fn publish(&self) {
        crate::admin::dashboard::publish(crate::admin::dashboard::Scene {
            router: self.router.clone(),
            cache: self.cache.clone(),
            traces: self.tracer.as_ref().map(|t| t.exporter().stats().clone()),
            fleets: self.fleets.clone(),
        });
    }

    /// The `Alt-Svc` value announcing HTTP/3 on each HTTPS port: (HTTPS port, value).
    fn alt_svc(&self) -> Vec<(u16, http::HeaderValue)> {
        let Some(ma) = self
            .config
            .tls
            .http3
            .as_ref()
            .and_then(|h| h.alt_svc_max_age)
        else {
            return Vec::new();
        };
        self.listening
            .iter()
            .filter(|l| l.kind == Kind::H3)
            .filter_map(|h3| {
                let https = self
                    .listening
                    .iter()
                    .find(|l| l.kind == Kind::Https && l.configured == h3.configured)?;
                let value = format!("h3=\":{}\"; ma={}", h3.actual.port(), ma.as_secs());
                Some((
                    https.actual.port(),
                    http::HeaderValue::from_str(&value).ok()?,
                ))
            })
            .collect()
    }

    /// Worker `i`'s view of the configuration in force.
    fn current(&self, i: usize) -> Current {
        let config = &self.config;
        // Redirects to HTTPS name the port unless it is the default one.
        let https_port = self
            .listening
            .iter()
            .find(|l| l.kind == Kind::Https)
            .map(|l| l.actual.port());
        let pipeline = Arc::new(Pipeline::new(Worker::new(
            config,
            Parts {
                router: self.router.clone(),
                origin_client: self.origin_clients[i].clone(),
                cache: self.cache.clone(),
                screen: self.screen.clone(),
                shared: self.shared.clone(),
                acme: self.tls.as_ref().map(|t| t.store.clone()),
                https_port,
                control: Some(self.control.clone()),
                access: self.access.clone(),
                alt_svc: self.alt_svc(),
                tracer: self.tracer.clone(),
                fleet: self.fleets.get(i).cloned(),
            },
        )));
        Current {
            pipeline,
            conn: ConnSettings::new(config, self.tls.as_ref(), self.per_ip.clone()),
        }
    }
}

/// The thread that sends purges to the fleet's other members (`None`: no `cache_peers`).
fn peer_purges(
    config: &Config,
    roster: Option<Arc<Roster>>,
    origin_tls: &Arc<rustls::ClientConfig>,
) -> std::io::Result<Option<crate::caching::PeerPurge>> {
    let Some(f) = &config.fleet else {
        return Ok(None);
    };
    let sender =
        crate::origin::fleet::PeerPurges::start(f, roster, &config.upstream, origin_tls.clone())?;
    Ok(Some(crate::caching::PeerPurge(Box::new(
        move |scope, soft| sender.send(scope, soft),
    ))))
}

/// Each worker's view of the fleet: its own connections to the peers, and their health as it
/// finds it (none without `cache_peers`).
fn fleets_of(
    config: &Config,
    roster: Option<&Arc<Roster>>,
    groups: usize,
    origin_tls: &Arc<rustls::ClientConfig>,
) -> Vec<Arc<crate::origin::fleet::Fleet>> {
    let Some(f) = &config.fleet else {
        return Vec::new();
    };
    (0..groups)
        .map(|_| {
            Arc::new(crate::origin::fleet::Fleet::new(
                f,
                roster.cloned(),
                &config.upstream,
                origin_tls.clone(),
            ))
        })
        .collect()
}
