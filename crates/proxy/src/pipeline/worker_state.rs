//! One worker's shared state, which every stage reads: the routing table, the worker-local
//! upstream pool, the cache, screening, and the settings the stages need.

use std::sync::Arc;
use std::time::Duration;

use rampart_config::AdminConfig;
use rampart_tls::cert_store::CertStore;

use crate::admin::commands::Control;
use crate::body::BodyLimits;
use crate::caching::Cache;
use crate::origin::client::OriginClient;
use crate::policy::route::Router;
use crate::policy::screening::Screen;
use crate::telemetry::access_log::AccessLog;

/// One worker's shared state: shared routing table, worker-local upstream pool.
#[derive(Debug)]
pub struct Worker {
    pub router: Arc<Router>,
    pub origin_client: OriginClient,
    pub cache: Option<Arc<Cache>>,
    /// `add_logging`: the access log is on (each rule has its own `enable_logging` too).
    pub access_log: bool,
    /// Where access-log lines go.
    pub access: Arc<AccessLog>,
    /// How long past its freshness a stored response may stand in for a failing origin.
    pub grace: Duration,
    pub admin: Arc<AdminConfig>,
    pub screen: Arc<Screen>,
    /// Idle and total timeouts for client request bodies (the size limit is per rule).
    pub body_limits: BodyLimits,
    /// Where ACME http-01 answers are (`None` without automatic certificates).
    pub acme: Option<Arc<CertStore>>,
    /// The HTTPS port named in redirects (`None` = no HTTPS listener).
    pub https_port: Option<u16>,
    /// Where the management API sends reloads and rule changes (`None`: nobody takes them).
    pub control: Option<Control>,
    /// `max_connections`, for the metrics.
    pub max_connections: usize,
    /// `max_request_headers`: rampart's HTTP/1.1 parser applies it itself; HTTP/2 and HTTP/3
    /// requests are counted in recv.
    pub max_headers: usize,
    /// `websocket_idle_timeout_seconds` (a rule may set its own).
    pub upgrade_idle: Duration,
    /// `Alt-Svc` announcing HTTP/3, by the HTTPS port a connection came in on (empty: HTTP/3
    /// is off or not announced).
    pub alt_svc: Vec<(u16, http::HeaderValue)>,
    /// What this instance shares with others through Redis (`None`: nothing).
    pub shared: Option<rampart_redis::Shared>,
    /// The response fields that tag objects (`cache_tag_headers`).
    pub tag_headers: Arc<[http::HeaderName]>,
    /// OpenTelemetry traces (`None`: tracing is off).
    pub tracer: Option<Arc<rampart_otel::Tracer>>,
    /// The fleet the cache is sharded over (`None`: no `cache_peers`).
    pub fleet: Option<Arc<crate::origin::fleet::Fleet>>,
}

/// What a worker is made of besides the configuration.
#[derive(Debug)]
pub struct Parts {
    pub router: Arc<Router>,
    pub origin_client: OriginClient,
    pub cache: Option<Arc<Cache>>,
    pub screen: Arc<Screen>,
    pub shared: Option<rampart_redis::Shared>,
    pub acme: Option<Arc<CertStore>>,
    pub https_port: Option<u16>,
    pub control: Option<Control>,
    pub access: Arc<AccessLog>,
    pub alt_svc: Vec<(u16, http::HeaderValue)>,
    pub tracer: Option<Arc<rampart_otel::Tracer>>,
    pub fleet: Option<Arc<crate::origin::fleet::Fleet>>,
}

impl Worker {
    /// What the management API may read and change.
    pub fn api(&self) -> crate::admin::Api<'_> {
        crate::admin::Api {
            config: &self.admin,
            cache: self.cache.as_deref(),
            router: &self.router,
            control: self.control.as_ref(),
            certs: self.acme.as_deref(),
            max_connections: self.max_connections,
            redis: self.shared.as_ref(),
            fleet: self.fleet.as_ref(),
            traces: self.tracer.as_deref().map(|t| &**t.exporter().stats()),
        }
    }

    pub fn new(config: &rampart_config::Config, parts: Parts) -> Self {
        let Parts {
            router,
            origin_client,
            cache,
            screen,
            shared,
            acme,
            https_port,
            control,
            access,
            alt_svc,
            tracer,
            fleet,
        } = parts;
        Worker {
            access,
            control,
            router,
            origin_client,
            cache,
            access_log: config.add_logging,
            grace: config.cache.grace,
            admin: Arc::new(config.admin.clone()),
            screen,
            body_limits: BodyLimits {
                // The size limit is the rule's, set once routing has found it.
                max: None,
                idle: config.downstream.body_idle_timeout,
                total: config.downstream.body_total_timeout,
            },
            acme,
            https_port,
            max_connections: config.downstream.max_connections,
            max_headers: config.downstream.max_headers,
            upgrade_idle: config.downstream.upgrade_idle_timeout,
            alt_svc,
            shared,
            tag_headers: config.cache.tag_headers.clone().into(),
            tracer,
            fleet,
        }
    }
}
