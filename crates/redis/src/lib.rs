//! What several rampart instances share through Redis (one server or a Redis Cluster): rate
//! limits ([`ratelimit`]), purges ([`purge`]), certificates ([`certs`]) and a second cache
//! tier ([`cache_tier`]).
//!
//! One [`Shared`] per configuration. It owns a thread (`rampart-redis`) with a runtime of its
//! own, where the shared connection lives (its driver tasks run there, whatever worker sends a
//! command) and where the background work runs: a PING every second that keeps the connection
//! warm and tells whether Redis is up, and the purge follower. Rate-limit decisions, one per
//! counted request, go instead on a connection each worker thread makes for itself
//! ([`Shared::call_here`]).
//!
//! The request path never waits for Redis longer than `redis_timeout_ms`. A command that fails
//! or times out starts a back-off: for [`BACK_OFF`] every feature decides locally without
//! asking (each such decision is counted per feature in [`Stats::fallbacks`]); the PING ends
//! the back-off as soon as Redis answers again. Nothing here panics or blocks on Redis, and
//! rampart starts and serves whether or not Redis is there.

pub mod cache_tier;
pub mod certs;
mod conn;
pub mod members;
pub mod purge;
pub mod ratelimit;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_config::RedisConfig;

pub use conn::Conn;

/// How long an instance decides locally after a Redis command failed or timed out, unless the
/// PING finds Redis back sooner.
pub const BACK_OFF: Duration = Duration::from_secs(1);
/// How often the background PING runs.
const PING_EVERY: Duration = Duration::from_secs(1);

/// What goes through Redis, for the counters (`FEATURES` names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    RateLimit = 0,
    Purge = 1,
    Cache = 2,
}

/// The `feature` label of the Redis counters, indexed by [`Feature`].
pub const FEATURES: [&str; 3] = ["rate_limit", "purge", "cache"];

/// Counters read by the metrics: one set per process (a reload that replaces the Redis
/// settings keeps counting).
pub static STATS: Stats = Stats::new();

/// What went through Redis, and what did not.
#[derive(Debug)]
pub struct Stats {
    /// Decisions and deliveries made with Redis, per feature.
    pub used: [AtomicU64; 3],
    /// Local decisions taken because Redis was slow, down or backing off, per feature.
    pub fallbacks: [AtomicU64; 3],
    /// Commands that failed or timed out.
    pub errors: AtomicU64,
    /// Purges applied here that another instance sent.
    pub purges_received: AtomicU64,
    /// Times this instance dropped its whole cache because purges may have been missed.
    pub purge_resyncs: AtomicU64,
    /// Local misses answered from the shared cache tier.
    pub cache_hits: AtomicU64,
    /// Objects written to the shared cache tier.
    pub cache_writes: AtomicU64,
    /// Fetches this instance left to another instance (it waited for their object).
    pub cache_waits: AtomicU64,
}

impl Stats {
    const fn new() -> Stats {
        Stats {
            used: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            fallbacks: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            errors: AtomicU64::new(0),
            purges_received: AtomicU64::new(0),
            purge_resyncs: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            cache_writes: AtomicU64::new(0),
            cache_waits: AtomicU64::new(0),
        }
    }

    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    pub fn fallback(&self, f: Feature) {
        Stats::add(&self.fallbacks[f as usize]);
    }

    pub fn used(&self, f: Feature) {
        Stats::add(&self.used[f as usize]);
    }
}

/// Why Redis gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    #[error("Redis is backing off after an error")]
    BackingOff,
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("Redis answered something unexpected: {0}")]
    Unexpected(&'static str),
    #[error("cannot start the Redis thread: {0}")]
    Thread(std::io::Error),
}

/// The handle every worker holds; clones share one connection and one thread.
#[derive(Clone)]
pub struct Shared {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("endpoint", &self.inner.config.endpoint)
            .field("instance", &self.inner.instance)
            .field("up", &self.is_up())
            .finish()
    }
}

struct Inner {
    config: RedisConfig,
    conn: Conn,
    /// This process's name in purge messages (its own are not applied twice).
    instance: String,
    health: Arc<Health>,
    /// Ends the Redis thread when the last handle goes.
    stop: tokio::sync::watch::Sender<bool>,
    outbox: Arc<purge::Outbox>,
    endpoint: conn::Endpoint,
    /// The Redis thread's runtime.
    handle: tokio::runtime::Handle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

/// Whether Redis answers, and the back-off after it did not.
#[derive(Debug)]
struct Health {
    epoch: Instant,
    /// Milliseconds since `epoch` before which Redis is not asked.
    back_off_until: AtomicU64,
    up: AtomicBool,
}

impl Health {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn backing_off(&self) -> bool {
        self.now_ms() < self.back_off_until.load(Relaxed)
    }

