//! NGINX as a peer, twice: tuned (`upstream` keep-alive to the origin) and with default proxy
//! settings; one config template for both.

use std::io;

use super::config::{fill, nofile_limit, prepare_dir, reachable_by_others, write_config};
use super::{Launch, Peer, Setup};

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

    # TLS 1.2/1.3, the same ECDSA P-256 certificate as every TLS peer, a session cache; HTTP/1.1
    # and HTTP/2 by ALPN.
    server {
        listen 127.0.0.1:@TLSPORT@ ssl http2;
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
