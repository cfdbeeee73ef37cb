//! The validated, typed configuration. Runtime code sees only these types.
//!
//! Long because it is declarations: every field carries the doc of the key it comes from, and
//! the code here is a few small accessors.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use http::uri::Authority;

pub use crate::matching::{Cidr, DomainPattern, MatchType, PathMatch, Pattern};

/// The whole validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Plain-HTTP listen addresses (HTTP/1.1 and h2c).
    pub listen_http: Vec<SocketAddr>,
    /// Number of worker threads.
    pub workers: usize,
    /// How worker threads are laid out.
    pub runtime: RuntimeMode,
    /// `tracing` filter for diagnostics (ARC2 `logging_level`).
    pub logging_level: String,
    /// Master switch for the access log (ARC2 `add_logging`).
    pub add_logging: bool,
    /// Capture backtraces on panics (ARC2 `backtracing`).
    pub backtracing: bool,
    pub downstream: DownstreamConfig,
    /// Which listeners read a PROXY protocol header, and from whom.
    pub proxy_protocol: ProxyProtocolConfig,
    pub upstream: UpstreamConfig,
    /// How long a graceful shutdown waits for in-flight requests.
    pub shutdown_timeout: Duration,
    /// Reload when the configuration file changes (`watch_config`, rampart's own key).
    pub watch_config: bool,
    /// Where and how access-log lines are written.
    pub access_log: AccessLogConfig,
    /// Domain rules, in file order.
    pub rules: Vec<RuleConfig>,
    pub cache: CacheConfig,
    pub admin: AdminConfig,
    pub screen: ScreenConfig,
    pub tls: TlsConfig,
    /// What several instances share through Redis (`redis_url` / `redis_cluster`); `None`
    /// without either key: every instance keeps its own state.
    pub redis: Option<RedisConfig>,
    /// OpenTelemetry traces (`tracing_endpoint` and the keys beside it); `None` without an
    /// endpoint: no spans, and `traceparent` passes through like any other field.
    pub tracing: Option<TracingConfig>,
    /// The cache sharded over several instances (`cache_peers` and the keys beside it); `None`
    /// without `cache_peers`: the instance caches on its own.
    pub fleet: Option<FleetConfig>,
}

/// The cache sharded over a fleet: each key has one owner among the members (rendezvous
/// hashing), which the others ask before the origin.
#[derive(Clone, PartialEq)]
pub struct FleetConfig {
    /// Every member's HTTP listener (`cache_peers`), this instance's among them.
    pub members: Vec<SocketAddr>,
    /// This instance (`cache_peer_self`, else the member its HTTP listener is).
    pub me: SocketAddr,
    /// The members announce themselves through Redis (`cache_peers_from_redis`); `members`
    /// is then this instance alone, until the others are read.
    pub discover: bool,
    /// What peers sign their requests with (`cache_peer_key` / `cache_peer_key_file`);
    /// `None`: a peer's request is recognised by its address alone.
    pub key: Option<Secret>,
    /// Longest a non-owner keeps what the owner sent (`cache_peer_local_ttl_seconds`; 0: not
    /// at all).
    pub local_ttl: Duration,
    /// Longest wait for a peer's connection and answer's head (`cache_peer_timeout_ms`).
    pub timeout: Duration,
}

impl std::fmt::Debug for FleetConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetConfig")
            .field("members", &self.members)
            .field("me", &self.me)
            .field("discover", &self.discover)
            .field("key", &self.key.as_ref().map(|_| "***"))
            .field("local_ttl", &self.local_ttl)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// OpenTelemetry tracing: W3C Trace Context on every request, spans exported over OTLP.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingConfig {
    /// The collector (`tracing_endpoint`): `http://` or `https://`, host and port; for
    /// HTTP/protobuf a URL without a path gets `/v1/traces`.
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    /// Fields sent with every export (`tracing_headers`: a collector's API key).
    pub headers: Vec<(String, String)>,
    /// `service.name` (`tracing_service_name`).
    pub service_name: String,
    /// More resource attributes (`tracing_resource`), as written.
    pub resource: Vec<(String, String)>,
    pub sampler: Sampler,
    /// The share of traces a ratio sampler keeps (`tracing_sample_ratio`, 0 to 1).
    pub ratio: f64,
    /// Spans waiting for export at most (`tracing_queue_size`); more are dropped and counted.
    pub queue_size: usize,
    /// Spans per export at most (`tracing_batch_size`).
    pub batch_size: usize,
    /// How often waiting spans are exported (`tracing_export_interval_ms`).
    pub export_interval: Duration,
    /// How long one export may take (`tracing_timeout_ms`).
    pub timeout: Duration,
    /// Whether a client's `traceparent` is continued (`trust_trace_context`); when not, the
    /// request starts a trace of its own.
    pub trust: bool,
    /// The clients whose trace context is trusted (`trust_trace_context_from`); empty: all.
    pub trust_from: Vec<Cidr>,
}

