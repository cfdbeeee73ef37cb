//! h2o as a peer: a reverse proxy without a cache, which answers the 12-byte `/hello` from a
//! file of its own.

use std::io;

use super::config::{fill, prepare_dir, reachable_by_others, write_config};
use super::{Launch, Peer, Setup};

/// h2o 2.2 as a reverse proxy (`proxy.reverse.url`, keep-alive to the origin for 30 s), set up as
/// its documentation describes for one core: `num-threads` = workers. HTTP/1.1 and HTTP/2 over
/// cleartext with prior knowledge on `port` and `h2_port`; HTTP/1.1 and HTTP/2 (ALPN) over TLS
/// 1.2/1.3 on `tls_port`, OCSP stapling off (the certificate names no responder).
///
/// h2o 2.2 has no cache. In the suite's scenarios on other connections (a new connection per
/// request, HTTPS, HTTP/2) it answers `/hello` from DIR/hello.txt (`file.file`: 12 bytes, as the
/// origin's), a fixed file, and the report marks those rows; every other path goes to the
/// origin.
///
/// Runs as `h2o -m worker -c DIR/h2o.conf` (one process in the foreground; no pid file, errors
/// to DIR/error.log, no access log). Started as root, h2o drops to `nobody` after reading its
/// certificate (the file it serves is readable by everyone), or stays root when a parent of DIR is
/// closed to other users. No environment variables are
/// needed.
#[derive(Debug, Clone, Copy)]
pub struct H2o;

const H2O_CONF: &str = "# h2o reverse proxy, no cache; /hello from a fixed file (rampart-bench).
@USER@num-threads: @WORKERS@
error-log: @DIR@/error.log
listen:
  host: 127.0.0.1
  port: @PORT@
listen:
  host: 127.0.0.1
  port: @H2PORT@
listen:
  host: 127.0.0.1
  port: @TLSPORT@
  ssl:
    certificate-file: @CERT@
    key-file: @KEY@
    minimum-version: TLSv1.2
    ocsp-update-interval: 0
hosts:
  default:
    paths:
      /hello:
        file.file: @DIR@/hello.txt
      /:
        proxy.reverse.url: http://@ORIGIN@/
        proxy.timeout.keepalive: 30000
";

const H2O_USER_ROOT: &str =
    "# A parent of this directory is closed to other users: h2o (nobody by default) could not
# read the fixed file, so it stays root (ignored when h2o is not started as root).
user: root
";

impl Peer for H2o {
    fn name(&self) -> &'static str {
        "h2o"
    }
    fn label(&self) -> String {
        "h2o proxy.reverse (no cache; /hello from a fixed file)".to_owned()
    }
    fn binary(&self) -> &'static str {
        "h2o"
    }
    fn install_hint(&self) -> &'static str {
        "apt-get install h2o"
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
    fn fixed_hello(&self) -> bool {
        true
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        let (dir, dir_text) = prepare_dir(setup.dir)?;
        write_config(&dir, "hello.txt", "Hello World!")?;
        let user = if reachable_by_others(&dir) {
            ""
        } else {
            H2O_USER_ROOT
        };
        let conf = fill(
            H2O_CONF,
            &[
                ("@USER@", user.to_owned()),
                ("@DIR@", dir_text),
                ("@WORKERS@", setup.workers.max(1).to_string()),
                ("@PORT@", setup.port.to_string()),
                ("@H2PORT@", setup.h2_port.to_string()),
                ("@TLSPORT@", setup.tls_port.to_string()),
                ("@CERT@", setup.tls.cert.display().to_string()),
                ("@KEY@", setup.tls.key.display().to_string()),
                ("@ORIGIN@", setup.origin.to_string()),
            ],
        );
        let config = write_config(&dir, "h2o.conf", &conf)?;
        Ok(Launch {
            program: "h2o".to_owned(),
            args: vec![
                "-m".to_owned(),
                "worker".to_owned(),
                "-c".to_owned(),
                config,
            ],
        })
    }
}
