//! rampart as a peer: its config (every listener HTTP/1.1 and h2c, an HTTPS listener, the
//! cache and compression on) and launch, for the build under test and a `--baseline` build.

use std::io;
use std::net::SocketAddr;

use super::config::{invalid, prepare_dir, write_config};
use super::{Launch, Peer, Setup};

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
        "cargo build --profile dist -p rampart"
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
{global}

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
{extra}
"#,
            extra = if self.baseline {
                ""
            } else {
                setup.rule_extra.unwrap_or("")
            },
            global = if self.baseline {
                ""
            } else {
                setup.global_extra.unwrap_or("")
            }
        );
        let config = write_config(&dir, "rampart.toml", &toml)?;
        Ok(Launch {
            program: setup.rampart.to_string_lossy().into_owned(),
            args: vec!["run".to_owned(), "--config".to_owned(), config],
        })
    }
}
