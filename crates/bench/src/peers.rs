//! Peers: how to configure and start each proxy the suite compares (NGINX, Varnish, HAProxy,
//! Squid, Caddy, Apache, rampart). Each peer writes its config into its own directory (the
//! report folder keeps them) and returns the command that runs it in the foreground, so the
//! runner owns the process tree, pins it with `taskset` and kills it at the end.

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Where and how one peer runs in this suite.
#[derive(Debug, Clone)]
pub struct Setup<'a> {
    /// The peer's own directory: configs, pid files, logs, cache storage.
    pub dir: &'a Path,
    /// HTTP/1.1 listen port on 127.0.0.1.
    pub port: u16,
    /// HTTP/2 cleartext (prior knowledge) listen port on 127.0.0.1, for peers that offer h2c.
    pub h2_port: u16,
    /// The built-in origin.
    pub origin: SocketAddr,
    /// Worker processes/threads (same for every peer).
    pub workers: usize,
    /// Path to the rampart binary (for the rampart peer).
    pub rampart: &'a Path,
    /// HTTPS (HTTP/1.1 over TLS) listen port on 127.0.0.1, for peers that terminate TLS.
    pub tls_port: u16,
    /// The certificate every TLS peer presents.
    pub tls: &'a TlsFiles,
}

/// One ECDSA P-256 certificate for `localhost` / 127.0.0.1, shared by every TLS peer.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// PEM certificate.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8).
    pub key: PathBuf,
    /// Certificate then key in one file (HAProxy's `crt`).
    pub combined: PathBuf,
}

impl TlsFiles {
    /// Generates the certificate into `dir`.
    pub fn create(dir: &Path) -> io::Result<TlsFiles> {
        let err = |e: rcgen::Error| io::Error::other(e.to_string());
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(err)?;
        let params =
            rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .map_err(err)?;
        let cert = params.self_signed(&key).map_err(err)?;
        let files = TlsFiles {
            cert: dir.join("bench-cert.pem"),
            key: dir.join("bench-key.pem"),
            combined: dir.join("bench-combined.pem"),
        };
        fs::write(&files.cert, cert.pem())?;
        fs::write(&files.key, key.serialize_pem())?;
        fs::write(
            &files.combined,
            format!("{}{}", cert.pem(), key.serialize_pem()),
        )?;
        for f in [&files.cert, &files.key, &files.combined] {
            fs::set_permissions(f, fs::Permissions::from_mode(0o644))?;
        }
        Ok(files)
    }
}

/// A command line to run in the foreground.
#[derive(Debug, Clone)]
pub struct Launch {
    pub program: String,
    pub args: Vec<String>,
}

/// One peer of the comparison.
pub trait Peer: Send + Sync {
    /// Short id used on the command line and in file names (`nginx`, `nginx-default`, ...).
    fn name(&self) -> &'static str;
    /// What the report calls it, e.g. "NGINX 1.22 proxy_cache, upstream keepalive".
    fn label(&self) -> String;
    /// The executable that must exist (checked on PATH and in /usr/sbin).
    fn binary(&self) -> &'static str;
    /// How to install it, e.g. "apt-get install nginx".
    fn install_hint(&self) -> &'static str;
    /// Whether it caches (cached scenarios skip peers that do not).
    fn caches(&self) -> bool;
    /// Whether it serves HTTP/2 cleartext with prior knowledge on `h2_port`.
    fn h2c(&self) -> bool;
    /// Whether it terminates TLS on `tls_port` (TLS 1.2/1.3 with `setup.tls`).
    fn tls(&self) -> bool {
        false
    }
    /// Writes the config files into `setup.dir` and returns the foreground command.
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch>;
    /// The suite's own fixed-response yardstick (`rampart-bench floor`): no proxying, no
    /// config, only scenarios for the 12-byte `/hello` over cleartext HTTP/1.1.
    fn is_floor(&self) -> bool {
        false
    }
}

/// All peers, rampart first.
pub fn all() -> Vec<Box<dyn Peer>> {
    vec![
        Box::new(Rampart { baseline: false }),
        Box::new(Nginx),
        Box::new(NginxDefault),
        Box::new(Varnish),
        Box::new(HaproxyCache),
        Box::new(Haproxy),
        Box::new(Squid),
        Box::new(Caddy),
        Box::new(Apache),
        Box::new(Floor),
    ]
}

// ---------------------------------------------------------------------------------------------
// the floor
// ---------------------------------------------------------------------------------------------

/// `rampart-bench floor` (see `floor.rs`): one read and one write per request, the cost below
/// which no HTTP server on this machine can go. Reports divide every program's CPU per request
/// by the floor's from the same run.
#[derive(Debug, Clone, Copy)]
pub struct Floor;

impl Peer for Floor {
    fn name(&self) -> &'static str {
        "floor"
    }
    fn label(&self) -> String {
        "floor: fixed-response epoll server (one read, one write per request)".to_owned()
    }
    fn binary(&self) -> &'static str {
        "rampart-bench"
    }
    fn install_hint(&self) -> &'static str {
        "built with rampart-bench"
    }
    fn caches(&self) -> bool {
        true
    }
    fn h2c(&self) -> bool {
        false
    }
    fn is_floor(&self) -> bool {
        true
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        prepare_dir(setup.dir)?;
        Ok(Launch {
            program: std::env::current_exe()?.to_string_lossy().into_owned(),
            args: vec![
                "floor".to_owned(),
                "--listen".to_owned(),
                format!("127.0.0.1:{}", setup.port),
            ],
        })
    }
}

// ---------------------------------------------------------------------------------------------
// rampart
// ---------------------------------------------------------------------------------------------

/// rampart itself, from `setup.rampart`. Both listeners serve HTTP/1.1 and h2c with prior
/// knowledge. A hit carries `Cache-Status: rampart; hit` (a miss `rampart; fwd=miss; stored`).
///
/// With `baseline`, the same configuration run from another build (`rampart-bench --baseline
/// PATH`): a before/after comparison of a change, interleaved in the same rounds.
#[derive(Debug, Clone, Copy)]
pub struct Rampart {
    pub baseline: bool,
}

