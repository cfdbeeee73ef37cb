//! The certificate store: which certificate answers which SNI name, plus the answers to ACME
//! challenges in flight. Handshakes read it; the certificate manager (files, local CA, ACME)
//! writes it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rampart_config::DomainPattern;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The ALPN protocol of TLS-ALPN-01 validation handshakes (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

#[derive(Debug, Default)]
struct Sites {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// Keyed by the suffix with its dot (`.example.com`).
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    /// The catch-all rule's certificate (`domain = "*"`).
    any: Option<Arc<CertifiedKey>>,
}

/// Certificates by name, and ACME challenge answers.
#[derive(Debug, Default)]
pub struct CertStore {
    sites: RwLock<Sites>,
    /// Serves handshakes without SNI or with a name no rule has (`tls_default_domain`).
    default_domain: Option<String>,
    /// TLS-ALPN-01: the self-signed challenge certificate per name.
    alpn_challenges: RwLock<HashMap<String, Arc<CertifiedKey>>>,
    /// HTTP-01: token → key authorization.
    http_challenges: RwLock<HashMap<String, String>>,
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

impl CertStore {
    pub fn new(default_domain: Option<String>) -> Self {
        CertStore {
            default_domain,
            ..CertStore::default()
        }
    }

    /// Installs (or replaces) the certificate for a rule's domain pattern.
    pub fn set(&self, domain: &DomainPattern, key: Arc<CertifiedKey>) {
        let mut sites = write(&self.sites);
        match domain {
            DomainPattern::Exact(d) => {
                sites.exact.insert(d.clone(), key);
            }
            DomainPattern::Wildcard(suffix) => {
                sites.wildcard.insert(suffix.clone(), key);
            }
            DomainPattern::Any => sites.any = Some(key),
        }
    }

    /// Whether a certificate is installed for exactly this pattern.
    pub fn has(&self, domain: &DomainPattern) -> bool {
        let sites = read(&self.sites);
        match domain {
            DomainPattern::Exact(d) => sites.exact.contains_key(d),
            DomainPattern::Wildcard(s) => sites.wildcard.contains_key(s),
            DomainPattern::Any => sites.any.is_some(),
        }
    }

    /// Every installed certificate with the name it serves (`*.example.com` for a wildcard,
    /// `*` for the catch-all rule's), sorted by name.
    pub fn certificates(&self) -> Vec<(String, Arc<CertifiedKey>)> {
        let sites = read(&self.sites);
        let mut out: Vec<(String, Arc<CertifiedKey>)> = sites
            .exact
            .iter()
            .map(|(d, k)| (d.clone(), k.clone()))
            .chain(
                sites
                    .wildcard
                    .iter()
                    .map(|(s, k)| (format!("*{s}"), k.clone())),
            )
            .chain(sites.any.iter().map(|k| ("*".to_owned(), k.clone())))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The certificate for a lower-case host name: exact, then `*.parent`, then the catch-all.
    pub fn get(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let sites = read(&self.sites);
        if let Some(k) = sites.exact.get(name) {
            return Some(k.clone());
        }
        // A wildcard covers one label: `*.example.com` serves `a.example.com`.
        if let Some(dot) = name.find('.') {
            if let Some(k) = sites.wildcard.get(&name[dot..]) {
                return Some(k.clone());
            }
        }
        sites.any.clone()
    }

    pub fn set_http_challenge(&self, token: &str, key_authorization: &str) {
        write(&self.http_challenges).insert(token.to_owned(), key_authorization.to_owned());
    }

    pub fn clear_http_challenge(&self, token: &str) {
        write(&self.http_challenges).remove(token);
    }

    /// The key authorization for an HTTP-01 token, if a challenge for it is in flight.
    pub fn http_challenge(&self, token: &str) -> Option<String> {
        let map = read(&self.http_challenges);
        if map.is_empty() {
            return None;
        }
        map.get(token).cloned()
    }

    pub fn set_alpn_challenge(&self, name: &str, key: Arc<CertifiedKey>) {
        write(&self.alpn_challenges).insert(name.to_owned(), key);
    }

    pub fn has_alpn_challenge(&self, name: &str) -> bool {
        read(&self.alpn_challenges).contains_key(name)
    }

    pub fn clear_alpn_challenge(&self, name: &str) {
        write(&self.alpn_challenges).remove(name);
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name().map(str::to_ascii_lowercase);
        let acme = hello
            .alpn()
            .is_some_and(|mut protocols| protocols.any(|p| p == ACME_TLS_ALPN));
        if acme {
            // RFC 8737: a validation handshake gets the challenge certificate or nothing.
            return name.and_then(|n| read(&self.alpn_challenges).get(&n).cloned());
        }
        let found = match &name {
            Some(n) => self.get(n),
            // No SNI (a client that connects by IP address): the catch-all rule's certificate.
            None => read(&self.sites).any.clone(),
        };
        let found = found.or_else(|| self.default_domain.as_deref().and_then(|d| self.get(d)));
        if found.is_none() {
            tracing::debug!(sni = ?name, "TLS handshake refused: no certificate for this name");
        }
        found
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(name: &str) -> Arc<CertifiedKey> {
        let k = rcgen::KeyPair::generate().unwrap();
        let c = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&k)
            .unwrap();
        crate::pem::parse_pair(c.pem().as_bytes(), k.serialize_pem().as_bytes())
            .unwrap()
            .key
    }

    #[test]
    fn lookup_order_exact_wildcard_any() {
        let store = CertStore::new(None);
        let (exact, wild, any) = (key("a.example"), key("*.example"), key("any"));
        store.set(&DomainPattern::Exact("a.example".into()), exact.clone());
        store.set(&DomainPattern::Wildcard(".example".into()), wild.clone());
        assert!(Arc::ptr_eq(&store.get("a.example").unwrap(), &exact));
        assert!(Arc::ptr_eq(&store.get("b.example").unwrap(), &wild));
        // One label only, and not the apex.
        assert!(store.get("x.b.example").is_none());
        assert!(store.get("example").is_none());
        store.set(&DomainPattern::Any, any.clone());
        assert!(Arc::ptr_eq(&store.get("other.test").unwrap(), &any));
        assert!(store.has(&DomainPattern::Any));
    }

    #[test]
    fn challenge_answers_come_and_go() {
        let store = CertStore::new(None);
        assert_eq!(store.http_challenge("t"), None);
        store.set_http_challenge("t", "t.thumb");
        assert_eq!(store.http_challenge("t").as_deref(), Some("t.thumb"));
        store.clear_http_challenge("t");
        assert_eq!(store.http_challenge("t"), None);
    }
}
