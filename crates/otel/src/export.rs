//! The exporter: finished spans wait in a bounded queue; a thread of its own sends them to the
//! collector in batches over OTLP (gRPC or HTTP/protobuf), every `tracing_export_interval_ms`
//! or as soon as a batch is full.
//!
//! Nothing on the request path waits for the collector: a request's spans are counted into the
//! queue with one atomic addition and pushed on a channel the exporter drains (it never waits
//! on the channel, so a push wakes no one). When the queue is full (a slow or stopped
//! collector) the spans are dropped and counted; an export that fails or times out is counted
//! as failed and not retried, so the queue never grows past its size.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Request, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rampart_config::{OtlpProtocol, TracingConfig};
use tokio::sync::{mpsc, watch, Notify};

use crate::otlp::{encode_request, Resource};
use crate::span::{AttrValue, Span};

/// The exporter's counters (spans), for the metrics and the dashboard.
#[derive(Debug, Default)]
pub struct Stats {
    /// Spans the collector accepted.
    pub exported: AtomicU64,
    /// Spans dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Spans in exports that failed (the collector refused them, was unreachable, or did not
    /// answer in time).
    pub failed: AtomicU64,
    /// Spans waiting in the queue now.
    pub queued: AtomicU64,
    /// Exports sent (batches), whatever their result.
    pub batches: AtomicU64,
}

/// The sending side of the queue, shared by every worker.
#[derive(Debug)]
pub struct Exporter {
    tx: mpsc::UnboundedSender<Vec<Span>>,
    stats: Arc<Stats>,
    queue_size: u64,
    batch_size: u64,
    wake: Arc<Notify>,
    stop: watch::Sender<bool>,
    /// Told when the thread has sent what it had and ended.
    done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl Exporter {
    /// Starts the exporter thread for `config`, counting in `stats` (new counters when
    /// `None`).
    pub fn start(config: &TracingConfig, stats: Option<Arc<Stats>>) -> std::io::Result<Exporter> {
        let transport = Transport::new(config)?;
        let resource = resource(config);
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = stats.unwrap_or_default();
        let wake = Arc::new(Notify::new());
        let (stop, stopped) = watch::channel(false);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let run = Run {
            rx,
            transport,
            resource,
            stats: stats.clone(),
            wake: wake.clone(),
            stopped,
            interval: config.export_interval,
            batch_size: config.batch_size.max(1),
            timeout: config.timeout,
            warned: None,
        };
        std::thread::Builder::new()
            .name("rampart-otlp".into())
            .spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt.block_on(run.run()),
                    Err(e) => tracing::error!(error = %e, "the trace exporter cannot start"),
                }
                let _ = done_tx.send(());
            })?;
        Ok(Exporter {
            tx,
            stats,
            queue_size: config.queue_size as u64,
            batch_size: config.batch_size as u64,
            wake,
            stop,
            done: Mutex::new(Some(done_rx)),
        })
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Queues a request's spans, or drops and counts them when the queue is full.
    pub fn submit(&self, spans: Vec<Span>) {
        let n = spans.len() as u64;
        let before = self.stats.queued.fetch_add(n, Ordering::Relaxed);
        if before + n > self.queue_size {
            self.stats.queued.fetch_sub(n, Ordering::Relaxed);
            self.stats.dropped.fetch_add(n, Ordering::Relaxed);
            return;
        }
        if self.tx.send(spans).is_err() {
            self.stats.queued.fetch_sub(n, Ordering::Relaxed);
            self.stats.dropped.fetch_add(n, Ordering::Relaxed);
            return;
        }
        // A full batch goes out now (one wake-up per batch, not per request).
        if before < self.batch_size && before + n >= self.batch_size {
            self.wake.notify_one();
        }
    }

    /// Sends what is queued and stops the thread, waiting for it at most `within`.
    pub fn shutdown(&self, within: Duration) {
        let _ = self.stop.send(true);
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(done) = done {
            let _ = done.recv_timeout(within);
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        // The thread sends what it has and ends (the channel is closed with `tx`).
        let _ = self.stop.send(true);
    }
}