impl Peer for Rampart {
    fn name(&self) -> &'static str {
        if self.baseline {
            "rampart-baseline"
        } else {
            "rampart"
        }
    }
    fn label(&self) -> String {
        if self.baseline {
            "rampart, baseline build (--baseline)".to_owned()
        } else {
            "rampart".to_owned()
        }
    }
    fn binary(&self) -> &'static str {
        "rampart"
    }
    fn install_hint(&self) -> &'static str {
        "cargo build --release -p rampart"
    }
    fn caches(&self) -> bool {
        true
    }
    fn h2c(&self) -> bool {
        true
    }
    fn tls(&self) -> bool {
        true
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        let (dir, _) = prepare_dir(setup.dir)?;
        let SocketAddr::V4(origin) = setup.origin else {
            return Err(invalid(format!(
                "rampart forwards to an IPv4 origin (forward_ipv4); got {}",
                setup.origin
            )));
        };
        let (port, h2_port, workers) = (setup.port, setup.h2_port, setup.workers.max(1));
        let (origin_ip, origin_port) = (origin.ip(), origin.port());
        let (tls_port, cert, key) = (
            setup.tls_port,
            setup.tls.cert.display(),
            setup.tls.key.display(),
        );
        let toml = format!(
            r#"# rampart (rampart-bench): every listener serves HTTP/1.1 and h2c with prior knowledge;
# the HTTPS listener HTTP/1.1 and HTTP/2 (ALPN).
listen = ["127.0.0.1:{port}", "127.0.0.1:{h2_port}"]
listen_https = ["127.0.0.1:{tls_port}"]
workers = {workers}
add_logging = false
logging_level = "error"
add_caching = true
cache_memory = "256MiB"
# ARC2's switch: compressible responses (the `compressed` scenario's page) get Brotli, zstd or
# gzip copies when stored; the other scenarios' bodies are too short, not compressible, or asked
# for without Accept-Encoding.
enable_compression = true

[[proxy_rules]]
domain = "*"
max_age_seconds = 3600
forward_ipv4 = "{origin_ip}"
forward_port_http = {origin_port}
rule_type = "Whitelist"
enable_logging = false
ignore_query_string = false
enable_sql_injection_protection = false
enable_compression = true
enable_minification = false
enable_webp_transformation = false
tls_cert_file = "{cert}"
tls_key_file = "{key}"
"#
        );
        let config = write_config(&dir, "rampart.toml", &toml)?;
        Ok(Launch {
            program: setup.rampart.to_string_lossy().into_owned(),
            args: vec!["run".to_owned(), "--config".to_owned(), config],
        })
    }
}

// ---------------------------------------------------------------------------------------------
// NGINX
// ---------------------------------------------------------------------------------------------

/// NGINX with `proxy_cache` (the settings of ARC2's published NGINX benchmark: `keys_zone=
/// mycache:60m`, `proxy_cache_valid any 60m`) and HTTP/1.1 keep-alive to the origin (`upstream`
/// with `keepalive 32`). h2c on `h2_port` only (`listen ... http2`, NGINX 1.22 syntax: one port
/// cannot serve both). NGINX honours the origin's `Cache-Control: no-store`, so such pages always
/// reach the origin. A hit carries `X-Cache-Status: HIT` (`$upstream_cache_status`).
///
/// Runs as `nginx -c DIR/nginx.conf -p DIR/ -e DIR/error.log` (`-e`, NGINX >= 1.19.5, keeps the
/// early error log out of /var/log even on builds whose default is a file there). Every path
/// (pid, lock, error log, temp paths, cache) is inside DIR. The workers run as the build's default
/// user (nobody); the master creates and chowns the cache and temp directories for them. If a
/// parent of DIR is closed to other users (e.g. under /root), the workers could not reach the
/// cache, so the config then says `user root;` (ignored when NGINX is not started as root).
#[derive(Debug, Clone, Copy)]
pub struct Nginx;

/// NGINX with `proxy_cache` and default proxy settings: `proxy_pass http://ORIGIN;` without an
/// `upstream` block, so HTTP/1.0 and a new connection per request to the origin. Otherwise as
/// [`Nginx`].
#[derive(Debug, Clone, Copy)]
pub struct NginxDefault;

impl Peer for Nginx {
    fn name(&self) -> &'static str {
        "nginx"
    }
    fn label(&self) -> String {
        "NGINX proxy_cache, upstream keepalive".to_owned()
    }
    fn binary(&self) -> &'static str {
        "nginx"
    }
    fn install_hint(&self) -> &'static str {
        "apt-get install nginx"
    }
    fn caches(&self) -> bool {
        true
    }
    fn h2c(&self) -> bool {
        true
    }
    fn tls(&self) -> bool {
        true
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        nginx_prepare(setup, true, &self.label())
    }
}

impl Peer for NginxDefault {
    fn name(&self) -> &'static str {
        "nginx-default"
    }
    fn label(&self) -> String {
        "NGINX proxy_cache, default proxy settings (HTTP/1.0, no upstream keepalive)".to_owned()
    }
    fn binary(&self) -> &'static str {
        "nginx"
    }
    fn install_hint(&self) -> &'static str {
        "apt-get install nginx"
    }
    fn caches(&self) -> bool {
        true
    }
    fn h2c(&self) -> bool {
        true
    }
    fn tls(&self) -> bool {
        true
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        nginx_prepare(setup, false, &self.label())
    }
}

/// Asked of NGINX with `worker_rlimit_nofile`, lowered to the hard limit when that is smaller
/// (raising past it fails with an alert).
const NGINX_NOFILE: u64 = 70_000;

const NGINX_CONF: &str = r"# @LABEL@ (rampart-bench).
# Cache settings of ARC2's published NGINX benchmark: keys_zone=mycache:60m, proxy_cache_valid any 60m.
# Every file NGINX writes (pid, lock, logs, temp files, cache) is inside this directory.
@USER@worker_processes @WORKERS@;
worker_rlimit_nofile @NOFILE@;
daemon off;
master_process on;
pid @DIR@/nginx.pid;
lock_file @DIR@/nginx.lock;
error_log @DIR@/error.log error;

events {
    worker_connections 65535;
}