    fn failed(&self, what: &str, e: &SharedError) {
        self.back_off_until
            .store(self.now_ms() + BACK_OFF.as_millis() as u64, Relaxed);
        if self.up.swap(false, Relaxed) {
            tracing::warn!(error = %e, during = what, "Redis unreachable; instances decide locally until it answers again");
        }
    }

    fn answered(&self) {
        if !self.up.swap(true, Relaxed) {
            self.back_off_until.store(0, Relaxed);
            tracing::info!("Redis answers; this instance shares its state with the others");
        }
    }
}

impl Shared {
    /// Starts the Redis thread and its (lazy) connection, the PING, and with `redis_purge`
    /// the purge sender ([`Shared::follow_purges`] adds the follower once there is a cache).
    /// Fails only when the addresses cannot be used at all or the thread cannot start; an
    /// unreachable Redis is not an error.
    pub fn start(config: &RedisConfig) -> Result<Shared, SharedError> {
        let endpoint = conn::Endpoint::parse(&config.endpoint)?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (tx, rx) = std::sync::mpsc::channel();
        let health = Arc::new(Health {
            epoch: Instant::now(),
            back_off_until: AtomicU64::new(0),
            up: AtomicBool::new(false),
        });
        let outbox = Arc::new(purge::Outbox::default());
        let instance = instance_name();
        let sender = purge::Sender {
            stream: config.purge.then(|| format!("{}purges", config.key_prefix)),
            tier: config.cache.then(|| config.key_prefix.clone()),
            instance: instance.clone(),
            outbox: outbox.clone(),
        };
        let purge_on = config.purge || config.cache;
        let (ping_health, ep) = (health.clone(), endpoint.clone());
        std::thread::Builder::new()
            .name("rampart-redis".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(SharedError::Thread(e)));
                        return;
                    }
                };
                rt.block_on(async move {
                    // Connections are made here so that their tasks run on this thread.
                    let conn = match ep.connect() {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = tx.send(Err(SharedError::Redis(e)));
                            return;
                        }
                    };
                    let handle = tokio::runtime::Handle::current();
                    let _ = tx.send(Ok((conn.clone(), handle)));
                    let mut tasks = tokio::task::JoinSet::new();
                    tasks.spawn(ping(conn.clone(), ping_health));
                    if purge_on {
                        tasks.spawn(sender.run(conn));
                    }
                    wait_stop(stopped).await;
                    tasks.abort_all();
                });
            })
            .map_err(SharedError::Thread)?;
        let (conn, handle) = rx
            .recv()
            .map_err(|_| SharedError::Unexpected("the Redis thread stopped"))??;
        tracing::info!(redis = ?config.endpoint.redacted(), prefix = config.key_prefix, instance, "sharing state through Redis");
        Ok(Shared {
            inner: Arc::new(Inner {
                config: config.clone(),
                instance,
                health,
                outbox,
                conn,
                endpoint,
                handle,
                stop,
            }),
        })
    }

    /// Runs `task` on the Redis thread until this configuration's Redis state is dropped.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let stopped = self.inner.stop.subscribe();
        self.inner.handle.spawn(async move {
            tokio::select! {
                _ = task => {}
                _ = wait_stop(stopped) => {}
            }
        });
    }

    /// The settings it was started with (a reload with others starts a new one).
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    pub fn stats(&self) -> &'static Stats {
        &STATS
    }

    /// Whether Redis answered the last command or PING.
    pub fn is_up(&self) -> bool {
        self.inner.health.up.load(Relaxed)
    }

    /// This instance's name in purge messages.
    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    /// `redis_key_prefix` + `name`.
    pub fn key(&self, name: &str) -> String {
        let p = &self.inner.config.key_prefix;
        let mut k = String::with_capacity(p.len() + name.len());
        k.push_str(p);
        k.push_str(name);
        k
    }

    /// Sends one request-path command: not while backing off, and never waiting longer than
    /// `redis_timeout_ms`. A failure starts the back-off.
    pub async fn call<T, F, Fut>(&self, what: &'static str, f: F) -> Result<T, SharedError>
    where
        F: FnOnce(Conn) -> Fut + Send + 'static,
        Fut: Future<Output = redis::RedisResult<T>> + Send + 'static,
        T: Send + 'static,
    {
        if self.inner.health.backing_off() {
            return Err(SharedError::BackingOff);
        }
        self.call_with(self.inner.config.timeout, what, f).await
    }

    /// Sends one request-path command on this thread's own connection, without leaving the
    /// thread: not while backing off, and never waiting longer than `redis_timeout_ms`.
    ///
    /// [`Shared::call`] hands the command to the Redis thread and the answer back, two wake-ups
    /// of another thread per command; for a rate-limit decision on every request that was most
    /// of its cost (+7.9 µs of rampart CPU per request, `rampart-bench cluster`). Here each
    /// worker thread has a connection of its own for each configuration, made on first use in
    /// the worker's runtime: its driver task and its reconnections run there and nowhere else,
    /// and it goes with the thread (a connection is never polled by two runtimes).
    pub async fn call_here<T, F, Fut>(&self, what: &'static str, f: F) -> Result<T, SharedError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let health = &self.inner.health;
        if health.backing_off() {
            return Err(SharedError::BackingOff);
        }
        let timeout = self.inner.config.timeout;
        let result = match self.local_conn() {
            Ok(conn) => match tokio::time::timeout(timeout, f(conn)).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(SharedError::Redis(e)),
                Err(_) => Err(SharedError::Timeout(timeout)),
            },
            Err(e) => Err(SharedError::Redis(e)),
        };
        match &result {
            Ok(_) => health.answered(),
            Err(e) => {
                STATS.errors.fetch_add(1, Relaxed);
                health.failed(what, e);
            }
        }
        result
    }

    /// This thread's connection for this configuration, made (lazily: it connects on its first
    /// command) the first time the thread asks.
    fn local_conn(&self) -> redis::RedisResult<Conn> {
        LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            // Connections of configurations that are gone go with them.
            local.retain(|(owner, _)| owner.strong_count() > 0);
            let me = Arc::downgrade(&self.inner);
            if let Some((_, conn)) = local.iter().find(|(owner, _)| owner.ptr_eq(&me)) {
                return Ok(conn.clone());
            }
            let conn = self.inner.endpoint.connect()?;
            local.push((me, conn.clone()));
            Ok(conn)
        })
    }

    /// Sends one command off the request path (certificates), waiting up to `timeout`, even
    /// while the request path backs off. A failure starts the back-off.
    ///
    /// The command runs on the Redis thread, whoever asks: the connection's futures (its
    /// reconnection, with its timers) then only ever belong to that thread's runtime. Polled
    /// on a worker, a reconnection made there outlived the worker's runtime at shutdown and
    /// panicked the Redis thread that polled it next (the chaos soak).
    pub async fn call_with<T, F, Fut>(
        &self,
        timeout: Duration,
        what: &'static str,
        f: F,
    ) -> Result<T, SharedError>
    where
        F: FnOnce(Conn) -> Fut + Send + 'static,
        Fut: Future<Output = redis::RedisResult<T>> + Send + 'static,
        T: Send + 'static,
    {
        let health = &self.inner.health;
        let conn = self.inner.conn.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.inner.handle.spawn(async move {
            let answer = tokio::time::timeout(timeout, f(conn)).await;
            let _ = tx.send(answer);
        });
        let result = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(Ok(Ok(v)))) => Ok(v),
            Ok(Ok(Ok(Err(e)))) => Err(SharedError::Redis(e)),
            // Timed out there or here, or the Redis thread is gone (stopping).
            Ok(Ok(Err(_))) | Err(_) => Err(SharedError::Timeout(timeout)),
            Ok(Err(_)) => Err(SharedError::Unexpected("the Redis thread stopped")),
        };
        match &result {
            Ok(_) => health.answered(),
            Err(e) => {
                STATS.errors.fetch_add(1, Relaxed);
                health.failed(what, e);
            }
        }
        result
    }
}

thread_local! {
    /// Each worker thread's own request-path connections ([`Shared::call_here`]), one per
    /// live configuration.
    static LOCAL: std::cell::RefCell<Vec<(std::sync::Weak<Inner>, Conn)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Keeps the connection warm and `up` true to Redis: one PING a second; an answer ends a
/// back-off at once, a failure starts one.
async fn ping(mut conn: Conn, health: Arc<Health>) {
    loop {
        let answer = tokio::time::timeout(
            PING_EVERY,
            redis::cmd("PING").query_async::<String>(&mut conn),
        )
        .await;
        match answer {
            Ok(Ok(_)) => health.answered(),
            Ok(Err(e)) => health.failed("PING", &SharedError::Redis(e)),
            Err(_) => health.failed("PING", &SharedError::Timeout(PING_EVERY)),
        }
        tokio::time::sleep(PING_EVERY).await;
    }
}

async fn wait_stop(mut stopped: tokio::sync::watch::Receiver<bool>) {
    while !*stopped.borrow_and_update() {
        if stopped.changed().await.is_err() {
            break;
        }
    }
}

/// A name unique to this process among the instances: host name, process id and start time.
fn instance_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into());
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("{host}/{}/{t:x}", std::process::id())
}