/// The resource every span is exported with: `service.name` and the configured attributes,
/// rampart's version and this process.
fn resource(config: &TracingConfig) -> Resource {
    let mut attrs: Vec<(String, AttrValue)> = vec![
        (
            "service.name".to_owned(),
            config.service_name.clone().into(),
        ),
        (
            "service.version".to_owned(),
            env!("CARGO_PKG_VERSION").into(),
        ),
        ("telemetry.sdk.name".to_owned(), "rampart".into()),
        ("telemetry.sdk.language".to_owned(), "rust".into()),
        (
            "process.pid".to_owned(),
            u64::from(std::process::id()).into(),
        ),
    ];
    if let Some(host) = host_name() {
        attrs.push(("host.name".to_owned(), host.into()));
    }
    for (k, v) in &config.resource {
        let v = AttrValue::from(v.clone());
        match attrs.iter_mut().find(|(have, _)| have == k) {
            Some(a) => a.1 = v,
            None => attrs.push((k.clone(), v)),
        }
    }
    Resource {
        attrs,
        scope_name: "rampart",
        scope_version: env!("CARGO_PKG_VERSION"),
    }
}

fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// The exporter thread's state.
struct Run {
    rx: mpsc::UnboundedReceiver<Vec<Span>>,
    transport: Transport,
    resource: Resource,
    stats: Arc<Stats>,
    wake: Arc<Notify>,
    stopped: watch::Receiver<bool>,
    interval: Duration,
    batch_size: usize,
    timeout: Duration,
    /// When a failed export was last reported (at most one warning a minute).
    warned: Option<Instant>,
}

impl Run {
    async fn run(mut self) {
        let mut batch: Vec<Span> = Vec::new();
        let mut last = false;
        loop {
            if !last {
                tokio::select! {
                    _ = tokio::time::sleep(self.interval) => {}
                    _ = self.wake.notified() => {}
                    _ = self.stopped.changed() => last = true,
                }
            }
            loop {
                match self.rx.try_recv() {
                    Ok(spans) => {
                        self.stats
                            .queued
                            .fetch_sub(spans.len() as u64, Ordering::Relaxed);
                        batch.extend(spans);
                        if batch.len() >= self.batch_size {
                            self.export(&mut batch).await;
                        }
                    }
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        last = true;
                        break;
                    }
                }
            }
            if !batch.is_empty() {
                self.export(&mut batch).await;
            }
            if last {
                return;
            }
        }
    }

    /// Sends `batch` (in pieces of at most `batch_size`) and empties it.
    async fn export(&mut self, batch: &mut Vec<Span>) {
        for chunk in batch.chunks(self.batch_size) {
            // Room for gRPC's message prefix, so the body is sent as it is written.
            let mut body = vec![0; GRPC_PREFIX];
            let refs: Vec<&Span> = chunk.iter().collect();
            encode_request(&self.resource, &refs, &mut body);
            let n = chunk.len() as u64;
            self.stats.batches.fetch_add(1, Ordering::Relaxed);
            let sent = tokio::time::timeout(self.timeout, self.transport.send(body)).await;
            match sent {
                Ok(Ok(())) => {
                    self.stats.exported.fetch_add(n, Ordering::Relaxed);
                }
                Ok(Err(e)) => self.failed(n, &e),
                Err(_) => self.failed(n, &format!("no answer within {:?}", self.timeout)),
            }
        }
        batch.clear();
    }

    fn failed(&mut self, n: u64, why: &str) {
        self.stats.failed.fetch_add(n, Ordering::Relaxed);
        let now = Instant::now();
        if self
            .warned
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
        {
            self.warned = Some(now);
            tracing::warn!(
                collector = %self.transport.uri,
                error = why,
                spans = n,
                "spans could not be exported (counted in rampart_trace_spans_failed_total; at most one warning a minute)"
            );
        }
    }
}

type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Where and how a batch is sent.
struct Transport {
    client: HttpClient,
    uri: Uri,
    grpc: bool,
    headers: Vec<(HeaderName, HeaderValue)>,
}

/// gRPC's message prefix: a compression flag and the length.
const GRPC_PREFIX: usize = 5;

/// The gRPC method of OTLP's trace service.
const GRPC_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

impl Transport {
    fn new(config: &TracingConfig) -> std::io::Result<Transport> {
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

    /// Sends one encoded `ExportTraceServiceRequest`, written after [`GRPC_PREFIX`] bytes of
    /// room.
    async fn send(&self, mut framed: Vec<u8>) -> Result<(), String> {
        let len = framed.len() - GRPC_PREFIX;
        let (body, content_type) = if self.grpc {
            // gRPC's length-prefixed message: not compressed, then its length.
            framed[0] = 0;
            framed[1..GRPC_PREFIX].copy_from_slice(&(len as u32).to_be_bytes());
            (Bytes::from(framed), "application/grpc")
        } else {
            (
                Bytes::from(framed).slice(GRPC_PREFIX..),
                "application/x-protobuf",
            )
        };
        let mut req = Request::post(self.uri.clone())
            .header(CONTENT_TYPE, content_type)
            .body(Full::new(body))
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
