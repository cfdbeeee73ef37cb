//! TLS-ALPN-01 answers from other instances (`redis_certificates`): the instance that ordered
//! a certificate publishes the challenge's digest in Redis, and whichever instance the CA
//! connects to makes the challenge certificate from it during the validation handshake.
//!
//! Only a handshake that offers `acme-tls/1` for a name this instance has no answer for asks
//! Redis (one round trip); every other handshake goes on untouched.

use std::sync::Arc;
use std::time::Duration;

use rampart_redis::Shared;

use crate::cert_store::{CertStore, ACME_TLS_ALPN};

/// How long an answer taken from Redis stays here (the CA validates within seconds; the
/// ordering instance's key in Redis lives 10 minutes).
const KEEP: Duration = Duration::from_secs(600);
/// Longest wait for Redis during a validation handshake.
const ASK_WITHIN: Duration = Duration::from_secs(2);

/// What a listener needs to answer other instances' TLS-ALPN-01 challenges.
#[derive(Debug, Clone)]
pub struct SharedAlpn {
    store: Arc<CertStore>,
    shared: Shared,
}

impl SharedAlpn {
    pub(crate) fn new(store: Arc<CertStore>, shared: Shared) -> SharedAlpn {
        SharedAlpn { store, shared }
    }

    /// Before the handshake goes on: when the client hello is a TLS-ALPN-01 validation for
    /// `sni` and this instance has no answer for it, takes the one another instance published.
    pub async fn prepare(&self, sni: Option<&str>, alpn: Option<Vec<Vec<u8>>>) {
        let acme = alpn.is_some_and(|protocols| protocols.iter().any(|p| p == ACME_TLS_ALPN));
        let Some(name) = sni.filter(|_| acme).map(str::to_ascii_lowercase) else {
            return;
        };
        if self.store.has_alpn_challenge(&name) {
            return;
        }
        let digest = match tokio::time::timeout(ASK_WITHIN, self.shared.alpn_challenge(&name)).await
        {
            Ok(Ok(Some(d))) => d,
            Ok(Ok(None)) => {
                tracing::debug!(domain = %name, "TLS-ALPN-01 validation for a name no instance is ordering");
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(domain = %name, error = %e, "TLS-ALPN-01 answer not taken from Redis");
                return;
            }
            Err(_) => return,
        };
        match crate::acme::alpn_challenge_cert(&name, &digest) {
            Ok(cert) => {
                tracing::info!(domain = %name, "answering another instance's TLS-ALPN-01 challenge");
                self.store.set_alpn_challenge(&name, cert.key);
                let (store, name) = (self.store.clone(), name.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(KEEP).await;
                    store.clear_alpn_challenge(&name);
                });
            }
            Err(e) => {
                tracing::warn!(domain = %name, error = %e, "cannot make the TLS-ALPN-01 certificate")
            }
        }
    }
}
