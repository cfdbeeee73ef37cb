//! The servers the soak starts: the two origins, the WebSocket echo origin and (when it is
//! installed and wanted) Redis behind rampart, the certificate rampart presents, and rampart
//! itself in front of them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::bail;

use super::faults::{OriginProc, RedisProc};
use super::rampart::{self, Rampart, Setup};
use super::{Soak, HEADER_TIMEOUT_S, SHUTDOWN_TIMEOUT_S};

/// Whether `tool` is on PATH.
fn installed(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A self-signed certificate for [`rampart::HOST`]: (certificate PEM path, key PEM path).
pub(super) fn certificate(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let params =
        rcgen::CertificateParams::new(vec![rampart::HOST.to_owned(), "localhost".to_owned()])?;
    let cert = params.self_signed(&key)?;
    let (c, k) = (dir.join("soak-cert.pem"), dir.join("soak-key.pem"));
    std::fs::write(&c, cert.pem())?;
    std::fs::write(&k, key.serialize_pem())?;
    Ok((c, k))
}

/// The WebSocket echo origin (`rampart-bench ws-origin`), killed when dropped.
pub(super) struct WsOrigin(std::process::Child);

impl Drop for WsOrigin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What rampart forwards to: two origins, the WebSocket echo origin, and Redis when it is
/// installed and wanted.
pub(super) struct Backends {
    pub(super) origin_a: OriginProc,
    pub(super) origin_b: OriginProc,
    pub(super) ws_origin: WsOrigin,
    ws_addr: SocketAddr,
    pub(super) redis: Option<RedisProc>,
}

impl Backends {
    /// Starts them; what the run then cannot cover is noted in `skipped`.
    pub(super) fn start(s: &Soak<'_>, skipped: &mut Vec<String>) -> anyhow::Result<Backends> {
        let (me, scratch) = (&s.me, &s.scratch);
        let loopback0 = SocketAddr::from(([127, 0, 0, 1], 0));
        let origin_a =
            OriginProc::start(me, s.seed, "a", loopback0, &scratch.join("origin-a.log"))?;
        let origin_b =
            OriginProc::start(me, s.seed, "b", loopback0, &scratch.join("origin-b.log"))?;
        let ws_addr = SocketAddr::from(([127, 0, 0, 1], crate::procs::free_port()?));
        let ws_origin = WsOrigin(
            Command::new(me)
                .args(["ws-origin", "--listen", &ws_addr.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()?,
        );
        if !crate::procs::wait_listening(ws_addr, Duration::from_secs(10)) {
            bail!("the WebSocket origin did not start");
        }
        let redis = if s.args.no_redis {
            skipped.push("Redis: --no-redis".to_owned());
            None
        } else if !installed("redis-server") {
            skipped.push(
                "Redis: redis-server is not installed (apt-get install redis-server), so no Redis faults".to_owned(),
            );
            None
        } else {
            Some(RedisProc::start(&scratch.join("redis.log"))?)
        };
        if redis.is_some() && s.schedule.redis_kill_every_s > 0 {
            skipped.push("Redis Cluster: the soak runs one redis-server (killed and restarted); a Cluster master's death is tested in crates/rampart/tests/e2e/redis.rs".to_owned());
        }
        Ok(Backends {
            origin_a,
            origin_b,
            ws_origin,
            ws_addr,
            redis,
        })
    }
}

/// Starts rampart in front of `backends`; returns it with its `--version`.
pub(super) fn start_rampart(
    s: &Soak<'_>,
    backends: &Backends,
    cert: PathBuf,
    key: PathBuf,
) -> anyhow::Result<(Rampart, String)> {
    let setup = Setup {
        origin_a: backends.origin_a.addr,
        origin_b: backends.origin_b.addr,
        ws_origin: backends.ws_addr,
        cert,
        key,
        state_dir: s.scratch.join("state"),
        cache_memory: s.cache_memory,
        redis: backends.redis.as_ref().map(|r| r.addr),
        redis_cache: !s.args.no_redis_cache,
        header_timeout_s: HEADER_TIMEOUT_S,
        shutdown_timeout_s: SHUTDOWN_TIMEOUT_S,
    };
    let rampart = Rampart::start(&s.binary, &s.scratch, &setup)?;
    let version = Command::new(&s.binary)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    eprintln!(
        "soak: {version} on http://{} https://{} udp://{} for {} s (seed {}); origins {} and {}{}",
        rampart.http,
        rampart.https,
        rampart.h3,
        s.args.duration,
        s.seed,
        backends.origin_a.addr,
        backends.origin_b.addr,
        backends
            .redis
            .as_ref()
            .map(|r| format!(", Redis {}", r.addr))
            .unwrap_or_default()
    );
    Ok((rampart, version))
}
