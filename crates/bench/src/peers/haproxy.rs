//! HAProxy as a peer, twice: with its small-object cache and as a plain reverse proxy; one
//! config template for both.

use std::io;

use super::config::{fill, nofile_limit, prepare_dir, write_config};
use super::{Launch, Peer, Setup};

/// HAProxy 2.6 with its small-object cache (`cache mycache`: 256 MB, objects up to 1 MiB, at most
/// 3600 s). h2c with prior knowledge on `h2_port` (`proto h2`); HAProxy also detects the h2
/// preface on the HTTP/1.1 port. TLS on `tls_port` offers HTTP/2 and HTTP/1.1 by ALPN. It does not store `no-store` responses. Runs as
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
    bind 127.0.0.1:@TLSPORT@ ssl crt @COMBINED@ alpn h2,http/1.1 ssl-min-ver TLSv1.2
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
