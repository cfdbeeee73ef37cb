//! Apache Traffic Server as a peer: a reverse proxy with its RAM cache over a small disk cache,
//! every file it reads or writes inside the peer's directory (a run root).

use std::fs;
use std::io;

use super::config::{fill, prepare_dir, write_config};
use super::{Launch, Peer, Setup};

/// Apache Traffic Server 9.2 as a reverse proxy, set up as its documentation describes for one
/// core: `exec_thread.limit` = workers (autoconfig off, no accept thread, one task thread), a
/// 256 MB RAM cache over a 256 MB cache file in DIR (ATS has no RAM-only cache: the RAM cache
/// sits in front of a volume), `remap.config` mapping every request to the origin (`map /
/// http://ORIGIN/`, `remap_required`), and only responses with an explicit lifetime
/// (`max-age` or `Expires`) cached (`required_headers 2`). It honours `no-store`. The cache's
/// write lock is left at its defaults: a request that finds another for its URL at the origin
/// retries 10 ms later, so concurrent requests for one `no-store` URL (the pass scenarios) wait;
/// `max_open_write_retries 0` would remove the wait but also stops ATS caching anything. HTTP/1.1 on
/// `port`, HTTP/1.1 and HTTP/2 (ALPN) over TLS on `tls_port`; ATS 9 has no HTTP/2 over cleartext.
/// Keep-alive to the origin is ATS's default (per-thread session pools). A hit carries `Age`.
///
/// Runs as `traffic_server --run-root=DIR/runroot.yaml`: the run root names DIR/etc for the
/// configs and DIR/run, DIR/log, DIR/cache for the lock, the diagnostics log and the cache file;
/// the programs, plugins and error-page templates are the installed ones. It stays in the
/// foreground without `traffic_manager`, as the invoking user (`admin.user_id #-1`; its crash
/// helper logs one harmless "missing password database entry" line about that). Logging is off.
#[derive(Debug, Clone, Copy)]
pub struct TrafficServer;

const RUNROOT: &str =
    "# Apache Traffic Server run root (rampart-bench): configs, state, logs and cache in
# this directory; programs and plugins where the package installed them.
prefix: @DIR@
exec_prefix: /usr
bindir: /usr/bin
sbindir: /usr/bin
sysconfdir: @DIR@/etc
datadir: @DIR@
includedir: /usr/include
libdir: /usr/lib/trafficserver
libexecdir: /usr/lib/trafficserver/modules
localstatedir: @DIR@
runtimedir: @DIR@/run
logdir: @DIR@/log
cachedir: @DIR@/cache
";

const RECORDS: &str = "# Apache Traffic Server reverse proxy with its RAM cache (rampart-bench).
# Threads: ATS's event threads are the workers; the accept thread is off (the event threads
# accept), one task thread, one cache I/O thread.
CONFIG proxy.config.exec_thread.autoconfig INT 0
CONFIG proxy.config.exec_thread.limit INT @WORKERS@
CONFIG proxy.config.accept_threads INT 0
CONFIG proxy.config.task_threads INT 1
CONFIG proxy.config.cache.threads_per_disk INT 1
# Listeners: HTTP/1.1, and TLS (HTTP/1.1 and HTTP/2 by ALPN), on 127.0.0.1 only.
CONFIG proxy.config.http.server_ports STRING @PORT@:ipv4:ip-in=127.0.0.1 @TLSPORT@:ipv4:ssl:ip-in=127.0.0.1
CONFIG proxy.config.net.connections_throttle INT 10000
CONFIG proxy.config.ssl.server.cert.path STRING @DIR@
CONFIG proxy.config.ssl.server.private_key.path STRING @DIR@
# Reverse proxy: every request must match remap.config.
CONFIG proxy.config.reverse_proxy.enabled INT 1
CONFIG proxy.config.url_remap.remap_required INT 1
# Cache: only responses with an explicit lifetime (max-age or Expires); a 256 MB RAM cache.
CONFIG proxy.config.http.cache.http INT 1
CONFIG proxy.config.http.cache.required_headers INT 2
CONFIG proxy.config.cache.ram_cache.size INT 268435456
CONFIG proxy.config.http.insert_request_via_str INT 0
CONFIG proxy.config.http.insert_response_via_str INT 0
# Stay the invoking user; no logs but diags.log.
CONFIG proxy.config.admin.user_id STRING #-1
CONFIG proxy.config.log.logging_enabled INT 0
CONFIG proxy.config.body_factory.template_sets_dir STRING /etc/trafficserver/body_factory
";

const REMAP: &str = "# Every request goes to the origin (rampart-bench).
map / http://@ORIGIN@/
";

const STORAGE: &str = "# The cache volume the RAM cache sits in front of (rampart-bench).
@DIR@/cache 256M
";

const SSL_MULTICERT: &str = "# The certificate every TLS peer presents (rampart-bench).
dest_ip=* ssl_cert_name=@CERT@ ssl_key_name=@KEY@
";

const IP_ALLOW: &str = "# Loopback clients only (rampart-bench).
ip_allow:
  - apply: in
    ip_addrs: 127.0.0.1
    action: allow
    methods: ALL
";

/// Files ATS reads at start that this setup leaves empty (written so it does not warn).
const EMPTY: &[&str] = &[
    "cache.config",
    "parent.config",
    "plugin.config",
    "volume.config",
    "hosting.config",
    "sni.yaml",
];

impl Peer for TrafficServer {
    fn name(&self) -> &'static str {
        "trafficserver"
    }
    fn label(&self) -> String {
        "Apache Traffic Server RAM cache".to_owned()
    }
    fn binary(&self) -> &'static str {
        "traffic_server"
    }
    fn install_hint(&self) -> &'static str {
        "apt-get install trafficserver"
    }
    fn caches(&self) -> bool {
        true
    }
    fn h2c(&self) -> bool {
        false
    }
    fn tls(&self) -> bool {
        true
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        let (dir, dir_text) = prepare_dir(setup.dir)?;
        let etc = dir.join("etc");
        for sub in [&etc, &dir.join("run"), &dir.join("log"), &dir.join("cache")] {
            fs::create_dir_all(sub)?;
        }
        let vars = [
            ("@DIR@", dir_text.clone()),
            ("@WORKERS@", setup.workers.max(1).to_string()),
            ("@PORT@", setup.port.to_string()),
            ("@TLSPORT@", setup.tls_port.to_string()),
            ("@ORIGIN@", setup.origin.to_string()),
            ("@CERT@", setup.tls.cert.display().to_string()),
            ("@KEY@", setup.tls.key.display().to_string()),
        ];
        let runroot = write_config(&dir, "runroot.yaml", &fill(RUNROOT, &vars))?;
        for (name, template) in [
            ("records.config", RECORDS),
            ("remap.config", REMAP),
            ("storage.config", STORAGE),
            ("ssl_multicert.config", SSL_MULTICERT),
            ("ip_allow.yaml", IP_ALLOW),
        ] {
            write_config(&etc, name, &fill(template, &vars))?;
        }
        for name in EMPTY {
            write_config(&etc, name, "")?;
        }
        Ok(Launch {
            program: "traffic_server".to_owned(),
            args: vec![format!("--run-root={runroot}")],
        })
    }
}