impl TracingConfig {
    /// Whether the trace context `client` sends is continued.
    pub fn trusts(&self, client: std::net::IpAddr) -> bool {
        self.trust
            && (self.trust_from.is_empty() || {
                let c = client.to_canonical();
                self.trust_from.iter().any(|n| n.contains(c))
            })
    }
}

/// How spans are sent to the collector (`tracing_protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (`"grpc"`, the collector's port 4317).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (`"http/protobuf"`, port 4318).
    HttpProtobuf,
}

/// Which requests are traced (`tracing_sampler`, OpenTelemetry's `OTEL_TRACES_SAMPLER` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampler {
    AlwaysOn,
    AlwaysOff,
    /// A share of traces, by trace id (`tracing_sample_ratio`).
    TraceIdRatio,
    /// A continued trace follows the client's decision; a new one is always sampled.
    ParentBasedAlwaysOn,
    /// A continued trace follows the client's decision; a new one is never sampled.
    ParentBasedAlwaysOff,
    /// A continued trace follows the client's decision; a new one by ratio.
    ParentBasedTraceIdRatio,
}

impl Sampler {
    pub const NAMES: [(&'static str, Sampler); 6] = [
        ("always_on", Sampler::AlwaysOn),
        ("always_off", Sampler::AlwaysOff),
        ("traceidratio", Sampler::TraceIdRatio),
        ("parentbased_always_on", Sampler::ParentBasedAlwaysOn),
        ("parentbased_always_off", Sampler::ParentBasedAlwaysOff),
        ("parentbased_traceidratio", Sampler::ParentBasedTraceIdRatio),
    ];
}

/// The PROXY protocol on client connections (`proxy_protocol`, `proxy_protocol_from`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProxyProtocolConfig {
    /// Listen addresses as configured (`true`: HTTPS) whose connections start with a PROXY
    /// header (version 1 or 2).
    pub listeners: Vec<(SocketAddr, bool)>,
    /// Peers that may send one; connections from anyone else to those listeners are closed.
    pub from: Vec<Cidr>,
}

impl ProxyProtocolConfig {
    /// Whether connections to the listener configured as `addr` start with a PROXY header.
    pub fn expects(&self, addr: SocketAddr, tls: bool) -> bool {
        self.listeners.contains(&(addr, tls))
    }

    /// Whether `peer` may send a PROXY header.
    pub fn trusts(&self, peer: std::net::IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.from.iter().any(|c| c.contains(peer))
    }
}

/// A PROXY protocol version rampart sends to an origin (`send_proxy_protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyProtocolVersion {
    /// The text line (`PROXY TCP4 ...`).
    V1,
    /// The binary header.
    V2,
}

/// The access log's destination and format (`access_log_path`, `access_log_format`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AccessLogConfig {
    /// A file appended to (reopened on SIGUSR1); `None` = stdout.
    pub path: Option<PathBuf>,
    pub format: LogFormat,
}

/// An access-log line's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// `key=value` pairs (values with spaces or quotes in double quotes).
    #[default]
    Kv,
    /// One JSON object per line.
    Json,
}

/// TLS termination and certificates.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsConfig {
    /// HTTPS listen addresses; empty when no rule has a certificate source (listener off).
    pub listen_https: Vec<SocketAddr>,
    /// Oldest protocol version offered to clients (`tls_min_version`; default TLS 1.2).
    pub min_version: TlsVersion,
    /// Where the ACME account, issued certificates and the local CA are kept (`state_dir`).
    pub state_dir: PathBuf,
    /// The domain whose certificate answers handshakes without SNI or with an unknown name
    /// (`tls_default_domain`); `None` = such handshakes fail.
    pub default_domain: Option<String>,
    /// How often certificate files are checked for changes (`tls_reload_interval_seconds`).
    pub reload_interval: Duration,
    pub acme: AcmeConfig,
    /// HTTP/3 on UDP beside every HTTPS address (`http3`; `None` = off, the default).
    pub http3: Option<Http3Config>,
}

