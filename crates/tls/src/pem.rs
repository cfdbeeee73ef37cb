//! PEM certificate chains and private keys → rustls `CertifiedKey`; writing key material to
//! disk with owner-only permissions.

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use crate::der::{self, Validity};
use crate::TlsError;

/// A loaded certificate with its validity (when it could be read).
#[derive(Debug, Clone)]
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    pub validity: Option<Validity>,
}

/// Parses a PEM chain (leaf first) and a PEM private key (PKCS#8, PKCS#1 or SEC1), and checks
/// that the key belongs to the leaf.
pub fn parse_pair(cert_pem: &[u8], key_pem: &[u8]) -> Result<Loaded, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(TlsError::CertificatePem)?;
    let Some(leaf) = chain.first() else {
        return Err(TlsError::NoCertificate);
    };
    let validity = der::validity(leaf);
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(TlsError::KeyPem)?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let certified = CertifiedKey::from_der(chain, key, &provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch,
        e => TlsError::Rustls(e),
    })?;
    Ok(Loaded {
        key: Arc::new(certified),
        validity,
    })
}

/// Reads and parses a certificate file and its key file.
pub fn load_pair(cert: &Path, key: &Path) -> Result<Loaded, TlsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })
    };
    let (c, k) = (read(cert)?, read(key)?);
    parse_pair(&c, &k)
}

/// Creates a directory (and parents) readable by the owner only.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

/// Writes a file atomically (temporary file + rename) with mode 0600.
pub fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        private_dir(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let mut f = o.open(&tmp)?;
    // The mode above applies only when the file is created: a leftover temporary file keeps
    // its own, so set it again.
    #[cfg(unix)]
    f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    f.write_all(data)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    // Make the rename itself durable.
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}