http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path @DIR@/client_body_temp;
    proxy_temp_path @DIR@/proxy_temp;
    fastcgi_temp_path @DIR@/fastcgi_temp;
    uwsgi_temp_path @DIR@/uwsgi_temp;
    scgi_temp_path @DIR@/scgi_temp;
    proxy_cache_path @DIR@/cache keys_zone=mycache:60m;
    # The `compressed` scenario: NGINX stores the identity body and gzips each hit (gzip_static
    # serves files from disk only; Debian's NGINX has no Brotli filter).
    gzip on;
    gzip_types text/css application/javascript application/json;
    gzip_comp_level 6;
    gzip_min_length 256;
    gzip_vary on;
    gzip_proxied any;
@UPSTREAM@
    server {
        listen 127.0.0.1:@PORT@;
@LOCATION@
    }

    server {
        listen 127.0.0.1:@H2PORT@ http2;
@LOCATION@
    }

    # TLS 1.2/1.3, the same ECDSA P-256 certificate as every TLS peer, a session cache.
    server {
        listen 127.0.0.1:@TLSPORT@ ssl;
        ssl_certificate @CERT@;
        ssl_certificate_key @KEY@;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:SSL:10m;
@LOCATION@
    }
}
";

const NGINX_UPSTREAM: &str = "
    upstream origin {
        server @ORIGIN@;
        keepalive 32;
    }
";

const NGINX_LOCATION_KEEPALIVE: &str = r#"        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache mycache;
            proxy_cache_valid any 60m;
            add_header X-Cache-Status $upstream_cache_status;
        }"#;

const NGINX_LOCATION_DEFAULT: &str = "        location / {
            proxy_pass http://@ORIGIN@;
            proxy_cache mycache;
            proxy_cache_valid any 60m;
            add_header X-Cache-Status $upstream_cache_status;
        }";

const NGINX_USER_ROOT: &str =
    "# A parent of this directory is closed to other users: the workers (nobody by default) could
# not reach the cache, so they run as root (ignored when NGINX is not started as root).
user root;
";

fn nginx_prepare(setup: &Setup<'_>, keepalive: bool, label: &str) -> io::Result<Launch> {
    let (dir, dir_text) = prepare_dir(setup.dir)?;
    let nofile = nofile_limit().map_or(NGINX_NOFILE, |hard| hard.min(NGINX_NOFILE));
    let user = if reachable_by_others(&dir) {
        ""
    } else {
        NGINX_USER_ROOT
    };
    let (upstream, location) = if keepalive {
        (NGINX_UPSTREAM, NGINX_LOCATION_KEEPALIVE)
    } else {
        ("", NGINX_LOCATION_DEFAULT)
    };
    let conf = fill(
        NGINX_CONF,
        &[
            ("@UPSTREAM@", upstream.to_owned()),
            ("@LOCATION@", location.to_owned()),
            ("@USER@", user.to_owned()),
            ("@LABEL@", label.to_owned()),
            ("@WORKERS@", setup.workers.max(1).to_string()),
            ("@NOFILE@", nofile.to_string()),
            ("@DIR@", dir_text.clone()),
            ("@PORT@", setup.port.to_string()),
            ("@H2PORT@", setup.h2_port.to_string()),
            ("@TLSPORT@", setup.tls_port.to_string()),
            ("@CERT@", setup.tls.cert.display().to_string()),
            ("@KEY@", setup.tls.key.display().to_string()),
            ("@ORIGIN@", setup.origin.to_string()),
        ],
    );
    let config = write_config(&dir, "nginx.conf", &conf)?;
    Ok(Launch {
        program: "nginx".to_owned(),
        args: vec![
            "-c".to_owned(),
            config,
            "-p".to_owned(),
            format!("{dir_text}/"),
            "-e".to_owned(),
            format!("{dir_text}/error.log"),
        ],
    })
}

// ---------------------------------------------------------------------------------------------
// Varnish
// ---------------------------------------------------------------------------------------------

/// Varnish with `-s malloc,256m` and the builtin VCL (plus an `X-Cache: HIT|MISS` header set in
/// `vcl_deliver`). The builtin VCL turns `Cache-Control: no-store` responses into hit-for-miss
/// objects, so such pages always reach the origin. `-p feature=+http2` makes both listeners serve
/// h2c with prior knowledge as well as HTTP/1.1.
///
/// Runs as `varnishd -F -T none -a 127.0.0.1:PORT -a 127.0.0.1:H2PORT -f DIR/default.vcl -s
/// malloc,256m -n DIR/varnish-work -p thread_pools=1 -p thread_pool_min=10 -p
/// thread_pool_max=500 -p feature=+http2`. `-T none`: no management CLI listener (the default
/// opens a random port). The work directory (`-n`, shared memory log and the compiled VCL) is in
/// DIR; varnishd compiles the VCL with the system C compiler and loads it from there, so DIR must
/// not be on a `noexec` file system. Started as root, the manager and the cache process drop to
/// the `varnish` and `vcache` users (`-j unix`); if a parent of DIR is closed to other users they
/// could not read the VCL, so the launch then adds `-j none` (everything stays root). No
/// environment variables are needed. Hits: `X-Cache: HIT`, or two ids in `X-Varnish`, or
/// `varnishstat -n DIR/varnish-work -1 -f MAIN.cache_hit`.
#[derive(Debug, Clone, Copy)]
pub struct Varnish;

const VARNISH_VCL: &str = r#"vcl 4.1;

# Varnish, malloc storage (rampart-bench). The builtin VCL does the rest: responses with
# Cache-Control no-store/no-cache/private or Set-Cookie become hit-for-miss, so they always reach
# the origin.

