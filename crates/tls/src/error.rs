//! What can go wrong setting up TLS, as one type for the crate. Each message names the file or
//! the step. The ACME client asks [`TlsError::acme_problem`] whether the CA refused for a rate
//! limit or an account it does not know, instead of searching the message.

use std::path::PathBuf;

/// A certificate or key that cannot be used, the local CA, the origin's trust roots, the
/// HTTPS server's setup, or an ACME exchange.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file that cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The certificate file is not PEM.
    #[error("certificate PEM: {0}")]
    CertificatePem(rustls::pki_types::pem::Error),
    /// The certificate file holds no certificate.
    #[error("no CERTIFICATE block in the certificate file")]
    NoCertificate,
    /// The key file is not a PEM private key.
    #[error("private key PEM: {0}")]
    KeyPem(rustls::pki_types::pem::Error),
    /// The key is not the certificate's.
    #[error("the private key does not belong to the certificate")]
    KeyMismatch,
    /// rustls refused a certificate or key.
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
    /// A certificate could not be made (local CA leaves, TLS-ALPN-01 answers).
    #[error("{0}")]
    Generate(#[from] rcgen::Error),
    /// A rule's `tls_cert_file`/`tls_key_file`.
    #[error("rule {rule:?}: tls_cert_file/tls_key_file: {source}")]
    RuleFiles { rule: String, source: Box<TlsError> },
    /// A step of loading, creating or using the local CA.
    #[error("local CA: {step}: {reason}")]
    LocalCa { step: String, reason: String },
    /// Half a local CA on disk: rampart does not silently replace a root clients trust.
    #[error("local CA: {} exists but {} does not; restore it, or remove both files to create a new CA (clients must then trust the new root)", have.display(), missing.display())]
    LocalCaHalf { have: PathBuf, missing: PathBuf },
    /// `proxy_ca_file`.
    #[error("proxy_ca_file {}: {reason}", path.display())]
    OriginRoots { path: PathBuf, reason: String },
    /// The HTTPS server or the certificate manager cannot start.
    #[error("{what}: {reason}")]
    Setup { what: &'static str, reason: String },
    /// The stored ACME account cannot be read or written.
    #[error("{}: {reason}", path.display())]
    AccountFile { path: PathBuf, reason: String },
    /// The CA refused or failed a request (the account, or a step of an order).
    #[error("{}{source}", step.map(|s| format!("{s}: ")).unwrap_or_default())]
    Acme {
        step: Option<&'static str>,
        source: instant_acme::Error,
    },
    /// An order in a state rampart cannot go on from.
    #[error("{0}")]
    AcmeOrder(String),
    /// The CA did not answer, or did not finish an order, in time.
    #[error("{0}")]
    AcmeTimeout(&'static str),

    #[error("shared certificate store: {0}")]
    Shared(#[from] rampart_redis::SharedError),
}

impl TlsError {
    /// An ACME request failed at `step` (`new order`, `authorization`, ...).
    pub(crate) fn acme(step: &'static str) -> impl FnOnce(instant_acme::Error) -> TlsError {
        move |source| TlsError::Acme {
            step: Some(step),
            source,
        }
    }

    /// The type of the problem document the CA answered with (RFC 8555 §6.7), without its
    /// `urn:ietf:params:acme:error:` prefix: `rateLimited`, `accountDoesNotExist`, ...
    pub fn acme_problem(&self) -> Option<&str> {
        let TlsError::Acme {
            source: instant_acme::Error::Api(problem),
            ..
        } = self
        else {
            return None;
        };
        let t = problem.r#type.as_deref()?;
        Some(t.rsplit(':').next().unwrap_or(t))
    }
}

impl From<instant_acme::Error> for TlsError {
    fn from(source: instant_acme::Error) -> Self {
        TlsError::Acme { step: None, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(t: &str) -> TlsError {
        let p: instant_acme::Problem = serde_json::from_value(serde_json::json!({
            "type": t, "detail": "too many certificates", "status": 429
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        TlsError::acme("new order")(instant_acme::Error::Api(p))
    }

    #[test]
    fn the_problem_type_is_read_from_the_document_not_the_text() {
        let e = problem("urn:ietf:params:acme:error:rateLimited");
        assert_eq!(e.acme_problem(), Some("rateLimited"));
        assert!(e
            .to_string()
            .starts_with("new order: API error: too many certificates"));
        let e = problem("urn:ietf:params:acme:error:accountDoesNotExist");
        assert_eq!(e.acme_problem(), Some("accountDoesNotExist"));
        // A message that merely mentions it is not the problem.
        let e = TlsError::AcmeOrder("authorization is Invalid (rateLimited)".into());
        assert_eq!(e.acme_problem(), None);
    }

    #[test]
    fn messages_name_the_file_and_the_step() {
        let e = TlsError::RuleFiles {
            rule: "example.com".into(),
            source: Box::new(TlsError::KeyMismatch),
        };
        assert_eq!(
            e.to_string(),
            "rule \"example.com\": tls_cert_file/tls_key_file: the private key does not belong to the certificate"
        );
        let e = TlsError::LocalCa {
            step: "reading root.key".into(),
            reason: "denied".into(),
        };
        assert_eq!(e.to_string(), "local CA: reading root.key: denied");
    }
}
