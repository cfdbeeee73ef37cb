//! How a batch reaches the collector: one OTLP export request over HTTP/protobuf (HTTP/1.1) or
//! gRPC (HTTP/2), through hyper's client with rustls, its body the batch's pieces as they are.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Request, Uri};
use http_body_util::BodyExt as _;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rampart_config::{OtlpProtocol, TracingConfig};

/// A request body of a few frames (the head, then the batch's chunks), its length known.
struct Frames {
    frames: std::collections::VecDeque<Bytes>,
    left: u64,
}

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let next = self.frames.pop_front();
        if let Some(b) = &next {
            self.left -= b.len() as u64;
        }
        std::task::Poll::Ready(next.map(|b| Ok(hyper::body::Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.left)
    }
}

type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Frames>;

/// Where and how a batch is sent.
pub(crate) struct Transport {
    client: HttpClient,
    pub(crate) uri: Uri,
    grpc: bool,
    headers: Vec<(HeaderName, HeaderValue)>,
}

/// gRPC's message prefix: a compression flag and the length.
pub(crate) const GRPC_PREFIX: usize = 5;

/// The gRPC method of OTLP's trace service.
const GRPC_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

impl Transport {
    pub(crate) fn new(config: &TracingConfig) -> std::io::Result<Transport> {
        let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
        let grpc = config.protocol == OtlpProtocol::Grpc;
        let url = if grpc {
            format!("{}{GRPC_PATH}", config.endpoint.trim_end_matches('/'))
        } else {
            config.endpoint.clone()
        };
        let uri: Uri = url
            .parse()
            .map_err(|e| invalid(format!("tracing_endpoint {url:?}: {e}")))?;
        let mut roots = rustls::RootCertStore::empty();
        if uri.scheme_str() == Some("https") {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.timeout));
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http();
        let connector = if grpc {
            builder.enable_http2().wrap_connector(http)
        } else {
            builder.enable_http1().wrap_connector(http)
        };
        let mut client = Client::builder(TokioExecutor::new());
        client
            .http2_only(grpc)
            .pool_idle_timeout(Duration::from_secs(60));
        let mut headers = Vec::new();
        for (k, v) in &config.headers {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| invalid(e.to_string()))?;
            let value = HeaderValue::from_str(v).map_err(|e| invalid(e.to_string()))?;
            headers.push((name, value));
        }
        Ok(Transport {
            client: client.build(connector),
            uri,
            grpc,
            headers,
        })
    }

    /// Sends one encoded `ExportTraceServiceRequest` in pieces, the first of which starts with
    /// [`GRPC_PREFIX`] bytes of room.
    pub(crate) async fn send(&self, mut frames: Vec<Bytes>) -> Result<(), String> {
        let total: usize = frames.iter().map(Bytes::len).sum();
        let len = total - GRPC_PREFIX;
        let head = std::mem::take(&mut frames[0]);
        let content_type = if self.grpc {
            // gRPC's length-prefixed message: not compressed, then its length.
            let mut head = Vec::from(head);
            head[0] = 0;
            head[1..GRPC_PREFIX].copy_from_slice(&(len as u32).to_be_bytes());
            frames[0] = Bytes::from(head);
            "application/grpc"
        } else {
            frames[0] = head.slice(GRPC_PREFIX..);
            "application/x-protobuf"
        };
        let left = frames.iter().map(|b| b.len() as u64).sum();
        let body = Frames {
            frames: frames.into(),
            left,
        };
        let mut req = Request::post(self.uri.clone())
            .header(CONTENT_TYPE, content_type)
            .body(body)
            .map_err(|e| e.to_string())?;
        if self.grpc {
            req.headers_mut()
                .insert("te", HeaderValue::from_static("trailers"));
        }
        for (k, v) in &self.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        let res = self.client.request(req).await.map_err(|e| {
            let mut msg = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                msg.push_str(": ");
                msg.push_str(&s.to_string());
                source = s.source();
            }
            msg
        })?;
        let status = res.status();
        let grpc_head = res.headers().get("grpc-status").cloned();
        let grpc_message = res.headers().get("grpc-message").cloned();
        let collected = res
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?;
        if !status.is_success() {
            return Err(format!("the collector answered {status}"));
        }
        if !self.grpc {
            return Ok(());
        }
        let trailers = collected.trailers().cloned();
        let grpc_status = grpc_head.or_else(|| trailers.as_ref()?.get("grpc-status").cloned());
        let message = grpc_message.or_else(|| trailers.as_ref()?.get("grpc-message").cloned());
        match grpc_status.as_ref().map(HeaderValue::as_bytes) {
            Some(b"0") => Ok(()),
            Some(code) => Err(format!(
                "grpc-status {} ({})",
                String::from_utf8_lossy(code),
                message
                    .as_ref()
                    .map(|m| String::from_utf8_lossy(m.as_bytes()).into_owned())
                    .unwrap_or_default()
            )),
            None => Err("the answer has no grpc-status".to_owned()),
        }
    }
}