/// HTTP/3 (QUIC) beside the HTTPS listeners.
#[derive(Debug, Clone, PartialEq)]
pub struct Http3Config {
    /// Most concurrent request streams per connection (`http3_max_concurrent_streams`).
    pub max_streams: u32,
    /// `ma` of the `Alt-Svc` header that announces HTTP/3 on HTTPS responses
    /// (`http3_alt_svc_max_age_seconds`); `None` (0) = not announced.
    pub alt_svc_max_age: Option<Duration>,
}

/// The ACME client (automatic certificates).
#[derive(Debug, Clone, PartialEq)]
pub struct AcmeConfig {
    /// Directory URL (`acme_directory_url`; default Let's Encrypt production).
    pub directory_url: String,
    /// ARC2 `lets_encrypt_contact_email`.
    pub contact: Option<String>,
    /// Extra trust root for the ACME server's own HTTPS (`acme_ca_file`), for private CAs.
    pub ca_file: Option<PathBuf>,
    /// Challenge types in order of preference (`acme_challenges`).
    pub challenges: Vec<AcmeChallenge>,
}

/// An ACME challenge type rampart can answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcmeChallenge {
    /// `http-01`, answered on the HTTP listener.
    Http01,
    /// `tls-alpn-01`, answered on the HTTPS listener.
    TlsAlpn01,
}

/// Where a rule's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    /// PEM files (`tls_cert_file` + `tls_key_file`), reloaded when they change.
    Files { cert: PathBuf, key: PathBuf },
    /// Issued by rampart's local CA (`tls = "internal"`).
    Internal,
    /// Obtained from the ACME CA (`lets_encrypt_contact_email` or `tls = "acme"`).
    Acme,
}

/// A TLS protocol version floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// Global request screening (recv): rate limiting, body limit, client addresses.
#[derive(Debug, Clone, PartialEq)]
pub struct ScreenConfig {
    /// ARC2 `add_sql_injection_protection`: the global switch (each rule has its own too).
    pub sql_injection: bool,
    /// The global per-client limiter (`add_rate_limiting`, `rate_limit_per_second`,
    /// `rate_limit_burst`); `None` when rate limiting is off.
    pub rate_limit: Option<RateLimit>,
    /// The status of a rate limit's refusal (`rate_limit_status`, default 429; NGINX's
    /// `limit_req_status`). A rule's own, when set, is in `RuleConfig::rate_limit_status`.
    pub rate_limit_status: u16,
    /// Clients never rate limited (`rate_limit_exempt`; default loopback).
    pub rate_limit_exempt: Vec<Cidr>,
    /// Most client addresses each limiter tracks (`rate_limit_max_clients`).
    pub rate_limit_max_clients: usize,
    /// Peers whose `X-Forwarded-For` names the real client (`trusted_proxies`).
    pub trusted_proxies: Vec<Cidr>,
    /// Default request body limit in bytes (`max_body_size`; 2 MiB unless
    /// `disable_default_body_limit`); `None` = unlimited.
    pub body_limit: Option<u64>,
}

/// A GCRA rate: `per_second` sustained, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub per_second: u32,
    pub burst: u32,
}

/// The management API and cache purging.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdminConfig {
    /// ARC2 `api_key`: enables `/_rampart/...` and authorises PURGE (`Authorization: Bearer`).
    pub api_key: Option<String>,
    /// Client addresses allowed to send `PURGE` without the key (`purge_allow`).
    pub purge_allow: Vec<Cidr>,
    /// Client addresses that may read `/_rampart/metrics` and the dashboard's figures without
    /// the key (`metrics_allow`, rampart's own key).
    pub metrics_allow: Vec<Cidr>,
}

/// The shared response cache.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    /// ARC2 `add_caching`: master switch.
    pub enabled: bool,
    /// Hard byte budget of the in-memory store (`cache_memory`).
    pub memory: u64,
    /// Larger bodies stream through uncached (`cache_max_object`).
    pub max_object: usize,
    /// How long past its freshness a stored response may be served when the origin fails
    /// (`cache_grace_seconds`), unless the origin forbids serving stale.
    pub grace: std::time::Duration,
    /// The default `cache_heuristic` of rules.
    pub heuristic: CacheHeuristic,
    /// The default `store_set_cookie` of rules.
    pub store_set_cookie: bool,
    /// The default `cache_by_scheme` of rules.
    pub by_scheme: bool,
    /// The default `cache_statuses` of rules.
    pub statuses: CacheStatuses,
    /// The default `stale_while_revalidate_seconds` of rules: the window a stored response
    /// whose origin sent no `stale-while-revalidate` gets; `None`: none.
    pub stale_while_revalidate: Option<u64>,
    /// The default `stale_if_error_seconds` of rules (as above, for `stale-if-error`).
    pub stale_if_error: Option<u64>,
    /// The response fields that tag objects for purges (`cache_tag_headers`): read when a
    /// response is stored, and never passed on to clients. Empty: tags are off.
    pub tag_headers: Vec<http::HeaderName>,
    /// The disk tier (`cache_disk`), when there is one.
    pub disk: Option<DiskConfig>,
}