backend default {
    .host = "@HOST@";
    .port = "@OPORT@";
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
"#;

impl Peer for Varnish {
    fn name(&self) -> &'static str {
        "varnish"
    }
    fn label(&self) -> String {
        "Varnish malloc".to_owned()
    }
    fn binary(&self) -> &'static str {
        "varnishd"
    }
    fn install_hint(&self) -> &'static str {
        "apt-get install varnish"
    }
    fn caches(&self) -> bool {
        true
    }
    fn h2c(&self) -> bool {
        true
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        let (dir, dir_text) = prepare_dir(setup.dir)?;
        let vcl = fill(
            VARNISH_VCL,
            &[
                ("@HOST@", setup.origin.ip().to_string()),
                ("@OPORT@", setup.origin.port().to_string()),
            ],
        );
        let vcl_path = write_config(&dir, "default.vcl", &vcl)?;
        let mut args = vec!["-F".to_owned()];
        if !reachable_by_others(&dir) {
            args.extend(strings(&["-j", "none"]));
        }
        args.extend(strings(&["-T", "none", "-a"]));
        args.push(format!("127.0.0.1:{}", setup.port));
        args.push("-a".to_owned());
        args.push(format!("127.0.0.1:{}", setup.h2_port));
        args.push("-f".to_owned());
        args.push(vcl_path);
        args.extend(strings(&["-s", "malloc,256m", "-n"]));
        args.push(format!("{dir_text}/varnish-work"));
        args.extend(strings(&[
            "-p",
            "thread_pools=1",
            "-p",
            "thread_pool_min=10",
            "-p",
            "thread_pool_max=500",
            "-p",
            "feature=+http2",
        ]));
        Ok(Launch {
            program: "varnishd".to_owned(),
            args,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// HAProxy
// ---------------------------------------------------------------------------------------------

/// HAProxy 2.6 with its small-object cache (`cache mycache`: 256 MB, objects up to 1 MiB, at most
/// 3600 s). h2c with prior knowledge on `h2_port` (`proto h2`); HAProxy also detects the h2
/// preface on the HTTP/1.1 port. It does not store `no-store` responses. Runs as
/// `haproxy -db -f DIR/haproxy.cfg` (`-db`: foreground, no daemon, no master process); writes no
/// file. A hit carries an `Age` header (a miss has none). HAProxy's cache has no request
/// coalescing: concurrent first requests for one URL all go to the origin.
#[derive(Debug, Clone, Copy)]
pub struct HaproxyCache;

/// HAProxy as a plain reverse proxy (no cache), otherwise as [`HaproxyCache`].
#[derive(Debug, Clone, Copy)]
pub struct Haproxy;

/// HAProxy's `maxconn` when the open-files limit allows it; HAProxy needs about two descriptors
/// per connection and refuses to start when it cannot raise its limit that far.
const HAPROXY_MAXCONN: u64 = 100_000;

const HAPROXY_CFG: &str = "# @LABEL@ (rampart-bench).
global
    nbthread @WORKERS@
    maxconn @MAXCONN@

defaults
    mode http
    maxconn @MAXCONN@
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    http-reuse always
@CACHE@
frontend fe
    bind 127.0.0.1:@PORT@
    bind 127.0.0.1:@H2PORT@ proto h2
    bind 127.0.0.1:@TLSPORT@ ssl crt @COMBINED@ alpn http/1.1 ssl-min-ver TLSv1.2
    default_backend be

backend be
@CACHE_RULES@    server o @ORIGIN@
";

const HAPROXY_CACHE: &str = "
cache mycache
    total-max-size 256
    max-object-size 1048576
    max-age 3600
";

const HAPROXY_CACHE_RULES: &str = "    http-request cache-use mycache
    http-response cache-store mycache
";

impl Peer for HaproxyCache {
    fn name(&self) -> &'static str {
        "haproxy-cache"
    }
    fn label(&self) -> String {
        "HAProxy cache".to_owned()
    }
    fn binary(&self) -> &'static str {
        "haproxy"
    }
    fn install_hint(&self) -> &'static str {
        "apt-get install haproxy"
    }
    fn caches(&self) -> bool {
        true
    }
    fn h2c(&self) -> bool {
        true
    }
    fn tls(&self) -> bool {
        true
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        haproxy_prepare(setup, true, &self.label())
    }
}

impl Peer for Haproxy {
    fn name(&self) -> &'static str {
        "haproxy"
    }
    fn label(&self) -> String {
        "HAProxy (no cache)".to_owned()
    }
    fn binary(&self) -> &'static str {
        "haproxy"
    }
    fn install_hint(&self) -> &'static str {
        "apt-get install haproxy"
    }
    fn caches(&self) -> bool {
        false
    }
    fn h2c(&self) -> bool {
        true
    }
    fn tls(&self) -> bool {
        true
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        haproxy_prepare(setup, false, &self.label())
    }
}

fn haproxy_prepare(setup: &Setup<'_>, cache: bool, label: &str) -> io::Result<Launch> {
    let (dir, _) = prepare_dir(setup.dir)?;
    let maxconn = nofile_limit()
        .map_or(HAPROXY_MAXCONN, |hard| {
            HAPROXY_MAXCONN.min(hard.saturating_sub(200) / 2)
        })
        .max(64);
    let (cache_section, cache_rules) = if cache {
        (HAPROXY_CACHE, HAPROXY_CACHE_RULES)
    } else {
        ("", "")
    };
    let cfg = fill(
        HAPROXY_CFG,
        &[
            ("@CACHE_RULES@", cache_rules.to_owned()),
            ("@CACHE@", cache_section.to_owned()),
            ("@LABEL@", label.to_owned()),
            ("@WORKERS@", setup.workers.max(1).to_string()),
            ("@MAXCONN@", maxconn.to_string()),
            ("@PORT@", setup.port.to_string()),
            ("@H2PORT@", setup.h2_port.to_string()),
            ("@TLSPORT@", setup.tls_port.to_string()),
            ("@COMBINED@", setup.tls.combined.display().to_string()),
            ("@ORIGIN@", setup.origin.to_string()),
        ],
    );
    let config = write_config(&dir, "haproxy.cfg", &cfg)?;
    Ok(Launch {
        program: "haproxy".to_owned(),
        args: vec!["-db".to_owned(), "-f".to_owned(), config],
    })
}

// ---------------------------------------------------------------------------------------------
// Squid
// ---------------------------------------------------------------------------------------------

