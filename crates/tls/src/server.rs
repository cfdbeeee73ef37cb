//! TLS termination: the rustls server configuration shared by every HTTPS listener.

use crate::TlsError;
use std::sync::Arc;

use rampart_config::TlsVersion;
use rustls::server::ServerSessionMemoryCache;
use rustls::ServerConfig;

use crate::origin::versions;
use crate::store::{CertStore, ACME_TLS_ALPN};

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
