//! TLS to origins: the rustls client configuration (trust roots, protocol floor, ALPN).

use crate::TlsError;
use std::sync::Arc;

use rampart_config::{TlsVersion, UpstreamConfig};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

/// The protocol versions from a floor upwards.
pub fn versions(min: TlsVersion) -> &'static [&'static rustls::SupportedProtocolVersion] {
    static FROM_12: [&rustls::SupportedProtocolVersion; 2] =
        [&rustls::version::TLS13, &rustls::version::TLS12];
    static FROM_13: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    match min {
        TlsVersion::Tls12 => &FROM_12,
        TlsVersion::Tls13 => &FROM_13,
    }
}

/// The client configuration for origin connections: `proxy_ca_file` or the system's roots,
/// `proxy_min_tls_version`, ALPN `http/1.1` (the pool speaks HTTP/1.1 to origins).
pub fn client_config(upstream: &UpstreamConfig) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    match &upstream.ca_file {
        Some(path) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<_, _>>())
                .map_err(|e| TlsError::OriginRoots {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(TlsError::OriginRoots {
                    path: path.clone(),
                    reason: "no usable CA certificate in it".into(),
                });
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                // Not fatal: only TLS origins need roots, and they will fail verification
                // with a clear log line.
                tracing::warn!(
                    errors = ?found.errors,
                    "no system CA certificates found; origins over TLS cannot be verified (set proxy_ca_file)"
                );
            }
        }
    }
    let mut config =
        ClientConfig::builder_with_protocol_versions(versions(upstream.tls_min_version))
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