/// The cache's second tier, on disk (`cache_disk`, `cache_disk_size`, `cache_disk_min_uses`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskConfig {
    /// The directory holding it (created when missing).
    pub path: std::path::PathBuf,
    /// Bytes it may use in all, its own metadata included.
    pub size: u64,
    /// How many times a response must be used (served or fetched) before it is written.
    pub min_uses: u32,
    /// The largest body it takes (`cache_max_object`, at most a quarter of `size`); bodies
    /// larger than the memory cache may hold go to disk only.
    pub max_object: u64,
}

/// What a response without an explicit lifetime gets (`cache_heuristic`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheHeuristic {
    /// `"max_age"` (ARC2): the rule's `max_age_seconds`.
    #[default]
    MaxAge,
    /// `"last_modified"`: 10% of the time since `Last-Modified` (RFC 9111 §4.2.2), at most
    /// `max_age_seconds`; none without `Last-Modified`.
    LastModified,
    /// `"none"`: only explicit freshness.
    None,
}

/// Which response statuses are stored (`cache_statuses`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheStatuses {
    /// `"arc2"` (default): 200, 201 and 204, as ARC2.
    #[default]
    Arc2,
    /// `"rfc9111"`: every final status RFC 9111 §3 allows (206 and 304 aside) that has a
    /// lifetime: an explicit one, or a heuristic one for the heuristically cacheable statuses.
    Rfc9111,
}

/// Worker layout (`worker_runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeMode {
    /// One single-threaded runtime per worker, each with its own `SO_REUSEPORT` listener.
    PerCore,
    /// One multi-threaded runtime with `workers` threads sharing one listener per address.
    Shared,
}

/// Client-side (downstream) socket and connection settings.
#[derive(Debug, Clone, PartialEq)]
pub struct DownstreamConfig {
    pub nodelay: bool,
    pub max_backlog: Option<i32>,
    pub recv_buffer_size: Option<usize>,
    pub send_buffer_size: Option<usize>,
    pub ip_ttl: Option<u32>,
    pub tcp_keepalive: Option<Duration>,
    /// Maximum open client connections across all workers.
    pub max_connections: usize,
    /// Longest a client may take to send a request head.
    pub header_read_timeout: Duration,
    /// Most open connections from one client address (`None` = no per-address limit).
    pub max_connections_per_ip: Option<usize>,
    /// Longest pause between two reads of a request body.
    pub body_idle_timeout: Duration,
    /// Longest a client may take to send a whole request body (`None` = no limit).
    pub body_total_timeout: Option<Duration>,
    /// Longest a response may wait for the client to take more of it
    /// (`client_send_timeout_seconds`, NGINX's `send_timeout`): the connection is closed.
    pub send_timeout: Duration,
    /// A connection that moves no bytes for this long is closed (gracefully).
    pub keepalive_timeout: Duration,
    /// An HTTP/1.1 keep-alive connection with no request for this long leaves its task and
    /// waits in its worker's epoll set (`client_idle_park_seconds`; `None`: never).
    pub park_after: Option<Duration>,
    /// Largest request head (request line + headers) in bytes; larger → 431.
    pub max_head_bytes: usize,
    /// Most header fields in a request; more → 431.
    pub max_headers: usize,
    /// HTTP/2: most concurrent streams per connection.
    pub h2_max_concurrent_streams: u32,
    /// HTTP/2: largest decoded header list in bytes.
    pub h2_max_header_list_bytes: u32,
    /// An upgraded connection (WebSocket) that moves no byte either way for this long is
    /// closed (`websocket_idle_timeout_seconds`).
    pub upgrade_idle_timeout: Duration,
}

