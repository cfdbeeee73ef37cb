//! rampart's certificates and TLS.
//!
//! - [`cert_store::CertStore`]: certificates by SNI name and ACME challenge answers; the HTTPS
//!   listener's certificate resolver.
//! - Certificate sources per rule: PEM files (reloaded when they change), the local CA
//!   (`tls = "internal"`), ACME.
//! - [`server::server_config`] for termination, [`origin::client_config`] for TLS to origins.
//!
//! [`start`] loads every certificate that is available now and leaves a background thread
//! keeping them current; it never waits for an ACME CA.

pub mod acme;
pub mod alpn;
pub mod cert_store;
pub mod der;
mod error;
pub mod internal;
pub mod origin;
pub mod pem;
mod renew;
pub mod server;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rampart_config::{CertSource, Config, DomainPattern};
use rustls::ServerConfig;

pub use crate::error::TlsError;

use crate::cert_store::CertStore;
use crate::der::Validity;
use crate::internal::LocalCa;

/// What the listeners need: the store (resolver and HTTP-01 answers) and the server config,
/// with a handle on the background work that keeps the certificates current.
#[derive(Debug, Clone)]
pub struct Tls {
    pub store: Arc<CertStore>,
    pub server: Arc<ServerConfig>,
    /// The same certificates for HTTP/3 (TLS 1.3, ALPN `h3`).
    pub quic: Arc<ServerConfig>,
    manager: Arc<Manager>,
    /// With certificates shared through Redis: answers to the other instances' TLS-ALPN-01
    /// challenges (the listeners then read the client hello first).
    pub shared_alpn: Option<alpn::SharedAlpn>,
}

/// The certificate manager thread's controls.
#[derive(Debug)]
struct Manager {
    stop: tokio::sync::watch::Sender<bool>,
    /// Wakes the file watcher at once (a configuration reload) instead of at its next tick.
    refresh: Arc<tokio::sync::Notify>,
}

impl Tls {
    /// Checks certificate files for changes now (a reload with the same TLS settings).
    pub fn refresh(&self) {
        self.manager.refresh.notify_one();
    }

    /// Stops the background work (file reloads, renewals, ACME orders): a reload replaced
    /// these settings. Certificates already loaded stay in the store.
    pub fn stop(&self) {
        self.manager.stop.send_replace(true);
    }
}

/// A rule whose certificate comes from files, with the files' last seen state.
struct Watched {
    domain: DomainPattern,
    label: String,
    cert: PathBuf,
    key: PathBuf,
    stamp: Option<Stamp>,
}

/// What identifies a version of a file pair: (modified, length, inode) of each.
type Stamp = [(Option<SystemTime>, u64, u64); 2];

fn stamp(a: &std::path::Path, b: &std::path::Path) -> Option<Stamp> {
    let one = |p: &std::path::Path| {
        let m = std::fs::metadata(p).ok()?;
        #[cfg(unix)]
        let ino = std::os::unix::fs::MetadataExt::ino(&m);
        #[cfg(not(unix))]
        let ino = 0;
        Some((m.modified().ok(), m.len(), ino))
    };
    Some([one(a)?, one(b)?])
}

/// A domain pattern as a certificate name (`*.example.com`, or the host).
fn cert_name(d: &DomainPattern) -> Option<String> {
    match d {
        DomainPattern::Exact(h) => Some(h.clone()),
        DomainPattern::Wildcard(suffix) => Some(format!("*{suffix}")),
        DomainPattern::Any => None,
    }
}

/// Loads the certificates of every rule that has one and starts the background work (file
/// reloads, local-CA renewals, ACME). `Ok(None)` when no rule is served over HTTPS. An
/// unreadable certificate file or local CA is an error; an unreachable ACME CA is not.
pub fn start(
    config: &Config,
    shared: Option<&rampart_redis::Shared>,
) -> Result<Option<Tls>, TlsError> {
    if config.tls.listen_https.is_empty() {
        return Ok(None);
    }
    let tls = &config.tls;
    let store = Arc::new(CertStore::new(tls.default_domain.clone()));
    let sources = Sources::load(config, &store)?;
    let server = server::server_config(store.clone(), tls.min_version)?;
    let quic = server::quic_server_config(&server);
    let shared = shared.cloned();
    // Other instances' TLS-ALPN-01 answers, when they order for this one too.
    let shared_alpn = shared
        .as_ref()
        .filter(|s| s.config().certificates && !sources.acme.is_empty())
        .map(|s| alpn::SharedAlpn::new(store.clone(), s.clone()));
    let manager = sources.keep_current(tls, store.clone(), shared)?;
    Ok(Some(Tls {
        store,
        server,
        quic,
        manager,
        shared_alpn,
    }))
}

/// Where the certificates in service came from, for the work that keeps them current.
struct Sources {
    /// Certificate files, reloaded when they change.
    watched: Vec<Watched>,
    /// The local CA and the names it issued for.
    ca: Option<LocalCa>,
    internal: Vec<(DomainPattern, String, Option<Validity>)>,
    /// Names ordered from the ACME CA (with the validity of the certificate stored earlier).
    acme: Vec<(DomainPattern, String, Option<Validity>)>,
}

