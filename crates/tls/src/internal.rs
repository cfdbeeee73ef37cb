//! `tls = "internal"`: a local certificate authority that rampart creates on first use (in
//! `state_dir/ca/`), and leaf certificates it issues for rule domains, like Caddy's local CA.
//! Clients trust it by importing `root.pem`.

use crate::TlsError;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use crate::pem::{self, Loaded};

/// The root's subject; fixed, so issuing after a restart needs only the stored key.
const ROOT_NAME: &str = "rampart local CA";
/// Lifetime of issued leaf certificates (renewed at two thirds).
pub const LEAF_LIFETIME: Duration = Duration::from_secs(7 * 86_400);
const ROOT_LIFETIME: Duration = Duration::from_secs(10 * 365 * 86_400);

/// The local CA: its key and parameters.
pub struct LocalCa {
    issuer: Issuer<'static, KeyPair>,
    pub root_pem: String,
    pub root_path: PathBuf,
}

impl std::fmt::Debug for LocalCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCa")
            .field("root_path", &self.root_path)
            .finish_non_exhaustive()
    }
}

fn root_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, ROOT_NAME);
    dn.push(DnType::OrganizationName, "rampart");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p
}

impl LocalCa {
    /// Loads the CA from `state_dir/ca/`, creating it on first use.
    pub fn load_or_create(state_dir: &Path) -> Result<LocalCa, TlsError> {
        let dir = state_dir.join("ca");
        let (cert_path, key_path) = (dir.join("root.pem"), dir.join("root.key"));
        let err = |step: &str, e: &dyn std::fmt::Display| TlsError::LocalCa {
            step: step.to_owned(),
            reason: e.to_string(),
        };
        match (cert_path.exists(), key_path.exists()) {
            (true, false) | (false, true) => {
                // Never replace half a CA silently: clients trust the old root.
                let (have, missing) = if cert_path.exists() {
                    (&cert_path, &key_path)
                } else {
                    (&key_path, &cert_path)
                };
                return Err(TlsError::LocalCaHalf {
                    have: have.clone(),
                    missing: missing.clone(),
                });
            }
            _ => {}
        }
        if cert_path.exists() && key_path.exists() {
            let key_pem =
                std::fs::read_to_string(&key_path).map_err(|e| err("reading root.key", &e))?;
            let root_pem =
                std::fs::read_to_string(&cert_path).map_err(|e| err("reading root.pem", &e))?;
            let key = KeyPair::from_pem(&key_pem).map_err(|e| err("root.key", &e))?;
            return Ok(LocalCa {
                issuer: Issuer::new(root_params(), key),
                root_pem,
                root_path: cert_path,
            });
        }
        let key = KeyPair::generate().map_err(|e| err("generating a key", &e))?;
        let mut params = root_params();
        let now = time_now();
        params.not_before = now - Duration::from_secs(3600);
        params.not_after = now + ROOT_LIFETIME;
        let root = params
            .self_signed(&key)
            .map_err(|e| err("self-signing", &e))?;
        pem::write_private(&key_path, key.serialize_pem().as_bytes())
            .map_err(|e| err("writing root.key", &e))?;
        pem::write_private(&cert_path, root.pem().as_bytes())
            .map_err(|e| err("writing root.pem", &e))?;
        tracing::info!(root = %cert_path.display(), "created the local CA; clients trust rampart's internal certificates after importing this file");
        Ok(LocalCa {
            issuer: Issuer::new(root_params(), key),
            root_pem: root.pem(),
            root_path: cert_path,
        })
    }

    /// Issues a leaf certificate for `name` (a host name, or `*.suffix`).
    pub fn issue(&self, name: &str) -> Result<Loaded, TlsError> {
        let err = |step: String, e: rcgen::Error| TlsError::LocalCa {
            step,
            reason: e.to_string(),
        };
        let mut params = CertificateParams::new(vec![name.to_owned()])
            .map_err(|e| err(format!("{name:?}"), e))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let now = time_now();
        params.not_before = now - Duration::from_secs(300);
        params.not_after = now + LEAF_LIFETIME;
        let key = KeyPair::generate().map_err(|e| err("generating a key".into(), e))?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| err(format!("signing {name:?}"), e))?;
        let chain = format!("{}{}", cert.pem(), self.root_pem);
        pem::parse_pair(chain.as_bytes(), key.serialize_pem().as_bytes())
    }
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}
