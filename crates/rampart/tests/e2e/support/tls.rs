//! TLS for end-to-end tests: a throwaway CA (rcgen) that issues certificates, rustls client
//! configurations, and real handshakes + requests over them (hyper, HTTP/1.1 or HTTP/2 by ALPN).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::{scratch, BoxBody, Got};

/// A certificate authority for one test.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
    pub der: CertificateDer<'static>,
}

/// A leaf certificate issued by a [`TestCa`].
pub struct Leaf {
    /// Leaf then CA, PEM.
    pub chain_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
}

impl Leaf {
    /// Writes `<name>.crt` and `<name>.key` to scratch files; returns their paths.
    pub fn write(&self, name: &str) -> (PathBuf, PathBuf) {
        let (c, k) = (
            scratch(&format!("{name}.crt")),
            scratch(&format!("{name}.key")),
        );
        std::fs::write(&c, &self.chain_pem).unwrap();
        std::fs::write(&k, &self.key_pem).unwrap();
        (c, k)
    }

    /// A rustls server configuration presenting this certificate (for TLS origins).
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        use rustls::pki_types::pem::PemObject;
        let chain = CertificateDer::pem_slice_iter(self.chain_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key =
            rustls::pki_types::PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).unwrap();
        let mut c = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        c.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(c)
    }
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        p.distinguished_name = dn;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        TestCa {
            pem: cert.pem(),
            der: cert.der().clone(),
            issuer: Issuer::new(p, key),
        }
    }

    /// Issues a certificate for `names` (ECDSA P-256).
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        let mut p = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
        p.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            chain_pem: format!("{}{}", cert.pem(), self.pem),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    /// Writes the CA certificate to a scratch file.
    pub fn write(&self, name: &str) -> PathBuf {
        let p = scratch(&format!("{name}.pem"));
        std::fs::write(&p, &self.pem).unwrap();
        p
    }

    pub fn roots(&self) -> RootCertStore {
        let mut r = RootCertStore::empty();
        r.add(self.der.clone()).unwrap();
        r
    }
}

/// Roots from PEM text (e.g. rampart's local CA or Pebble's root).
pub fn roots_from_pem(pem: &str) -> RootCertStore {
    use rustls::pki_types::pem::PemObject;
    let mut r = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        r.add(c.unwrap()).unwrap();
    }
    r
}

/// A client configuration trusting `roots`, offering `alpn`, limited to `versions`.
pub fn client_config(
    roots: RootCertStore,
    alpn: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    let mut c = ClientConfig::builder_with_protocol_versions(versions)
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(c)
}

/// The usual browser offer: h2 then http/1.1, TLS 1.2 and 1.3.
pub fn browser(roots: RootCertStore) -> Arc<ClientConfig> {
    client_config(
        roots,
        &[b"h2", b"http/1.1"],
        &[&rustls::version::TLS13, &rustls::version::TLS12],
    )
}

/// A TLS handshake with `addr` sending `sni`.
pub async fn connect(
    addr: SocketAddr,
    sni: &str,
    config: &Arc<ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(sni.to_owned()).unwrap();
    let connector = tokio_rustls::TlsConnector::from(config.clone());
    tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "handshake timed out"))?
}

/// The certificate the server presented.
pub fn peer_leaf(s: &TlsStream<TcpStream>) -> CertificateDer<'static> {
    s.get_ref().1.peer_certificates().unwrap()[0].clone()
}

/// Sends one request over an established TLS connection, speaking what ALPN chose.
pub async fn request(s: TlsStream<TcpStream>, req: Request<BoxBody>) -> Got {
    let h2 = s.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(s);
    let res = if h2 {
        let (mut tx, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        tx.send_request(req).await.unwrap()
    } else {
        let (mut tx, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        tx.send_request(req).await.unwrap()
    };
    let (parts, body) = res.into_parts();
    let body: Bytes = body.collect().await.unwrap().to_bytes();
    Got {
        status: parts.status,
        headers: parts.headers,
        body,
        version: parts.version,
    }
}

/// GET `https://{sni}{path}` through rampart's HTTPS listener.
pub async fn get(
    proxy_https: SocketAddr,
    sni: &str,
    path: &str,
    config: &Arc<ClientConfig>,
) -> Got {
    let s = connect(proxy_https, sni, config)
        .await
        .expect("TLS handshake");
    let h2 = s.get_ref().1.alpn_protocol() == Some(b"h2");
    // HTTP/2 carries the authority in the URI; HTTP/1.1 sends origin-form and Host.
    let req = if h2 {
        Request::get(format!("https://{sni}{path}"))
    } else {
        Request::get(path).header("host", sni)
    };
    request(s, req.body(super::empty()).unwrap()).await
}

/// `tls_cert_file` + `tls_key_file` lines for a rule.
pub fn files(cert: &std::path::Path, key: &std::path::Path) -> String {
    format!(
        "tls_cert_file = {:?}\ntls_key_file = {:?}\n",
        cert.display().to_string(),
        key.display().to_string()
    )
}

/// Polls `f` until it returns true or `within` passes.
pub async fn eventually(within: Duration, mut f: impl AsyncFnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}
