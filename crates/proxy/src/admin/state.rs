//! What the management API works on, lent by the worker for one request.

use rampart_config::AdminConfig;

use crate::admin::commands::Control;
use crate::caching::Cache;
use crate::policy::route::Router;

/// What the management API works on: one worker's settings, and the state it reports on or
/// changes. The recv stage lends it for a request the API answers.
#[derive(Debug, Clone, Copy)]
pub struct Api<'a> {
    pub config: &'a AdminConfig,
    pub cache: Option<&'a Cache>,
    pub router: &'a Router,
    /// Where reloads and rule changes go (`None`: nobody takes them).
    pub control: Option<&'a Control>,
    pub certs: Option<&'a rampart_tls::cert_store::CertStore>,
    pub max_connections: usize,
    /// Redis shared with other instances, when configured.
    pub redis: Option<&'a rampart_redis::Shared>,
    /// The trace exporter's counters, when tracing is on.
    pub traces: Option<&'a rampart_otel::Stats>,
    /// The fleet the cache is sharded over, as this worker sees it (`cache_peers`).
    pub fleet: Option<&'a std::sync::Arc<crate::origin::fleet::Fleet>>,
}