/// Origin-side (upstream) settings.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    pub nodelay: bool,
    /// Idle pooled connections are closed after this long (ARC2 `proxy_keepalive_sec`).
    pub keepalive: Duration,
    /// Longest wait for an origin's response head (ARC2 `proxy_timeout`); `None` = no limit.
    pub timeout: Option<Duration>,
    /// Longest wait for a TCP connection to an origin.
    pub connect_timeout: Duration,
    /// Most idle pooled connections kept per origin per worker.
    pub max_idle_per_origin: usize,
    /// Oldest TLS version accepted from origins (ARC2 `proxy_min_tls_version`; 1.0 and 1.1 are
    /// raised to 1.2).
    pub tls_min_version: TlsVersion,
    /// Trust roots for origin certificates (`proxy_ca_file`); `None` = the system's roots.
    pub ca_file: Option<PathBuf>,
}

/// `Whitelist` / `Blacklist`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleType {
    Whitelist,
    Blacklist,
}

/// A per-path override (`[[proxy_rules.path_rules]]`).
#[derive(Debug, Clone, PartialEq)]
pub struct PathRuleConfig {
    pub path: String,
    /// `match_type` (and `ignore_case`): how `path` is compared.
    pub matcher: PathMatch,
    pub rule_type: RuleType,
    pub max_age_seconds: u64,
    /// This path's `max_age_by_status`; `None`: the rule's applies.
    pub max_age_by_status: Option<std::sync::Arc<[(u16, u64)]>>,
    /// This path's own field rules, applied after the rule's.
    pub request_headers: HeaderRules,
    pub response_headers: HeaderRules,
    /// `expires` here: `None` keeps the rule's, `Some(None)` (`"off"`) turns it off.
    pub expires: Option<Option<u64>>,
    /// `deny = true`: matching requests are refused (403), whatever `strict_path_rules` says.
    pub deny: bool,
}

impl PathRuleConfig {
    /// Whether this path rule applies to `path` (normalised, without query).
    pub fn matches(&self, path: &str) -> bool {
        self.matcher.matches(&self.path, path)
    }
}

/// What a request or response's fields get on their way (`[proxy_rules.request_headers]`,
/// `[proxy_rules.response_headers]`, and the same in a path rule): removed first, then set
/// (replacing every field of the name), then added (beside those there are).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeaderRules {
    pub remove: Vec<http::HeaderName>,
    pub set: Vec<(http::HeaderName, Template)>,
    pub add: Vec<(http::HeaderName, Template)>,
    /// Responses only (`always`, NGINX's `add_header ... always`): `set` and `add` reach every
    /// answer. Without it they reach only answers from the origin or the cache whose status a
    /// client may keep (2xx and 3xx, as NGINX's `add_header`); `remove` applies to all.
    pub always: bool,
}

impl HeaderRules {
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.set.is_empty() && self.add.is_empty()
    }

    /// Whether a value uses `v`.
    pub fn uses(&self, v: Variable) -> bool {
        self.set
            .iter()
            .chain(&self.add)
            .any(|(_, t)| t.parts.contains(&TemplatePart::Var(v)))
    }
}

/// A field value with variables: `"{client_ip}"`, `"https://{host}{path}"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub parts: Vec<TemplatePart>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplatePart {
    Text(String),
    Var(Variable),
}

/// What a header value or a redirect target may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variable {
    /// `{client_ip}`: the client's address (from `X-Forwarded-For` behind `trusted_proxies`).
    ClientIp,
    /// `{scheme}`: `http` or `https`, as the client connected.
    Scheme,
    /// `{host}`: the host the request was routed by, without its port.
    Host,
    /// `{request_id}`: the request's id (the client's `X-Request-Id` when usable, else
    /// rampart's), as the origin and the access log get it.
    RequestId,
    /// `{path}`: the request's path (normalised; after rewrites, the rewritten one).
    Path,
    /// `{query}`: the query string without its `?` (empty when there is none).
    Query,
}

impl Variable {
    pub const ALL: [(&'static str, Variable); 6] = [
        ("client_ip", Variable::ClientIp),
        ("scheme", Variable::Scheme),
        ("host", Variable::Host),
        ("request_id", Variable::RequestId),
        ("path", Variable::Path),
        ("query", Variable::Query),
    ];
}

/// `[[proxy_rules.rewrites]]`: a path rewritten before the request goes on (NGINX's `rewrite
/// ... break`, Caddy's `rewrite`). The first that matches applies.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewrite {
    /// `from`: matched on the normalised path (without query).
    pub from: Pattern,
    /// `to`: the new path, `$1`/`${name}` for what `from` captured.
    pub to: String,
}

