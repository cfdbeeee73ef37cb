//! TLS termination: the rustls server configuration shared by every HTTPS listener.

use crate::TlsError;
use std::sync::Arc;

use rampart_config::TlsVersion;
use rustls::server::ServerSessionMemoryCache;
use rustls::ServerConfig;

use crate::cert_store::{CertStore, ACME_TLS_ALPN};
use crate::origin::versions;

/// Session-cache entries (TLS 1.2 session IDs and TLS 1.3 stateful resumption fallback).
const SESSION_CACHE: usize = 16 * 1024;

/// The server configuration: certificates by SNI from `store`, TLS 1.2+ (or 1.3 only), rustls's
/// modern cipher suites, ALPN `h2` then `http/1.1` (and `acme-tls/1` for TLS-ALPN-01
/// validation), resumption by tickets (keys rotate every 6 hours) and a session cache.
pub fn server_config(
    store: Arc<CertStore>,
    min: TlsVersion,
) -> Result<Arc<ServerConfig>, TlsError> {
    let mut config = ServerConfig::builder_with_protocol_versions(versions(min))
        .with_no_client_auth()
        .with_cert_resolver(store);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec(), ACME_TLS_ALPN.to_vec()];
    config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE);
    config.send_tls13_tickets = 1;
    config.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new().map_err(|e| TlsError::Setup {
        what: "cannot create the session ticket key",
        reason: e.to_string(),
    })?;
    Ok(Arc::new(config))
}

/// The server configuration for HTTP/3 (QUIC): the same certificates as `tcp` (its resolver),
/// TLS 1.3 only (QUIC requires it), ALPN `h3`, and no 0-RTT (early data can be replayed, and
/// a proxy cannot tell which requests are safe to replay). Resumption shares `tcp`'s tickets
/// and session cache.
pub fn quic_server_config(tcp: &ServerConfig) -> Arc<ServerConfig> {
    let mut config = ServerConfig::builder_with_protocol_versions(&[&rustls::version::TLS13])
        .with_no_client_auth()
        .with_cert_resolver(tcp.cert_resolver.clone());
    config.alpn_protocols = vec![b"h3".to_vec()];
    config.max_early_data_size = 0;
    config.session_storage = tcp.session_storage.clone();
    config.send_tls13_tickets = 1;
    config.ticketer = tcp.ticketer.clone();
    Arc::new(config)
}
