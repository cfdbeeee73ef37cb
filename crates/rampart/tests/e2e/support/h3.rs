//! An HTTP/3 client for end-to-end tests: quinn (QUIC) and h3 (HTTP/3), real handshakes and
//! request streams against rampart's UDP socket.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf as _, Bytes, BytesMut};
use http::Request;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

use crate::support::Got;

/// One HTTP/3 connection.
pub struct H3 {
    /// Kept so the client's socket lives as long as the connection.
    _endpoint: quinn::Endpoint,
    pub conn: quinn::Connection,
    send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    /// Resolves when the connection ends (the server closed it, or it failed).
    closed: tokio::task::JoinHandle<String>,
    /// The interim (1xx) answers that came before the last final answer.
    pub interim: Vec<(http::StatusCode, http::HeaderMap)>,
}

impl Drop for H3 {
    /// Closes the connection at once (the server's slot is freed without waiting for its idle
    /// timeout).
    fn drop(&mut self) {
        self.conn.close(0x100u32.into(), b"done");
    }
}

/// Sends requests on an [`H3`] connection from another task.
#[derive(Clone)]
pub struct H3Sender(h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>);

impl From<&H3> for H3Sender {
    fn from(h: &H3) -> Self {
        H3Sender(h.send.clone())
    }
}

impl H3Sender {
    /// Sends a bodiless request and reads the whole response; returns its status.
    pub async fn send(&mut self, req: Request<()>) -> Result<http::StatusCode, String> {
        let mut stream = self.0.send_request(req).await.map_err(|e| e.to_string())?;
        stream.finish().await.map_err(|e| e.to_string())?;
        let res = stream.recv_response().await.map_err(|e| e.to_string())?;
        while let Some(mut chunk) = stream.recv_data().await.map_err(|e| e.to_string())? {
            chunk.advance(chunk.remaining());
        }
        Ok(res.status())
    }
}

/// Connects to `addr` as `sni`, trusting `roots`.
pub async fn connect(addr: SocketAddr, sni: &str, roots: RootCertStore) -> Result<H3, String> {
    let mut tls = rustls::ClientConfig::builder_with_protocol_versions(&[&rustls::version::TLS13])
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(tls)).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let connecting = endpoint.connect(addr, sni).map_err(|e| e.to_string())?;
    let conn = tokio::time::timeout(Duration::from_secs(10), connecting)
        .await
        .map_err(|_| "QUIC handshake timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
        .await
        .map_err(|e| e.to_string())?;
    let closed = tokio::spawn(async move {
        let e = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        e.to_string()
    });
    Ok(H3 {
        _endpoint: endpoint,
        conn,
        send,
        closed,
        interim: Vec::new(),
    })
}

impl H3 {
    /// Waits until the connection ends; returns why.
    pub async fn closed(&mut self) -> String {
        (&mut self.closed).await.unwrap()
    }

    /// The certificate the server presented.
    pub fn peer_leaf(&self) -> CertificateDer<'static> {
        let certs = self
            .conn
            .peer_identity()
            .unwrap()
            .downcast::<Vec<CertificateDer<'static>>>()
            .unwrap();
        certs[0].clone()
    }

    /// Sends `req` with `body` (sent in 64 KiB chunks; none when empty), then reads the whole
    /// response.
    pub async fn send(&mut self, req: Request<()>, body: Bytes) -> Result<Got, String> {
        let mut stream = self
            .send
            .send_request(req)
            .await
            .map_err(|e| e.to_string())?;
        // A server that answers before the body is all sent (a refusal) stops the upload;
        // its response is read all the same.
        let mut rest = body;
        let mut sent = true;
        while !rest.is_empty() && sent {
            let chunk = rest.split_to(rest.len().min(64 << 10));
            sent = stream.send_data(chunk).await.is_ok();
        }
        if sent {
            let _ = stream.finish().await;
        }
        // Interim answers are HEADERS frames of their own before the final one (RFC 9114 §4.1).
        self.interim.clear();
        let mut res = stream.recv_response().await.map_err(|e| e.to_string())?;
        while res.status().is_informational() {
            self.interim
                .push((res.status(), std::mem::take(res.headers_mut())));
            res = stream.recv_response().await.map_err(|e| e.to_string())?;
        }
        let mut body = BytesMut::new();
        while let Some(mut chunk) = stream.recv_data().await.map_err(|e| e.to_string())? {
            body.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
        }
        let (parts, ()) = res.into_parts();
        Ok(Got {
            status: parts.status,
            headers: parts.headers,
            body: body.freeze(),
            version: parts.version,
        })
    }

    /// GET `https://{host}{path}`.
    pub async fn get(&mut self, host: &str, path: &str) -> Got {
        let req = Request::get(format!("https://{host}{path}"))
            .body(())
            .unwrap();
        self.send(req, Bytes::new()).await.unwrap()
    }
}