/// `[[proxy_rules.redirects]]`: answered with a redirect (NGINX's `return 301`, Caddy's
/// `redir`). The first that matches applies, before any rewrite.
#[derive(Debug, Clone, PartialEq)]
pub struct Redirect {
    pub from: Pattern,
    /// `to`: a path or a URL, with `$1`/`${name}` and the variables of header values.
    pub to: Template,
    /// 301 (default), 302, 303, 307 or 308.
    pub status: u16,
    /// `keep_query` (default true): the request's query string is added to the target.
    pub keep_query: bool,
    /// `scheme`: only requests that arrived over HTTPS (`Some(true)`) or plain HTTP
    /// (`Some(false)`); `None`: both.
    pub https: Option<bool>,
}

/// `[proxy_rules.error_pages]`: the bodies of a rule's error answers (NGINX's `error_page`,
/// HAProxy's `errorfile`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ErrorPages {
    /// By status; rampart's own answers with that status get the page.
    pub pages: Vec<(u16, ErrorPage)>,
    /// `origin_errors` (default false): the origin's 5xx answers get the page of their status
    /// too (when there is one).
    pub origin_errors: bool,
}

impl ErrorPages {
    pub fn get(&self, status: u16) -> Option<&ErrorPage> {
        self.pages
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, p)| p)
    }
}

/// One error page: its body (read from its file when the configuration is read) and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPage {
    pub body: Vec<u8>,
    pub content_type: String,
}

/// How a rule picks among several upstreams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoutingMethod {
    /// Best-ranked upstream takes all traffic; the next one is used when it cannot be reached.
    Priority,
    /// Requests are spread in proportion to each upstream's weight.
    Weighted,
    /// The healthy upstream with the lowest response-time average (EWMA) takes the request.
    Performance,
}

/// Minification for a rule (`enable_minification`, `minification_flags`): which languages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Minify {
    pub html: bool,
    pub css: bool,
    pub js: bool,
    /// `comments` in the flags: HTML comments are removed too (kept by default).
    pub html_comments: bool,
}

/// WebP transformation for a rule (`enable_webp_transformation`): pictures stored for longer
/// than `min_age` get a WebP copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Webp {
    /// `webp_transformation_min_age` (default 21,600 s, ARC2's 6 hours).
    pub min_age: std::time::Duration,
}

/// Response compression for a rule (`enable_compression`, `compression_flags`,
/// `compression_types`, `compression_min_length`): the level of each coding offered (`None` =
/// not offered), the smallest body compressed, and the media types compressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compression {
    pub br: Option<u32>,
    pub zstd: Option<i32>,
    pub gzip: Option<u32>,
    pub min_length: u64,
    /// `compression_types`; `None` = the built-in list (text, JSON, XML, JavaScript, ...).
    pub types: Option<Vec<MediaRange>>,
}

/// One entry of `compression_types` (NGINX's `gzip_types`), lower-cased.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaRange {
    /// `"text/html"`: exactly this type (honoured even for a type that is compressed already).
    Exact(String),
    /// `"text/*"`: every subtype of `text`, but content that is compressed already.
    Type(String),
    /// `"*"` (or `"*/*"`): every type, but content that is compressed already.
    Any,
}

/// Active health checks of a rule's origins (`enable_health_checks` in `routing_rules`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// `health_check_interval` (seconds, at least 1).
    pub interval: std::time::Duration,
    /// `health_check_path` (default `/`).
    pub path: String,
}

/// One origin server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTarget {
    /// `host:port` used to connect over plain HTTP (and in the access log).
    pub authority: Authority,
    /// `host:port` for TLS (`forward_port_https`, 443 under `https_only`): used for requests
    /// that arrived over HTTPS, and for every request when `https_only`.
    pub tls: Option<Authority>,
    /// Always connect with TLS (`https_only`, or an `https://` entry in `upstreams`).
    pub https_only: bool,
    /// The name sent as SNI and verified in the origin's certificate: the origin's host name,
    /// or the rule's domain when the origin is an IP address (`forward_tls_name` overrides).
    pub tls_name: String,
    /// Weight for `Weighted` routing (≥ 1).
    pub weight: u32,
    /// The HTTP version spoken to it (`origin_protocol`).
    pub protocol: OriginProtocol,
}

/// The HTTP version rampart speaks to an origin (`origin_protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OriginProtocol {
    /// HTTP/1.1 (default).
    #[default]
    Http1,
    /// HTTP/2 over TLS (ALPN `h2`).
    H2,
    /// HTTP/2 without TLS (prior knowledge).
    H2c,
}