impl Sources {
    /// Loads every rule's certificate available now into `store`.
    fn load(config: &Config, store: &CertStore) -> Result<Sources, TlsError> {
        let tls = &config.tls;
        let mut s = Sources {
            watched: Vec::new(),
            ca: None,
            internal: Vec::new(),
            acme: Vec::new(),
        };
        for rule in &config.rules {
            let Some(source) = &rule.cert else { continue };
            let label = rule.domain_text.clone();
            match source {
                CertSource::Files { cert, key } => {
                    let loaded = pem::load_pair(cert, key).map_err(|e| TlsError::RuleFiles {
                        rule: label.clone(),
                        source: Box::new(e),
                    })?;
                    store.set(&rule.domain, loaded.key);
                    s.watched.push(Watched {
                        domain: rule.domain.clone(),
                        label,
                        cert: cert.clone(),
                        key: key.clone(),
                        stamp: stamp(cert, key),
                    });
                }
                CertSource::Internal => {
                    let Some(name) = cert_name(&rule.domain) else {
                        continue;
                    };
                    if s.ca.is_none() {
                        s.ca = Some(LocalCa::load_or_create(&tls.state_dir)?);
                    }
                    let Some(local) = &s.ca else { continue };
                    let loaded = local.issue(&name)?;
                    store.set(&rule.domain, loaded.key);
                    s.internal
                        .push((rule.domain.clone(), name, loaded.validity));
                }
                CertSource::Acme => {
                    let DomainPattern::Exact(name) = &rule.domain else {
                        continue;
                    };
                    let previous = acme::stored(&tls.state_dir, &tls.acme, name)
                        .filter(|l| l.validity.is_none_or(|v| v.not_after > SystemTime::now()));
                    let validity = match previous {
                        Some(l) => {
                            store.set(&rule.domain, l.key);
                            l.validity
                        }
                        None => {
                            tracing::info!(domain = %name, directory = %tls.acme.directory_url, "no certificate yet; ordering one from the ACME CA (HTTPS for this name fails until it arrives)");
                            None
                        }
                    };
                    s.acme.push((rule.domain.clone(), name.clone(), validity));
                }
            }
        }
        Ok(s)
    }

    /// Starts the `rampart-certs` thread: file reloads, local-CA renewals, the ACME client.
    fn keep_current(
        self,
        tls: &rampart_config::TlsConfig,
        store: Arc<CertStore>,
        shared: Option<rampart_redis::Shared>,
    ) -> Result<Arc<Manager>, TlsError> {
        let reload_every = tls.reload_interval;
        let (acme_cfg, state_dir) = (tls.acme.clone(), tls.state_dir.clone());
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let refresh = Arc::new(tokio::sync::Notify::new());
        let manager = Arc::new(Manager {
            stop,
            refresh: refresh.clone(),
        });
        let Sources {
            watched,
            ca,
            internal,
            acme,
        } = self;
        let spawned = std::thread::Builder::new()
            .name("rampart-certs".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        return tracing::error!(error = %e, "cannot start the certificate manager")
                    }
                };
                rt.block_on(async move {
                    let mut tasks = tokio::task::JoinSet::new();
                    if !watched.is_empty() {
                        tasks.spawn(watch_files(watched, store.clone(), reload_every, refresh));
                    }
                    if let Some(ca) = ca {
                        tasks.spawn(renew_internal(ca, internal, store.clone()));
                    }
                    if !acme.is_empty() {
                        tasks.spawn(renew::run(acme_cfg, state_dir, acme, store, shared));
                    }
                    tokio::select! {
                        _ = async { while tasks.join_next().await.is_some() {} } => {}
                        _ = stopped.wait_for(|s| *s) => tasks.abort_all(),
                    }
                });
            });
        match spawned {
            Ok(_) => Ok(manager),
            Err(e) => Err(TlsError::Setup {
                what: "cannot start the certificate manager",
                reason: e.to_string(),
            }),
        }
    }
}

/// Reloads certificate files when they change. A pair that fails to load (half written, key
/// not matching) keeps the previous certificate in service and is tried again.
async fn watch_files(
    mut watched: Vec<Watched>,
    store: Arc<CertStore>,
    every: Duration,
    refresh: Arc<tokio::sync::Notify>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = refresh.notified() => {}
        }
        for w in &mut watched {
            let now = stamp(&w.cert, &w.key);
            if now.is_none() || now == w.stamp {
                continue;
            }
            match pem::load_pair(&w.cert, &w.key) {
                Ok(loaded) => {
                    store.set(&w.domain, loaded.key);
                    w.stamp = now;
                    tracing::info!(domain = %w.label, cert = %w.cert.display(), "certificate reloaded");
                }
                Err(e) => {
                    // Logged once per version of the files; retried when they change again.
                    w.stamp = now;
                    tracing::warn!(domain = %w.label, error = %e, "changed certificate files cannot be loaded; the previous certificate stays in service");
                }
            }
        }
    }
}

/// Re-issues local-CA certificates at two thirds of their lifetime.
async fn renew_internal(
    ca: LocalCa,
    mut sites: Vec<(DomainPattern, String, Option<Validity>)>,
    store: Arc<CertStore>,
) {
    loop {
        let now = SystemTime::now();
        let next = sites
            .iter()
            .map(|(_, _, v)| v.map_or(now, |v| v.renew_at()))
            .min()
            .unwrap_or(now + Duration::from_secs(86_400));
        if let Ok(wait) = next.duration_since(now) {
            tokio::time::sleep(wait).await;
        }
        for (domain, name, validity) in &mut sites {
            if validity.is_some_and(|v| v.renew_at() > SystemTime::now()) {
                continue;
            }
            match ca.issue(name) {
                Ok(loaded) => {
                    store.set(domain, loaded.key);
                    *validity = loaded.validity;
                    tracing::info!(domain = %name, "local CA certificate renewed");
                }
                Err(e) => {
                    tracing::error!(domain = %name, error = %e, "local CA cannot renew");
                    // Try again in an hour (renew_at = not_before + 2/3 of 3 h).
                    *validity = Some(Validity {
                        not_before: SystemTime::now() - Duration::from_secs(3600),
                        not_after: SystemTime::now() + Duration::from_secs(7200),
                    });
                }
            }
        }
    }
}