/// Squid 5 as an accelerator (reverse proxy) with a memory-only cache (`cache_mem 256 MB`, no
/// `cache_dir`), HTTP/1.1 only. `vhost` + `defaultsite` accept any Host; every request goes to
/// the origin peer (`never_direct`), so Squid never resolves or contacts the Host itself. DNS,
/// ICMP pinger, cache digests and the netdb file are off or pointed at 127.0.0.1. Squid honours
/// `no-store`. A hit carries `X-Cache: HIT from localhost` (a miss `MISS`).
///
/// With one worker it runs as `squid -N -f DIR/squid.conf` (one process, no daemon). With N > 1
/// it runs as `squid --foreground -f DIR/squid.conf` with `workers N` (a master and N kids plus
/// a coordinator in the launched process's group); SMP Squid then also uses shared memory
/// segments in /dev/shm (`squid-*.shm`) and IPC sockets in /run/squid — compiled-in places,
/// removed (the sockets: left) when it exits. Started as root it drops to `proxy` (Debian's squid
/// user), so `DIR/squid-logs` (cache.log) is given to that user; if it cannot write there Squid
/// logs to stderr instead. After SIGTERM Squid takes about 2 s to exit (`shutdown_lifetime 1
/// seconds`). No environment variables are needed.
#[derive(Debug, Clone, Copy)]
pub struct Squid;

const SQUID_CONF: &str = "# Squid accelerator, memory-only cache (rampart-bench).
http_port 127.0.0.1:@PORT@ accel defaultsite=localhost vhost
cache_peer @HOST@ parent @OPORT@ 0 no-query no-digest originserver name=origin
cache_peer_access origin allow all
never_direct allow all
http_access allow all
workers @WORKERS@
cache_mem 256 MB
maximum_object_size_in_memory 1 MB
@USER@visible_hostname localhost
pid_filename @DIR@/squid.pid
cache_log @DIR@/squid-logs/cache.log
access_log none
cache_store_log none
netdb_filename none
coredump_dir @DIR@/squid-logs
shutdown_lifetime 1 seconds
pinger_enable off
digest_generation off
dns_nameservers 127.0.0.1
udp_incoming_address 127.0.0.1
";