/// A `[[proxy_rules]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleConfig {
    /// The domain as written (for logs).
    pub domain_text: String,
    pub domain: DomainPattern,
    pub max_age_seconds: u64,
    /// `max_age_by_status` (NGINX's `proxy_cache_valid`): status → seconds, status 0 = `any`;
    /// empty when not set.
    pub max_age_by_status: std::sync::Arc<[(u16, u64)]>,
    /// Rule-level path prefixes; never empty (missing = `["/"]`).
    pub paths: Vec<String>,
    pub rule_type: RuleType,
    pub path_rules: Vec<PathRuleConfig>,
    /// Origins in preference order; never empty.
    pub upstreams: Vec<UpstreamTarget>,
    pub routing_method: RoutingMethod,
    /// Active health checks (`routing_rules.enable_health_checks`); `None` = off.
    pub health_check: Option<HealthCheck>,
    /// Response compression (global and rule `enable_compression`); `None` = off.
    pub compression: Option<Compression>,
    /// Minification of stored HTML, CSS and JS (`enable_minification`); `None` = off.
    pub minify: Option<Minify>,
    /// WebP copies of stored PNG and JPEG pictures (`enable_webp_transformation`); `None` = off.
    pub webp: Option<Webp>,
    pub enable_logging: bool,
    pub ignore_query_string: bool,
    /// When true, `Whitelist`/`Blacklist` control access (403) instead of only caching.
    pub strict_path_rules: bool,
    /// ARC2 behaviour: `max_age_seconds` replaces the origin's freshness information (the origin's
    /// `no-store`/`private` still win). Default: the origin's lifetime wins and `max_age_seconds`
    /// applies when it gives none.
    pub max_age_overrides_origin: bool,
    /// `cache_heuristic` (the global one unless the rule sets its own).
    pub cache_heuristic: CacheHeuristic,
    /// `store_set_cookie` (the global one unless the rule sets its own).
    pub store_set_cookie: bool,
    /// `cache_by_scheme` (the global one unless the rule sets its own): responses to HTTPS
    /// requests are stored apart from those to plain HTTP (NGINX's default key has the
    /// scheme). Off, they share entries (docs/arc2.md, "Cache keys") unless the origins differ.
    pub cache_by_scheme: bool,
    /// `cache_disk` (rampart): whether this rule's responses may go to the disk tier (a rule
    /// turns it off with `cache_disk = false`).
    pub cache_disk: bool,
    /// `cache_statuses` (the global one unless the rule sets its own).
    pub cache_statuses: CacheStatuses,
    /// `stale_while_revalidate_seconds` / `stale_if_error_seconds` (the global ones unless the
    /// rule sets its own): the windows a stored response gets when its origin gives none.
    pub stale_while_revalidate: Option<u64>,
    pub stale_if_error: Option<u64>,
    /// Field rules for requests to the origin and responses to the client.
    pub request_headers: HeaderRules,
    pub response_headers: HeaderRules,
    /// `expires` (NGINX's): the seconds clients may keep a response (`Expires` and
    /// `Cache-Control: max-age` on its way out); `None`: the origin's fields pass as they are.
    pub expires: Option<u64>,
    /// Redirects, then rewrites, in file order (the first match of each applies).
    pub redirects: Vec<Redirect>,
    pub rewrites: Vec<Rewrite>,
    /// Error pages for this rule's error answers.
    pub error_pages: ErrorPages,
    /// SQL-injection screening for this rule (global and rule switches both on).
    pub sql_injection: bool,
    /// `disallowed_user_agents`: a request whose User-Agent matches any entry is blocked.
    pub disallowed_user_agents: Vec<(MatchType, String)>,
    /// Clients allowed to use this rule (`allow_ips`; empty = everyone).
    pub allow_ips: Vec<Cidr>,
    /// Clients refused by this rule (`deny_ips`), checked after `allow_ips`.
    pub deny_ips: Vec<Cidr>,
    /// A per-client limiter for this rule only (`rate_limit_per_second`/`rate_limit_burst`).
    pub rate_limit: Option<RateLimit>,
    /// The status of this rule's limiter's refusals (`rate_limit_status`); `None` = the
    /// global one.
    pub rate_limit_status: Option<u16>,
    /// Body limit for this rule (`max_body_size`): `None` = the global one, `Some(None)` =
    /// unlimited.
    pub body_limit: Option<Option<u64>>,
    /// Where this rule's certificate comes from; `None` = not served over HTTPS.
    pub cert: Option<CertSource>,
    /// Answer plain-HTTP requests with a 308 to the same URL over HTTPS (`redirect_to_https`).
    pub redirect_to_https: bool,
    /// The status of that redirect (`redirect_to_https_status`: 301, 302, 307 or 308).
    pub redirect_to_https_status: u16,
    /// The `Strict-Transport-Security` value sent on HTTPS responses (`hsts_max_age_seconds`,
    /// `hsts_include_subdomains`, `hsts_preload`).
    pub hsts: Option<String>,
    /// A PROXY protocol header starts each connection to this rule's origins
    /// (`send_proxy_protocol`).
    pub send_proxy_protocol: Option<ProxyProtocolVersion>,
    /// Clients may switch protocols (WebSocket) on this rule (`allow_upgrades`, default true).
    pub allow_upgrades: bool,
    /// This rule's `websocket_idle_timeout_seconds` (`None`: the global one).
    pub upgrade_idle_timeout: Option<Duration>,
}

