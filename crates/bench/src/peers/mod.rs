//! Peers: how to configure and start each proxy the suite compares (NGINX, Varnish, HAProxy,
//! Apache Traffic Server, h2o, Squid, Caddy, Apache, rampart). Each peer writes its config into its own directory (the
//! report folder keeps them) and returns the command that runs it in the foreground, so the
//! runner owns the process tree, pins it with `taskset` and kills it at the end.
//!
//! This file owns what the runner sees of a peer (the [`Peer`] trait, its [`Setup`] and
//! [`Launch`], the shared certificate) and the list of peers; each peer's config and command line
//! is in its own file, and [`config`] has what writing those configs needs.

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

mod apache;
mod caddy;
mod config;
mod floor;
mod h2o;
mod haproxy;
mod nginx;
mod rampart;
mod squid;
mod trafficserver;
mod varnish;

pub use apache::Apache;
pub use caddy::Caddy;
pub use floor::Floor;
pub use h2o::H2o;
pub use haproxy::{Haproxy, HaproxyCache};
pub use nginx::{Nginx, NginxDefault};
pub use rampart::Rampart;
pub use squid::Squid;
pub use trafficserver::TrafficServer;
pub use varnish::Varnish;

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
    /// TOML added to the rampart peer's rule (not the baseline's): `--rampart-rule`, to
    /// measure what a feature costs when it is configured.
    pub rule_extra: Option<&'a str>,
    /// TOML added to the rampart peer's global keys (not the baseline's): `--rampart-global`,
    /// for features configured outside the rule (tracing).
    pub global_extra: Option<&'a str>,
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
    /// Whether it terminates TLS on `tls_port` (TLS 1.2/1.3 with `setup.tls`), offering HTTP/1.1
    /// and HTTP/2 by ALPN.
    fn tls(&self) -> bool {
        false
    }
    /// Whether, having no cache, it answers the 12-byte `/hello` from a fixed file of its own:
    /// it then takes part in the cached scenarios that allow that (the ones about connections:
    /// new per request, TLS, HTTP/2), and the report marks its rows as a fixed file.
    fn fixed_hello(&self) -> bool {
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
        Box::new(TrafficServer),
        Box::new(H2o),
        Box::new(Squid),
        Box::new(Caddy),
        Box::new(Apache),
        Box::new(Floor),
    ]
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
            rule_extra: None,
            global_extra: None,
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
            "trafficserver" => &[
                "runroot.yaml",
                "etc/records.config",
                "etc/remap.config",
                "etc/storage.config",
                "etc/ssl_multicert.config",
            ],
            "h2o" => &["h2o.conf"],
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
                "trafficserver",
                "h2o",
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
        assert_eq!(no_cache, ["haproxy", "h2o", "caddy"]);
        let fixed: Vec<&str> = all()
            .iter()
            .filter(|p| p.fixed_hello())
            .map(|p| p.name())
            .collect();
        assert_eq!(fixed, ["h2o"]);
        let no_h2c: Vec<&str> = all()
            .iter()
            .filter(|p| !p.h2c())
            .map(|p| p.name())
            .collect();
        assert_eq!(no_h2c, ["trafficserver", "squid", "floor"]);
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
                launch
                    .args
                    .iter()
                    .any(|a| a == &main_config || a.ends_with(&format!("={main_config}"))),
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
        let ats = read(&TrafficServer, "etc/records.config")?;
        assert!(ats.contains("CONFIG proxy.config.exec_thread.limit INT 2"));
        assert!(ats.contains("CONFIG proxy.config.http.cache.required_headers INT 2"));
        assert!(ats.contains("19603:ipv4:ssl:ip-in=127.0.0.1"));
        let h2o = read(&H2o, "h2o.conf")?;
        assert!(h2o.contains("num-threads: 2"));
        assert!(h2o.contains("proxy.reverse.url: http://127.0.0.1:19500/"));
        assert!(h2o.contains("file.file: /"));
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
}