impl Peer for Squid {
    fn name(&self) -> &'static str {
        "squid"
    }
    fn label(&self) -> String {
        "Squid accelerator".to_owned()
    }
    fn binary(&self) -> &'static str {
        "squid"
    }
    fn install_hint(&self) -> &'static str {
        "apt-get install squid"
    }
    fn caches(&self) -> bool {
        true
    }
    fn h2c(&self) -> bool {
        false
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        let (dir, dir_text) = prepare_dir(setup.dir)?;
        let logs = dir.join("squid-logs");
        fs::create_dir_all(&logs)?;
        fs::set_permissions(&logs, fs::Permissions::from_mode(0o755))?;
        let user = system_user(&["proxy", "squid", "nobody"]);
        let user_line = match &user {
            Some(u) => {
                // Only root can hand the directory over; otherwise Squid runs as the caller,
                // who owns it already.
                let _ = std::os::unix::fs::chown(&logs, Some(u.uid), Some(u.gid));
                format!("cache_effective_user {}\n", u.name)
            }
            None => String::new(),
        };
        let workers = setup.workers.max(1);
        let conf = fill(
            SQUID_CONF,
            &[
                ("@USER@", user_line),
                ("@WORKERS@", workers.to_string()),
                ("@DIR@", dir_text),
                ("@PORT@", setup.port.to_string()),
                ("@HOST@", setup.origin.ip().to_string()),
                ("@OPORT@", setup.origin.port().to_string()),
            ],
        );
        let config = write_config(&dir, "squid.conf", &conf)?;
        let mode = if workers == 1 { "-N" } else { "--foreground" };
        Ok(Launch {
            program: "squid".to_owned(),
            args: vec![mode.to_owned(), "-f".to_owned(), config],
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Caddy
// ---------------------------------------------------------------------------------------------

/// Caddy 2.6 `reverse_proxy` (no cache), HTTP/1.1 and h2c with prior knowledge on both ports,
/// bound to 127.0.0.1 only (`bind`; a site address alone would listen on every interface) and
/// answering any Host.
///
/// Runs as `caddy run --config DIR/Caddyfile --adapter caddyfile --envfile DIR/caddy.env`.
/// Caddy autosaves its config under `$XDG_CONFIG_HOME/caddy` on every start (the Caddyfile of 2.6
/// cannot turn that off) and keeps its storage under `$XDG_DATA_HOME/caddy` (set to DIR/caddy-data
/// by `storage` too); `caddy.env` points HOME, XDG_CONFIG_HOME and XDG_DATA_HOME into DIR. Two
/// things need the real environment of the process, set before it starts: HOME=DIR (or
/// STEPPATH=DIR/.step), because a library creates an empty `$HOME/.step` at program start, before
/// the env file is read; and GOMAXPROCS=N, Caddy's only worker limit (the Go runtime reads it at
/// start; without it Go uses the CPUs of the `taskset` affinity mask, which also works). Caddy has
/// no cache, so it sends every request to the origin.
#[derive(Debug, Clone, Copy)]
pub struct Caddy;

const CADDYFILE: &str = "# Caddy reverse_proxy, no cache (rampart-bench).
{
	admin off
	auto_https off
	storage file_system {
		root @DIR@/caddy-data
	}
	servers {
		protocols h1 h2c
	}
}

http://:@PORT@, http://:@H2PORT@ {
	bind 127.0.0.1
	reverse_proxy @ORIGIN@
}
";

const CADDY_ENV: &str = "HOME=@DIR@
XDG_CONFIG_HOME=@DIR@/caddy-config
XDG_DATA_HOME=@DIR@/caddy-data
";

impl Peer for Caddy {
    fn name(&self) -> &'static str {
        "caddy"
    }
    fn label(&self) -> String {
        "Caddy reverse_proxy (no cache)".to_owned()
    }
    fn binary(&self) -> &'static str {
        "caddy"
    }
    fn install_hint(&self) -> &'static str {
        "apt-get install caddy"
    }
    fn caches(&self) -> bool {
        false
    }
    fn h2c(&self) -> bool {
        true
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        let (dir, dir_text) = prepare_dir(setup.dir)?;
        let caddyfile = fill(
            CADDYFILE,
            &[
                ("@DIR@", dir_text.clone()),
                ("@PORT@", setup.port.to_string()),
                ("@H2PORT@", setup.h2_port.to_string()),
                ("@ORIGIN@", setup.origin.to_string()),
            ],
        );
        let config = write_config(&dir, "Caddyfile", &caddyfile)?;
        let env = write_config(&dir, "caddy.env", &fill(CADDY_ENV, &[("@DIR@", dir_text)]))?;
        Ok(Launch {
            program: "caddy".to_owned(),
            args: vec![
                "run".to_owned(),
                "--config".to_owned(),
                config,
                "--adapter".to_owned(),
                "caddyfile".to_owned(),
                "--envfile".to_owned(),
                env,
            ],
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Apache
// ---------------------------------------------------------------------------------------------

/// Apache httpd 2.4, event MPM, `mod_proxy_http` (pooled keep-alive connections to the origin)
/// and `mod_cache` with `mod_cache_socache` on a 256 MiB shared-memory `shmcb` store (objects up
/// to 1 MiB, `CacheQuickHandler on`, `CacheDefaultExpire 3600`). `mod_http2` serves h2c with
/// prior knowledge (`Protocols h2c http/1.1`, `H2Direct on`) on both ports. mod_cache honours
/// `no-store`. A hit carries `X-Cache: HIT from localhost` (`CacheHeader on`; a miss `MISS`).
///
/// Runs as `apache2 -f DIR/httpd.conf -DFOREGROUND` with a standalone config: modules are loaded
/// by absolute path, and ServerRoot, DefaultRuntimeDir, the pid file and the error log are DIR
/// (no access log; mutexes are the default pthread ones, no files), so Debian's /etc/apache2 and
/// its APACHE_* environment variables are not used. Workers: N child processes
/// (`StartServers`/`ServerLimit` N) of 64 threads each. Threads are not CPUs in Apache: a thread
/// serves one request at a time and waits for the origin, so one thread per CPU would serialise
/// a pass-through load; N processes match the N worker processes of NGINX. Started as root the
/// children run as `www-data` (or `apache`/`daemon`/`nobody`, whichever exists); they need no
/// access to DIR.
#[derive(Debug, Clone, Copy)]
pub struct Apache;

/// Threads per Apache child process.
const APACHE_THREADS: usize = 64;

const APACHE_CONF: &str = r#"# Apache mod_proxy + mod_cache (rampart-bench): a standalone config, nothing from /etc/apache2.
ServerRoot "@DIR@"
DefaultRuntimeDir "@DIR@"
PidFile "@DIR@/httpd.pid"
ErrorLog "@DIR@/error.log"
LogLevel error
ServerName localhost
@USER@
LoadModule mpm_event_module @MODULES@/mod_mpm_event.so
LoadModule authz_core_module @MODULES@/mod_authz_core.so
LoadModule proxy_module @MODULES@/mod_proxy.so
LoadModule proxy_http_module @MODULES@/mod_proxy_http.so
LoadModule cache_module @MODULES@/mod_cache.so
LoadModule cache_socache_module @MODULES@/mod_cache_socache.so
LoadModule socache_shmcb_module @MODULES@/mod_socache_shmcb.so
LoadModule http2_module @MODULES@/mod_http2.so

# @WORKERS@ child process(es) of @THREADS@ threads, all started at once and never stopped.
StartServers @WORKERS@
ServerLimit @WORKERS@
ThreadLimit @THREADS@
ThreadsPerChild @THREADS@
MaxRequestWorkers @MAXWORKERS@
MinSpareThreads 1
MaxSpareThreads @MAXSPARE@
MaxConnectionsPerChild 0

Listen 127.0.0.1:@PORT@
Listen 127.0.0.1:@H2PORT@
Protocols h2c http/1.1
H2Direct on
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 60

ProxyRequests Off
ProxyPass / http://@ORIGIN@/

CacheQuickHandler on
CacheEnable socache /
CacheSocache "shmcb:@DIR@/cache.shmcb(268435456)"
CacheSocacheMaxSize 1048576
CacheDefaultExpire 3600
CacheHeader on
"#;

/// Where distributions keep Apache's modules; the first that has mod_proxy.so is used.
const APACHE_MODULE_DIRS: [&str; 4] = [
    "/usr/lib/apache2/modules",
    "/usr/lib64/httpd/modules",
    "/usr/lib/httpd/modules",
    "/usr/libexec/apache2",
];

impl Peer for Apache {
    fn name(&self) -> &'static str {
        "apache"
    }
    fn label(&self) -> String {
        "Apache mod_proxy + mod_cache".to_owned()
    }
    fn binary(&self) -> &'static str {
        "apache2"
    }
    fn install_hint(&self) -> &'static str {
        "apt-get install apache2"
    }
    fn caches(&self) -> bool {
        true
    }
    fn h2c(&self) -> bool {
        true
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        let (dir, dir_text) = prepare_dir(setup.dir)?;
        let modules = APACHE_MODULE_DIRS
            .iter()
            .find(|d| Path::new(d).join("mod_proxy.so").is_file())
            .unwrap_or(&APACHE_MODULE_DIRS[0]);
        let user = match system_user(&["www-data", "apache", "daemon", "nobody"]) {
            Some(u) => format!("User {}\nGroup #{}\n", u.name, u.gid),
            None => String::new(),
        };
        let workers = setup.workers.max(1);
        let conf = fill(
            APACHE_CONF,
            &[
                ("@USER@", user),
                ("@MODULES@", (*modules).to_owned()),
                ("@MAXWORKERS@", (workers * APACHE_THREADS).to_string()),
                ("@MAXSPARE@", ((workers + 1) * APACHE_THREADS).to_string()),
                ("@WORKERS@", workers.to_string()),
                ("@THREADS@", APACHE_THREADS.to_string()),
                ("@DIR@", dir_text),
                ("@PORT@", setup.port.to_string()),
                ("@H2PORT@", setup.h2_port.to_string()),
                ("@ORIGIN@", setup.origin.to_string()),
            ],
        );
        let config = write_config(&dir, "httpd.conf", &conf)?;
        Ok(Launch {
            program: "apache2".to_owned(),
            args: vec!["-f".to_owned(), config, "-DFOREGROUND".to_owned()],
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Characters that could change the meaning of a path written into one of the config languages
/// (quotes, comments, statement ends, blocks, variables, placeholders, shmcb's size suffix).
const UNSAFE_PATH_CHARS: &str = "\"'\\;{}#$`@()";

/// Creates the peer's directory and returns it absolute (configs name absolute paths, so neither
/// the runner's working directory nor NGINX's `-p` can change their meaning) with its text,
/// opened to the unprivileged users the peers' workers run as (0755).
fn prepare_dir(dir: &Path) -> io::Result<(PathBuf, String)> {
    fs::create_dir_all(dir)?;
    let abs = fs::canonicalize(dir)?;
    fs::set_permissions(&abs, fs::Permissions::from_mode(0o755))?;
    let Some(text) = abs.to_str() else {
        return Err(invalid(format!("{} is not UTF-8", abs.display())));
    };
    if let Some(c) = text
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || UNSAFE_PATH_CHARS.contains(*c))
    {
        return Err(invalid(format!(
            "{text}: {c:?} cannot be written into the peers' config files; use a plainer directory"
        )));
    }
    let text = text.to_owned();
    Ok((abs, text))
}

/// Writes `name` in `dir`, readable by everyone (the peers read their configs after dropping
/// privileges), and returns its path.
fn write_config(dir: &Path, name: &str, contents: &str) -> io::Result<String> {
    let path = dir.join(name);
    fs::write(&path, contents)?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
    Ok(path.to_string_lossy().into_owned())
}

/// Replaces each placeholder with its value, in order.
fn fill(template: &str, vars: &[(&str, String)]) -> String {
    let mut out = template.to_owned();
    for (key, value) in vars {
        out = out.replace(key, value);
    }
    out
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// The hard limit on open files of this process (which the peers inherit); None when unlimited
/// or unknown.
fn nofile_limit() -> Option<u64> {
    parse_nofile(&fs::read_to_string("/proc/self/limits").ok()?)
}

/// `Max open files  <soft>  <hard>  files` from /proc/PID/limits.
fn parse_nofile(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(4)?.parse().ok()
}

/// Whether every directory from `/` down to `dir` lets other users through (o+x): the workers
/// that NGINX and Varnish start as unprivileged users need that to reach their files.
fn reachable_by_others(dir: &Path) -> bool {
    dir.ancestors()
        .all(|d| fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// A system account from /etc/passwd.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SystemUser {
    name: String,
    uid: u32,
    gid: u32,
}

/// The first of `candidates` that exists in /etc/passwd.
fn system_user(candidates: &[&str]) -> Option<SystemUser> {
    parse_passwd(&fs::read_to_string("/etc/passwd").ok()?, candidates)
}

fn parse_passwd(passwd: &str, candidates: &[&str]) -> Option<SystemUser> {
    candidates.iter().find_map(|want| {
        passwd.lines().find_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            if name != *want {
                return None;
            }
            let _password = fields.next()?;
            let uid = fields.next()?.parse().ok()?;
            let gid = fields.next()?.parse().ok()?;
            Some(SystemUser {
                name: name.to_owned(),
                uid,
                gid,
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use std::sync::atomic::{AtomicUsize, Ordering};

    const PORT: u16 = 19_601;
    const H2_PORT: u16 = 19_602;
    const ORIGIN_PORT: u16 = 19_500;

    fn temp_dir(tag: &str) -> PathBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        std::env::temp_dir().join(format!("rampart-bench-peers-{pid}-{n}-{tag}"))
    }

    fn origin() -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), ORIGIN_PORT)
    }

    static TLS: std::sync::LazyLock<TlsFiles> = std::sync::LazyLock::new(|| TlsFiles {
        cert: PathBuf::from("/tmp/bench-cert.pem"),
        key: PathBuf::from("/tmp/bench-key.pem"),
        combined: PathBuf::from("/tmp/bench-combined.pem"),
    });

    fn setup(dir: &Path, origin: SocketAddr) -> Setup<'_> {
        Setup {
            dir,
            port: PORT,
            h2_port: H2_PORT,
            origin,
            workers: 2,
            rampart: Path::new("/opt/rampart/bin/rampart"),
            tls_port: 19_603,
            tls: &TLS,
        }
    }

    /// The files each peer writes.
    fn config_files(name: &str) -> &'static [&'static str] {
        match name {
            "rampart" | "rampart-baseline" => &["rampart.toml"],
            "nginx" | "nginx-default" => &["nginx.conf"],
            "varnish" => &["default.vcl"],
            "haproxy" | "haproxy-cache" => &["haproxy.cfg"],
            "squid" => &["squid.conf"],
            "caddy" => &["Caddyfile", "caddy.env"],
            "apache" => &["httpd.conf"],
            _ => &[],
        }
    }

    #[test]
    fn all_peers_in_order() {
        let names: Vec<&str> = all().iter().map(|p| p.name()).collect();
        assert_eq!(
            names,
            [
                "rampart",
                "nginx",
                "nginx-default",
                "varnish",
                "haproxy-cache",
                "haproxy",
                "squid",
                "caddy",
                "apache",
                "floor"
            ]
        );
        for p in all() {
            assert!(!p.label().is_empty(), "{}", p.name());
            assert!(!p.binary().is_empty(), "{}", p.name());
            assert!(!p.install_hint().is_empty(), "{}", p.name());
        }
        let no_cache: Vec<&str> = all()
            .iter()
            .filter(|p| !p.caches())
            .map(|p| p.name())
            .collect();
        assert_eq!(no_cache, ["haproxy", "caddy"]);
        let no_h2c: Vec<&str> = all()
            .iter()
            .filter(|p| !p.h2c())
            .map(|p| p.name())
            .collect();
        assert_eq!(no_h2c, ["squid", "floor"]);
    }

    #[test]
    fn every_peer_writes_its_config() -> io::Result<()> {
        for peer in all().into_iter().filter(|p| !p.is_floor()) {
            let name = peer.name();
            let dir = temp_dir(name);
            let launch = peer.prepare(&setup(&dir, origin()))?;
            let files = config_files(name);
            assert!(!files.is_empty(), "{name}: no config files listed");
            let mut text = String::new();
            for f in files {
                let path = dir.join(f);
                assert!(path.is_file(), "{name}: {} missing", path.display());
                text.push_str(&fs::read_to_string(&path)?);
            }
            // Listen ports are in the config or, for Varnish, on the command line.
            let all_text = format!("{text}\n{}", launch.args.join(" "));
            assert!(
                all_text.contains(&PORT.to_string()),
                "{name}: port missing:\n{all_text}"
            );
            if peer.h2c() {
                assert!(
                    all_text.contains(&H2_PORT.to_string()),
                    "{name}: h2 port missing:\n{all_text}"
                );
            }
            assert!(
                text.contains(&ORIGIN_PORT.to_string()),
                "{name}: origin port missing:\n{text}"
            );
            assert!(
                !all_text.contains("0.0.0.0"),
                "{name}: listens beyond loopback"
            );
            assert!(!text.contains('@'), "{name}: placeholder left:\n{text}");
            // The command names the config file, and the program is the peer's binary.
            let main_config = dir.join(files[0]).to_string_lossy().into_owned();
            assert!(
                launch.args.contains(&main_config),
                "{name}: {:?}",
                launch.args
            );
            if name == "rampart" {
                assert_eq!(launch.program, "/opt/rampart/bin/rampart");
                assert_eq!(launch.args[..2], ["run", "--config"]);
            } else {
                assert_eq!(launch.program, peer.binary(), "{name}");
            }
            // Preparing again in the same directory works (reruns reuse report folders).
            peer.prepare(&setup(&dir, origin()))?;
            fs::remove_dir_all(&dir)?;
        }
        Ok(())
    }

    /// `--baseline`: the same rampart config under its own name (the runner gives it the other
    /// binary through `Setup::rampart`).
    #[test]
    fn the_baseline_is_rampart_under_its_own_name() -> io::Result<()> {
        let (current, baseline) = (Rampart { baseline: false }, Rampart { baseline: true });
        assert_eq!(baseline.name(), "rampart-baseline");
        assert_ne!(baseline.label(), current.label());
        let (a, b) = (temp_dir("rampart-a"), temp_dir("rampart-b"));
        let mut before = setup(&b, origin());
        before.rampart = Path::new("/tmp/before/rampart");
        let (la, lb) = (
            current.prepare(&setup(&a, origin()))?,
            baseline.prepare(&before)?,
        );
        assert_eq!(lb.program, "/tmp/before/rampart");
        assert_eq!(la.args[..2], lb.args[..2]);
        assert_eq!(
            fs::read_to_string(a.join("rampart.toml"))?,
            fs::read_to_string(b.join("rampart.toml"))?
        );
        fs::remove_dir_all(&a)?;
        fs::remove_dir_all(&b)?;
        Ok(())
    }

    #[test]
    fn variants_differ_where_they_should() -> io::Result<()> {
        let read = |peer: &dyn Peer, file: &str| -> io::Result<String> {
            let dir = temp_dir(peer.name());
            peer.prepare(&setup(&dir, origin()))?;
            let text = fs::read_to_string(dir.join(file))?;
            fs::remove_dir_all(&dir)?;
            Ok(text)
        };
        let keepalive = read(&Nginx, "nginx.conf")?;
        assert!(keepalive.contains("keepalive 32;"));
        assert!(keepalive.contains("proxy_http_version 1.1;"));
        assert!(keepalive.contains("listen 127.0.0.1:19602 http2;"));
        let default = read(&NginxDefault, "nginx.conf")?;
        assert!(!default.contains("upstream origin"));
        assert!(!default.contains("keepalive 32"));
        assert!(!default.contains("proxy_http_version"));
        assert!(default.contains("proxy_pass http://127.0.0.1:19500;"));
        let cached = read(&HaproxyCache, "haproxy.cfg")?;
        assert!(cached.contains("http-response cache-store mycache"));
        assert!(cached.contains("nbthread 2"));
        let plain = read(&Haproxy, "haproxy.cfg")?;
        assert!(!plain.contains("cache mycache"));
        assert!(!plain.contains("cache-use"));
        assert!(plain.contains("bind 127.0.0.1:19602 proto h2"));
        let squid = read(&Squid, "squid.conf")?;
        assert!(squid.contains("workers 2"));
        assert!(squid.contains("cache_peer 127.0.0.1 parent 19500 0"));
        let apache = read(&Apache, "httpd.conf")?;
        assert!(apache.contains("ServerLimit 2"));
        assert!(apache.contains("MaxRequestWorkers 128"));
        assert!(apache.contains("ProxyPass / http://127.0.0.1:19500/"));
        Ok(())
    }

    #[test]
    fn squid_stays_in_the_foreground() -> io::Result<()> {
        let dir = temp_dir("squid-one");
        let mut one = setup(&dir, origin());
        one.workers = 1;
        assert_eq!(Squid.prepare(&one)?.args[0], "-N");
        let mut two = setup(&dir, origin());
        two.workers = 2;
        assert_eq!(Squid.prepare(&two)?.args[0], "--foreground");
        fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn unsafe_directories_are_refused() -> io::Result<()> {
        let dir = temp_dir("with space");
        for peer in all() {
            let err = peer.prepare(&setup(&dir, origin())).err();
            assert_eq!(
                err.map(|e| e.kind()),
                Some(io::ErrorKind::InvalidInput),
                "{}",
                peer.name()
            );
        }
        fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn rampart_needs_an_ipv4_origin() -> io::Result<()> {
        let dir = temp_dir("rampart-v6");
        let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), ORIGIN_PORT);
        let err = Rampart { baseline: false }.prepare(&setup(&dir, v6)).err();
        assert_eq!(err.map(|e| e.kind()), Some(io::ErrorKind::InvalidInput));
        fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn open_files_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            1024                 20000                files     \n";
        assert_eq!(parse_nofile(limits), Some(20_000));
        let unlimited =
            "Max open files            unlimited            unlimited            files     \n";
        assert_eq!(parse_nofile(unlimited), None);
        assert_eq!(parse_nofile(""), None);
    }

    #[test]
    fn passwd_lookup() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
                      proxy:x:13:13:proxy:/bin:/usr/sbin/nologin\n";
        let found = parse_passwd(passwd, &["squid", "proxy", "nobody"]);
        assert_eq!(
            found,
            Some(SystemUser {
                name: "proxy".to_owned(),
                uid: 13,
                gid: 13
            })
        );
        assert_eq!(parse_passwd(passwd, &["www-data"]), None);
    }

    #[test]
    fn reachability() {
        assert!(reachable_by_others(Path::new("/")));
        assert!(!reachable_by_others(Path::new("/definitely/not/here")));
    }
}