impl RuleConfig {
    /// Whether HTTPS requests use keys of their own: `cache_by_scheme`, or origins that differ
    /// by scheme.
    pub fn keys_by_scheme(&self) -> bool {
        self.cache_by_scheme || self.origins_differ_by_scheme()
    }

    /// Whether requests over HTTPS reach a different origin than plain ones (an origin with
    /// `forward_port_https` and without `https_only`). Such a rule keeps the schemes' cache
    /// entries apart (docs/arc2.md, "Cache keys").
    pub fn origins_differ_by_scheme(&self) -> bool {
        self.upstreams
            .iter()
            .any(|u| u.tls.is_some() && !u.https_only)
    }
}

/// Redis shared by several instances: where it is and what goes through it.
#[derive(Clone, PartialEq)]
pub struct RedisConfig {
    pub endpoint: RedisEndpoint,
    /// Prepended to every key and stream rampart writes (`redis_key_prefix`, default
    /// `rampart:`), so instances of several sites can share one Redis.
    pub key_prefix: String,
    /// Longest wait for one answer on the request path (`redis_timeout_ms`, default 5 ms);
    /// past it the instance decides locally.
    pub timeout: Duration,
    /// Rate limits counted in Redis (`redis_rate_limits`, default on).
    pub rate_limits: bool,
    /// Purges sent to every instance (`redis_purge`, default on).
    pub purge: bool,
    /// ACME account, certificates and keys kept in Redis, one order for all instances
    /// (`redis_certificates`, default on when a rule uses ACME).
    pub certificates: bool,
    /// What encrypts the ACME account and keys in Redis (`redis_encryption_key` or
    /// `redis_encryption_key_file`); required when `certificates` is on.
    pub encryption_key: Option<Secret>,
    /// A second cache tier in Redis, shared by every instance (`redis_cache`, default off).
    pub cache: bool,
    /// Largest body written to the Redis tier (`redis_cache_max_object`, default 1 MiB).
    pub cache_max_object: u64,
}

/// Key material for encryption at rest (never printed).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("endpoint", &self.endpoint)
            .field("key_prefix", &self.key_prefix)
            .field("timeout", &self.timeout)
            .field("rate_limits", &self.rate_limits)
            .field("purge", &self.purge)
            .field("certificates", &self.certificates)
            .field(
                "encryption_key",
                &self.encryption_key.as_ref().map(|_| "***"),
            )
            .field("cache", &self.cache)
            .field("cache_max_object", &self.cache_max_object)
            .finish()
    }
}

/// One Redis server, or the seed nodes of a Redis Cluster. Each address is a URL
/// (`redis://[user:password@]host[:port][/db]`, `rediss://` for TLS, `redis+unix:///path`).
#[derive(Clone, PartialEq, Eq)]
pub enum RedisEndpoint {
    Node(String),
    Cluster(Vec<String>),
}

impl RedisEndpoint {
    /// The addresses with any password replaced by `***` (for logs and `Debug`).
    pub fn redacted(&self) -> Vec<String> {
        let urls = match self {
            RedisEndpoint::Node(u) => std::slice::from_ref(u),
            RedisEndpoint::Cluster(n) => n.as_slice(),
        };
        urls.iter().map(|u| redact_url(u)).collect()
    }
}

impl std::fmt::Debug for RedisEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedisEndpoint::Node(_) => write!(f, "Node({:?})", self.redacted()[0]),
            RedisEndpoint::Cluster(_) => write!(f, "Cluster({:?})", self.redacted()),
        }
    }
}

/// `scheme://user:secret@host` → `scheme://user:***@host`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split_once(':').map_or(&rest[..at], |(u, _)| u);
            format!("{scheme}://{user}:***{}", &rest[at..])
        }
        None => url.to_owned(),
    }
}
